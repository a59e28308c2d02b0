"""Comparisons the checks judge: log-prob agreement on the same tokens, and two groups' LoRA updates.

Pure functions over plain numbers and numpy arrays; the limits they are judged against live in
`config` and the judging in `checks`.
"""

from __future__ import annotations

import hashlib
import math
from typing import Mapping, Sequence

import numpy as np


def masked_abs_errors(reference: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
                      masks: Sequence[Sequence[int]]) -> list[float]:
    """|a - b| for every action-masked token of every rollout, in rollout then token order."""
    errors = []
    for ref_row, other_row, mask in zip(reference, other, masks, strict=True):
        if not len(ref_row) == len(other_row) == len(mask):
            raise ValueError(f"log-prob rows and mask differ in length ({len(ref_row)}, {len(other_row)}, {len(mask)})")
        errors.extend(abs(float(a) - float(b)) for a, b, m in zip(ref_row, other_row, mask) if m)
    return errors


def nearest_rank_percentile(values: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `percent` % of values at or below it."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def logprob_agreement(reference: Sequence[Sequence[float]], other: Sequence[Sequence[float]],
                      masks: Sequence[Sequence[int]]) -> dict:
    """`{token_count, mean_abs_error, p99_abs_error, max_abs_error}` over the action-masked tokens."""
    errors = masked_abs_errors(reference, other, masks)
    if not errors:
        raise ValueError("a log-prob comparison needs at least one action token")
    return {"token_count": len(errors), "mean_abs_error": sum(errors) / len(errors),
            "p99_abs_error": nearest_rank_percentile(errors, 99), "max_abs_error": max(errors)}


def within_limits(agreement: Mapping[str, float], *, mean_limit: float, p99_limit: float) -> bool:
    """True when both the mean and the p99 of a comparison are within their limits (inclusive)."""
    return agreement["mean_abs_error"] <= mean_limit and agreement["p99_abs_error"] <= p99_limit


def behaviour_drift(behaviour: Sequence[float], current: Sequence[float], mask: Sequence[int]) -> float:
    """Mean |log pi_current - log pi_behaviour| over the rollout's action tokens."""
    pairs = [(float(b), float(c)) for b, c, m in zip(behaviour, current, mask, strict=True) if m]
    if not pairs:
        raise ValueError("a rollout without action tokens cannot be re-scored")
    return sum(abs(c - b) for b, c in pairs) / len(pairs)


# ---------------------------------------------------------------------------
# LoRA tensors
# ---------------------------------------------------------------------------

def array_digest(array: np.ndarray) -> dict:
    """dtype, shape and sha256 of an array's float32 C-order bytes."""
    data = np.ascontiguousarray(array, dtype=np.float32)
    return {"dtype": "float32", "shape": list(data.shape), "sha256": hashlib.sha256(data.tobytes()).hexdigest()}


def state_digests(state: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """Per-tensor digests of a LoRA state (name -> array)."""
    return {name: array_digest(state[name]) for name in sorted(state)}


def changed_tensor_names(before: Mapping[str, Mapping], after: Mapping[str, Mapping]) -> list[str]:
    """Names whose digest differs (a tensor present in only one side counts as changed)."""
    names = sorted(set(before) | set(after))
    return [name for name in names if before.get(name, {}).get("sha256") != after.get(name, {}).get("sha256")]


def compare_lora_updates(first: Mapping[str, Mapping[str, np.ndarray]],
                         second: Mapping[str, Mapping[str, np.ndarray]]) -> dict:
    """How far two groups' LoRA updates are apart; each group is `{"initial": state, "updated": state}`
    (state: name -> array) and its update is `updated - initial`.

    Returns `{tensor_count, names_match, bit_identical, max_abs_difference, relative_difference,
    sign_disagreement_share}`: bit_identical compares the updated tensors; relative_difference is
    ||u1 - u2||_F / max(||u1||_F, ||u2||_F) over all tensors together (0.0 when neither group moved,
    so it lies in [0, 2]); sign_disagreement_share is the share of elements whose two updates have
    opposite signs. Different tensor names give None for every difference.
    """
    names = sorted(first["initial"])
    names_match = all(sorted(state) == names for state in (first["updated"], second["initial"], second["updated"]))
    if not names_match:
        return {"tensor_count": len(names), "names_match": False, "bit_identical": False,
                "max_abs_difference": None, "relative_difference": None, "sign_disagreement_share": None}
    difference_sq = first_sq = second_sq = 0.0
    max_abs, disagree, elements, identical = 0.0, 0, 0, True
    for name in names:
        arrays = [np.asarray(group[part][name], dtype=np.float64)
                  for group in (first, second) for part in ("initial", "updated")]
        if len({array.shape for array in arrays}) != 1:
            raise ValueError(f"LoRA tensor {name} has shapes {[array.shape for array in arrays]}")
        identical = identical and np.array_equal(np.asarray(first["updated"][name]), np.asarray(second["updated"][name]))
        update_one, update_two = arrays[1] - arrays[0], arrays[3] - arrays[2]
        delta = update_one - update_two
        difference_sq += float(np.sum(delta * delta))
        first_sq += float(np.sum(update_one * update_one))
        second_sq += float(np.sum(update_two * update_two))
        max_abs = max(max_abs, float(np.max(np.abs(delta))) if delta.size else 0.0)
        disagree += int(np.sum(np.sign(update_one) * np.sign(update_two) < 0))
        elements += delta.size
    scale = math.sqrt(max(first_sq, second_sq))
    relative = math.sqrt(difference_sq) / scale if scale > 0 else 0.0
    return {"tensor_count": len(names), "names_match": True, "bit_identical": bool(identical),
            "max_abs_difference": max_abs, "relative_difference": relative,
            "sign_disagreement_share": disagree / elements if elements else 0.0}
