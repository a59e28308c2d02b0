"""The chapter-73 training baseline (stand-in) and the input manifest chapter 76 checks.

Chapter 73 is not in the course yet, so this command measures its baseline training workload
(batch 1, sequence 768, warm-up 2, 5 timed iterations, seed 42, float32, AdamW; `cpu_smoke`
uses the tiny model and sequence 64) and writes two write-once records into the results folder:

- `73_<mode>_training_baseline_<label>.json` (schema `training-performance-baseline/v1`);
- `76_<mode>_input_manifest_<label>.json` (schema `memory-strategy-input-manifest/v1`), which
  names the baseline file and its sha256 and the workload 76 must reproduce.

`load_input_manifest(path, expected_workload)` is what chapter 76 calls: it fails with a clear
UpstreamRecordError when the baseline's sha256 or workload does not match.

    python -m tools.training_baseline --run-mode cpu_smoke --label L --results-dir DIR
    python -m tools.training_baseline --run-mode real_gpu --label L [--weights random_init]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from tools.errors import ConfigError, CourseError, ModelCacheMissingError, RecordExistsError, UpstreamRecordError
from tools.memory_strategy_runtime import TrainingWorkload, run_memory_strategy
from tools.core.environment import runtime_snapshot
from tools.core.paths import default_results_dir, resolve_project_root
from tools.core.records import load_record, record_header, save_json_record_once, sha256_file
from tools.core.runs import validate_run_label, validate_run_mode
from tools.measure.training import run_with_oom_guard

BASELINE_SCHEMA_VERSION = "training-performance-baseline/v1"
MANIFEST_SCHEMA_VERSION = "memory-strategy-input-manifest/v1"
WORKLOAD_NAME = "pressure"
RUN_MODES = ("cpu_smoke", "real_gpu")
MODEL_CHOICES = ("tiny", "Qwen/Qwen2.5-0.5B-Instruct")
WEIGHT_CHOICES = ("local", "random_init")
DEFAULT_MODELS = {"cpu_smoke": "tiny", "real_gpu": "Qwen/Qwen2.5-0.5B-Instruct"}
WORKLOADS = {
    "real_gpu": TrainingWorkload(batch_size=1, seq_len=768, warmup=2, iters=5, seed=42, optimizer="adamw"),
    "cpu_smoke": TrainingWorkload(batch_size=1, seq_len=64, warmup=2, iters=5, seed=42, optimizer="adamw"),
}
DEVICES = {"cpu_smoke": "cpu", "real_gpu": "cuda"}
IDENTITY_KEYS = ("model_id", "workload", "batch_size", "seq_len", "dtype", "optimizer", "warmup", "iters", "seed")
EXIT_OK, EXIT_RUN_FAILED, EXIT_CONFIG, EXIT_MODEL_CACHE = 0, 1, 2, 4


def baseline_file_name(run_mode: str, label: str) -> str:
    """`73_<mode>_training_baseline_<label>.json`."""
    return f"73_{run_mode}_training_baseline_{label}.json"


def manifest_file_name(run_mode: str, label: str) -> str:
    """`76_<mode>_input_manifest_<label>.json`."""
    return f"76_{run_mode}_input_manifest_{label}.json"


def expected_workload(run_mode: str, model_id: str | None = None) -> dict:
    """The workload identity a baseline of `run_mode` must carry (what 76 passes to load_input_manifest)."""
    if run_mode not in WORKLOADS:
        raise ConfigError(f"run mode {run_mode!r} has no training workload; choose one of {', '.join(RUN_MODES)}.")
    config = WORKLOADS[run_mode].as_config()
    identity = {"model_id": model_id or DEFAULT_MODELS[run_mode], "workload": WORKLOAD_NAME, **config}
    return {key: identity[key] for key in IDENTITY_KEYS}


def _plan(run_mode: str, label: str, results_dir: Path | None, model_id: str | None, weights: str) -> dict:
    """Check every argument and the output paths before any work; return the resolved plan."""
    if run_mode not in RUN_MODES:
        validate_run_mode(run_mode)
        raise ConfigError(f"the training baseline runs in {' or '.join(RUN_MODES)}, not {run_mode!r}.")
    validate_run_label(label)
    model_id = model_id or DEFAULT_MODELS[run_mode]
    if model_id not in MODEL_CHOICES:
        raise ConfigError(f"unknown model {model_id!r}; choose one of {', '.join(MODEL_CHOICES)}.")
    if run_mode == "cpu_smoke" and model_id != "tiny":
        raise ConfigError("cpu_smoke measures the tiny model only; use --run-mode real_gpu for a real model.")
    if weights not in WEIGHT_CHOICES:
        raise ConfigError(f"unknown weights {weights!r}; choose one of {', '.join(WEIGHT_CHOICES)}.")
    folder = Path(results_dir) if results_dir is not None else default_results_dir(run_mode)
    baseline_path = folder / baseline_file_name(run_mode, label)
    manifest_path = folder / manifest_file_name(run_mode, label)
    for path in (baseline_path, manifest_path):
        if path.exists():
            raise RecordExistsError(f"record {path} already exists; records are write-once, use a new label.")
    if run_mode == "real_gpu":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"real_gpu needs a CUDA device; torch {torch.__version__} sees none. "
                              "Use --run-mode cpu_smoke on this machine.")
    return {"run_mode": run_mode, "label": label, "model_id": model_id, "weights": weights,
            "workload": WORKLOADS[run_mode], "device": DEVICES[run_mode],
            "baseline_path": baseline_path, "manifest_path": manifest_path}


def run_training_baseline(*, run_mode: str, label: str, results_dir: str | Path | None = None,
                          model_id: str | None = None, weights: str = "local") -> dict:
    """Measure the baseline workload and write the 73 record, then (if it ran) the 76 input manifest.

    Returns `{"status", "baseline_path", "baseline_sha256", "manifest_path", "manifest_sha256"}`;
    the manifest fields are None when the baseline ran out of memory or failed (recorded as such).
    """
    plan = _plan(run_mode, label, Path(results_dir) if results_dir is not None else None, model_id, weights)
    import torch

    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    model_path = resolve_model(plan["model_id"], source=plan["weights"])
    identity = model_identity(model_path)
    workload: TrainingWorkload = plan["workload"]

    def factory():
        model, _ = load_causal_lm(model_path, dtype=torch.float32, device="cpu")
        return model

    run = run_with_oom_guard(
        lambda: run_memory_strategy(factory, "baseline", workload, device=plan["device"]),
        torch_module=torch, context={"name": "baseline", "strategy": "baseline", "seq_len": workload.seq_len})
    config = {
        "model_id": plan["model_id"], "weights": identity.get("weights"), "model_source": plan["weights"],
        "workload": WORKLOAD_NAME, **workload.as_config(), "device": plan["device"], "strategy": "baseline",
        "mode": "fp32",
    }
    root = resolve_project_root()
    record = {
        **record_header(schema_version=BASELINE_SCHEMA_VERSION, chapter="73", stage="training_baseline",
                        run_mode=run_mode, run_label=label),
        "status": run["status"],
        "stand_in": "tools.training_baseline (chapter 73 is not in the course yet)",
        "config": config,
        "model": identity,
        "environment": runtime_snapshot(root),
        "measurement": run,
    }
    baseline_sha256 = save_json_record_once(plan["baseline_path"], record)
    result = {"status": run["status"], "baseline_path": plan["baseline_path"], "baseline_sha256": baseline_sha256,
              "manifest_path": None, "manifest_sha256": None}
    if run["status"] != "ok":
        return result
    manifest = {
        **record_header(schema_version=MANIFEST_SCHEMA_VERSION, chapter="76", stage="input_manifest",
                        run_mode=run_mode, run_label=label),
        "workload": {key: config[key] for key in IDENTITY_KEYS},
        "source_artifacts": {
            "training_baseline": {
                "path": plan["baseline_path"].name,
                "path_relative_to": "manifest_folder",
                "schema_version": BASELINE_SCHEMA_VERSION,
                "sha256": baseline_sha256,
            },
        },
    }
    result["manifest_sha256"] = save_json_record_once(plan["manifest_path"], manifest)
    result["manifest_path"] = plan["manifest_path"]
    return result


def load_input_manifest(path: str | Path, expected_workload: Mapping[str, Any]) -> dict:
    """Read a 76 input manifest, check the baseline's sha256 and workload; return both records.

    Raises UpstreamRecordError when the manifest or baseline is missing or of another schema, the
    baseline's bytes changed since the manifest was written, the baseline did not run, or its
    workload differs from `expected_workload` in any key.
    """
    manifest_path = Path(path)
    manifest = load_record(manifest_path, schema_version=MANIFEST_SCHEMA_VERSION)
    entry = manifest.get("source_artifacts", {}).get("training_baseline")
    if not isinstance(entry, Mapping) or not entry.get("path") or not entry.get("sha256"):
        raise UpstreamRecordError(f"{manifest_path} names no training_baseline path and sha256.")
    baseline_path = manifest_path.parent / entry["path"]
    baseline = load_record(baseline_path, schema_version=BASELINE_SCHEMA_VERSION, expected_sha256=entry["sha256"])
    if baseline.get("status") != "ok":
        raise UpstreamRecordError(f"training baseline {baseline_path} has status {baseline.get('status')!r}, not ok.")
    config = baseline.get("config", {})
    mismatches = {key: {"baseline": config.get(key), "expected": value}
                  for key, value in expected_workload.items() if config.get(key) != value}
    mismatches.update({f"manifest.{key}": {"manifest": manifest["workload"].get(key), "expected": value}
                       for key, value in expected_workload.items()
                       if manifest.get("workload", {}).get(key) != value})
    if mismatches:
        detail = "; ".join(f"{key}: {values}" for key, values in mismatches.items())
        raise UpstreamRecordError(
            f"training baseline {baseline_path} does not match the expected workload ({detail}); "
            "rerun tools.training_baseline with the same workload and a new label.")
    return {"manifest": manifest, "manifest_path": manifest_path, "manifest_sha256": sha256_file(manifest_path),
            "baseline": baseline, "baseline_path": baseline_path, "baseline_sha256": entry["sha256"]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.training_baseline",
                                     description="Measure the chapter-73 training baseline and write the 76 input manifest.")
    parser.add_argument("--run-mode", required=True, choices=RUN_MODES)
    parser.add_argument("--label", required=True, help="unique run label (names the records)")
    parser.add_argument("--results-dir", default=None,
                        help="folder of the records (default: build/results for cpu_smoke, benchmarks/results for real_gpu)")
    parser.add_argument("--model", default=None, choices=MODEL_CHOICES,
                        help="model to train (default: tiny in cpu_smoke, Qwen/Qwen2.5-0.5B-Instruct in real_gpu)")
    parser.add_argument("--weights", default="local", choices=WEIGHT_CHOICES,
                        help="local cache weights, or the architecture with random weights (recorded as such)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run_training_baseline(run_mode=args.run_mode, label=args.label, results_dir=args.results_dir,
                                       model_id=args.model, weights=args.weights)
    except ModelCacheMissingError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return EXIT_MODEL_CACHE
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"training baseline: {result['status']}  {result['baseline_path']}  sha256={result['baseline_sha256']}")
    if result["manifest_path"] is None:
        print("no input manifest written: the baseline did not complete (see its record).", file=sys.stderr)
        return EXIT_RUN_FAILED
    print(f"input manifest:    {result['manifest_path']}  sha256={result['manifest_sha256']}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
