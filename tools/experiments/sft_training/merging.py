"""Is a merged adapter the same model as the unmerged one? peft's `merge_and_unload`, judged by dtype.

Merging folds the adapter into the base weights (LoRA: W0 + scaling * B @ A; DoRA: the magnitude
times the row-normalised W0 + scaling * B @ A), so the merged model must give the same logits as
the unmerged one. How close is "the same" depends on the dtype the merged weights are stored in:

* float32: tight. The largest logit difference, relative to the logit scale, must stay within
  FLOAT32_RELATIVE: each operation rounds at about 1e-7, and the errors grow by an order of magnitude
  or two through the layers and the sums on their way to the logits; a wrong merge (a wrong scaling,
  a layer left out) is off by the size of the update itself, far above.
* bfloat16: 8 significant bits (about 2-3 decimal digits). A merged weight is rounded to them, so
  the small update is partly lost and the two paths round differently; each path also rounds its
  own logits. The tolerance is therefore counted in bfloat16 spacings at the logits' magnitude:
  spacing = 2**(floor(log2(scale)) - 7), the distance between neighbouring bfloat16 numbers near
  the logit scale. Within BFLOAT16_ACCEPT_SPACINGS (2: each path's own rounding of a logit) is
  `accept`; up to BFLOAT16_TUNE_SPACINGS (16) is `tune` (the merge drifts measurably: keep the
  unmerged adapter, or merge in float32); beyond that `reject`. The record shows the drift in
  spacings, so the margin to each threshold is visible.

The logit scale is the largest |logit| of the unmerged output, at least 1 (near-zero logits are
judged in absolute terms). Chapter 14 teaches the judgement; chapters 14 and 31 record it.
"""

from __future__ import annotations

import copy
import math

import torch

from tools.errors import ConfigError

FLOAT32_RELATIVE = 1e-4
BFLOAT16_ACCEPT_SPACINGS = 2
BFLOAT16_TUNE_SPACINGS = 16
DTYPES = ("float32", "bfloat16")
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def bf16_spacing(scale: float) -> float:
    """The distance between neighbouring bfloat16 numbers at `scale` (>= 1): 2**(floor(log2(scale)) - 7)."""
    _, exponent = math.frexp(scale)  # scale = m * 2**exponent with m in [0.5, 1)
    return 2.0 ** (exponent - 8)


def thresholds(dtype: str, scale: float) -> tuple[float, float | None]:
    """(accept_below, tune_below) of the relative drift for `dtype` at logit scale `scale`."""
    if dtype == "float32":
        return FLOAT32_RELATIVE, None
    spacing = bf16_spacing(scale)
    return BFLOAT16_ACCEPT_SPACINGS * spacing / scale, BFLOAT16_TUNE_SPACINGS * spacing / scale


def judge_merge(unmerged_logits, merged_logits, dtype: str) -> dict:
    """Compare the logits of the unmerged and the merged model computed in `dtype`.

    Returns `{"dtype", "max_abs_diff", "logit_scale", "relative_drift", "accept_below",
    "tune_below", "decision", "bf16_spacing", "drift_in_spacings"}` (the last two None for float32;
    thresholds inclusive; `tune_below` is None for float32, where
    anything above `accept_below` is `reject`). A merged output that is not finite is `reject` with
    an infinite difference. ConfigError on tensors of different shapes, empty or non-floating
    tensors, a non-finite unmerged output, or an unknown dtype."""
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    for name, tensor in (("unmerged_logits", unmerged_logits), ("merged_logits", merged_logits)):
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point() or tensor.numel() == 0:
            raise ConfigError(f"{name} must be a non-empty floating tensor")
    if tuple(unmerged_logits.shape) != tuple(merged_logits.shape):
        raise ConfigError(f"shapes differ: {tuple(unmerged_logits.shape)} vs {tuple(merged_logits.shape)}")
    reference = unmerged_logits.detach().to("cpu", torch.float64)
    merged = merged_logits.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(reference).all()):
        raise ConfigError("the unmerged logits are not finite: there is nothing to compare the merge with")
    scale = max(1.0, float(reference.abs().max()))
    if bool(torch.isfinite(merged).all()):
        max_abs_diff = float((reference - merged).abs().max())
    else:
        max_abs_diff = math.inf
    drift = max_abs_diff / scale
    accept_below, tune_below = thresholds(dtype, scale)
    if drift <= accept_below:
        decision = "accept"
    elif tune_below is not None and drift <= tune_below:
        decision = "tune"
    else:
        decision = "reject"
    spacing = bf16_spacing(scale) if dtype == "bfloat16" else None
    return {"dtype": dtype, "max_abs_diff": max_abs_diff, "logit_scale": scale, "relative_drift": drift,
            "accept_below": accept_below, "tune_below": tune_below, "decision": decision,
            "bf16_spacing": spacing, "drift_in_spacings": None if spacing is None else max_abs_diff / spacing}


def recordable(judgement: dict) -> dict:
    """The judgement with infinities as None (records refuse non-finite numbers)."""
    return {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
            for key, value in judgement.items()}


def _real_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return logits[batch["attention_mask"].bool()].float()


def merge_equivalence(peft_model, batch: dict, dtype: str, judge=None) -> dict:
    """Logits of a copy of `peft_model` in `dtype`, unmerged and after `merge_and_unload`, judged by
    `judge(unmerged, merged, dtype)` (chapter 14's judge_merge: the learner's; None: this module's).

    The trained model itself is left untouched (the copy is merged). `batch` holds `input_ids` and
    `attention_mask` on the model's device; only real (unmasked) positions are compared."""
    if dtype not in TORCH_DTYPES:
        raise ConfigError(f"dtype must be one of {tuple(TORCH_DTYPES)}, got {dtype!r}")
    candidate = copy.deepcopy(peft_model).to(TORCH_DTYPES[dtype])
    candidate.eval()
    unmerged = _real_logits(candidate, batch)
    merged_model = candidate.merge_and_unload()
    merged = _real_logits(merged_model, batch)
    leftover = sorted({name for name, _ in merged_model.named_parameters() if "lora_" in name})
    judgement = (judge or judge_merge)(unmerged, merged, dtype)
    del candidate, merged_model
    return {**recordable(judgement), "adapter_tensors_left": len(leftover)}
