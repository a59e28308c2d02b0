"""The shared single-GPU experiment of PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM.

Two groups that differ only in `free_cache_engine` (release: the rollout engine sleeps between
generation and training and is resumed for the weight sync; retain: it keeps its state) run the
same controlled step on the fixed arithmetic tasks:

    initialisation -> [initial_release] -> initial_sync -> generation -> [engine_release]
    -> score_before_update -> update -> score_after_update -> weight_sync
    -> post_sync_generation -> post_sync_scoring

(bracketed phases only in the release group). The release group's generation is frozen
(4 samples per task, temperature 1, seed 42, a response-token cap) and both groups score and
re-score that same frozen set. Both groups load one initial LoRA adapter (rank 16) and take one
supervised update on the tasks' correct answers. A background sampler reads whole-device GPU
memory and host memory every 0.25 s; samples are aligned to the stage events (one monotonic
clock). The record is written once and read by both chapters through `read_summary`.

Backends: `torch` (transformers + peft; the rollout engine is a separate model copy that is
released and resumed in the release group) runs anywhere, `--model tiny --device cpu` in well
under two minutes; `verl` drives verl 0.9.1 (FSDP actor + vLLM rollout, PT-VERL-CUDA profile)
through `tools/closure_verl_backend.py`.

Command line:

    python -m tools.verl_mechanism_closure --mode preflight|run --run-label L --output PATH
        [--verl-root DIR] [--backend verl|torch] [--model ID|tiny] [--device cpu|cuda]

Preflight loads no model: exit 0 ready, 4 when only the model cache is missing, 3 blocked.
A run exits 0 when the record was written, 2 on invalid input (nothing done), 3/4 when the
preflight blocks, 1 when a stage failed (no record; see stderr and `<label>_<group>.log`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from tools.data.arithmetic import DEFAULT_TASK_SEED, TaskPool, build_task_pool
from tools.closure_protocol import (FREE_CACHE_ENGINE, GROUPS, INITIALISATION_PHASE, PHASES, RELEASE_ONLY_PHASES,
                                    GroupSession, Request, SupervisedExample, admission, build_examples,
                                    build_requests, expected_phases, rollouts_sha256, run_group)
from tools.errors import ConfigError, ModelCacheMissingError, RecordExistsError
from tools.core.environment import installed_version, runtime_snapshot
from tools.core.paths import resolve_project_root
from tools.core.preflight import PREFLIGHT_EXIT_MODEL_CACHE, format_preflight, preflight_exit_code, preflight_report
from tools.core.records import load_record, record_header, save_json_record_once
from tools.core.runs import require_finite, validate_run_label
from tools.measure.sampler import DEFAULT_INTERVAL_S, ResourceSampler, align_to_phases, peaks, samples_as_dicts

__all__ = [
    "SCHEMA", "GROUPS", "FREE_CACHE_ENGINE", "PHASES", "RELEASE_ONLY_PHASES", "SUMMARY_PAGES", "ClosureConfig",
    "validate_config", "group_settings", "verl_group_overrides", "compose_verl_config", "verl_config_dir",
    "GroupSession", "Request", "SupervisedExample", "run_group", "admission", "expected_phases", "rollouts_sha256",
    "system_checks", "decide", "build_record", "read_summary", "preflight", "run_experiment", "main",
]

SCHEMA = "verl-mechanism-closure/v2"
STAGE = "verl_mechanism_closure"
CHAPTERS = ("PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM")
BACKENDS = ("verl", "torch")
DEVICES = ("cpu", "cuda")
SUMMARY_PAGES = ("lifecycle", "system")
VERL_VERSION = "0.9.1"
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
TINY = "tiny"


EXIT_OK = 0
EXIT_STAGE_FAILED = 1
EXIT_INVALID = 2


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ClosureConfig:
    """Everything that defines one run. Groups differ only in FREE_CACHE_ENGINE."""

    run_label: str
    output: Path
    backend: str = "verl"
    model: str = DEFAULT_MODEL
    model_source: str = "local"
    device: str = "cuda"
    verl_root: Path | None = None
    model_cache: Path | None = None
    task_seed: int = DEFAULT_TASK_SEED
    samples_per_task: int = 4
    temperature: float = 1.0
    sampling_seed: int = 42
    response_token_cap: int = 128
    prompt_token_cap: int = 256
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lora_init_seed: int = 0
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    same_version_max_abs_error: float = 0.15
    behaviour_drift_threshold: float = 0.2
    sample_interval_s: float = DEFAULT_INTERVAL_S
    score_micro_batch: int = 8
    gpu_memory_utilization: float = 0.3
    attn_implementation: str = "sdpa"
    """Actor attention in verl: "sdpa" works with the pinned PT-VERL-CUDA profile (no flash-attn);
    "flash_attention_2" is verl's own default and needs flash-attn."""
    lora_init_seed_overrides: Mapping[str, int] = field(default_factory=dict)
    """Test hook: a different adapter seed for a group makes a deliberately failed pairing."""

    @property
    def run_mode(self) -> str:
        """real_gpu only for a real model on CUDA; everything else is a cpu_smoke code-path proof."""
        return "real_gpu" if self.device == "cuda" and self.model != TINY else "cpu_smoke"

    def lora_seed(self, group: str) -> int:
        return int(self.lora_init_seed_overrides.get(group, self.lora_init_seed))

    def log_path(self, group: str) -> Path:
        return self.output.parent / f"{self.run_label}_{group}.log"

    @classmethod
    def from_public(cls, data: Mapping[str, Any]) -> "ClosureConfig":
        """Rebuild a config from `public()` (e.g. in a verl group process)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {key: value for key, value in data.items() if key in names}
        kwargs["output"] = Path(kwargs["output"])
        for key in ("verl_root", "model_cache"):
            kwargs[key] = None if kwargs.get(key) is None else Path(kwargs[key])
        kwargs["lora_target_modules"] = tuple(kwargs.get("lora_target_modules", ()))
        return cls(**kwargs)

    def public(self) -> dict:
        """The config as stored in the record."""
        data = dataclasses.asdict(self)
        data["output"] = str(self.output)
        data["verl_root"] = None if self.verl_root is None else str(self.verl_root)
        data["model_cache"] = None if self.model_cache is None else str(self.model_cache)
        data["lora_target_modules"] = list(self.lora_target_modules)
        data["lora_init_seed_overrides"] = dict(self.lora_init_seed_overrides)
        data["run_mode"] = self.run_mode
        return data

    def record_view(self) -> dict:
        """The config as stored in the record: folders by name only, never machine paths."""
        data = self.public()
        data["output"] = self.output.name
        data["verl_root"] = None if self.verl_root is None else self.verl_root.name
        data["model_cache"] = None if self.model_cache is None else self.model_cache.name
        return data


def validate_config(config: ClosureConfig) -> ClosureConfig:
    """Raise ConfigError on any invalid field; nothing is done before this passes."""
    validate_run_label(config.run_label)
    if config.backend not in BACKENDS:
        raise ConfigError(f"unknown backend {config.backend!r}; choose one of {', '.join(BACKENDS)}.")
    if config.device not in DEVICES:
        raise ConfigError(f"unknown device {config.device!r}; choose one of {', '.join(DEVICES)}.")
    if config.backend == "verl" and config.device != "cuda":
        raise ConfigError("the verl backend needs --device cuda (vLLM and FSDP run on a GPU); use --backend torch on CPU.")
    if config.model_source not in ("local", "random_init"):
        raise ConfigError(f"unknown model source {config.model_source!r}; choose local or random_init.")
    output = Path(config.output)
    if output.suffix != ".json":
        raise ConfigError(f"--output must name a .json file, got {output}")
    for name in ("samples_per_task", "response_token_cap", "prompt_token_cap", "lora_rank", "lora_alpha",
                 "score_micro_batch"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    for name in ("temperature", "learning_rate", "same_version_max_abs_error", "behaviour_drift_threshold",
                 "sample_interval_s", "gpu_memory_utilization", "grad_clip"):
        require_finite(name, getattr(config, name), positive=True)
    require_finite("weight_decay", config.weight_decay, minimum=0.0)
    if config.gpu_memory_utilization >= 1:
        raise ConfigError("gpu_memory_utilization must be below 1")
    unknown = set(config.lora_init_seed_overrides) - set(GROUPS)
    if unknown:
        raise ConfigError(f"lora_init_seed_overrides names unknown groups {sorted(unknown)}")
    if config.attn_implementation not in ("flash_attention_2", "sdpa", "eager"):
        raise ConfigError(f"unsupported attn_implementation {config.attn_implementation!r}")
    return config


def group_settings(config: ClosureConfig, group: str) -> dict:
    """The effective settings of one group; the pairing check compares these across groups."""
    if group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose one of {', '.join(GROUPS)}")
    settings = {key: value for key, value in config.public().items()
                if key not in ("output", "run_label", "lora_init_seed_overrides")}
    settings["lora_init_seed"] = config.lora_seed(group)
    settings["free_cache_engine"] = FREE_CACHE_ENGINE[group]
    return settings


# ---------------------------------------------------------------------------
# verl: override sets and config composition
# ---------------------------------------------------------------------------

_HYDRA_SAFE = re.compile(r"^[A-Za-z0-9_./:\-+~]+$")


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(item) for item in value) + "]"
    text = str(value)
    if _HYDRA_SAFE.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_group_overrides(group: str, model_path: str | os.PathLike, *, lora_adapter_path: str | os.PathLike | None = None,
                         run_label: str = "verl_mechanism_closure", response_token_cap: int = 128,
                         prompt_token_cap: int = 256, lora_rank: int = 16, lora_alpha: int = 32,
                         lora_target_modules: Sequence[str] = ("q_proj", "v_proj"), learning_rate: float = 1e-3,
                         weight_decay: float = 0.0, grad_clip: float = 1.0, micro_batch: int = 8,
                         sampling_seed: int = 42, temperature: float = 1.0, gpu_memory_utilization: float = 0.3,
                         attn_implementation: str | None = None) -> list[str]:
    """Hydra overrides of verl 0.9.1's `ppo_trainer` config for one group ("release" or "retain").

    The two groups' lists are identical except `actor_rollout_ref.rollout.free_cache_engine`.
    One GPU: trainer.n_gpus_per_node=1, trainer.nnodes=1, rollout TP 1; rollout mode async
    (the only mode 0.9.1 accepts); `enable_sleep_mode` is a RolloutConfig field that the yaml
    does not list, hence the `+`. LoRA rank 16 on q/v, loaded from one shared initial adapter
    so both groups start from the same weights. Engine log-probs are requested
    (calculate_log_probs) for the behaviour and same-version checks.
    """
    if group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose one of {', '.join(GROUPS)}")
    overrides = {
        "trainer.n_gpus_per_node": 1,
        "trainer.nnodes": 1,
        "trainer.device": "cuda",
        "trainer.project_name": "verl_mechanism_closure",
        "trainer.experiment_name": run_label,
        "trainer.logger": ["console"],
        "trainer.total_training_steps": 1,
        "data.max_prompt_length": prompt_token_cap,
        "data.max_response_length": response_token_cap,
        "actor_rollout_ref.model.path": str(model_path),
        "actor_rollout_ref.model.lora_rank": lora_rank,
        "actor_rollout_ref.model.lora_alpha": lora_alpha,
        "actor_rollout_ref.model.target_modules": list(lora_target_modules),
        "actor_rollout_ref.model.lora_adapter_path": None if lora_adapter_path is None else str(lora_adapter_path),
        "actor_rollout_ref.actor.optim.lr": learning_rate,
        "actor_rollout_ref.actor.optim.weight_decay": weight_decay,
        "actor_rollout_ref.actor.optim.total_training_steps": 1,
        "actor_rollout_ref.actor.grad_clip": grad_clip,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": micro_batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro_batch,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.gpu_memory_utilization": gpu_memory_utilization,
        "actor_rollout_ref.rollout.max_model_len": prompt_token_cap + response_token_cap,
        "actor_rollout_ref.rollout.temperature": temperature,
        "actor_rollout_ref.rollout.top_p": 1.0,
        "actor_rollout_ref.rollout.top_k": -1,
        "actor_rollout_ref.rollout.seed": sampling_seed,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro_batch,
        "actor_rollout_ref.rollout.free_cache_engine": FREE_CACHE_ENGINE[group],
        "+actor_rollout_ref.rollout.enable_sleep_mode": True,
        "algorithm.use_kl_in_reward": False,
    }
    if attn_implementation is not None:
        overrides["+actor_rollout_ref.model.override_config.attn_implementation"] = attn_implementation
        if attn_implementation != "flash_attention_2":
            # packed (remove-padding) batches need flash-attention's varlen kernels
            overrides["actor_rollout_ref.model.use_remove_padding"] = False
    return [f"{key}={_hydra_value(value)}" for key, value in overrides.items()]


def overrides_for_config(config: ClosureConfig, group: str, model_path: str | os.PathLike,
                         lora_adapter_path: str | os.PathLike | None) -> list[str]:
    """`verl_group_overrides` with the run's settings."""
    return verl_group_overrides(
        group, model_path, lora_adapter_path=lora_adapter_path, run_label=config.run_label,
        response_token_cap=config.response_token_cap, prompt_token_cap=config.prompt_token_cap,
        lora_rank=config.lora_rank, lora_alpha=config.lora_alpha, lora_target_modules=config.lora_target_modules,
        learning_rate=config.learning_rate, weight_decay=config.weight_decay, grad_clip=config.grad_clip,
        micro_batch=config.score_micro_batch, sampling_seed=config.sampling_seed, temperature=config.temperature,
        gpu_memory_utilization=config.gpu_memory_utilization, attn_implementation=config.attn_implementation)


def verl_config_dir(verl_root: str | os.PathLike | None = None) -> Path:
    """verl's `trainer/config` folder: from a verl checkout at `verl_root`, else the installed package.

    Finds the package without importing it (importing verl pulls in ray and torch).
    """
    if verl_root is not None:
        candidate = Path(verl_root).expanduser() / "verl" / "trainer" / "config"
        if candidate.is_dir():
            return candidate
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise ConfigError("verl is not installed and no verl checkout was given (--verl-root); "
                          "install environment/verl-config-check.txt or the PT-VERL-CUDA profile.")
    return Path(spec.origin).parent / "trainer" / "config"


def compose_verl_config(overrides: Sequence[str], verl_root: str | os.PathLike | None = None,
                        config_name: str = "ppo_trainer"):
    """Compose verl's shipped Hydra config with `overrides` (hydra compose API); returns a DictConfig."""
    from hydra import compose, initialize_config_dir

    config_dir = verl_config_dir(verl_root)
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


# ---------------------------------------------------------------------------
# Checks, decision and record
# ---------------------------------------------------------------------------

def _settings_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    return sorted(key for key in set(first) | set(second) if first.get(key) != second.get(key))


def _override_differences(first: Sequence[str], second: Sequence[str]) -> list[str]:
    def as_map(items: Sequence[str]) -> dict:
        return dict(item.split("=", 1) for item in items)

    a, b = as_map(first), as_map(second)
    return sorted(key for key in set(a) | set(b) if a.get(key) != b.get(key))


def _phase_order_ok(phases: Sequence[Mapping[str, Any]], expected: Sequence[str]) -> bool:
    names = [p["name"] for p in phases]
    if names != list(expected):
        return False
    return all(p["end"] >= p["start"] for p in phases) and all(
        later["start"] >= earlier["end"] for earlier, later in zip(phases, phases[1:]))


def system_checks(groups: Mapping[str, Mapping[str, Any]], *, settings: Mapping[str, Mapping[str, Any]],
                  overrides: Mapping[str, Sequence[str]] | None, config: ClosureConfig, sample_count: int) -> dict:
    """Each check a boolean; all true for a valid run."""
    release, retain = groups["release"], groups["retain"]
    threshold = config.same_version_max_abs_error
    setting_diff = _settings_differences(settings["release"], settings["retain"])
    override_diff = None if overrides is None else _override_differences(overrides["release"], overrides["retain"])
    return {
        "initial_lora_hash_equal": release["initial_lora_sha256"] == retain["initial_lora_sha256"],
        "config_differs_only_in_free_cache_engine": setting_diff == ["free_cache_engine"] and (
            override_diff is None or override_diff == ["actor_rollout_ref.rollout.free_cache_engine"]),
        "frozen_rollouts_shared": release["frozen_sha256"] == retain["frozen_sha256"],
        "frozen_rollouts_aligned": all(
            len(r["response_token_ids"]) == len(r["behaviour_logprobs"]) == sum(r["action_mask"]) > 0
            and r["policy_version"] == release["trainer_version_before_update"]
            for r in release["frozen_rollouts"]),
        "parameters_changed": all(g["changed_tensor_count"] > 0 for g in groups.values()),
        "updated_lora_hash_equal": release["updated_lora_sha256"] == retain["updated_lora_sha256"],
        "same_version_before_update_within_threshold": all(
            g["same_version_before_update"]["max_abs_error"] <= threshold for g in groups.values()),
        "same_version_after_sync_within_threshold": all(
            g["same_version_after_sync"]["max_abs_error"] <= threshold for g in groups.values()),
        "admission_recorded": all(
            g["admission"]["admitted"] + g["admission"]["rejected"] == len(release["frozen_rollouts"])
            for g in groups.values()),
        "policy_versions_consistent": all(
            g["trainer_version_after_update"] == g["trainer_version_before_update"] + 1
            and g["engine_version_at_generation"] == g["trainer_version_before_update"]
            and g["engine_version_after_sync"] == g["trainer_version_after_update"] for g in groups.values()),
        "stage_events_complete": all(_phase_order_ok(g["phases"], expected_phases(name))
                                     for name, g in groups.items()),
        "release_resume_match_config": (release["release_calls"] > 0 and release["resume_calls"] > 0
                                        and retain["release_calls"] == 0 and retain["resume_calls"] == 0),
        "resource_sampling_active": sample_count > 0,
    }


def decide(checks: Mapping[str, bool]) -> dict:
    """pass when every check holds; a different initial LoRA is a failed pairing, reported as such."""
    failed = [name for name, ok in checks.items() if not ok]
    if not failed:
        status, note = "pass", "every check holds; stage observations and the strict pairing are both valid"
    elif not checks["initial_lora_hash_equal"]:
        status = "pairing_failed"
        note = ("the groups started from different LoRA weights: stage observations are kept, but differences "
                "cannot be attributed to free_cache_engine")
    else:
        status, note = "checks_failed", "see the failed checks"
    return {"status": status, "failed_checks": failed, "note": note}


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


def _group_entry(group: Mapping[str, Any]) -> dict:
    keep = ("free_cache_engine", "initial_lora_sha256", "updated_lora_sha256", "lora_tensor_count",
            "changed_tensor_count", "changed_tensors", "resume_calls", "release_calls",
            "trainer_version_before_update", "trainer_version_after_update", "engine_version_at_generation",
            "engine_version_after_sync", "generation_sha256", "frozen_sha256", "generation_vs_frozen", "update",
            "same_version_before_update", "same_version_after_sync", "admission")
    entry = {key: group[key] for key in keep}
    entry["rescored_logprobs"] = group["rescored"]
    return entry


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
        "truncated": sum(r["finish_reason"] == "length" for r in frozen),
        "rollouts": list(frozen),
    }


def build_record(*, config: ClosureConfig, pool: TaskPool, groups: Mapping[str, Mapping[str, Any]],
                 settings: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Sequence[str]] | None,
                 sampler: ResourceSampler, origin: float, model: Mapping[str, Any], runtime: Mapping[str, Any],
                 backend_details: Mapping[str, Any]) -> dict:
    """The full record (schema SCHEMA) from the groups' measurements."""
    samples = sampler.snapshot()
    checks = system_checks(groups, settings=settings, overrides=overrides, config=config, sample_count=len(samples))
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
        "verl_overrides": None if overrides is None else {k: list(v) for k, v in overrides.items()},
        "backend_details": dict(backend_details),
        "tasks": pool.manifest(),
        "frozen_rollouts": _frozen_summary(groups["release"]["frozen_rollouts"], config),
        "groups": {name: _group_entry(group) for name, group in groups.items()},
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
                            "interpretation_limits": [
                                "one paired run on one device: no steady-state speed-up is claimed",
                                "whole-device and whole-machine samples include other processes; a peak difference "
                                "is not the KV-cache size",
                                "a phase shorter than the sampling interval can have no sample: its peaks are null",
                            ]},
    }


# ---------------------------------------------------------------------------
# Summaries for the chapters
# ---------------------------------------------------------------------------

def read_summary(path: str | os.PathLike, page: str) -> dict:
    """What a chapter reads from the record: page "lifecycle" (identity, versions, re-scoring,
    admission) or "system" (stage events, engine state events, sampled resources)."""
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
        "model_id": record["model"].get("model_id"),
        "weights": record["model"].get("weights"),
        "status": decision["status"],
        "checks": dict(decision["checks"]),
    }
    groups = record["groups"]
    if page == "lifecycle":
        frozen = record["frozen_rollouts"]
        return {
            **base,
            "task_version": record["tasks"]["task_version"],
            "pool_sha256": record["tasks"]["pool_sha256"],
            "frozen_rollouts": {key: frozen[key] for key in ("count", "policy_version", "sha256", "parsed",
                                                             "correct", "truncated", "temperature", "seed",
                                                             "response_token_cap")},
            "same_version_threshold": record["config"]["same_version_max_abs_error"],
            "behaviour_drift_threshold": record["config"]["behaviour_drift_threshold"],
            "groups": {name: {
                "initial_lora_sha256": g["initial_lora_sha256"],
                "updated_lora_sha256": g["updated_lora_sha256"],
                "changed_tensor_count": g["changed_tensor_count"],
                "policy_version": {"frozen": frozen["policy_version"],
                                   "trainer_after_update": g["trainer_version_after_update"],
                                   "engine_after_sync": g["engine_version_after_sync"]},
                "same_version_before_update_max_abs_error": g["same_version_before_update"]["max_abs_error"],
                "same_version_after_sync_max_abs_error": g["same_version_after_sync"]["max_abs_error"],
                "admitted": g["admission"]["admitted"],
                "rejected": g["admission"]["rejected"],
                "update_loss": g["update"].get("loss"),
            } for name, g in groups.items()},
        }
    measurements = decision["measurements"]
    return {
        **base,
        "sampler": {key: record["resource_samples"].get(key) for key in ("interval_s", "gpu_source", "host_source",
                                                                          "sample_count", "error_count")},
        "sampled_gpu_peak_mb": dict(record["sampled_gpu_peak_mb"]),
        "sampled_host_peak_mb": dict(record["sampled_host_peak_mb"]),
        "groups": {name: {
            "free_cache_engine": groups[name]["free_cache_engine"],
            "resume_calls": m["resume_calls"],
            "release_calls": m["release_calls"],
            "initialisation_s": m["initialisation_s"],
            "step_s": m["step_s"],
            "phases": {phase: {key: value[key] for key in ("duration_s", "sample_count", "gpu_peak_mb", "host_peak_mb")}
                       for phase, value in m["phases"].items()},
        } for name, m in measurements.items()},
        "worker_events": [{key: e.get(key) for key in ("group", "event", "call", "tags", "start_s", "end_s")}
                          for e in record["worker_events"]],
        "timeline": {"stage_events": [dict(e) for e in record["stage_events"]],
                     "samples": [dict(s) for s in record["resource_samples"]["samples"]]},
        "interpretation_limits": list(decision["interpretation_limits"]),
    }


# ---------------------------------------------------------------------------
# Preflight
# ---------------------------------------------------------------------------

def _check(name: str, ok: bool, severity: str, detail: str, fix: str | None = None) -> dict:
    return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "fix": None if ok else fix}


_VERL_PROBE = (
    "import importlib.metadata as m, importlib.util as u, json\n"
    "def v(n):\n"
    "    try: return m.version(n)\n"
    "    except m.PackageNotFoundError: return None\n"
    "print(json.dumps({n: v(n) for n in ('verl','ray','vllm','torch','transformers','peft','flash_attn',"
    "'tensordict','hydra-core')}))\n"
)


def verl_python(verl_root: str | os.PathLike | None) -> Path | None:
    """The interpreter of a PT-VERL-CUDA checkout (`<root>/.venv/bin/python`), when there is one."""
    if verl_root is None:
        return None
    candidate = Path(verl_root).expanduser() / ".venv" / "bin" / "python"
    return candidate if candidate.is_file() else None


def _verl_environment(config: ClosureConfig) -> tuple[dict, str]:
    """Versions of the verl runtime packages, from this interpreter or the checkout's, and which one."""
    local = {name: installed_version(name) for name in ("verl", "ray", "vllm", "torch", "transformers", "peft",
                                                        "flash_attn", "tensordict", "hydra-core")}
    if local["ray"] and local["vllm"]:
        return local, sys.executable
    interpreter = verl_python(config.verl_root)
    if interpreter is None:
        return local, sys.executable
    completed = subprocess.run([str(interpreter), "-c", _VERL_PROBE], capture_output=True, text=True,
                               timeout=120, check=False)
    if completed.returncode != 0:
        return {**local, "probe_error": completed.stderr.strip()[-500:]}, str(interpreter)
    return json.loads(completed.stdout.strip().splitlines()[-1]), str(interpreter)


def _backend_checks(config: ClosureConfig) -> list[dict]:
    checks = []
    if config.backend == "torch":
        for package in ("torch", "transformers", "peft"):
            version = installed_version(package)
            checks.append(_check(f"package:{package}", version is not None, "blocked",
                                 f"{package} {version}" if version else f"{package} is not installed",
                                 "pip install -r requirements-cpu.txt"))
        return checks
    versions, interpreter = _verl_environment(config)
    fix_env = ("install the PT-VERL-CUDA profile (requirements-verl.txt) or pass --verl-root to a verl "
               f"{VERL_VERSION} checkout with its .venv; on a machine without it use --backend torch")
    checks.append(_check("verl_version", versions.get("verl") == VERL_VERSION, "blocked",
                         f"verl {versions.get('verl')} in {interpreter} (need {VERL_VERSION})", fix_env))
    for package in ("ray", "vllm", "tensordict"):
        checks.append(_check(f"package:{package}", versions.get(package) is not None, "blocked",
                             f"{package} {versions.get(package)} in {interpreter}", fix_env))
    if config.attn_implementation == "flash_attention_2":
        checks.append(_check("package:flash_attn", versions.get("flash_attn") is not None, "blocked",
                             f"flash_attn {versions.get('flash_attn')} (needed by --attn-implementation "
                             "flash_attention_2)", "install flash-attn or use --attn-implementation sdpa"))
    try:
        config_dir = verl_config_dir(config.verl_root)
        checks.append(_check("verl_config", (config_dir / "ppo_trainer.yaml").is_file(), "blocked",
                             f"verl config folder {config_dir}", fix_env))
    except ConfigError as error:
        checks.append(_check("verl_config", False, "blocked", str(error), fix_env))
    return checks


def preflight(config: ClosureConfig) -> dict:
    """Check (never load or install) what a run needs; returns a project_runtime preflight report."""
    from tools.models.cache import model_cache_check

    validate_config(config)
    checks = _backend_checks(config)
    checks.append(model_cache_check(config.model, config.model_cache, source=config.model_source))
    report = preflight_report(require_cuda=config.device == "cuda", output_paths=[Path(config.output)],
                              extra_checks=checks)
    report["run_mode"] = config.run_mode
    return report


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------

class GroupLog:
    """Appends timestamped lines to `<label>_<group>.log` (UTF-8) and echoes them to stderr."""

    def __init__(self, path: Path, echo: bool = True):
        self.path = path
        self.echo = echo
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(path, "a", encoding="utf-8")

    def __call__(self, line: str) -> None:
        stamp = _dt.datetime.now().strftime("%H:%M:%S.%f")[:-3]
        self._handle.write(f"{stamp} {line}\n")
        self._handle.flush()
        if self.echo:
            print(f"[{self.path.stem}] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self._handle.close()


def _fail_group(log: GroupLog, group: str, error: BaseException) -> None:
    log(f"group {group} FAILED: {type(error).__name__}: {error}")
    for line in traceback.format_exception(error):
        for part in line.rstrip().splitlines():
            log(part)



def run_experiment(config: ClosureConfig, *, sampler: ResourceSampler | None = None,
                   clock: Callable[[], float] = time.monotonic, echo: bool = True) -> dict:
    """Run both groups and write the record once; returns `{path, sha256, record, groups, ...}`
    (`groups` holds the raw per-group measurements on the absolute clock).

    Raises RecordExistsError before any work when the output exists, ConfigError on invalid
    input; a failed stage raises after logging to stderr and `<label>_<group>.log`, and no
    record is written.
    """
    validate_config(config)
    output = Path(config.output)
    if output.exists():
        raise RecordExistsError(f"record {output} already exists; records are write-once, use a new run label.")
    if config.backend == "verl":
        from tools import closure_verl_backend as backend
    else:
        from tools import closure_torch_backend as backend
    pool = build_task_pool(config.task_seed)
    tasks = {task.task_id: task for task in pool.tasks}
    model_path = backend.resolve_model_path(config)
    model = backend.model_identity_for(model_path)
    tokenizer = backend.load_tokenizer(model_path)
    requests = build_requests(pool, tokenizer.prompt_ids, config.samples_per_task, config.sampling_seed)
    probe_requests = build_requests(pool, tokenizer.prompt_ids, 1, config.sampling_seed + 10_000)
    probe_requests = [dataclasses.replace(r, rollout_id=r.rollout_id.replace("#s", "#probe")) for r in probe_requests]
    examples = build_examples(pool, tokenizer.prompt_ids, tokenizer.answer_ids)
    settings = {group: group_settings(config, group) for group in GROUPS}
    if sampler is None:
        sampler = ResourceSampler(interval_s=config.sample_interval_s, device=config.device, clock=clock)
    output.parent.mkdir(parents=True, exist_ok=True)
    workspace = Path(tempfile.mkdtemp(prefix=f".{config.run_label}_work_", dir=output.parent))
    overrides: dict[str, list[str]] | None = {} if config.backend == "verl" else None
    groups: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        runtime_details = stack.enter_context(backend.runtime_context(config))
        stack.callback(backend.cleanup_workspace, workspace)
        adapters = {group: backend.initial_adapter(model_path, config, config.lora_seed(group), workspace)
                    for group in GROUPS}
        if overrides is not None:
            overrides.update({group: overrides_for_config(config, group, model_path, adapters[group])
                              for group in GROUPS})
        origin = clock()
        sampler.start()
        try:
            frozen = None
            for group in GROUPS:
                log = GroupLog(config.log_path(group), echo=echo)
                log(f"run {config.run_label}: group {group} (backend {config.backend}, device {config.device}, "
                    f"model {config.model}, free_cache_engine={FREE_CACHE_ENGINE[group]})")
                try:
                    groups[group] = backend.execute_group(
                        group=group, config=config, model_path=model_path, adapter=adapters[group],
                        overrides=None if overrides is None else overrides[group], requests=requests,
                        probe_requests=probe_requests, examples=examples, tasks=tasks, frozen=frozen,
                        clock=clock, log=log, workspace=workspace)
                except BaseException as error:
                    _fail_group(log, group, error)
                    raise
                finally:
                    log.close()
                if group == "release":
                    frozen = groups[group]["frozen_rollouts"]
        finally:
            sampler.stop()
        record = build_record(config=config, pool=pool, groups=groups, settings=settings, overrides=overrides,
                              sampler=sampler, origin=origin, model=model, runtime=runtime_snapshot(),
                              backend_details={**backend.details(config, adapters), **runtime_details})
    digest = save_json_record_once(output, record)
    return {"path": output, "sha256": digest, "record": record, "groups": groups, "settings": settings,
            "overrides": overrides}


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.verl_mechanism_closure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("preflight", "run"), required=True)
    parser.add_argument("--run-label", required=True)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--verl-root", type=Path, default=None)
    parser.add_argument("--backend", choices=BACKENDS, default="verl")
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"a model id, or '{TINY}'")
    parser.add_argument("--model-source", choices=("local", "random_init"), default="local")
    parser.add_argument("--device", choices=DEVICES, default="cuda")
    parser.add_argument("--model-cache", type=Path, default=None)
    parser.add_argument("--response-token-cap", type=int, default=128)
    parser.add_argument("--attn-implementation", default="sdpa", choices=("flash_attention_2", "sdpa", "eager"),
                        help="actor attention in the verl backend (flash_attention_2 needs flash-attn)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    return parser


def config_from_args(args: argparse.Namespace) -> ClosureConfig:
    return ClosureConfig(run_label=args.run_label, output=args.output, backend=args.backend, model=args.model,
                         model_source=args.model_source, device=args.device, verl_root=args.verl_root,
                         model_cache=args.model_cache, response_token_cap=args.response_token_cap,
                         attn_implementation=args.attn_implementation,
                         gpu_memory_utilization=args.gpu_memory_utilization)


def _reexec_in_verl_env(config: ClosureConfig, argv: Sequence[str]) -> int | None:
    """Run this command again with the verl checkout's interpreter when this one lacks verl's runtime."""
    if config.backend != "verl" or (installed_version("ray") and installed_version("vllm")):
        return None
    interpreter = verl_python(config.verl_root)
    if interpreter is None or Path(sys.executable).resolve() == interpreter.resolve():
        return None
    root = resolve_project_root()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    print(f"running in the verl environment: {interpreter} -m tools.verl_mechanism_closure "
          f"{' '.join(shlex.quote(a) for a in argv)}", file=sys.stderr, flush=True)
    return subprocess.run([str(interpreter), "-m", "tools.verl_mechanism_closure", *argv], cwd=root, env=env,
                          check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        config = validate_config(config_from_args(args))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    if args.mode == "preflight":
        report = preflight(config)
        print(format_preflight(report, title=f"verl_mechanism_closure preflight ({config.backend}, {config.run_mode})"))
        return preflight_exit_code(report)
    delegated = _reexec_in_verl_env(config, argv)
    if delegated is not None:
        return delegated
    if Path(config.output).exists():
        print(f"error: record {config.output} already exists; records are write-once, use a new run label.",
              file=sys.stderr)
        return EXIT_INVALID
    report = preflight(config)
    if report["status"] == "blocked":
        print(format_preflight(report, title="verl_mechanism_closure preflight"), file=sys.stderr)
        return preflight_exit_code(report)
    try:
        result = run_experiment(config)
    except (ConfigError, RecordExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except ModelCacheMissingError as error:
        print(f"error: {error}", file=sys.stderr)
        return PREFLIGHT_EXIT_MODEL_CACHE
    except Exception as error:  # noqa: BLE001 - reported with its traceback in the group log
        print(f"error: a stage failed ({type(error).__name__}: {error}); no record was written. "
              f"Details: {config.log_path('release')} / {config.log_path('retain')}", file=sys.stderr)
        return EXIT_STAGE_FAILED
    decision = result["record"]["system_decision"]
    print(json.dumps({"record": str(result["path"]), "sha256": result["sha256"], "status": decision["status"],
                      "checks": decision["checks"]}, indent=2))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
