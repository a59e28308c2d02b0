"""The one command line of the experiments: the common flags declared once, and `python -m tools.experiments`.

    python -m tools.experiments list                      every registered experiment and its stages
    python -m tools.experiments steps [--json]            the GPU batch's steps, in order
    python -m tools.experiments run EXPERIMENT --run-mode M --label L [--chapter C] [--stage S]
        [--results-dir D] [--variant V ...] [--seed N ...] [--model ID|tiny] [--model-source local|random_init]
        [--device cpu|cuda] [--model-cache DIR] [--time-limit-s S] [--cpu-threads N] [--progress]
        [the experiment's own flags]

`add_common_arguments` is what every experiment's own command line (`python -m
tools.experiments.memory_strategy.stages`, `tools.verl_mechanism_closure`, ...) builds its parser
from, with the spellings and defaults it has always had. Exit codes: 0 ok, 1 a record says `oom` or
`failed` (or a stage raised), 2 invalid input (nothing done), 4 only the model cache is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tools.core.runs import RUN_MODES
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
    "chapter": (("--chapter",), {"default": None, "help": "the chapter whose plan runs (default: the experiment's first)"}),
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
    "device": (("--device",), {"choices": DEVICES, "default": None, "help": "default: cpu (cpu_smoke), cuda (real_gpu)"}),
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
    get = lambda name, default=None: getattr(args, name, default)
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = ("list", "steps", "run")
    if not argv or argv[0] not in commands:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "list":
        return _list()
    if command == "steps":
        return _steps("--json" in rest)
    if not rest or rest[0].startswith("-"):
        print("usage: python -m tools.experiments run EXPERIMENT [flags] (see: python -m tools.experiments list)",
              file=sys.stderr)
        return 2
    try:
        return run_command(rest[0], rest[1:])
    except CourseError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return exit_code_for(error)
