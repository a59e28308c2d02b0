"""Chapter 76's four stages, prepare -> g0 -> g1 -> close, for the notebook and for a shell.

    prepare  reads only: parameters, the five files of the label, the manifest's sha256 and workload
    g0       AdamW on the fixed workload: four strategies x REPEATS under the OOM guard -> G0 record
    g1       momentum-free SGD length ladder with a safety admission before each longer length -> G1 record
    close    reads G0 and G1 (no model): scoped decisions and the handoff gate to 75 -> decision record

One label runs through every stage; a stage whose record exists is read and checked, never rerun
or overwritten, so repeating a stage is a no-op. `RUN_STAGE = "auto"` starts a fresh run (a used
label, i.e. one whose G0, G1 or decision exists, is refused before any work; chapter 73's baseline and
the input manifest of the label are 76's input and may exist): `all` stages in cpu_smoke, the printed
plan in dry_run. Records
go to `<results root>/<slug>/<slug>_<stage>_<label>.json` (the 73 baseline to its own chapter's
folder) through a record sink: the notebook passes its `ChapterContext` (`open_chapter`), the
command line and the experiment contract a `tools.experiments.contract.RecordSink`; both name and
write records the same way. The plan is made in `plan`, a strategy set runs in `candidates`;
`run(plan, sink)` is the contract's runner (experiment `memory_strategy`).

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

from tools.core.records import lineage_entry, load_record, sha256_file
from tools.errors import EXIT_CONFIG, EXIT_MODEL_CACHE  # noqa: F401 - this command's exit codes, with EXIT_OK
from tools.errors import ConfigError, CourseError, UpstreamRecordError, exit_code_for
from tools.experiments.cli import add_common_arguments
from tools.experiments.contract import RecordSink
from tools.experiments.memory_strategy import baseline as tb
from tools.experiments.memory_strategy import judge
from tools.experiments.memory_strategy.candidates import quality_floor_from, run_strategy_set, saved_bytes_table
from tools.experiments.memory_strategy.hooks import offload_copy_method
from tools.experiments.memory_strategy.plan import (  # noqa: F401 - the names the notebook and tests know here
    BUDGET,
    DECISION_SCHEMA,
    G1_SCHEDULE,
    MODE_SETTINGS,
    MODEL_SOURCES,
    QUALITY_TOLERANCE,
    RECORD_STAGES,
    REPEATS,
    RUN_SCHEMA,
    SEMANTIC_ID,
    STAGE_CHOICES,
    TIME_MARGIN_S,
    STAGE_ORDER,
    StagePlan,
    StageRecords,
    plan_stages,
    resolve_stages,
    stage_records,
)
from tools.experiments.memory_strategy.runner import CachedModel, course_model
from tools.experiments.memory_strategy.strategies import CHECKPOINT_API, STRATEGIES

EXIT_OK = 0



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
        sink = plan.records if isinstance(plan.records, RecordSink) else None
        written = tb.run_training_baseline(run_mode=plan.run_mode, label=plan.label, results_dir=plan.results_root,
                                           model_id=plan.model_id, model_source=plan.model_source, models=models,
                                           sink=sink)
        if written["manifest_path"] is None:
            raise UpstreamRecordError(f"the chapter-73 baseline ended with status {written['status']!r}; "
                                      f"see {written['baseline_path']}.")
        if log is not None:
            log(f"  wrote the chapter-73 baseline {written['baseline_path'].name} and {manifest.name}")
    return tb.load_input_manifest(manifest, plan.expected_workload(), plan.results_root)


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
    budget_s = None if plan.deadline is None else round(plan.deadline - time.monotonic(), 1)
    if not plan.path("g0").exists():
        raise UpstreamRecordError(f"G1 needs the G0 record of label {plan.label!r} ({plan.path('g0').name}); run "
                                  "the g0 stage first (g1 never runs G0 for you).")
    g0 = read_stage_record(plan, "g0")
    _require_device(plan)
    models = models_for(plan, models)
    length_records, checks, time_checks, status = [], [], [], "completed"
    memory = _device_memory(plan)
    previous_len, previous, previous_seconds = None, None, None
    for seq_len in lengths:
        if previous_len is not None:
            timing = judge.admit_by_time(previous_seq_len=previous_len, previous_seconds=previous_seconds,
                                         next_seq_len=seq_len, elapsed_s=time.perf_counter() - started,
                                         budget_s=budget_s)
            if timing["status"] != "not_limited":
                time_checks.append(timing)
                _say(result, log, f"  time admission before seq {seq_len}: {timing['status']} ({timing['reason']})")
            if timing["status"] == "blocked":
                status = "completed_with_time_boundary"
                break
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
        length_started = time.perf_counter()
        candidates = run_strategy_set(plan, plan.g1_workload(seq_len), models, log)
        previous_seconds = time.perf_counter() - length_started
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
        "time_admission": {"budget_s": budget_s, "checks": time_checks,
                           "projection": "previous length's wall time, linear in seq_len"},
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
    if g1["status"] == "completed_with_time_boundary":
        limitations.append("length_ladder_stopped_at_the_time_limit")
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
    if plan.seeds:
        raise ConfigError("the workload seed is fixed by chapter 73's baseline (seed 42); 76 takes no --seed.")
    stage_plan = plan_stages(sink, stage=plan.stage or "auto", model_source=plan.model_source)
    if plan.writes and (plan.model, plan.device) != (stage_plan.model_id, stage_plan.device):
        raise ConfigError(f"chapter 76 measures {stage_plan.model_id} on {stage_plan.device} in {plan.run_mode}, "
                          f"not {plan.model} on {plan.device}.")
    changes = {}
    if plan.variants:
        changes["strategies"] = tuple(name for name in STRATEGIES if name in plan.variants)
    if plan.limits.time_s is not None:
        changes["deadline"] = time.monotonic() + max(plan.limits.time_s - TIME_MARGIN_S, 0.0)
    stage_plan = replace(stage_plan, **changes) if changes else stage_plan
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
