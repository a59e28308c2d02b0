"""The one command line of the experiments: the common flags declared once, and `python -m tools.experiments`.

    python -m tools.experiments list                      every registered experiment and its stages
    python -m tools.experiments steps [--json]            the GPU batch's steps, in order
    python -m tools.experiments run EXPERIMENT --run-mode M --label L [--chapter C] [--stage S]
        [--results-dir D] [--variant V ...] [--seed N ...] [--model ID|tiny] [--model-source local|random_init]
        [--device cpu|cuda] [--model-cache DIR] [--time-limit-s S] [--cpu-threads N] [--progress]
        [the experiment's own flags]
    python -m tools.experiments environment --run-mode M [--json PATH]   the GPU batch's machine check
    python -m tools.experiments models --run-mode M [--model-source S]   build the batch's models once
    python -m tools.experiments batch --label L --out DIR [--rehearse] [--budget-s S]   the GPU batch

`add_common_arguments` is what every experiment's own command line (`python -m
tools.experiments.memory_strategy.stages`, `tools.verl_mechanism_closure`, ...) builds its parser
from, with the spellings and defaults it has always had. Exit codes: 0 ok, 1 a record says `oom` or
`failed` (or a stage raised), 2 invalid input (nothing done), 4 only the model cache is missing.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tools.experiments.device_batch as device_batch
from tools.core.runs import RUN_MODES, validate_run_label
from tools.errors import CourseError, exit_code_for
from tools.experiments.contract import (
    DEVICES,
    MODEL_SOURCES,
    Limits,
    Plan,
    RecordRef,
    failed_records,
    run,
)

EXIT_OK = 0
EXIT_RUN_FAILED = 1

COMMON_FLAGS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "chapter": (("--chapter",), {"default": None,
                                 "help": "the chapter whose plan runs (default: the experiment's first)"}),
    "run_mode": (("--run-mode",), {"choices": RUN_MODES, "required": True}),
    "label": (("--label",), {"required": True, "help": "one unique run label (names the records)"}),
    "results_dir": (("--results-dir",), {"default": None, "help": "results root (default: build/results for "
                                         "cpu_smoke, benchmarks/results for real_gpu)"}),
    "stage": (("--stage",), {"default": None, "help": "the stage to run (default: the experiment's)"}),
    "variants": (("--variant",), {"dest": "variants", "action": "append", "default": None,
                                  "help": "run only this variant (repeatable; default: every one)"}),
    "seeds": (("--seed",), {"dest": "seeds", "action": "append", "type": int, "default": None,
                            "help": "a seed (repeatable; default: the experiment's)"}),
    "model": (("--model",), {"default": None, "help": "a model id, or 'tiny' (default: tiny in cpu_smoke, "
                             "Qwen/Qwen2.5-0.5B-Instruct in real_gpu)"}),
    "model_source": (("--model-source",), {"choices": MODEL_SOURCES, "default": "local",
                                           "help": "local cache weights, or the architecture with random weights "
                                                   "(recorded as weights: random_init)"}),
    "device": (("--device",), {"choices": DEVICES, "default": None,
                               "help": "default: cpu (cpu_smoke), cuda (real_gpu)"}),
    "model_cache": (("--model-cache",), {"type": Path, "default": None}),
    "time_limit_s": (("--time-limit-s",), {"type": float, "default": None,
                                           "help": "wall-clock seconds this run may take (the GPU batch passes the "
                                                   "time left)"}),
    "cpu_threads": (("--cpu-threads",), {"type": int, "default": None}),
    "progress": (("--progress",), {"action": "store_true", "help": "show model-loading progress bars"}),
}
"""Every flag the experiments share, declared once: name -> (spellings, argparse keywords)."""

PLAN_FLAGS = tuple(COMMON_FLAGS)
OPTION_FLAGS = ("progress",)
"""Common flags that are not Plan fields: they reach the runner in `plan.options`."""


def add_common_arguments(parser: argparse.ArgumentParser, names: Sequence[str] = PLAN_FLAGS,
                         **overrides: Mapping[str, Any]) -> argparse.ArgumentParser:
    """Add the common flags `names` to `parser`. `overrides[name]` changes argparse keywords (e.g.
    `choices`, `default`, `required`, `help`) and may give `flags`, the spellings (the first one
    wins in help, every one is accepted)."""
    for name in names:
        flags, keywords = COMMON_FLAGS[name]
        keywords = {"dest": name, **keywords, **dict(overrides.get(name, {}))}
        flags = tuple(keywords.pop("flags", flags))
        parser.add_argument(*flags, **keywords)
    return parser


def plan_from_args(experiment: str, args: argparse.Namespace, *, chapter: str | None = None,
                   options: Mapping[str, Any] | None = None) -> Plan:
    """The Plan of parsed arguments (flags an experiment's parser lacks take the plan's defaults)."""

    def get(name: str, default: Any = None) -> Any:
        return getattr(args, name, default)

    return Plan(experiment=experiment, chapter=get("chapter") or chapter, run_mode=args.run_mode, label=args.label,
                results_dir=get("results_dir"), stage=get("stage"), variants=tuple(get("variants") or ()),
                seeds=tuple(get("seeds") or ()), model=get("model"), model_source=get("model_source", "local"),
                device=get("device"), model_cache=get("model_cache"),
                limits=Limits(time_s=get("time_limit_s"), cpu_threads=get("cpu_threads")),
                options=dict(options or {}))


def experiment_parser(name: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The parser of `run EXPERIMENT`: the common flags, then the experiment's own."""
    from tools.experiments.registry import get_experiment

    experiment = get_experiment(name)
    parser = argparse.ArgumentParser(prog=prog or f"python -m tools.experiments run {name}",
                                     description=experiment.title)
    add_common_arguments(parser, PLAN_FLAGS, stage={"choices": experiment.stages},
                         run_mode={"choices": experiment.run_modes})
    experiment.add_arguments(parser)
    return parser


def _options(args: argparse.Namespace) -> dict:
    return {key: value for key, value in vars(args).items() if key not in COMMON_FLAGS or key in OPTION_FLAGS}


def record_lines(records: Sequence[RecordRef]) -> list[str]:
    return [f"{ref.stage}: {ref.action}, status {ref.status}  {ref.path}  sha256={ref.sha256[:12]}"
            for ref in records]


def run_command(name: str, argv: Sequence[str], prog: str | None = None) -> int:
    """Parse an experiment's arguments, run its plan, print its records; returns the exit code."""
    from tools.experiments.registry import get_experiment

    args = experiment_parser(name, prog).parse_args(list(argv))
    try:
        experiment = get_experiment(name)
        plan = plan_from_args(name, args, chapter=experiment.chapters[0], options=_options(args))
        records = run(plan, log=print)
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
    except Exception:  # noqa: BLE001 - a stage that raised: its traceback, exit 1 (finished records stay)
        traceback.print_exc()
        return EXIT_RUN_FAILED
    for line in record_lines(records):
        print(line)
    return EXIT_RUN_FAILED if failed_records(records) else EXIT_OK


def _list() -> int:
    from tools.experiments.registry import all_experiments

    for experiment in all_experiments().values():
        print(f"{experiment.name}: {experiment.title}")
        print(f"  chapters {', '.join(experiment.chapters)}; stages {', '.join(experiment.stages)}; "
              f"run modes {', '.join(experiment.run_modes)}")
    return EXIT_OK


def _steps(as_json: bool) -> int:
    from tools.experiments.registry import device_steps

    steps = device_steps()
    if as_json:
        print(json.dumps([{"name": s.name, "experiment": s.experiment, "stage": s.stage, "chapter": s.chapter,
                           "order": s.order, "max_s": s.max_s, "arguments": list(s.arguments)} for s in steps],
                         indent=2))
    else:
        for step in steps:
            flags = (["--stage", step.stage] if step.stage else []) + (["--chapter", step.chapter] if step.chapter
                                                                        else []) + list(step.arguments)
            print(f"{step.order:>6g}  {step.name:<24} {' '.join([step.experiment, *flags])}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# The GPU batch's commands (tools.experiments.device_batch does the work)
# ---------------------------------------------------------------------------

def _mode_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    return add_common_arguments(parser, ("run_mode", "model_source"), run_mode={"choices": ("cpu_smoke", "real_gpu")})


def environment_main(argv: Sequence[str]) -> int:
    from tools.core.preflight import format_preflight, preflight_exit_code

    parser = _mode_parser("python -m tools.experiments environment")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(list(argv))
    report = device_batch.environment_report(args.run_mode)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({"python": report["python"], "packages": report["packages"]}, indent=2))
    print(format_preflight(report, title=f"GPU batch environment ({args.run_mode})"))
    return preflight_exit_code(report)


def models_main(argv: Sequence[str]) -> int:
    args = _mode_parser("python -m tools.experiments models").parse_args(list(argv))
    try:
        identities = device_batch.build_models(args.run_mode, args.model_source)
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
    for identity in identities:
        print(f"{identity['model_id']}: weights {identity['weights']}, folder {identity['folder']}")
    return 0


def batch_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.experiments batch",
                                     description=device_batch.__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--rehearse", action="store_true", help="the same steps, cpu_smoke, tiny model, on the CPU")
    parser.add_argument("--budget-s", type=float, default=device_batch.BATCH_BUDGET_S)
    parser.add_argument("--max-step-s", type=float, default=None, help="cap every step's time (default: its own)")
    parser.add_argument("--model-source", choices=("local", "random_init"), default=None,
                        help="default: random_init on the GPU, the tiny model in rehearsal")
    parser.add_argument("--step", action="append", default=[], help="run only this step (repeatable)")
    args = parser.parse_args(list(argv))

    def stop(signum, frame):  # the batch is stopped from outside: its running step goes with it
        device_batch.stop_running_step()
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        validate_run_label(args.label)
        if args.budget_s <= 0 or (args.max_step_s is not None and args.max_step_s <= 0):
            raise ValueError("--budget-s and --max-step-s must be positive")
        summary = device_batch.run_batch(label=args.label, out=args.out.resolve(), rehearse=args.rehearse,
                                         budget_s=args.budget_s, max_step_s=args.max_step_s,
                                         model_source=args.model_source, only=args.step, echo=print)
    except ValueError as error:  # ConfigError is a ValueError
        print(f"ERROR: {error}", file=sys.stderr)
        return 2
    print(f"summary: {args.out / 'summary.json'}; records: {args.out / 'records.tar.gz'}; log: {args.out / 'log.txt'}")
    return 1 if summary["failed_steps"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = ("list", "steps", "run", "environment", "models", "batch")
    if not argv or argv[0] not in commands:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "list":
        return _list()
    if command == "steps":
        return _steps("--json" in rest)
    if command in ("environment", "models", "batch"):
        return {"environment": environment_main, "models": models_main, "batch": batch_main}[command](rest)
    if not rest or rest[0].startswith("-"):
        print("usage: python -m tools.experiments run EXPERIMENT [flags] (see: python -m tools.experiments list)",
              file=sys.stderr)
        return 2
    try:
        return run_command(rest[0], rest[1:])
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
