"""The LoRA family side by side: each variant's scaling, DoRA's forward pass, and a check against peft.

* LoRA and DoRA multiply the update B @ A by alpha / r; rsLoRA by alpha / sqrt(r). With r
  independent rank-one terms of comparable size, |B @ A @ x| grows like sqrt(r), so the scaled
  update shrinks like 1 / sqrt(r) under LoRA and keeps its size under rsLoRA
  (`relative_update_size` = scaling * sqrt(r) / alpha, 1 at rank 1).
* DoRA splits the adapted weight W = W0 + scaling * B @ A into a direction and a magnitude: each
  output row of W is divided by its L2 norm and multiplied by a trained magnitude m (one per
  output, initialised to the row norms of W0). The output is
  (m / |W|_row) * (W0 @ x + scaling * B @ (A @ x)) + bias.

Chapter 31 teaches these; `check_against_peft` compares `dora_forward` with peft's own DoRA layer.
"""

from __future__ import annotations

import math

import torch

from tools.errors import ConfigError
from tools.experiments.sft_training.config import METHODS


def adapter_scaling(method: str, alpha: float, rank: int) -> dict:
    """`{"scaling": float, "relative_update_size": float}` of a variant (see the module docstring)."""
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError(f"rank must be an int >= 1, got {rank!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise ConfigError(f"alpha must be a finite number > 0, got {alpha!r}")
    scaling = alpha / math.sqrt(rank) if method == "rslora" else alpha / rank
    return {"scaling": float(scaling), "relative_update_size": float(scaling * math.sqrt(rank) / alpha)}


def dora_forward(x, weight, lora_A, lora_B, magnitude, scaling: float, bias=None):
    """DoRA's output for inputs `x` (..., in): weight (out, in), lora_A (r, in), lora_B (out, r),
    magnitude (out,), optional bias (out,). The row norms are of W0 + scaling * B @ A."""
    adapted = weight + scaling * (lora_B @ lora_A)
    row_norm = torch.linalg.vector_norm(adapted, dim=1)
    output = (x @ weight.T + scaling * ((x @ lora_A.T) @ lora_B.T)) * (magnitude / row_norm)
    return output if bias is None else output + bias


def dora_layers(peft_model) -> list[tuple[str, object]]:
    """`(name, layer)` of every peft LoRA layer that carries a DoRA magnitude."""
    found = []
    for name, module in peft_model.named_modules():
        magnitudes = getattr(module, "lora_magnitude_vector", None)
        if magnitudes is not None and "default" in magnitudes:
            found.append((name, module))
    return found


def applied_scaling(peft_model) -> float | None:
    """The scaling peft's first LoRA layer of the model really applies (None without one)."""
    for _, module in peft_model.named_modules():
        scaling = getattr(module, "scaling", None)
        if isinstance(scaling, dict) and "default" in scaling:
            return float(scaling["default"])
    return None


def check_against_peft(peft_model, inputs: torch.Tensor | None = None, seed: int = 0, dora=None) -> dict:
    """`dora(...)` (chapter 31's dora_forward: the learner's; None: this module's) vs peft's DoRA layer
    (the first one of the model) on the same inputs.

    Returns `{"layer", "max_abs_diff", "output_scale", "tolerance", "matches"}`, or `{"layer": None}`
    when the model has no DoRA layer. Computed in float32 on the layer's own weights."""
    layers = dora_layers(peft_model)
    if not layers:
        return {"layer": None}
    name, layer = layers[0]
    base = layer.get_base_layer()
    weight = base.weight.detach().float()
    if inputs is None:
        generator = torch.Generator().manual_seed(seed)
        inputs = torch.randn(3, weight.shape[1], generator=generator)
    inputs = inputs.to(weight.device, torch.float32)
    was_training = layer.training
    layer.eval()
    with torch.no_grad():
        theirs = layer(inputs.to(base.weight.dtype)).float()
        ours = (dora or dora_forward)(inputs, weight, layer.lora_A["default"].weight.detach().float(),
                            layer.lora_B["default"].weight.detach().float(),
                            layer.lora_magnitude_vector["default"].weight.detach().float(),
                            float(layer.scaling["default"]), None if base.bias is None else base.bias.detach().float())
    layer.train(was_training)
    scale = max(1.0, float(theirs.abs().max()))
    difference = float((ours - theirs).abs().max())
    tolerance = 1e-5 * scale
    return {"layer": name, "max_abs_diff": difference, "output_scale": scale, "tolerance": tolerance,
            "matches": difference <= tolerance}
