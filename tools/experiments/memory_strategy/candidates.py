"""A strategy set on one workload: every strategy REPEATS times under the OOM guard, the saved-bytes
table beside the analytic estimate, and the quality floor the candidates are judged against."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tools.experiments.memory_strategy.plan import QUALITY_TOLERANCE, StagePlan
from tools.experiments.memory_strategy.runner import (
    CachedModel,
    TrainingWorkload,
    run_memory_strategy,
)


def run_strategy_set(plan: StagePlan, workload: TrainingWorkload, models: CachedModel,
                     log: Callable[[str], None] | None = None) -> list[dict]:
    """Every strategy, REPEATS times, under the OOM guard; one aggregated record per strategy."""
    import torch

    from tools.measure.training import run_repeated

    candidates = []
    for name in plan.strategies:
        started = time.perf_counter()
        aggregate = run_repeated(
            name, lambda name=name: run_memory_strategy(models, name, workload, device=plan.device,
                                                        pin_memory=plan.pin_memory),
            repeats=plan.repeats, torch_module=torch, context={"strategy": name, "seq_len": workload.seq_len})
        aggregate["wall_seconds"] = round(time.perf_counter() - started, 3)
        candidates.append(aggregate)
        if log is not None:
            log(f"  seq {workload.seq_len:>5} {name:<11}{aggregate['status']:<13}ok {aggregate['successful_runs']}"
                f"/{aggregate['repeat_count']}  verified={aggregate['execution_path_verified']}"
                f"  {aggregate['wall_seconds']:.1f}s")
    return candidates


def saved_bytes_table(candidates: Sequence[Mapping[str, Any]]) -> dict:
    """Hook bytes per strategy beside the analytic estimate (device, host, ratios), from aggregated records."""
    table = {}
    for candidate in candidates:
        ok_runs = [run for run in candidate.get("runs", []) if run.get("status") == "ok"]
        evidence = candidate.get("saved_tensors") or (ok_runs[0].get("saved_tensors") if ok_runs else None)
        estimate = candidate.get("activation_estimate") or (ok_runs[0].get("activation_estimate") if ok_runs else None)
        last, estimate = (evidence or {}).get("last_step") or {}, estimate or {}
        table[candidate["name"]] = {
            "status": candidate.get("status"),
            "execution_path_verified": candidate.get("execution_path_verified") is True,
            "evidence_source": ("all_successful_runs" if candidate.get("saved_tensors")
                                else ("first_successful_run" if ok_runs else None)),
            "device_saved_bytes": last.get("device_saved_bytes"),
            "host_offloaded_bytes": last.get("host_offloaded_bytes"),
            "recomputed_layer_calls": last.get("recomputed_layer_calls"),
            "forward_layer_calls": last.get("forward_layer_calls"),
            "estimated_device_bytes": estimate.get("estimated_device_bytes"),
            "estimated_host_bytes": estimate.get("estimated_host_bytes"),
            "device_ratio": estimate.get("device_ratio"),
            "host_ratio": estimate.get("host_ratio"),
        }
    return table


def quality_floor_from(candidates: Sequence[Mapping[str, Any]], fallback_loss: float, fallback_source: str) -> dict:
    """max_val_loss = baseline eval loss x QUALITY_TOLERANCE (the fallback when the baseline did not run)."""
    baseline = next(c for c in candidates if c["name"] == "baseline")
    if baseline["status"] == "ok" and baseline.get("eval_loss") is not None:
        return {"max_val_loss": baseline["eval_loss"] * QUALITY_TOLERANCE, "source": "baseline_eval_loss",
                "tolerance": QUALITY_TOLERANCE}
    return {"max_val_loss": fallback_loss * QUALITY_TOLERANCE, "source": fallback_source,
            "tolerance": QUALITY_TOLERANCE}
