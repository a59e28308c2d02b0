"""Verification: a strategy's path counts only when the observer saw it, in every observed step.

The declared name and the model's checkpoint flag are not evidence. Required per step: the pack
hook saw saved tensors; layer forward calls during backward (recomputation) exactly when the
strategy recomputes; saved activations copied to the host, none left on the device and copies
brought back in backward exactly when it offloads.
"""

from __future__ import annotations

from typing import Any, Mapping

from tools.experiments.memory_strategy.hooks import StrategyObserver
from tools.experiments.memory_strategy.strategies import STRATEGY_PATHS, validate_strategy


def observed_evidence(observer: StrategyObserver) -> dict:
    """The observer's evidence with every step's counters attached (what verification reads)."""
    return {**observer.evidence(), "steps": observer.step_evidence()}


def _step_checks(step: Mapping[str, Any], expected: Mapping[str, bool]) -> dict:
    recomputed = step["recomputed_layer_calls"] > 0
    offloaded = step["offloaded_tensor_count"] > 0
    if expected["offload"]:
        offload_ok = (offloaded and step["host_copy_devices"] == ["cpu"] and step["device_saved_bytes"] == 0
                      and step["restored_tensor_count"] > 0)
    else:
        offload_ok = not offloaded and step["host_offloaded_bytes"] == 0
    return {
        "saved_tensors_observed": step["saved_tensor_count"] > 0,
        "recomputation_matches": recomputed if expected["recompute"] else step["recomputed_layer_calls"] == 0,
        "offload_matches": offload_ok,
    }


def verify_execution_path(evidence: Mapping[str, Any], strategy: str) -> dict:
    """Decide from observed evidence whether `strategy`'s path really ran, in every observed step.

    `evidence` is `observed_evidence(observer)` (all steps) or a record's `saved_tensors` (its last
    step). Returns the checks, the reasons they failed (empty when verified) and the share of
    layers recomputed in the last step.
    """
    expected = STRATEGY_PATHS[validate_strategy(strategy)]
    steps = evidence.get("steps") or ([evidence["last_step"]] if evidence.get("last_step") else [])
    reasons = []
    if not steps:
        reasons.append("no_step_observed")
        checks = {"saved_tensors_observed": False, "recomputation_matches": False, "offload_matches": False}
    else:
        per_step = [_step_checks(step, expected) for step in steps]
        checks = {name: all(step[name] for step in per_step) for name in per_step[0]}
    if not checks["saved_tensors_observed"]:
        reasons.append("no_saved_tensors_observed")
    if not checks["recomputation_matches"]:
        reasons.append("recomputation_not_observed" if expected["recompute"] else "unexpected_recomputation")
    if not checks["offload_matches"]:
        reasons.append("offload_not_observed" if expected["offload"] else "unexpected_offload")
    last = steps[-1] if steps else {}
    coverage = last["recomputed_layer_calls"] / last["forward_layer_calls"] if last.get("forward_layer_calls") else None
    return {
        "strategy": strategy,
        "expected_path": dict(expected),
        "execution_path_verified": not reasons,
        "checks": checks,
        "reasons": reasons,
        "recompute_coverage": coverage,
    }
