"""Is a merged adapter the same model as the unmerged one? peft's `merge_and_unload`, judged by dtype.

Merging folds the adapter into the base weights (LoRA: W0 + scaling * B @ A; DoRA: the magnitude
times the row-normalised W0 + scaling * B @ A), so the merged model must give the same logits as
the unmerged one. How close is "the same" depends on the dtype the merged weights are stored in:

* float32: tight. The largest logit difference, relative to the logit scale, must stay within
  FLOAT32_RELATIVE (a few hundred float32 rounding steps).
* bfloat16: a merged weight is rounded to 8 significant bits, so the small update is partly lost
  and the two paths round differently. Within one bfloat16 step of the logit scale (2**-7) is
  `accept`; up to eight steps (2**-4) is `tune` (the merge drifts: keep the unmerged adapter, or
  merge in float32); beyond that `reject`.

The logit scale is the largest |logit| of the unmerged output, at least 1 (near-zero logits are
judged in absolute terms). Chapter 14 teaches the judgement; chapters 14 and 31 record it.
"""

from __future__ import annotations

import copy
import math

import torch

from tools.errors import ConfigError

FLOAT32_RELATIVE = 1e-5
BFLOAT16_ACCEPT = 2.0 ** -7
BFLOAT16_TUNE = 2.0 ** -4
THRESHOLDS = {"float32": (FLOAT32_RELATIVE, None), "bfloat16": (BFLOAT16_ACCEPT, BFLOAT16_TUNE)}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def judge_merge(unmerged_logits, merged_logits, dtype: str) -> dict:
    """Compare the logits of the unmerged and the merged model computed in `dtype`.

    Returns `{"dtype", "max_abs_diff", "logit_scale", "relative_drift", "accept_below",
    "tune_below", "decision"}` (thresholds inclusive; `tune_below` is None for float32, where
    anything above `accept_below` is `reject`). A merged output that is not finite is `reject` with
    an infinite difference. ConfigError on tensors of different shapes, empty or non-floating
    tensors, a non-finite unmerged output, or an unknown dtype."""
    if dtype not in THRESHOLDS:
        raise ConfigError(f"dtype must be one of {tuple(THRESHOLDS)}, got {dtype!r}")
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
    accept_below, tune_below = THRESHOLDS[dtype]
    if drift <= accept_below:
        decision = "accept"
    elif tune_below is not None and drift <= tune_below:
        decision = "tune"
    else:
        decision = "reject"
    return {"dtype": dtype, "max_abs_diff": max_abs_diff, "logit_scale": scale, "relative_drift": drift,
            "accept_below": accept_below, "tune_below": tune_below, "decision": decision}


def recordable(judgement: dict) -> dict:
    """The judgement with infinities as None (records refuse non-finite numbers)."""
    return {key: (None if isinstance(value, float) and not math.isfinite(value) else value)
            for key, value in judgement.items()}


def _real_logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return logits[batch["attention_mask"].bool()].float()


def merge_equivalence(peft_model, batch: dict, dtype: str) -> dict:
    """Logits of a copy of `peft_model` in `dtype`, unmerged and after `merge_and_unload`, judged.

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
    judgement = judge_merge(unmerged, merged, dtype)
    del candidate, merged_model
    return {**recordable(judgement), "adapter_tensors_left": len(leftover)}
