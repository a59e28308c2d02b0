"""Chapter 15's measurements on the shared SFT stage: did an update really train, and did evaluation stay apart?

The stage records hashes, gradient norms, losses and learning rates for every variant. This module
adds what a record needs to tell a real update from one that only looks like it:

- `TrainingLedger`: the content hash of every example a `collate` call put into a training batch
  (what was really trained on, not what the split says);
- `leaking_collate`: a deliberately wrong collate for a negative control that swaps one example of
  every micro-batch for an evaluation example (a sampler reading from the unsplit pool);
- `same_batch_losses`: the supervised loss of the first training batch before training (the adapter
  switched off: peft's LoRA starts as the identity) and after;
- `evaluation_side_effects`: the stage's own `evaluate` run once more, with every parameter hash,
  every gradient and the train/eval flag compared before and after.

The decision (accept_mechanism / tune / reject) is not taken here: the chapter computes it from the
records with the functions the learner writes.

The package's copies of the chapter's three exercises (`accumulate_gradients`,
`effective_update_check`, `isolated_evaluation`, the contracts of notebooks/15) are what the stage
runs when no notebook passes the learner's (the command line, the GPU batch); they assume valid
inputs, which the stage always gives them.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from tools.errors import ConfigError
from tools.experiments.sft_training.adapters import tensor_hashes
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, Example, batches, pad_batch, stage_split
from tools.experiments.sft_training.training import evaluate, supervised_loss_sum


class TrainingLedger:
    """Content hashes of the examples each variant was trained on, in the order they were seen."""

    def __init__(self):
        self._seen: dict[str, list[str]] = {}

    def start(self, variant: str) -> None:
        self._seen[variant] = []

    def add(self, variant: str, examples: list[Example]) -> None:
        if variant not in self._seen:
            raise ConfigError(f"the ledger was not started for variant {variant!r} (the plan's prepare starts it)")
        self._seen[variant].extend(example.content_sha256 for example in examples)

    def seen(self, variant: str) -> list[str]:
        return list(self._seen.get(variant, []))


_EVALUATION_CACHE: dict[tuple, list[Example]] = {}


def evaluation_examples(config: StageConfig, spec: AdapterSpec) -> list[Example]:
    """The stage's held-apart evaluation examples, rebuilt exactly as the runner builds them."""
    from transformers import AutoTokenizer

    from tools.experiments.sft_training.runner import model_for

    folder = model_for(config)
    max_length = spec.max_length or config.max_length
    key = (str(folder), tuple(config.train_task_seeds), config.eval_task_seed, config.tasks_per_operation, max_length,
           config.lab_task, config.lab_train_problems, config.lab_eval_problems)
    if key not in _EVALUATION_CACHE:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        _EVALUATION_CACHE[key] = stage_split(tokenizer, config, max_length).evaluation
    return _EVALUATION_CACHE[key]


def leaking_examples(examples: list[Example], evaluation: list[Example], call: int) -> list[Example]:
    """The micro-batch with its last example replaced by evaluation example number `call` (cycling)."""
    if not examples or not evaluation:
        raise ConfigError("a leaking batch needs training and evaluation examples")
    return [*examples[:-1], evaluation[call % len(evaluation)]]


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def first_batch(split, config: StageConfig) -> list[Example]:
    """The examples of the first micro-batch of the first step, as the stage plans them."""
    return batches(split.train, config.batch_size, 1, config.grad_accumulation)[0][0]


def _mean_loss(model, batch, device) -> float:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            loss_sum, tokens = supervised_loss_sum(model, batch, device)
    finally:
        model.train(was_training)
    return float(loss_sum) / tokens


def same_batch_losses(model, split, config: StageConfig, tokenizer) -> dict:
    """Mean supervised loss of the first training batch before training and after it.

    "Before" is the model with its adapter switched off (`disable_adapter`): a LoRA adapter starts as
    the identity (peft initialises lora_B to zero), so that is the model the first step saw."""
    batch = pad_batch(first_batch(split, config), _pad_id(tokenizer))
    with model.disable_adapter():
        before = _mean_loss(model, batch, config.device)
    after = _mean_loss(model, batch, config.device)
    return {"examples": int(batch["input_ids"].shape[0]), "loss_before": before, "loss_after": after,
            "before_is": "the base model (adapter disabled; LoRA starts as the identity)"}


def _gradients(model) -> dict[str, torch.Tensor | None]:
    return {name: None if parameter.grad is None else parameter.grad.detach().clone()
            for name, parameter in model.named_parameters()}


def _same_gradients(before: dict, after: dict) -> bool:
    if set(before) != set(after):
        return False
    for name, value in before.items():
        other = after[name]
        if (value is None) != (other is None) or (value is not None and not torch.equal(value, other)):
            return False
    return True


def evaluation_side_effects(model, split, config: StageConfig, tokenizer) -> dict:
    """Run the stage's `evaluate` once more and compare what training owns before and after it.

    The optimiser lives inside the stage's training loop and is gone by now: its state is not
    observable here and is recorded as None (the chapter checks it on the tiny model itself)."""
    mode = model.training
    hashes, gradients = tensor_hashes(model), _gradients(model)
    loss = evaluate(model, split.evaluation, config.batch_size, _pad_id(tokenizer), config.device)
    return {"evaluation_loss": loss,
            "parameters_unchanged": tensor_hashes(model) == hashes,
            "gradients_unchanged": _same_gradients(gradients, _gradients(model)),
            "training_mode_restored": model.training == mode,
            "optimizer_state_unchanged": None}


def split_audit(trained: list[str], split) -> dict:
    """Which evaluation examples (by content hash) were trained on."""
    evaluation = {example.content_sha256 for example in split.evaluation}
    leaked = sorted(set(trained) & evaluation)
    return {"trained_examples": len(trained), "distinct_trained": len(set(trained)),
            "evaluation_examples": len(evaluation), "leaked": leaked, "leaked_count": len(leaked)}


# ---- the package's copies of the chapter's exercises -------------------------------------------------------

def _summed_token_nll(model, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits = logits if logits.dtype in (torch.float32, torch.float64) else logits.float()
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="sum")


def accumulate_gradients(model, micro_batches: list[dict]) -> dict:
    """One step's gradient over micro-batches, each summed token loss divided by the global count N."""
    counts = [int((batch["labels"][:, 1:] != IGNORE_INDEX).sum()) for batch in micro_batches]
    total = sum(counts)
    if total == 0:
        raise ConfigError("no supervised token in the global batch")
    for parameter in model.parameters():
        parameter.grad = None
    loss = 0.0
    for batch in micro_batches:
        summed = _summed_token_nll(model, batch)
        (summed / total).backward()
        loss += float(summed.detach())
    gradients = {name: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                 for name, p in model.named_parameters() if p.requires_grad}
    return {"loss": loss / total, "supervised_tokens": total, "micro_batch_tokens": counts, "gradients": gradients}


def effective_update_check(observation: dict, min_loss_decrease: float = 1e-3) -> dict:
    """The five failure codes of an update, in the chapter's order (all that apply)."""
    norms, before, after = observation["grad_norms"], observation["loss_before"], observation["loss_after"]
    planned, applied = observation["planned_lr"], observation["applied_lr"]
    decrease = float(before - after)
    checks = [("parameters_unchanged", observation["sha256_after"] == observation["sha256_before"]),
              ("grad_norm_not_finite", not all(math.isfinite(norm) for norm in norms)),
              ("grad_norm_zero", any(norm == 0 for norm in norms)),
              ("loss_not_lower", not (math.isfinite(before) and math.isfinite(after) and decrease >= min_loss_decrease)),
              ("lr_schedule_not_applied", len(applied) != len(planned) or not all(
                  math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) for a, b in zip(applied, planned)))]
    failures = [code for code, failed in checks if failed]
    return {"effective": not failures, "failures": failures, "loss_decrease": decrease, "steps": len(norms)}


def isolated_evaluation(model, eval_batches: list[dict], optimizer, train_hashes: list[str],
                        eval_hashes: list[str]) -> dict:
    """Mean supervised loss in eval mode without gradients; whether the model's state (parameters,
    buffers, gradients) and the optimiser's state came through unchanged; the trained evaluation hashes."""
    def state():
        return ([(name, value.detach().clone()) for name, value in model.state_dict().items()],
                [(name, None if p.grad is None else p.grad.detach().clone()) for name, p in model.named_parameters()])

    def equal(left, right) -> bool:
        if isinstance(left, torch.Tensor) or isinstance(right, torch.Tensor):
            return (isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor) and left.dtype == right.dtype
                    and left.shape == right.shape and bool(torch.equal(left, right)))
        if isinstance(left, dict) and isinstance(right, dict):
            return left.keys() == right.keys() and all(equal(left[key], right[key]) for key in left)
        if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            return len(left) == len(right) and all(equal(a, b) for a, b in zip(left, right))
        return type(left) is type(right) and left == right

    tokens = sum(int((batch["labels"][:, 1:] != IGNORE_INDEX).sum()) for batch in eval_batches)
    if tokens == 0:
        raise ConfigError("no supervised token in the evaluation batches")
    before, optimizer_before = state(), copy.deepcopy(optimizer.state_dict())
    mode, summed = model.training, 0.0
    model.eval()
    try:
        with torch.no_grad():
            summed = sum(float(_summed_token_nll(model, batch)) for batch in eval_batches)
    finally:
        model.train(mode)
    state_unchanged = equal(before, state())
    optimizer_unchanged = equal(optimizer_before, optimizer.state_dict())
    leaked = sorted(set(train_hashes) & set(eval_hashes))
    return {"loss": summed / tokens, "supervised_tokens": tokens, "state_unchanged": state_unchanged,
            "optimizer_unchanged": optimizer_unchanged, "leaked": leaked,
            "isolated": state_unchanged and optimizer_unchanged and not leaked}
