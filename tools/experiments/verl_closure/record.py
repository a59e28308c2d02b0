"""The record of a run (schema SCHEMA), built from the groups' measurements, and what the chapters read.

`build_record` keeps measuring and judging apart: raw per-group measurements, the sampler's
samples on the run's clock, the comparisons, then the checks and the decision derived from them.
`read_summary(path, page)` is the one reader both chapters use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tools.core.records import load_record, record_header
from tools.data.arithmetic import TaskPool
from tools.errors import ConfigError
from tools.experiments.verl_closure.checks import decide, system_checks
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.protocol import INITIALISATION_PHASE, rollouts_sha256
from tools.measure.sampler import ResourceSampler, align_to_phases, peaks, samples_as_dicts

SCHEMA = "verl-mechanism-closure/v3"
STAGE = "verl_mechanism_closure"
CHAPTERS = ("PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM")
SUMMARY_PAGES = ("lifecycle", "system")

INTERPRETATION_LIMITS = (
    "one paired run on one device: no steady-state speed-up is claimed",
    "whole-device and whole-machine samples include other processes; a peak difference is not the KV-cache size",
    "a phase shorter than the sampling interval can have no sample: its peaks are null",
    "same-version agreement is judged by the mean and p99 of |error| (bf16 scoring); the maximum is recorded only",
)


def group_measurements(group: Mapping[str, Any], samples, origin: float) -> dict:
    """Per-phase timing and sampled peaks, plus the group's whole-segment peak (kept apart)."""
    phases = group["phases"]
    aligned = align_to_phases(samples, phases, origin=origin)
    start, end = phases[0]["start"], phases[-1]["end"]
    segment = peaks(s for s in samples if start <= s.t <= end)
    after_init = [p for p in phases if p["name"] != INITIALISATION_PHASE]
    steady = peaks(s for s in samples if after_init and after_init[0]["start"] <= s.t <= end)
    return {
        "phases": aligned,
        "initialisation_s": aligned[INITIALISATION_PHASE]["duration_s"],
        "step_s": sum(v["duration_s"] for k, v in aligned.items() if k != INITIALISATION_PHASE),
        "sample_count": segment["sample_count"],
        "sampled_gpu_peak_mb": segment["gpu_peak_mb"],
        "sampled_host_peak_mb": segment["host_peak_mb"],
        "sampled_gpu_peak_mb_after_initialisation": steady["gpu_peak_mb"],
        "resume_calls": group["resume_calls"],
        "release_calls": group["release_calls"],
    }


def _relative_events(events: Iterable[Mapping[str, Any]], origin: float, group: str) -> list[dict]:
    rows = []
    for event in events:
        row = {key: value for key, value in event.items() if key not in ("start", "end")}
        row.update(group=group, start_s=event["start"] - origin, end_s=event["end"] - origin)
        rows.append(row)
    return rows


def _relative_phases(phases: Iterable[Mapping[str, Any]], origin: float, group: str) -> list[dict]:
    return [{"group": group, "phase": p["name"], "start_s": p["start"] - origin, "end_s": p["end"] - origin}
            for p in phases]


GROUP_FIELDS = ("free_cache_engine", "initial_lora_sha256", "updated_lora_sha256", "lora_tensor_count",
                "changed_tensor_count", "changed_tensors", "resume_calls", "release_calls",
                "trainer_version_before_update", "trainer_version_after_update", "engine_version_at_generation",
                "engine_version_after_sync", "engine_reported_versions", "generation_sha256", "frozen_sha256",
                "generation_vs_frozen", "update", "same_version_before_update", "same_version_after_sync",
                "admission")


def _group_entry(group: Mapping[str, Any]) -> dict:
    entry = {key: group[key] for key in GROUP_FIELDS}
    entry["rescored_logprobs"] = group["rescored"]
    return entry


PATH_OVERRIDES = ("actor_rollout_ref.model.path", "actor_rollout_ref.model.lora_adapter_path")
"""Overrides whose values are machine paths: the record keeps their folder names only."""


def record_overrides(overrides: Mapping[str, Sequence[str]] | None) -> dict | None:
    """The groups' verl overrides as the record stores them (machine paths reduced to folder names)."""
    if overrides is None:
        return None
    shown = {}
    for group, items in overrides.items():
        rows = []
        for item in items:
            key, value = item.split("=", 1)
            if key in PATH_OVERRIDES and value != "null":
                value = Path(value.strip("'")).name
            rows.append(f"{key}={value}")
        shown[group] = rows
    return shown


def _frozen_summary(frozen: Sequence[Mapping[str, Any]], config: ClosureConfig) -> dict:
    return {
        "source_group": "release",
        "count": len(frozen),
        "samples_per_task": config.samples_per_task,
        "temperature": config.temperature,
        "seed": config.sampling_seed,
        "response_token_cap": config.response_token_cap,
        "policy_version": frozen[0]["policy_version"] if frozen else None,
        "sha256": rollouts_sha256(frozen),
        "parsed": sum(r["parsed"] is not None for r in frozen),
        "correct": sum(bool(r["correct"]) for r in frozen),
        "finish_reasons": {reason: sum(r["finish_reason"] == reason for r in frozen)
                           for reason in sorted({r["finish_reason"] for r in frozen}, key=str)},
        "truncated": sum(r["finish_reason"] == "length" for r in frozen),
        "rollouts": list(frozen),
    }


def comparable_figures(groups: Mapping[str, Mapping[str, Any]], measurements: Mapping[str, Mapping[str, Any]]) -> dict:
    """The run's numbers under the names of the figures the original course reported for this record
    (benchmarks/reported/original_course.toml), for the registry's measured / reported ratios. A
    number not measured (e.g. no GPU sample in a phase) is left out, never 0."""
    values: dict[str, float | None] = {}
    for name, measured in measurements.items():
        update = measured["phases"]["update"]
        values[f"update_phase_sampled_peak_mib.{name}"] = update["gpu_peak_mb"]
        values[f"update_phase_seconds.{name}"] = update["duration_s"]
        values[f"whole_segment_sampled_peak_mib.{name}"] = measured["sampled_gpu_peak_mb"]
    changed = {group["changed_tensor_count"] for group in groups.values()}
    values["changed_parameter_tensors_per_group"] = changed.pop() if len(changed) == 1 else None
    values["max_same_version_logprob_error_after_update"] = max(
        group["same_version_after_sync"]["max_abs_error"] for group in groups.values())
    return {key: float(value) for key, value in values.items() if value is not None}


def build_record(*, config: ClosureConfig, pool: TaskPool, groups: Mapping[str, Mapping[str, Any]],
                 settings: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Sequence[str]] | None,
                 sampler: ResourceSampler, origin: float, model: Mapping[str, Any], runtime: Mapping[str, Any],
                 backend_details: Mapping[str, Any], update_comparison: Mapping[str, Any],
                 memory_settling: Mapping[str, Any]) -> dict:
    """The full record (schema SCHEMA) from the groups' measurements (without their LoRA tensors)."""
    samples = sampler.snapshot()
    checks = system_checks(groups, settings=settings, overrides=overrides, config=config, sample_count=len(samples),
                           update_comparison=update_comparison, memory_settling=memory_settling)
    measurements = {name: group_measurements(group, samples, origin) for name, group in groups.items()}
    run_peaks = peaks(samples)
    header = record_header(schema_version=SCHEMA, chapter=CHAPTERS[0], stage=STAGE, run_mode=config.run_mode,
                           run_label=config.run_label)
    return {
        **header,
        "chapters": list(CHAPTERS),
        "backend": config.backend,
        "device": config.device,
        "model": dict(model),
        "runtime": dict(runtime),
        "config": config.record_view(),
        "group_settings": {name: dict(value) for name, value in settings.items()},
        "verl_overrides": record_overrides(overrides),
        "backend_details": dict(backend_details),
        "tasks": pool.manifest(),
        "frozen_rollouts": _frozen_summary(groups["release"]["frozen_rollouts"], config),
        "groups": {name: _group_entry(group) for name, group in groups.items()},
        "updated_lora_comparison": {**dict(update_comparison),
                                    "tolerance": config.updated_lora_relative_tolerance,
                                    "statistic": "||u_release - u_retain||_F / max(||u_release||_F, ||u_retain||_F), "
                                                 "u = updated - initial LoRA weights"},
        "memory_settling": dict(memory_settling),
        "stage_events": [row for name, group in groups.items()
                         for row in _relative_phases(group["phases"], origin, name)],
        "worker_events": [row for name, group in groups.items()
                          for row in _relative_events(group["worker_events"], origin, name)],
        "resource_samples": {**sampler.summary(), "samples": samples_as_dicts(samples, origin)},
        "sampled_gpu_peak_mb": {**{name: m["sampled_gpu_peak_mb"] for name, m in measurements.items()},
                                "run": run_peaks["gpu_peak_mb"]},
        "sampled_host_peak_mb": {**{name: m["sampled_host_peak_mb"] for name, m in measurements.items()},
                                 "run": run_peaks["host_peak_mb"]},
        "system_decision": {**decide(checks), "checks": checks, "measurements": measurements,
                            "interpretation_limits": list(INTERPRETATION_LIMITS)},
        "comparable": comparable_figures(groups, measurements),
    }


# ---------------------------------------------------------------------------
# What the chapters read
# ---------------------------------------------------------------------------

def _agreement(entry: Mapping[str, Any]) -> dict:
    return {key: entry[key] for key in ("token_count", "mean_abs_error", "p99_abs_error", "max_abs_error")}


def _lifecycle_page(record: Mapping[str, Any]) -> dict:
    frozen, config = record["frozen_rollouts"], record["config"]
    return {
        "task_version": record["tasks"]["task_version"],
        "pool_sha256": record["tasks"]["pool_sha256"],
        "frozen_rollouts": {key: frozen[key] for key in ("count", "policy_version", "sha256", "parsed", "correct",
                                                         "truncated", "finish_reasons", "temperature", "seed",
                                                         "response_token_cap")},
        "same_version_limits": {"mean_abs": config["same_version_mean_abs_limit"],
                                "p99_abs": config["same_version_p99_abs_limit"]},
        "behaviour_drift_threshold": config["behaviour_drift_threshold"],
        "updated_lora_comparison": dict(record["updated_lora_comparison"]),
        "groups": {name: {
            "initial_lora_sha256": g["initial_lora_sha256"],
            "updated_lora_sha256": g["updated_lora_sha256"],
            "lora_tensor_count": g["lora_tensor_count"],
            "changed_tensor_count": g["changed_tensor_count"],
            "changed_tensors": list(g["changed_tensors"]),
            "policy_version": {"frozen": frozen["policy_version"],
                               "trainer_after_update": g["trainer_version_after_update"],
                               "engine_after_sync": g["engine_version_after_sync"]},
            "engine_reported_versions": dict(g["engine_reported_versions"]),
            "same_version_before_update": _agreement(g["same_version_before_update"]),
            "same_version_after_sync": _agreement(g["same_version_after_sync"]),
            "admitted": g["admission"]["admitted"],
            "rejected": g["admission"]["rejected"],
            "admission_decisions": [dict(d) for d in g["admission"]["decisions"]],
            "rescored_after_update": [list(row) for row in g["rescored_logprobs"]["after_update"]],
            "update_loss": g["update"].get("loss"),
        } for name, g in record["groups"].items()},
        "rollouts": [dict(r) for r in frozen["rollouts"]],
    }


def _system_page(record: Mapping[str, Any]) -> dict:
    decision, groups = record["system_decision"], record["groups"]
    return {
        "sampler": {key: record["resource_samples"].get(key)
                    for key in ("interval_s", "gpu_source", "gpu_mapping", "host_source", "sample_count", "error_count")},
        "sampled_gpu_peak_mb": dict(record["sampled_gpu_peak_mb"]),
        "sampled_host_peak_mb": dict(record["sampled_host_peak_mb"]),
        "memory_settling": dict(record["memory_settling"]),
        "compilation": record["backend_details"].get("compilation"),
        "groups": {name: {
            "free_cache_engine": groups[name]["free_cache_engine"],
            "initial_lora_sha256": groups[name]["initial_lora_sha256"],
            "resume_calls": m["resume_calls"],
            "release_calls": m["release_calls"],
            "initialisation_s": m["initialisation_s"],
            "step_s": m["step_s"],
            "phases": {phase: {key: value[key] for key in ("duration_s", "sample_count", "gpu_peak_mb", "host_peak_mb")}
                       for phase, value in m["phases"].items()},
        } for name, m in decision["measurements"].items()},
        "worker_events": [{key: e.get(key) for key in ("group", "event", "call", "tags", "start_s", "end_s")}
                          for e in record["worker_events"]],
        "engine_description": {key: record["backend_details"].get(key) for key in ("engine", "release", "resume")},
        "timeline": {"stage_events": [dict(e) for e in record["stage_events"]],
                     "samples": [dict(s) for s in record["resource_samples"]["samples"]]},
        "interpretation_limits": list(decision["interpretation_limits"]),
    }


def read_summary(path: str | os.PathLike, page: str) -> dict:
    """What a chapter reads from the record: page "lifecycle" (identity, versions, re-scoring,
    admission) or "system" (stage events, engine state events, sampled resources). Both pages
    carry the header fields, the status and every check."""
    if page not in SUMMARY_PAGES:
        raise ConfigError(f"unknown summary page {page!r}; choose one of {', '.join(SUMMARY_PAGES)}")
    record = load_record(path, schema_version=SCHEMA)
    decision = record["system_decision"]
    base = {
        "schema_version": record["schema_version"],
        "run_label": record["run_label"],
        "run_mode": record["run_mode"],
        "evidence_level": record["evidence_level"],
        "backend": record["backend"],
        "device": record["device"],
        "model_id": record["model"].get("model_id"),
        "weights": record["model"].get("weights"),
        "status": decision["status"],
        "failed_checks": list(decision["failed_checks"]),
        "checks": dict(decision["checks"]),
    }
    return {**base, **(_lifecycle_page(record) if page == "lifecycle" else _system_page(record))}
