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
from tools.experiments.cli import add_common_arguments
from tools.experiments.sft_training.config import DEVICES, MODEL_SOURCES
from tools.experiments.sft_training.plans import stage_config_for
from tools.experiments.sft_training.runner import run_plan


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments.sft_training", description=__doc__.splitlines()[0])
    return add_common_arguments(
        parser, ("chapter", "run_mode", "label", "results_dir", "model", "model_source", "device"),
        chapter={"required": True, "help": "chapter id with an SFT plan (e.g. 14)"},
        run_mode={"choices": ("cpu_smoke", "real_gpu")}, model_source={"choices": MODEL_SOURCES},
        device={"choices": DEVICES})


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
