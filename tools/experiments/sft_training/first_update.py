"""The first optimiser step of an adapter, measured in function space (chapter 31's rank sweep).

peft starts every LoRA-family adapter with B = 0, so before the first step the adapted model is the
base. `first_update` repeats a variant's first training step exactly as the stage takes it (same
seed, so the same A; the same micro-batches, token-normalised; AdamW at the stage's learning rate)
on a copy of the base with the adapter made afresh, and measures what the step changed:

- `delta_weight_norm`: the Frobenius norm, over every adapted layer, of the change of the layer's
  effective weight, read from the layer itself (its output on the identity minus its output on
  zero, less the same for the base layer), so it covers DoRA's magnitude too;
- `loss_drop`: the first batch's mean supervised loss before the step minus after it.

Why the rank matters here: Adam divides each gradient entry by its own running size, so its first
step moves every entry of B by about the learning rate whatever the scaling gamma and whatever the
gradient's size. The update gamma * dB @ A is then a sum of r rank-one terms of one size, and its
norm grows like gamma * sqrt(r): alpha / sqrt(r) under LoRA, alpha under rsLoRA. Under plain SGD
dB itself carries gamma, and the update goes like gamma^2 * r instead (`optimizer="sgd"`).
"""

from __future__ import annotations

import copy
import math

import torch

from tools.errors import ConfigError
from tools.experiments.sft_training.adapters import attach
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, batches, pad_batch
from tools.experiments.sft_training.training import supervised_loss_sum

OPTIMIZERS = ("adamw", "sgd")


def adapted_layers(peft_model) -> list[tuple[str, torch.nn.Module]]:
    """`(name, layer)` of every peft LoRA layer of the model (those with a "default" adapter)."""
    return [(name, module) for name, module in peft_model.named_modules()
            if "default" in getattr(module, "lora_A", {})]


def effective_weight_change(layer) -> torch.Tensor:
    """The adapted layer's effective weight minus its base layer's, [out, in], read from their outputs."""
    base = layer.get_base_layer()
    eye = torch.eye(base.in_features, dtype=base.weight.dtype, device=base.weight.device)
    zero = torch.zeros_like(eye[:1])
    was_training = layer.training
    layer.eval()
    try:
        with torch.no_grad():
            adapted = layer(eye) - layer(zero)
            plain = base(eye) - base(zero)
    finally:
        layer.train(was_training)
    return (adapted - plain).T


def _weights(peft_model) -> dict[str, torch.Tensor]:
    return {name: effective_weight_change(layer) for name, layer in adapted_layers(peft_model)}


def _step_loss(model, micro_batches, device) -> tuple[torch.Tensor, int]:
    supervised = sum(int((batch["labels"][:, 1:] != IGNORE_INDEX).sum()) for batch in micro_batches)
    total = sum(supervised_loss_sum(model, batch, device)[0] for batch in micro_batches)
    return total / supervised, supervised


def fresh_base(peft_model):
    """A copy of the base under a trained peft model, its adapter layers removed (nothing merged)."""
    return copy.deepcopy(peft_model).unload()


def first_step(peft_model, micro_batches: list[dict], *, optimizer: str = "adamw", learning_rate: float,
               device="cpu") -> dict:
    """One optimiser step of `peft_model`'s adapter on `micro_batches` (token-normalised over all of
    them, as the stage does), and what it changed (see the module docstring). The model is trained
    in place: pass a fresh one. Returns `{"optimizer", "learning_rate", "delta_weight_norm",
    "base_weight_norm", "loss_before", "loss_after", "loss_drop", "layers"}`."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or not learning_rate > 0:
        raise ConfigError(f"learning_rate must be a number > 0, got {learning_rate!r}")
    device = torch.device(device)
    trainable = [parameter for parameter in peft_model.parameters() if parameter.requires_grad]
    step = torch.optim.AdamW(trainable, lr=learning_rate) if optimizer == "adamw" else torch.optim.SGD(trainable, lr=learning_rate)
    before_weights = _weights(peft_model)
    peft_model.train()
    loss, _ = _step_loss(peft_model, micro_batches, device)
    loss.backward()
    step.step()
    step.zero_grad(set_to_none=True)
    with torch.no_grad():
        peft_model.eval()
        after, _ = _step_loss(peft_model, micro_batches, device)
    change = {name: weight - before_weights[name] for name, weight in _weights(peft_model).items()}
    base_norm = math.sqrt(sum(float(layer.get_base_layer().weight.detach().float().square().sum())
                              for _, layer in adapted_layers(peft_model)))
    delta = math.sqrt(sum(float(value.float().square().sum()) for value in change.values()))
    return {"optimizer": optimizer, "learning_rate": float(learning_rate), "delta_weight_norm": delta,
            "base_weight_norm": base_norm, "loss_before": float(loss.detach()), "loss_after": float(after),
            "loss_drop": float(loss.detach()) - float(after), "layers": len(change)}


def first_update(base, config: StageConfig, spec: AdapterSpec, split, pad_id: int, *, optimizer: str = "adamw") -> dict:
    """The variant's first stage step repeated on `base` (a plain model, e.g. `fresh_base(trained)`;
    it is changed: pass a copy), the adapter made afresh from the stage's seed, the stage's first
    step's micro-batches (padded) and learning rate."""
    model = attach(base, spec, config.seed)
    micro = [pad_batch(chunk, pad_id) for chunk in batches(split.train, config.batch_size, 1, config.grad_accumulation)[0]]
    return first_step(model, micro, optimizer=optimizer, learning_rate=config.learning_rate, device=config.device)
