"""`python -m tools.experiments.sft_training`: run one chapter's SFT variants and write their records.

This is what a GPU machine without papermill runs (benchmarks/gpu/run_device_batch.sh); the chapter
notebook calls the same `run_stage` with the same plan.
Exit codes: 0 every variant ok, 1 a variant ended oom or failed (its record says so), 2 invalid input.
"""

from __future__ import annotations

import argparse
import sys

from tools.core.paths import results_root_for
from tools.errors import CourseError, exit_code_for
from tools.experiments.sft_training.config import DEVICES, MODEL_SOURCES
from tools.experiments.sft_training.plans import run_plan, stage_config_for


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.sft_training", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, help="chapter id with an SFT plan (e.g. 14)")
    parser.add_argument("--run-mode", required=True, choices=("cpu_smoke", "real_gpu"))
    parser.add_argument("--label", required=True, help="unique run label (names the records)")
    parser.add_argument("--results-dir", help="default: build/results (cpu_smoke) or benchmarks/results (real_gpu)")
    parser.add_argument("--model", default=None, help="default: tiny (cpu_smoke) or Qwen/Qwen2.5-0.5B-Instruct (real_gpu)")
    parser.add_argument("--model-source", default="local", choices=MODEL_SOURCES)
    parser.add_argument("--device", default=None, choices=DEVICES, help="default: cpu (cpu_smoke) or cuda (real_gpu)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = stage_config_for(args.chapter, args.run_mode, args.label,
                                  results_root_for(args.run_mode, args.results_dir), model_source=args.model_source,
                                  model_id=args.model, device=args.device)
        written = run_plan(config)
    except CourseError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return exit_code_for(error)
    for item in written:
        print(f"{item['variant']}: {item['status']}  {item['path']}  sha256={item['sha256'][:12]}")
    return 0 if all(item["status"] == "ok" for item in written) else 1


if __name__ == "__main__":
    sys.exit(main())
