"""Judging aggregated candidate records: accept / tune / reject (G0), the length ladder (G1), the
safety admission before each longer length, and the handoff gate to the memory-budget project (75).

Memory limits are judged where an out-of-memory error happens: at the caching allocator's
*reserved* peak plus the device memory outside the allocator (the CUDA context and library
handles), never at the allocated peak alone. The memory cap gate reads
`peak_reserved_mb + cuda_context_margin_mb <= memory_cap_mb` (the margin is stated in the budget,
DEFAULT_CUDA_CONTEXT_MARGIN_MB when absent); the G1 admission projects the previous length's
reserved peak, since the free memory the driver reports already excludes this process's context.
Savings stay differences of allocated peaks (what the tensors needed). An OOM is never a saving
and an unverified path is never accepted.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from tools.errors import ConfigError

CANDIDATE_VERDICTS = ("accept", "tune", "reject")
CANDIDATE_STATUSES = ("ok", "partial_oom", "partial_failed", "oom", "failed")
DEFAULT_MIN_BOUNDARY_LENGTHS = 2
DEFAULT_CUDA_CONTEXT_MARGIN_MB = 1024.0
"""Device memory a process uses outside PyTorch's allocator: the CUDA context (about 0.3 to 0.8 GiB
depending on GPU and loaded kernels) plus cuBLAS / cuDNN handles, with headroom."""
MEMORY_CAP_RULE = "peak_reserved_mb + cuda_context_margin_mb <= memory_cap_mb"
HANDOFF_CONSUMER = "75_memory_budget_compression"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _budget_value(budget: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = budget.get(name, default)
    if not _finite(value):
        raise ConfigError(f"budget[{name!r}] must be a finite number, got {budget.get(name)!r}")
    return float(value)


def context_margin_mb(budget: Mapping[str, Any]) -> float:
    """The stated device memory outside the allocator that the memory cap adds to the reserved peak."""
    margin = _budget_value(budget, "cuda_context_margin_mb", DEFAULT_CUDA_CONTEXT_MARGIN_MB)
    if margin < 0:
        raise ConfigError(f"budget['cuda_context_margin_mb'] must be >= 0, got {margin!r}")
    return margin


def _quality_limit(quality_floor: Mapping[str, Any]) -> float:
    value = quality_floor.get("max_val_loss")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise ConfigError(f"quality_floor['max_val_loss'] must be a number, got {value!r}")
    return float(value)


def _differences(row: dict, baseline: Mapping[str, Any] | None) -> None:
    if baseline is None:
        return
    if _finite(row["peak_memory_mb"]) and _finite(baseline.get("peak_memory_mb")):
        row["memory_saving_mb"] = baseline["peak_memory_mb"] - row["peak_memory_mb"]
    if _finite(row["peak_reserved_mb"]) and _finite(baseline.get("peak_reserved_mb")):
        row["reserved_saving_mb"] = baseline["peak_reserved_mb"] - row["peak_reserved_mb"]
    if _finite(row["samples_per_s"]) and _finite(baseline.get("samples_per_s")) and baseline["samples_per_s"] > 0:
        row["throughput_ratio"] = row["samples_per_s"] / baseline["samples_per_s"]
    if _finite(row["eval_loss"]) and _finite(baseline.get("eval_loss")):
        row["quality_delta"] = row["eval_loss"] - baseline["eval_loss"]


def _assess_candidate(candidate: Mapping[str, Any], baseline: Mapping[str, Any] | None, budget: Mapping[str, Any],
                      max_val_loss: float) -> dict:
    status = candidate.get("status")
    row: dict[str, Any] = {
        "name": candidate.get("name"), "status": status,
        "successful_runs": candidate.get("successful_runs"), "oom_runs": candidate.get("oom_runs"),
        "execution_path_verified": candidate.get("execution_path_verified") is True,
        "peak_memory_mb": candidate.get("peak_memory_mb"), "peak_reserved_mb": candidate.get("peak_reserved_mb"),
        "device_footprint_mb": None,
        "samples_per_s": candidate.get("samples_per_s"), "step_time_ms": candidate.get("step_time_ms"),
        "eval_loss": candidate.get("eval_loss"),
        "memory_saving_mb": None, "reserved_saving_mb": None, "throughput_ratio": None, "quality_delta": None,
        "gates": {}, "reasons": [],
    }
    if status in ("oom", "failed"):
        row.update(verdict="reject", reasons=[f"hard_failure:{status}"])
        return row
    reject, tune = [], []
    if status != "ok":
        tune.append(f"unstable:{status}")
    if not row["execution_path_verified"]:
        reject.append("execution_path_unverified")
    for key in ("samples_per_s", "eval_loss"):
        if not _finite(candidate.get(key)):
            reject.append(f"missing_metric:{key}")
    quality_ok = _finite(row["eval_loss"]) and row["eval_loss"] <= max_val_loss
    if _finite(row["eval_loss"]) and not quality_ok:
        reject.append("quality_below_floor")
    memory_measured = _finite(row["peak_memory_mb"]) and _finite(row["peak_reserved_mb"])
    if memory_measured:
        row["device_footprint_mb"] = row["peak_reserved_mb"] + context_margin_mb(budget)
    _differences(row, baseline)
    gates = {
        "no_hard_failure": True,
        "path_verified": row["execution_path_verified"],
        "quality_ok": quality_ok,
        "device_memory_measured": memory_measured,
        "within_memory_cap": memory_measured and row["device_footprint_mb"] <= _budget_value(budget, "memory_cap_mb"),
        "meets_min_samples_per_s": (_finite(row["samples_per_s"])
                                    and row["samples_per_s"] >= _budget_value(budget, "min_samples_per_s")),
        "memory_saving_ok": (row["memory_saving_mb"] is not None
                             and row["memory_saving_mb"] >= _budget_value(budget, "min_memory_saving_mb")),
        "throughput_ratio_ok": (row["throughput_ratio"] is not None
                                and row["throughput_ratio"] >= _budget_value(budget, "min_throughput_ratio")),
    }
    row["gates"] = gates
    if baseline is None:
        tune.append("baseline_unavailable")
    elif not memory_measured:
        tune.append("device_memory_not_measured")
    for gate in ("within_memory_cap", "meets_min_samples_per_s", "memory_saving_ok", "throughput_ratio_ok"):
        memory_gate = gate in ("within_memory_cap", "memory_saving_ok")
        if not gates[gate] and (not memory_gate or memory_measured):
            tune.append(f"gate_failed:{gate}")
    if reject:
        row.update(verdict="reject", reasons=reject + tune)
    elif tune:
        row.update(verdict="tune", reasons=tune)
    else:
        row.update(verdict="accept", reasons=[])
    return row


def summarize_memory_strategy_candidates(candidates: Sequence[Mapping[str, Any]], budget: Mapping[str, Any],
                                         quality_floor: Mapping[str, Any]) -> dict:
    """Judge each non-baseline candidate against the baseline and the budget: accept / tune / reject.

    `candidates`: aggregated records (`tools.measure.training.aggregate_runs`) with exactly one
    `baseline`. `budget`: memory_cap_mb, min_samples_per_s, min_memory_saving_mb,
    min_throughput_ratio[, cuda_context_margin_mb]. `quality_floor`: max_val_loss.
    reject: OOM or failed (a missing peak is never a saving), unverified path, missing throughput or
    eval loss, eval loss above the floor. tune: some repeats failed, baseline unusable, device
    memory not measured (CPU), or a gate not met (the memory cap: MEMORY_CAP_RULE). accept: all pass.
    """
    names = [candidate.get("name") for candidate in candidates]
    if len(set(names)) != len(names):
        raise ConfigError(f"candidate names must be unique, got {names}")
    if names.count("baseline") != 1:
        raise ConfigError("candidates must contain exactly one 'baseline' record")
    for name in ("memory_cap_mb", "min_samples_per_s", "min_memory_saving_mb", "min_throughput_ratio"):
        _budget_value(budget, name)
    margin = context_margin_mb(budget)
    max_val_loss = _quality_limit(quality_floor)
    baseline = next(candidate for candidate in candidates if candidate.get("name") == "baseline")
    baseline_row = {
        "name": "baseline", "status": baseline.get("status"),
        "execution_path_verified": baseline.get("execution_path_verified") is True,
        "peak_memory_mb": baseline.get("peak_memory_mb"), "peak_reserved_mb": baseline.get("peak_reserved_mb"),
        "samples_per_s": baseline.get("samples_per_s"), "eval_loss": baseline.get("eval_loss"),
    }
    usable = baseline.get("status") == "ok" and baseline_row["execution_path_verified"]
    rows = [_assess_candidate(candidate, baseline if usable else None, budget, max_val_loss)
            for candidate in candidates if candidate.get("name") != "baseline"]
    accepted = sorted((row for row in rows if row["verdict"] == "accept"),
                      key=lambda row: (-row["memory_saving_mb"], -row["throughput_ratio"]))
    return {
        "baseline": {**baseline_row, "usable": usable},
        "device_memory_measured": _finite(baseline_row["peak_memory_mb"]),
        "budget": dict(budget),
        "memory_cap_rule": MEMORY_CAP_RULE,
        "cuda_context_margin_mb": margin,
        "quality_floor": dict(quality_floor),
        "candidates": rows,
        "eligible_strategies": [row["name"] for row in accepted],
        "tune_strategies": [row["name"] for row in rows if row["verdict"] == "tune"],
        "rejected_strategies": [row["name"] for row in rows if row["verdict"] == "reject"],
        "oom_strategies": [row["name"] for row in rows if row["status"] in ("oom", "partial_oom")],
        "best_strategy": accepted[0]["name"] if accepted else None,
    }


def decide_memory_strategy_project(summary: Mapping[str, Any]) -> dict:
    """Decision for full-training adoption (G0): accept / tune / reject with the next action."""
    base = {"scope": "full_training_adoption", "eligible_strategies": list(summary["eligible_strategies"]),
            "tune_strategies": list(summary["tune_strategies"]),
            "rejected_strategies": list(summary["rejected_strategies"])}
    if not summary["baseline"].get("usable"):
        return {**base, "decision": "tune", "reason": "baseline_unavailable", "selected_strategy": None,
                "next_action": "rerun_baseline_with_a_new_label"}
    if summary["eligible_strategies"]:
        return {**base, "decision": "accept", "reason": "gates_passed", "selected_strategy": summary["best_strategy"],
                "next_action": "hand_off_to_75_memory_budget"}
    if not summary["device_memory_measured"]:
        return {**base, "decision": "tune", "reason": "device_memory_not_measured", "selected_strategy": None,
                "next_action": "run_g0_in_real_gpu_mode"}
    if summary["tune_strategies"]:
        return {**base, "decision": "tune", "reason": "gates_not_all_met", "selected_strategy": None,
                "next_action": "adjust_strategy_or_budget_and_rerun_g0_with_a_new_label"}
    return {**base, "decision": "reject", "reason": "no_viable_strategy", "selected_strategy": None,
            "next_action": "keep_baseline_and_revisit_strategies"}


def incomplete_g0_decision(candidates: Sequence[Mapping[str, Any]], repeats: int) -> dict:
    """The G0 decision when some strategy has fewer successful repeats than planned: always tune."""
    return {"scope": "full_training_adoption", "decision": "tune", "reason": "g0_incomplete_repeats",
            "selected_strategy": None,
            "incomplete_candidates": [c["name"] for c in candidates if c.get("successful_runs", 0) < repeats],
            "next_action": "rerun_g0_with_a_new_label_after_freeing_device_memory"}


def summarize_memory_boundary(length_records: Sequence[Mapping[str, Any]], budget: Mapping[str, Any],
                              quality_floor: Mapping[str, Any]) -> dict:
    """Judge every strategy at every length of the G1 ladder and collect the memory-by-length curve.

    `length_records`: `[{"seq_len", "source", "candidates": [aggregated records]}]`, lengths strictly
    increasing. A length counts as tested when its baseline ran and verified; a strategy is eligible
    for the activation-memory scope when accepted at every tested length. `budget` may carry
    `min_boundary_lengths` (default 2): fewer tested lengths are not enough evidence.
    """
    seq_lens = [record.get("seq_len") for record in length_records]
    if not seq_lens or seq_lens != sorted(set(seq_lens)):
        raise ConfigError(f"length records must have strictly increasing seq_len values, got {seq_lens}")
    minimum = budget.get("min_boundary_lengths", DEFAULT_MIN_BOUNDARY_LENGTHS)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
        raise ConfigError(f"budget['min_boundary_lengths'] must be a positive integer, got {minimum!r}")
    per_length = [{"seq_len": record["seq_len"], "source": record.get("source"),
                   "summary": summarize_memory_strategy_candidates(record["candidates"], budget, quality_floor)}
                  for record in length_records]
    tested = [entry for entry in per_length if entry["summary"]["baseline"]["usable"]]
    names = [row["name"] for row in per_length[0]["summary"]["candidates"]]
    strategies = {}
    for name in names:
        verdicts = {}
        for entry in per_length:
            row = next((row for row in entry["summary"]["candidates"] if row["name"] == name), None)
            verdicts[entry["seq_len"]] = None if row is None else row["verdict"]
        tested_verdicts = [verdicts[entry["seq_len"]] for entry in tested]
        strategies[name] = {
            "verdict_by_seq_len": {str(length): verdict for length, verdict in verdicts.items()},
            "accepted_at_all_tested": bool(tested_verdicts) and all(v == "accept" for v in tested_verdicts),
            "max_accepted_seq_len": max((n for n, verdict in verdicts.items() if verdict == "accept"), default=None),
        }
    memory_by_length = {
        str(entry["seq_len"]): {
            row["name"]: {"status": row["status"], "peak_memory_mb": row["peak_memory_mb"],
                          "peak_reserved_mb": row["peak_reserved_mb"]}
            for row in [entry["summary"]["baseline"], *entry["summary"]["candidates"]]
        }
        for entry in per_length
    }
    return {
        "seq_lens": seq_lens,
        "tested_seq_lens": [entry["seq_len"] for entry in tested],
        "device_memory_measured": bool(tested) and all(entry["summary"]["device_memory_measured"] for entry in tested),
        "min_boundary_lengths": minimum,
        "per_length": per_length,
        "strategies": strategies,
        "eligible_strategies": [name for name in names if strategies[name]["accepted_at_all_tested"]],
        "memory_by_length": memory_by_length,
    }


def decide_memory_boundary(summary: Mapping[str, Any]) -> dict:
    """Scoped decision from the G1 ladder: accept_for_activation_memory_scope / measure / tune.

    measure: fewer tested lengths than required, or no device memory readings (CPU); accept for the
    activation-memory scope: some strategy accepted at every tested length; tune otherwise. Never
    promoted to full training: the ladder's momentum-free SGD has no optimizer state.
    """
    base = {"scope": "activation_memory_isolation", "promotable_to_full_training": False,
            "tested_seq_lens": list(summary["tested_seq_lens"]),
            "eligible_strategies": list(summary["eligible_strategies"])}
    if len(summary["tested_seq_lens"]) < summary["min_boundary_lengths"]:
        return {**base, "decision": "measure", "reason": "insufficient_lengths_observed",
                "next_action": "extend_the_safe_length_ladder"}
    if not summary["device_memory_measured"]:
        return {**base, "decision": "measure", "reason": "device_memory_not_measured",
                "next_action": "run_g1_in_real_gpu_mode"}
    if summary["eligible_strategies"]:
        return {**base, "decision": "accept_for_activation_memory_scope", "reason": "gates_passed_at_every_length",
                "next_action": "use_as_activation_memory_evidence_only"}
    return {**base, "decision": "tune", "reason": "quality_memory_or_throughput_gate_not_met",
            "next_action": "adjust_strategy_and_rerun_the_ladder_with_a_new_label"}


# ---------------------------------------------------------------------------
# G1 safety admission
# ---------------------------------------------------------------------------

def safety_margin_mb(total_memory_mb: float, *, minimum_mb: float = 2048.0, fraction: float = 0.15) -> float:
    """Headroom kept free during the ladder: max(minimum_mb, fraction * total device memory)."""
    return max(minimum_mb, fraction * total_memory_mb)


def admit_next_length(*, previous_seq_len: int, previous_peak_reserved_mb: float | None, next_seq_len: int,
                      free_memory_mb: float | None, safety_margin: float | None) -> dict:
    """Admit the next ladder length only if its projected reserved peak fits in free memory minus the margin.

    Projection: previous reserved peak * next_seq_len / previous_seq_len (conservative: parameters
    do not grow with length). `free_memory_mb` is the driver's free memory after the allocator's
    cache was emptied, so this process's CUDA context is already outside it. Without device memory
    readings (CPU) the status is `not_applicable`; without a previous reserved peak it is `blocked`.
    """
    if isinstance(next_seq_len, bool) or not isinstance(next_seq_len, int) or not isinstance(previous_seq_len, int) \
            or next_seq_len <= previous_seq_len or previous_seq_len < 1:
        raise ConfigError(f"next_seq_len ({next_seq_len!r}) must be an integer above previous_seq_len "
                          f"({previous_seq_len!r})")
    check: dict[str, Any] = {
        "seq_len": next_seq_len, "previous_seq_len": previous_seq_len,
        "previous_peak_reserved_mb": previous_peak_reserved_mb,
        "free_memory_mb": free_memory_mb, "safety_margin_mb": safety_margin,
        "safe_process_limit_mb": None, "projected_peak_reserved_mb": None,
        "projection": "linear_in_seq_len_from_previous_peak_reserved",
    }
    if free_memory_mb is None:
        return {**check, "status": "not_applicable", "admitted": None, "reason": "no_device_memory_readings"}
    if not _finite(previous_peak_reserved_mb) or not _finite(safety_margin):
        return {**check, "status": "blocked", "admitted": False, "reason": "no_previous_peak_to_project_from"}
    projected = previous_peak_reserved_mb * next_seq_len / previous_seq_len
    limit = free_memory_mb - safety_margin
    admitted = projected <= limit
    return {**check, "safe_process_limit_mb": limit, "projected_peak_reserved_mb": projected,
            "status": "admitted" if admitted else "blocked", "admitted": admitted,
            "reason": "projected_peak_fits" if admitted else "projected_peak_exceeds_safe_limit"}


def admit_by_time(*, previous_seq_len: int, previous_seconds: float, next_seq_len: int, elapsed_s: float,
                  budget_s: float | None) -> dict:
    """Admit the next ladder length only if it is projected to finish within the run's time budget.

    Projection: the previous length's wall time * next_seq_len / previous_seq_len (a step's work
    grows at least linearly with length). Without a budget the status is `not_limited`.
    """
    check: dict[str, Any] = {"seq_len": next_seq_len, "previous_seq_len": previous_seq_len,
                             "previous_seconds": previous_seconds, "elapsed_s": elapsed_s, "budget_s": budget_s,
                             "projected_s": None, "projection": "linear_in_seq_len_from_previous_wall_time"}
    if budget_s is None:
        return {**check, "status": "not_limited", "admitted": True, "reason": "no_time_budget"}
    projected = previous_seconds * next_seq_len / previous_seq_len
    admitted = elapsed_s + projected <= budget_s
    return {**check, "projected_s": projected, "status": "admitted" if admitted else "blocked", "admitted": admitted,
            "reason": "projected_time_fits" if admitted else "projected_time_exceeds_budget"}


def highest_reserved_peak(candidates: Sequence[Mapping[str, Any]]) -> float | None:
    """The highest reserved peak among the strategies that completed at a length (None if none has one)."""
    peaks = [c["peak_reserved_mb"] for c in candidates if c.get("status") == "ok" and _finite(c.get("peak_reserved_mb"))]
    return max(peaks) if peaks else None


# ---------------------------------------------------------------------------
# Handoff to 75 (the library copy of the chapter's TODO 4)
# ---------------------------------------------------------------------------

def _check_handoff_input(candidates: Any, minimum_repeats: Any) -> None:
    if isinstance(minimum_repeats, bool) or not isinstance(minimum_repeats, int) or minimum_repeats < 1:
        raise ConfigError(f"minimum_repeats must be an int >= 1, got {minimum_repeats!r}")
    if not isinstance(candidates, list) or not all(isinstance(item, dict) for item in candidates):
        raise ConfigError("candidates must be a list of dicts")
    names = []
    for item in candidates:
        name, status, runs = item.get("name"), item.get("status"), item.get("successful_runs")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"candidate name must be a non-empty string, got {name!r}")
        if status not in CANDIDATE_STATUSES:
            raise ConfigError(f"{name}: status must be one of {', '.join(CANDIDATE_STATUSES)}, got {status!r}")
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 0:
            raise ConfigError(f"{name}: successful_runs must be an int >= 0, got {runs!r}")
        names.append(name)
    if len(set(names)) != len(names):
        raise ConfigError(f"candidate names must be unique, got {names}")
    if names.count("baseline") != 1:
        raise ConfigError("candidates must hold exactly one 'baseline'")


def handoff_gate(candidates: list, minimum_repeats: int = 3) -> dict:
    """Can G0's paired evidence go to the memory-budget project (75)? Same contract as the chapter's TODO 4.

    rerun_candidates: the baseline if it is not ok or short of repeats, then (input order) every
    partial_oom / partial_failed candidate and every ok candidate short of repeats; any -> rerun_required.
    failed_candidates: oom / failed candidates, kept as failures. Otherwise eligible: ok, path verified
    exactly True and a finite device peak (a CPU run has none); none -> no_valid_candidate.
    """
    _check_handoff_input(candidates, minimum_repeats)
    others = [item for item in candidates if item["name"] != "baseline"]
    baseline = next(item for item in candidates if item["name"] == "baseline")
    rerun = ["baseline"] if baseline["status"] != "ok" or baseline["successful_runs"] < minimum_repeats else []
    rerun += [item["name"] for item in others if item["status"] in ("partial_oom", "partial_failed")
              or (item["status"] == "ok" and item["successful_runs"] < minimum_repeats)]
    failed = [item["name"] for item in others if item["status"] in ("oom", "failed")]
    result = {"eligible_candidates": [], "rerun_candidates": rerun, "failed_candidates": failed}
    if rerun:
        return {"status": "rerun_required", "reason": "incomplete_repeats", **result,
                "next_action": "repeat_paired_runs_with_a_new_label"}
    eligible = [item["name"] for item in others if item["status"] == "ok"
                and item.get("execution_path_verified") is True and _finite(item.get("peak_memory_mb"))]
    if not eligible:
        return {"status": "no_valid_candidate", "reason": "no_measured_verified_candidate", **result,
                "next_action": "repair_strategy_execution_or_measure_on_a_gpu"}
    return {"status": "ready_for_budget_review", "reason": "paired_evidence_complete",
            **result, "eligible_candidates": eligible, "next_action": "send_to_75_memory_budget"}
