"""Chapter 76's four stages, prepare -> g0 -> g1 -> close, for the notebook and for a shell.

    prepare  reads only: parameters, the five files of the label, the manifest's sha256 and workload
    g0       AdamW on the fixed workload: four strategies x REPEATS under the OOM guard -> G0 record
    g1       momentum-free SGD length ladder with a safety admission before each longer length -> G1 record
    close    reads G0 and G1 (no model): scoped decisions and the handoff gate to 75 -> decision record

One label runs through every stage; a stage whose record exists is read and checked, never rerun
or overwritten, so repeating a stage is a no-op. `RUN_STAGE = "auto"` starts a fresh run (a used
label is refused before any work): `all` stages in cpu_smoke, the printed plan in dry_run. Records
go to `<results root>/<slug>/<slug>_<stage>_<label>.json` (the 73 baseline to its own chapter's
folder) through a record sink: the notebook passes its `ChapterContext` (`open_chapter`), the
command line builds `StageRecords`, which names and writes records the same way.

Library functions are silent; pass `log=print` to see progress. A GPU machine without papermill runs

    python -m tools.experiments.memory_strategy.stages --run-mode real_gpu --label L --stage g0 \\
        --model-source random_init --results-dir D
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tools.core.environment import runtime_snapshot
from tools.core.paths import chapter_record_path, resolve_project_root, results_root_for
from tools.core.records import lineage_entry, load_record, record_header, save_json_record_once, sha256_file
from tools.core.runs import validate_run_label, validate_run_mode
from tools.errors import EXIT_CONFIG, EXIT_MODEL_CACHE  # noqa: F401 - this command's exit codes, with EXIT_OK
from tools.errors import ConfigError, CourseError, RecordExistsError, UpstreamRecordError, exit_code_for
from tools.experiments.cli import add_common_arguments
from tools.experiments.memory_strategy import baseline as tb
from tools.experiments.memory_strategy import judge
from tools.experiments.memory_strategy.hooks import offload_copy_method
from tools.experiments.memory_strategy.runner import CachedModel, TrainingWorkload, course_model, run_memory_strategy
from tools.experiments.memory_strategy.strategies import CHECKPOINT_API, STRATEGIES

SEMANTIC_ID = "PERF-MEMORY-STRATEGY"
RUN_SCHEMA = "training-performance-project/v1"
DECISION_SCHEMA = "memory-strategy-decision/v1"
STAGE_ORDER = ("prepare", "g0", "g1", "close")
STAGE_CHOICES = ("auto", "all", *STAGE_ORDER)
RECORD_STAGES = ("g0", "g1", "close")
MODEL_SOURCES = ("local", "random_init")
REPEATS = 3
QUALITY_TOLERANCE = 1.02
BUDGET = {"memory_cap_mb": 11200.0, "min_samples_per_s": 1.0, "min_memory_saving_mb": 512.0,
          "min_throughput_ratio": 0.70, "cuda_context_margin_mb": judge.DEFAULT_CUDA_CONTEXT_MARGIN_MB,
          "min_boundary_lengths": 2}
MODE_SETTINGS = {
    "real_gpu": {"model_id": tb.QWEN, "device": "cuda", "ladder": (1024, 1280, 1536, 1792), "torch_threads": None},
    "cpu_smoke": {"model_id": tb.TINY, "device": "cpu", "ladder": (96,), "torch_threads": 1},
}
G1_SCHEDULE = {"optimizer": "sgd", "warmup": 1, "iters": 3}
EXIT_OK = 0


# ---------------------------------------------------------------------------
# Where records go
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StageRecords:
    """Names and writes this chapter's records as `tools.chapters.context.ChapterContext` does.

    The command line uses it; the notebook passes its ChapterContext, which has the same members
    (run_mode, run_label, results_root, record_path, save_record).
    """

    run_mode: str
    run_label: str
    results_root: Path | None
    slug: str = tb.CHAPTER_SLUG
    chapter_id: str = tb.CHAPTER_ID

    def record_path(self, stage: str) -> Path | None:
        return None if self.results_root is None else chapter_record_path(self.results_root, self.slug, stage,
                                                                          self.run_label)

    def save_record(self, stage: str, body: Mapping[str, Any], *, schema_version: str | None = None) -> tuple[Path, str]:
        path = self.record_path(stage)
        if path is None:
            raise RecordExistsError("dry_run writes no record")
        record = {**record_header(schema_version=schema_version or f"{self.slug}-{stage}/v1", chapter=self.chapter_id,
                                  stage=stage, run_mode=self.run_mode, run_label=self.run_label),
                  "runtime": runtime_snapshot(resolve_project_root()), **body}
        return path, save_json_record_once(path, record)


def stage_records(run_mode: str, label: str, results_dir: str | Path | None = None) -> StageRecords:
    """The record sink of a command-line run (label checked outside dry_run)."""
    run_mode = validate_run_mode(run_mode)
    if run_mode == "dry_run":
        return StageRecords(run_mode, label, None)
    return StageRecords(run_mode, validate_run_label(label), results_root_for(run_mode, results_dir))


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StagePlan:
    """Everything the stages need, derived from the run parameters before any work."""

    records: Any
    requested_stage: str
    stages: tuple[str, ...]
    model_source: str
    model_id: str
    device: str
    ladder: tuple[int, ...]
    torch_threads: int | None
    g0_workload: TrainingWorkload
    strategies: tuple[str, ...] = STRATEGIES
    repeats: int = REPEATS
    budget: Mapping[str, Any] = field(default_factory=lambda: dict(BUDGET))
    pin_memory: bool = False

    @property
    def run_mode(self) -> str:
        return self.records.run_mode

    @property
    def label(self) -> str:
        return self.records.run_label

    @property
    def results_root(self) -> Path | None:
        return self.records.results_root

    @property
    def writes(self) -> bool:
        return self.run_mode != "dry_run"

    def path(self, name: str) -> Path | None:
        """Record path of `baseline_73`, `manifest`, `g0`, `g1` or `close` (None in dry_run)."""
        if not self.writes:
            return None
        if name == "baseline_73":
            return tb.baseline_path(self.results_root, self.label)
        if name == "manifest":
            return tb.manifest_path(self.results_root, self.label)
        return self.records.record_path(name)

    def files(self) -> dict[str, Path | None]:
        return {name: self.path(name) for name in ("baseline_73", "manifest", *RECORD_STAGES)}

    def g1_workload(self, seq_len: int) -> TrainingWorkload:
        """The ladder workload at one length: momentum-free SGD, G0's batch, seed and dtype."""
        return TrainingWorkload(batch_size=self.g0_workload.batch_size, seq_len=seq_len,
                                warmup=G1_SCHEDULE["warmup"], iters=G1_SCHEDULE["iters"], seed=self.g0_workload.seed,
                                optimizer=G1_SCHEDULE["optimizer"])

    def g0_identity(self) -> dict:
        """What a G0 record of this label must carry to be reused (compared key by key)."""
        return {"model_id": self.model_id, "model_source": self.model_source, "device": self.device,
                "strategies": list(self.strategies), "repeats": self.repeats, **self.g0_workload.as_config()}

    def g1_identity(self) -> dict:
        return {"model_id": self.model_id, "model_source": self.model_source, "device": self.device,
                "strategies": list(self.strategies), "repeats": self.repeats,
                "seq_lens": [self.g0_workload.seq_len, *self.ladder],
                **self.g1_workload(self.g0_workload.seq_len).as_config(), "seq_len": None}

    def expected_workload(self) -> dict:
        return tb.expected_workload(self.run_mode, self.model_id, self.model_source)

    def baseline_command(self) -> str:
        command = f"python -m tools.experiments.memory_strategy.baseline --run-mode {self.run_mode} --label {self.label}"
        if self.results_root is not None:
            command += f" --results-dir {self.results_root}"
        if self.model_source == "random_init":
            command += " --model-source random_init"
        return command

    def describe(self) -> str:
        mode = "real_gpu (the plan dry_run shows)" if not self.writes else self.run_mode
        lines = [f"76 stages {list(self.stages)} (RUN_STAGE = {self.requested_stage!r}) for {mode}, "
                 f"label {self.label!r}",
                 f"  model {self.model_id} ({self.model_source}) on {self.device}; strategies {list(self.strategies)}",
                 f"  G0: {self.g0_workload.as_config()} x {self.repeats} repeats",
                 f"  G1: SGD momentum 0, warm-up {G1_SCHEDULE['warmup']}, {G1_SCHEDULE['iters']} timed steps, lengths "
                 f"{[self.g0_workload.seq_len, *self.ladder]}, reserved-peak admission before each longer length",
                 f"  budget {dict(self.budget)}; memory cap rule: {judge.MEMORY_CAP_RULE}; quality floor = "
                 f"baseline eval loss x {QUALITY_TOLERANCE}"]
        if self.writes:
            lines += [f"  {name:<12} {path}" for name, path in self.files().items()]
        else:
            lines.append("  dry_run: nothing is read or written and no model is loaded")
        return "\n".join(lines)


def resolve_stages(run_mode: str, stage: str) -> tuple[str, ...]:
    """The stages a RUN_STAGE value runs: auto is prepare in dry_run, all in cpu_smoke, refused in real_gpu."""
    if stage not in STAGE_CHOICES:
        raise ConfigError(f"unknown RUN_STAGE {stage!r}; choose one of {', '.join(STAGE_CHOICES)}.")
    if stage == "auto":
        if run_mode == "real_gpu":
            raise ConfigError("real_gpu runs the stages one at a time: set RUN_STAGE to prepare, g0, g1 or close "
                              "(or all), keeping the same RUN_LABEL for every stage.")
        stage = "prepare" if run_mode == "dry_run" else "all"
    return STAGE_ORDER if stage == "all" else (stage,)


def plan_stages(records: Any, *, stage: str = "auto", model_source: str = "local") -> StagePlan:
    """Check the stage parameters before any work and derive the plan.

    `records`: the notebook's ChapterContext or a `StageRecords`. In dry_run the plan is the
    real_gpu experiment's, for reading. `stage = "auto"` is a fresh run: a label that already named
    one of the five files is refused (RecordExistsError).
    """
    run_mode = validate_run_mode(records.run_mode)
    stages = resolve_stages(run_mode, stage)
    if model_source not in MODEL_SOURCES:
        raise ConfigError(f"unknown MODEL_SOURCE {model_source!r}; choose one of {', '.join(MODEL_SOURCES)}.")
    settings = MODE_SETTINGS["real_gpu" if run_mode == "dry_run" else run_mode]
    plan = StagePlan(
        records=records, requested_stage=stage, stages=stages,
        model_source=model_source if settings["model_id"] != tb.TINY else "local",  # tiny is always built offline
        model_id=settings["model_id"], device=settings["device"], ladder=tuple(settings["ladder"]),
        torch_threads=settings["torch_threads"],
        g0_workload=tb.WORKLOADS["real_gpu" if run_mode == "dry_run" else run_mode])
    if stage == "auto" and plan.writes:
        used = [path for path in plan.files().values() if path.exists()]
        if used:
            raise RecordExistsError(
                f"RUN_LABEL {plan.label!r} was used before ({', '.join(path.name for path in used)} exist). "
                "RUN_STAGE = 'auto' starts a fresh run: choose a new RUN_LABEL, or name a stage explicitly to "
                "continue the staged run of this label.")
    return plan


# ---------------------------------------------------------------------------
# Shared pieces of the stages
# ---------------------------------------------------------------------------

@dataclass
class StageResult:
    """What one stage did: `written`, `already_complete`, `read_only` (prepare) or `planned` (dry_run)."""

    stage: str
    status: str
    path: Path | None = None
    sha256: str | None = None
    seconds: float | None = None
    record: dict | None = None
    lines: list[str] = field(default_factory=list)


def _say(result: StageResult, log: Callable[[str], None] | None, text: str) -> None:
    result.lines.append(text)
    if log is not None:
        log(text)


def read_stage_record(plan: StagePlan, stage: str) -> dict:
    """This label's record of `stage`; its schema, label, mode, stage and configuration are checked."""
    path = plan.path(stage)
    record = load_record(path, schema_version=DECISION_SCHEMA if stage == "close" else RUN_SCHEMA)
    found = (record.get("run_label"), record.get("run_mode"), record.get("stage"))
    if found != (plan.label, plan.run_mode, stage):
        raise UpstreamRecordError(f"{path} holds label/mode/stage {found}, expected {(plan.label, plan.run_mode, stage)}.")
    wanted = {"g0": plan.g0_identity, "g1": plan.g1_identity}.get(stage)
    if wanted is not None:
        expected = wanted()
        stored = {key: record.get("config", {}).get(key) for key in expected}
        if stored != expected:
            changed = sorted(key for key in expected if stored[key] != expected[key])
            raise UpstreamRecordError(f"{path.name} was recorded with another configuration ({', '.join(changed)}); "
                                      "use a new RUN_LABEL for a new configuration.")
    return record


def read_if_present(plan: StagePlan, stage: str) -> dict | None:
    """This label's checked record of `stage`, or None when it is not there (always None in dry_run)."""
    path = plan.path(stage)
    return read_stage_record(plan, stage) if path is not None and path.exists() else None


def _require_device(plan: StagePlan) -> None:
    import torch

    if plan.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"RUN_MODE real_gpu needs a CUDA device; torch {torch.__version__} sees none. "
                          "Use RUN_MODE = 'cpu_smoke' on this machine.")
    if plan.torch_threads:
        torch.set_num_threads(plan.torch_threads)


def _hardware_id(plan: StagePlan) -> str:
    import torch

    if plan.device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu-{platform.machine()}"


def _measurement_note(plan: StagePlan) -> str:
    if plan.run_mode == "cpu_smoke":
        return ("cpu_smoke: hook evidence and CPU timings of the tiny model; device memory is null, "
                "not a GPU measurement")
    return "real_gpu measurement"


def load_inputs(plan: StagePlan, *, write_missing: bool, models: CachedModel | None = None,
                log: Callable[[str], None] | None = None) -> dict:
    """The 73 baseline through the input manifest (sha256 and workload, weights included, checked).

    In cpu_smoke (`write_missing`) a missing manifest is written first by running the baseline.
    """
    manifest = plan.path("manifest")
    if not manifest.exists():
        if not write_missing:
            raise UpstreamRecordError(f"input manifest {manifest} is missing. Write the chapter-73 baseline and the "
                                      f"manifest first, from the repository root:\n  {plan.baseline_command()}")
        if plan.path("baseline_73").exists():
            raise UpstreamRecordError(f"{plan.path('baseline_73').name} exists without a manifest: that baseline "
                                      "did not complete. Use a new RUN_LABEL.")
        written = tb.run_training_baseline(run_mode=plan.run_mode, label=plan.label, results_dir=plan.results_root,
                                           model_id=plan.model_id, model_source=plan.model_source, models=models)
        if written["manifest_path"] is None:
            raise UpstreamRecordError(f"the chapter-73 baseline ended with status {written['status']!r}; "
                                      f"see {written['baseline_path']}.")
        if log is not None:
            log(f"  wrote the chapter-73 baseline {written['baseline_path'].name} and {manifest.name}")
    return tb.load_input_manifest(manifest, plan.expected_workload(), plan.results_root)


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


def models_for(plan: StagePlan, models: CachedModel | None = None) -> CachedModel | None:
    """The plan's model, loaded on first use and shared by the stages (None in dry_run: nothing loads)."""
    if models is not None or not plan.writes:
        return models
    return course_model(plan.model_id, plan.model_source)


# ---------------------------------------------------------------------------
# The four stages
# ---------------------------------------------------------------------------

def prepare(plan: StagePlan, *, log: Callable[[str], None] | None = None) -> StageResult:
    """Read-only checks: the files of this label, the manifest, existing records, CUDA and the model cache."""
    result = StageResult("prepare", "planned" if not plan.writes else "read_only")
    if not plan.writes:
        _say(result, log, "prepare (dry_run): nothing is read or written, no model is loaded")
        return result
    started = time.perf_counter()
    _say(result, log, f"prepare ({plan.run_mode}, label {plan.label}) in {plan.results_root}")
    for name, path in plan.files().items():
        _say(result, log, f"  {name:<12} {'exists ' if path.exists() else 'missing'}  {path.name}")
    if plan.path("manifest").exists():
        checked = tb.load_input_manifest(plan.path("manifest"), plan.expected_workload(), plan.results_root)
        _say(result, log, f"  manifest ok: baseline sha256 {checked['baseline_sha256'][:16]}..., workload and "
                          f"weights match {plan.model_id}")
    elif plan.run_mode == "real_gpu":
        _say(result, log, f"  manifest missing: run {plan.baseline_command()}")
    else:
        _say(result, log, "  manifest missing: g0 writes the chapter-73 baseline and the manifest first (cpu_smoke)")
    for stage in RECORD_STAGES:
        if plan.path(stage).exists():
            existing = read_stage_record(plan, stage)
            status = existing.get("status", existing.get("decision", {}).get("decision"))
            _say(result, log, f"  {stage} record ok: status {status}")
    if plan.run_mode == "real_gpu":
        import torch

        from tools.models.cache import model_cache_check

        _say(result, log, f"  cuda available: {torch.cuda.is_available()}")
        cache = model_cache_check(plan.model_id, source=plan.model_source)
        _say(result, log, f"  model: {cache['detail']}" + (f"; fix: {cache['fix']}" if cache.get("fix") else ""))
    following = next((stage for stage in RECORD_STAGES if not plan.path(stage).exists()), None)
    _say(result, log, f"  next stage to run: {following or 'none, every stage of this label is complete'}")
    result.seconds = round(time.perf_counter() - started, 2)
    return result


def run_g0(plan: StagePlan, *, models: CachedModel | None = None,
           log: Callable[[str], None] | None = None) -> StageResult:
    """G0: AdamW on the fixed workload, every strategy REPEATS times; writes the G0 record once."""
    result = StageResult("g0", "planned", plan.path("g0"))
    if not plan.writes:
        _say(result, log, f"g0 (dry_run): would train {plan.model_id} with {plan.g0_workload.as_config()} for "
                          f"{list(plan.strategies)} x {plan.repeats}")
        return result
    if result.path.exists():
        record = read_stage_record(plan, "g0")
        inputs = load_inputs(plan, write_missing=False)
        if record["source_input_manifest"]["sha256"] != inputs["manifest_sha256"]:
            raise UpstreamRecordError(f"{plan.path('manifest').name} changed after G0 was recorded; use a new RUN_LABEL.")
        result.status, result.record = "already_complete", record
        _say(result, log, f"g0: already complete ({result.path.name}, status {record['status']}); not rerun")
        return result
    started = time.perf_counter()
    _require_device(plan)
    models = models_for(plan, models)
    inputs = load_inputs(plan, write_missing=(plan.run_mode == "cpu_smoke"), models=models, log=log)
    _say(result, log, f"g0: {plan.model_id} on {plan.device}, workload {plan.g0_workload.workload_id}, "
                      f"{plan.repeats} repeats per strategy")
    candidates = run_strategy_set(plan, plan.g0_workload, models, log)
    quality = quality_floor_from(candidates, inputs["baseline"]["measurement"]["eval_loss"],
                                 "chapter_73_baseline_eval_loss")
    complete = all(candidate["successful_runs"] >= plan.repeats for candidate in candidates)
    body = {
        "semantic_id": SEMANTIC_ID,
        "status": "complete" if complete else "incomplete_repeats",
        "measurement_note": _measurement_note(plan),
        "source_input_manifest": lineage_entry(plan.path("manifest"), plan.results_root),
        "source_baseline": lineage_entry(inputs["baseline_path"], plan.results_root),
        "config": {
            **plan.g0_identity(),
            "weights": (models.identity or {}).get("weights"),
            "workload": tb.WORKLOAD_NAME,
            "workload_id": plan.g0_workload.workload_id,
            "hardware_id": _hardware_id(plan),
            "checkpoint_api": CHECKPOINT_API,
            "pin_memory": plan.pin_memory,
            "offload_copy": offload_copy_method(plan.pin_memory),
            "torch_threads": _torch_threads(),
        },
        "model": models.identity,
        "budget": dict(plan.budget),
        "quality_floor": quality,
        "candidates": candidates,
        "saved_bytes": saved_bytes_table(candidates),
        "summary": judge.summarize_memory_strategy_candidates(candidates, plan.budget, quality),
    }
    return _write(plan, result, "g0", body, started, log)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _write(plan: StagePlan, result: StageResult, stage: str, body: dict, started: float,
           log: Callable[[str], None] | None) -> StageResult:
    result.seconds = round(time.perf_counter() - started, 2)
    body["timing"] = {"stage_seconds": result.seconds}
    schema = DECISION_SCHEMA if stage == "close" else RUN_SCHEMA
    result.path, result.sha256 = plan.records.save_record(stage, body, schema_version=schema)
    result.status = "written"
    result.record = load_record(result.path, schema_version=schema)
    _say(result, log, f"wrote {result.path.name} (sha256 {result.sha256[:16]}..., status "
                      f"{body.get('status', body.get('decision', {}).get('decision'))}) in {result.seconds} s")
    return result


def _device_memory(plan: StagePlan) -> dict | None:
    import torch

    from tools.measure.training import device_memory_mb, free_device_memory

    free_device_memory(torch)
    return device_memory_mb(torch, plan.device)


def run_g1(plan: StagePlan, *, models: CachedModel | None = None,
           log: Callable[[str], None] | None = None) -> StageResult:
    """G1: the SGD length ladder; before each longer length the reserved-peak admission; writes the G1 record."""
    result = StageResult("g1", "planned", plan.path("g1"))
    lengths = [plan.g0_workload.seq_len, *plan.ladder]
    if not plan.writes:
        _say(result, log, f"g1 (dry_run): would run {list(plan.strategies)} at lengths {lengths} with SGD (momentum 0)")
        return result
    if result.path.exists():
        record = read_stage_record(plan, "g1")
        if record["source_g0"]["sha256"] != sha256_file(plan.path("g0")):
            raise UpstreamRecordError(f"{plan.path('g0').name} changed after G1 was recorded; use a new RUN_LABEL.")
        result.status, result.record = "already_complete", record
        _say(result, log, f"g1: already complete ({result.path.name}, status {record['status']}); not rerun")
        return result
    started = time.perf_counter()
    if not plan.path("g0").exists():
        raise UpstreamRecordError(f"G1 needs the G0 record of label {plan.label!r} ({plan.path('g0').name}); run "
                                  "the g0 stage first (g1 never runs G0 for you).")
    g0 = read_stage_record(plan, "g0")
    _require_device(plan)
    models = models_for(plan, models)
    length_records, checks, status = [], [], "completed"
    memory = _device_memory(plan)
    previous_len, previous = None, None
    for seq_len in lengths:
        if previous_len is not None:
            memory = _device_memory(plan)
            check = judge.admit_next_length(
                previous_seq_len=previous_len, previous_peak_reserved_mb=judge.highest_reserved_peak(previous),
                next_seq_len=seq_len, free_memory_mb=memory["free_mb"] if memory else None,
                safety_margin=judge.safety_margin_mb(memory["total_mb"]) if memory else None)
            checks.append(check)
            _say(result, log, f"  admission before seq {seq_len}: {check['status']} ({check['reason']})")
            if check["status"] == "blocked":
                status = "completed_with_safety_boundary"
                break
        candidates = run_strategy_set(plan, plan.g1_workload(seq_len), models, log)
        length_records.append({"seq_len": seq_len, "source": "g1_sgd_base" if seq_len == lengths[0] else "g1_sgd",
                               "candidates": candidates})
        if next(c for c in candidates if c["name"] == "baseline")["status"] != "ok":
            status = "stopped_after_baseline_failure"
            break
        previous_len, previous = seq_len, candidates
    quality = quality_floor_from(length_records[0]["candidates"],
                                 g0["quality_floor"]["max_val_loss"] / QUALITY_TOLERANCE, "g0_quality_floor")
    summary = judge.summarize_memory_boundary(length_records, plan.budget, quality)
    body = {
        "semantic_id": SEMANTIC_ID,
        "status": status,
        "measurement_note": g0["measurement_note"],
        "source_g0": lineage_entry(plan.path("g0"), plan.results_root),
        "config": {
            **plan.g1_identity(),
            "weights": g0["config"].get("weights"),
            "hardware_id": _hardware_id(plan),
            "g0_seq_len": lengths[0],
            "comparison_scope": "activation_memory_isolation",
            "offload_copy": offload_copy_method(plan.pin_memory),
            "torch_threads": _torch_threads(),
        },
        "admission": {"status": status, "total_memory_mb": memory["total_mb"] if memory else None,
                      "safety_margin_mb": judge.safety_margin_mb(memory["total_mb"]) if memory else None,
                      "projection": "previous length's highest reserved peak, linear in seq_len",
                      "checks": checks},
        "budget": dict(plan.budget),
        "quality_floor": quality,
        "length_records": length_records,
        "saved_bytes_by_length": {str(r["seq_len"]): saved_bytes_table(r["candidates"]) for r in length_records},
        "summary": summary,
        "assessment": judge.decide_memory_boundary(summary),
    }
    return _write(plan, result, "g1", body, started, log)


def _handoff_view(candidates: Sequence[Mapping[str, Any]]) -> list[dict]:
    keys = ("name", "status", "successful_runs", "execution_path_verified", "peak_memory_mb")
    return [{key: candidate.get(key) for key in keys} for candidate in candidates]


def run_close(plan: StagePlan, *, log: Callable[[str], None] | None = None) -> StageResult:
    """close: read G0 and G1 (no model), decide per scope, gate the handoff to 75; writes the decision once."""
    result = StageResult("close", "planned", plan.path("close"))
    if not plan.writes:
        _say(result, log, "close (dry_run): would read G0 and G1 (no model) and write the scoped decision with "
                          "their sha256")
        return result
    started = time.perf_counter()
    for stage in ("g0", "g1"):
        if not plan.path(stage).exists():
            raise UpstreamRecordError(f"close needs the {stage.upper()} record of label {plan.label!r} "
                                      f"({plan.path(stage).name}); run the {stage} stage first.")
    g0, g1 = read_stage_record(plan, "g0"), read_stage_record(plan, "g1")
    g0_sha256, g1_sha256 = sha256_file(plan.path("g0")), sha256_file(plan.path("g1"))
    if g1["source_g0"]["sha256"] != g0_sha256:
        raise UpstreamRecordError(f"{plan.path('g1').name} was measured against another G0 file; use a new RUN_LABEL.")
    if result.path.exists():
        record = read_stage_record(plan, "close")
        if (record["source_g0"]["sha256"], record["source_g1"]["sha256"]) != (g0_sha256, g1_sha256):
            raise UpstreamRecordError(f"{result.path.name} was closed over other G0/G1 files; the inputs changed, "
                                      "use a new RUN_LABEL.")
        result.status, result.record = "already_complete", record
        _say(result, log, f"close: already complete ({result.path.name}); G0 and G1 sha256 match, not rewritten")
        return result
    if sha256_file(plan.path("manifest")) != g0["source_input_manifest"]["sha256"]:
        raise UpstreamRecordError(f"{plan.path('manifest').name} changed after G0; use a new RUN_LABEL.")
    if g0["status"] == "complete":
        g0_decision = judge.decide_memory_strategy_project(g0["summary"])
    else:
        g0_decision = judge.incomplete_g0_decision(g0["candidates"], plan.repeats)
    limitations = ["no_optimizer_state_momentum_free_sgd", "says_nothing_about_adamw_full_training_adoption"]
    if g1["status"] == "completed_with_safety_boundary":
        limitations.append("length_ladder_stopped_at_the_safety_boundary")
    if g1["status"] == "stopped_after_baseline_failure":
        limitations.append("length_ladder_stopped_after_a_baseline_failure")
    g1_decision = {**judge.decide_memory_boundary(g1["summary"]), "evidence_status": g1["status"],
                   "limitations": limitations}
    view = _handoff_view(g0["candidates"])
    gate = judge.handoff_gate(view, plan.repeats)
    copy_method = g0["config"].get("offload_copy") or offload_copy_method(plan.pin_memory)
    body = {
        "semantic_id": SEMANTIC_ID,
        "measurement_note": g0["measurement_note"],
        "source_g0": lineage_entry(plan.path("g0"), plan.results_root),
        "source_g1": lineage_entry(plan.path("g1"), plan.results_root),
        "source_input_manifest": lineage_entry(plan.path("manifest"), plan.results_root),
        "top_level_decision_scope": "full_training_adoption",
        "decision": g0_decision,
        "decision_scopes": {"full_training_adoption": g0_decision, "activation_memory_mechanism": g1_decision},
        "handoff": {
            "consumer": judge.HANDOFF_CONSUMER,
            "status": g0_decision["decision"],
            "gate_input": view,
            "gate": gate,
            "ready": gate["status"] == "ready_for_budget_review",
            "offload_copy": copy_method,
            "throughput_note": ("offload and hybrid throughput is this implementation's: a "
                                f"{copy_method['copy']} copy into {copy_method['host_memory']} host memory"),
        },
        "saved_bytes": g0["saved_bytes"],
    }
    return _write(plan, result, "close", body, started, log)


STAGE_FUNCTIONS = {"prepare": prepare, "g0": run_g0, "g1": run_g1, "close": run_close}


def run_stages(plan: StagePlan, *, models: CachedModel | None = None,
               log: Callable[[str], None] | None = None) -> list[StageResult]:
    """Run the plan's stages in order (one model cache shared by g0 and g1)."""
    models = models_for(plan, models)
    results = []
    for stage in plan.stages:
        if stage in ("g0", "g1"):
            results.append(STAGE_FUNCTIONS[stage](plan, models=models, log=log))
        else:
            results.append(STAGE_FUNCTIONS[stage](plan, log=log))
    return results


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> list[StageResult]:
    """The experiment contract's runner: the plan's stage(s) with the sink as the record sink.

    `plan.variants` selects strategies (default: all four); a stage found complete is kept by the
    sink as an existing record."""
    if plan.variants and "baseline" not in plan.variants:
        raise ConfigError("every strategy is judged against the baseline: keep 'baseline' among the variants.")
    stage_plan = plan_stages(sink, stage=plan.stage or "auto", model_source=plan.model_source)
    if plan.variants:
        stage_plan = replace(stage_plan, strategies=tuple(name for name in STRATEGIES if name in plan.variants))
    if log is not None:
        log(stage_plan.describe())
    results = run_stages(stage_plan, log=log)
    for item in results:
        if item.status == "already_complete":
            sink.adopt(item.path, stage=item.stage, action="existing")
    return results


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.memory_strategy.stages",
                                     description="Run chapter 76's stages (prepare, g0, g1, close) without a notebook.")
    return add_common_arguments(
        parser, ("run_mode", "label", "stage", "model_source", "results_dir"),
        label={"help": "one unique label shared by every stage of the run"},
        stage={"choices": STAGE_CHOICES, "required": True,
               "help": "the stage to run; all = prepare, g0, g1, close in order; auto = a fresh run"})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = plan_stages(stage_records(args.run_mode, args.label, args.results_dir), stage=args.stage,
                           model_source=args.model_source)
        print(plan.describe())
        results = run_stages(plan, log=print)
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
    for item in results:
        print(f"{item.stage}: {item.status}" + (f"  {item.path}" if item.path else ""))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
