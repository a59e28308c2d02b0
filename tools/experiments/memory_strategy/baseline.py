"""Chapter 73's training baseline, the record it hands to 76, and 76's input manifest.

`run_training_baseline` measures the baseline workload (batch 1, sequence 768, warm-up 2, 5 timed
iterations, seed 42, float32, AdamW; `cpu_smoke` uses the tiny model and sequence 64) with chapter
73's protocol: the warm-up calls untimed, each timed step between two device synchronisations
(`time_steps`), the median and spread of the repeats and the throughput of the real tokens
(`step_time_report`). Those functions come from `mechanism` (the notebook passes the learner's; the
command line and 76's cpu_smoke fallback use the package's) and the record says which ran. It writes
two write-once records under the results root, in the chapters' folders:

- `73-training-performance/73-training-performance_training_baseline_<label>.json`
  (schema `training-performance-baseline/v1`);
- `76-activation-memory-strategies/76-activation-memory-strategies_input_manifest_<label>.json`
  (schema `memory-strategy-input-manifest/v1`): the baseline's path (relative to the results root),
  its sha256, and the workload 76 must reproduce.

The workload identity includes the weights (`pretrained` or `random_init`): a baseline measured on
random weights never stands in for a run on real weights. `load_input_manifest` is what 76 calls.

    python -m tools.experiments.memory_strategy.baseline --run-mode cpu_smoke --label L --results-dir DIR
    python -m tools.experiments.memory_strategy.baseline --run-mode real_gpu --label L [--model-source random_init]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from tools.core.environment import runtime_snapshot
from tools.core.paths import chapter_record_path, resolve_project_root, results_root_for
from tools.core.records import load_record, resolve_lineage, sha256_file
from tools.core.runs import validate_run_label, validate_run_mode
from tools.errors import EXIT_CONFIG, EXIT_MODEL_CACHE  # noqa: F401 - this command's exit codes, with EXIT_OK
from tools.errors import ConfigError, CourseError, RecordExistsError, UpstreamRecordError, exit_code_for
from tools.experiments.cli import add_common_arguments
from tools.experiments.contract import Mechanism, RecordSink
from tools.experiments.memory_strategy.runner import TrainingWorkload, course_model, run_memory_strategy
from tools.measure.training import run_with_oom_guard

BASELINE_SCHEMA_VERSION = "training-performance-baseline/v1"
MANIFEST_SCHEMA_VERSION = "memory-strategy-input-manifest/v1"
BASELINE_CHAPTER, BASELINE_SLUG = "73", "73-training-performance"
CHAPTER_ID, CHAPTER_SLUG = "76", "76-activation-memory-strategies"
WORKLOAD_NAME = "pressure"
RUN_MODES = ("cpu_smoke", "real_gpu")
TINY, QWEN = "tiny", "Qwen/Qwen2.5-0.5B-Instruct"
MODEL_CHOICES = (TINY, QWEN)
MODEL_SOURCES = ("local", "random_init")
DEFAULT_MODELS = {"cpu_smoke": TINY, "real_gpu": QWEN}
WORKLOADS = {
    "real_gpu": TrainingWorkload(batch_size=1, seq_len=768, warmup=2, iters=5, seed=42, optimizer="adamw"),
    "cpu_smoke": TrainingWorkload(batch_size=1, seq_len=64, warmup=2, iters=5, seed=42, optimizer="adamw"),
}
DEVICES = {"cpu_smoke": "cpu", "real_gpu": "cuda"}
BASELINE_MECHANISM = ("time_steps", "step_time_report")
STATIC_BYTES_PER_PARAMETER = 16
CPU_THREADS = 1
IDENTITY_KEYS = ("model_id", "weights", "workload", "batch_size", "seq_len", "dtype", "optimizer", "warmup", "iters",
                 "seed")
EXIT_OK, EXIT_RUN_FAILED = 0, 1


def baseline_path(results_root: Path, label: str) -> Path:
    return chapter_record_path(results_root, BASELINE_SLUG, "training_baseline", label)


def manifest_path(results_root: Path, label: str) -> Path:
    return chapter_record_path(results_root, CHAPTER_SLUG, "input_manifest", label)


def expected_weights(model_id: str, model_source: str) -> str:
    """`random_init` for the tiny model (built with random weights) and for source random_init, else `pretrained`."""
    return "random_init" if model_id == TINY or model_source == "random_init" else "pretrained"


def expected_workload(run_mode: str, model_id: str | None = None, model_source: str = "local") -> dict:
    """The workload identity a baseline of `run_mode` must carry (what 76 passes to load_input_manifest)."""
    if run_mode not in WORKLOADS:
        raise ConfigError(f"run mode {run_mode!r} has no training workload; choose one of {', '.join(RUN_MODES)}.")
    model_id = model_id or DEFAULT_MODELS[run_mode]
    identity = {"model_id": model_id, "weights": expected_weights(model_id, model_source), "workload": WORKLOAD_NAME,
                **WORKLOADS[run_mode].as_config()}
    return {key: identity[key] for key in IDENTITY_KEYS}


def _plan(run_mode: str, label: str, results_dir: Any, model_id: str | None, model_source: str) -> dict:
    """Check every argument and the output paths before any work; return the resolved plan."""
    if run_mode not in RUN_MODES:
        validate_run_mode(run_mode)
        raise ConfigError(f"the training baseline runs in {' or '.join(RUN_MODES)}, not {run_mode!r}.")
    validate_run_label(label)
    model_id = model_id or DEFAULT_MODELS[run_mode]
    if model_id not in MODEL_CHOICES:
        raise ConfigError(f"unknown model {model_id!r}; choose one of {', '.join(MODEL_CHOICES)}.")
    if run_mode == "cpu_smoke" and model_id != TINY:
        raise ConfigError("cpu_smoke measures the tiny model only; use --run-mode real_gpu for a real model.")
    if model_source not in MODEL_SOURCES:
        raise ConfigError(f"unknown model source {model_source!r}; choose one of {', '.join(MODEL_SOURCES)}.")
    root = results_root_for(run_mode, results_dir)
    paths = {"baseline": baseline_path(root, label), "manifest": manifest_path(root, label)}
    for path in paths.values():
        if path.exists():
            raise RecordExistsError(f"record {path} already exists; records are write-once, use a new label.")
    if run_mode == "real_gpu":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"real_gpu needs a CUDA device; torch {torch.__version__} sees none. "
                              "Use --run-mode cpu_smoke on this machine.")
    return {"run_mode": run_mode, "label": label, "model_id": model_id, "model_source": model_source,
            "workload": WORKLOADS[run_mode], "device": DEVICES[run_mode], "results_root": root, **paths}


def mechanism_defaults() -> dict:
    """The package's copies of the chapter-73 functions the baseline is measured with."""
    from tools.measure.timing import step_time_report, time_steps

    return {"time_steps": time_steps, "step_time_report": step_time_report}


def protocol_measure(functions: Mapping[str, Any], workload: TrainingWorkload):
    """A `measure` for `run_memory_strategy` (the keywords and result keys of `measure_training_run`)
    that times with chapter 73's functions: `time_steps` on a `DeviceClock`, then `step_time_report`
    (the workload's batch has no padding, so every token is real). On CUDA the allocator's peak is
    reset before the first timed call and read after the last one."""
    import math

    import torch

    from tools.measure.timing import DeviceClock
    from tools.measure.training import MIB, allocator_outside_mb

    mask = torch.ones((workload.batch_size, workload.seq_len), dtype=torch.long)

    def measure(train_step, *, torch_module, device, batch_size, warmup, iters) -> dict:
        device = torch.device(device)
        cuda = device.type == "cuda"

        def around(index, run):
            if index == warmup and cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            return run()

        runner = DeviceClock(train_step, device, around_call=around)
        durations = functions["time_steps"](runner, warmup, iters)
        report = functions["step_time_report"](list(durations), mask)
        loss = runner.results[-1] if runner.results else None
        result = {
            "status": "ok", "device": str(device), "batch_size": batch_size, "warmup": warmup, "iters": iters,
            "step_time_ms": report["median_s"] * 1000.0, "samples_per_s": report["samples_per_s"],
            "loss": loss,
            "peak_memory_mb": torch.cuda.max_memory_allocated(device) / MIB if cuda else None,
            "peak_reserved_mb": torch.cuda.max_memory_reserved(device) / MIB if cuda else None,
            **allocator_outside_mb(torch_module, device),
            "protocol": {"calls": runner.calls, "durations_s": list(durations), "report": report,
                         "step_time": "median of the timed steps", "throughput": "real tokens (attention mask)"},
        }
        if not isinstance(loss, float) or not math.isfinite(loss):
            result.update(status="failed", error=f"non-finite or missing training loss {loss!r}", loss=None)
        return result

    return measure


def run_training_baseline(*, run_mode: str, label: str, results_dir: str | Path | None = None,
                          model_id: str | None = None, model_source: str = "local", models=None,
                          sink: RecordSink | None = None, mechanism: Mechanism | None = None) -> dict:
    """Measure the baseline workload and write the 73 record, then (if it ran) the 76 input manifest.

    `models` (optional): a `runner.CachedModel` to reuse a model already loaded. `sink` (optional):
    the run's record sink (its results root must be the plan's); both records go through it.
    `mechanism` (optional): chapter 73's functions to measure with (default: the package's). Returns
    `{"status", "baseline_path", "baseline_sha256", "manifest_path", "manifest_sha256"}`; the
    manifest fields are None when the baseline ran out of memory or failed (recorded as such).
    """
    plan = _plan(run_mode, label, results_dir, model_id, model_source)
    if sink is None:
        sink = RecordSink(run_mode=run_mode, run_label=label, results_root=plan["results_root"],
                          chapter_id=BASELINE_CHAPTER, slug=BASELINE_SLUG)
    elif sink.results_root is None or sink.results_root.resolve() != Path(plan["results_root"]).resolve():
        raise ConfigError(f"the record sink writes under {sink.results_root}, the baseline under {plan['results_root']}")
    import torch

    mechanism = mechanism or Mechanism()
    functions = {name: mechanism.function(name, default) for name, default in mechanism_defaults().items()}
    models = models or course_model(plan["model_id"], plan["model_source"])
    workload: TrainingWorkload = plan["workload"]
    measure = protocol_measure(functions, workload)
    threads = torch.get_num_threads()
    if plan["device"] == "cpu":  # the tiny model's matrices are too small for several threads: they only wait
        torch.set_num_threads(CPU_THREADS)
    try:
        run = run_with_oom_guard(
            lambda: run_memory_strategy(models, "baseline", workload, device=plan["device"], measure=measure),
            torch_module=torch, context={"name": "baseline", "strategy": "baseline", "seq_len": workload.seq_len})
    finally:
        torch.set_num_threads(threads)
    identity = models.identity or {}
    config = {
        "model_id": plan["model_id"], "weights": identity.get("weights"), "model_source": plan["model_source"],
        "workload": WORKLOAD_NAME, **workload.as_config(), "device": plan["device"], "strategy": "baseline",
        "mode": "fp32", "torch_threads": CPU_THREADS if plan["device"] == "cpu" else None,
    }
    record = {
        **sink.header("training_baseline", BASELINE_SCHEMA_VERSION, chapter=BASELINE_CHAPTER),
        "status": run["status"],
        "measured_by": "chapter 73's protocol: time_steps, then step_time_report (median of the timed steps)",
        "mechanism": mechanism.describe(mechanism_defaults()),
        "config": config,
        "model": identity,
        "model_size": {"parameters": models.parameter_count(), "static_bytes_per_parameter": STATIC_BYTES_PER_PARAMETER,
                       "static_bytes_rule": "float32 weights, gradients and AdamW's two moments: 4 x 4 bytes"},
        "environment": runtime_snapshot(resolve_project_root()),
        "measurement": run,
    }
    baseline_sha256 = sink.save(plan["baseline"], record, stage="training_baseline").sha256
    result = {"status": run["status"], "baseline_path": plan["baseline"], "baseline_sha256": baseline_sha256,
              "manifest_path": None, "manifest_sha256": None}
    if run["status"] != "ok":
        return result
    manifest = {
        **sink.header("input_manifest", MANIFEST_SCHEMA_VERSION, chapter=CHAPTER_ID),
        "workload": {key: config[key] for key in IDENTITY_KEYS},
        "source_artifacts": {
            "training_baseline": {**sink.lineage(plan["baseline"]),
                                  "path_relative_to": "results_root", "schema_version": BASELINE_SCHEMA_VERSION},
        },
    }
    result["manifest_sha256"] = sink.save(plan["manifest"], manifest, stage="input_manifest").sha256
    result["manifest_path"] = plan["manifest"]
    return result


def load_input_manifest(path: str | Path, expected: Mapping[str, Any], results_root: str | Path) -> dict:
    """Read a 76 input manifest, check the baseline's sha256 and workload; return both records.

    Raises UpstreamRecordError when the manifest or baseline is missing or of another schema, the
    baseline's bytes changed since the manifest was written, the baseline did not run, or its
    workload (weights included) differs from `expected` in any key.
    """
    manifest_file = Path(path)
    manifest = load_record(manifest_file, schema_version=MANIFEST_SCHEMA_VERSION)
    entry = manifest.get("source_artifacts", {}).get("training_baseline")
    if not isinstance(entry, Mapping) or not entry.get("path") or not entry.get("sha256"):
        raise UpstreamRecordError(f"{manifest_file} names no training_baseline path and sha256.")
    baseline = resolve_lineage(entry, results_root, schema_version=BASELINE_SCHEMA_VERSION)
    baseline_file = Path(results_root) / entry["path"]
    if baseline.get("status") != "ok":
        raise UpstreamRecordError(f"training baseline {baseline_file} has status {baseline.get('status')!r}, not ok.")
    config, written = baseline.get("config", {}), manifest.get("workload", {})
    mismatches = {key: {"baseline": config.get(key), "expected": value}
                  for key, value in expected.items() if config.get(key) != value}
    mismatches.update({f"manifest.{key}": {"manifest": written.get(key), "expected": value}
                       for key, value in expected.items() if written.get(key) != value})
    if mismatches:
        detail = "; ".join(f"{key}: {values}" for key, values in mismatches.items())
        raise UpstreamRecordError(
            f"training baseline {baseline_file} does not match the expected workload ({detail}); rerun "
            "python -m tools.experiments.memory_strategy.baseline with the same workload and a new label.")
    return {"manifest": manifest, "manifest_path": manifest_file, "manifest_sha256": sha256_file(manifest_file),
            "baseline": baseline, "baseline_path": baseline_file, "baseline_sha256": entry["sha256"]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.memory_strategy.baseline",
                                     description="Measure the chapter-73 training baseline and write 76's input manifest.")
    return add_common_arguments(
        parser, ("run_mode", "label", "results_dir", "model", "model_source"), run_mode={"choices": RUN_MODES},
        model={"choices": MODEL_CHOICES, "help": "model to train (default: tiny in cpu_smoke, "
                                                 "Qwen/Qwen2.5-0.5B-Instruct in real_gpu)"},
        model_source={"flags": ("--model-source", "--weights")})


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run_training_baseline(run_mode=args.run_mode, label=args.label, results_dir=args.results_dir,
                                       model_id=args.model, model_source=args.model_source)
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
    print(f"training baseline: {result['status']}  {result['baseline_path']}  sha256={result['baseline_sha256']}")
    if result["manifest_path"] is None:
        print("no input manifest written: the baseline did not complete (see its record).", file=sys.stderr)
        return EXIT_RUN_FAILED
    print(f"input manifest:    {result['manifest_path']}  sha256={result['manifest_sha256']}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())


def run(plan, sink, *, log=None) -> dict | None:
    """The experiment contract's runner: the baseline and (when it ran) 76's input manifest, kept by the sink."""
    if not plan.writes:
        if log is not None:
            log(f"training_baseline (dry_run): would measure {plan.model} ({plan.model_source}); nothing is written")
        return None
    return run_training_baseline(run_mode=plan.run_mode, label=plan.label, results_dir=sink.results_root,
                                 model_id=plan.model, model_source=plan.model_source, sink=sink,
                                 mechanism=plan.mechanism)
