"""The registry of experiments: what each experiment is, its stages, and its device-batch steps.

An experiment registers itself by declaring `EXPERIMENTS = (Experiment(...), ...)` in the module
`experiment.py` of its own package (`tools/experiments/<name>/experiment.py`); nothing else is
edited. The registry finds every such module, so the command line (`python -m tools.experiments`),
the GPU batch (`benchmarks/gpu/run_device_batch.sh`), the asset registry page and the tests all
read one list. Declarations name their code by `"module:function"` and are imported lazily: reading
the registry imports no torch.

Packages outside `tools.experiments` (a test's toy experiment, a project's own) are found when
`COURSE_EXPERIMENT_PACKAGES` lists them (importable package names, separated by `os.pathsep`).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tools.core.runs import RUN_MODES
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools.experiments.contract import Plan


def load_runner(reference: str) -> Callable:
    """The callable named by `"package.module:function"`."""
    module_name, _, attribute = reference.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"runner {reference!r} must read 'package.module:function'")
    return getattr(importlib.import_module(module_name), attribute)

EXTRA_PACKAGES_ENV = "COURSE_EXPERIMENT_PACKAGES"
DECLARATION_MODULE = "experiment"
"""The module of an experiment package that declares `EXPERIMENTS`."""

DEFAULT_STEP_MAX_S = 150.0
"""The longest a device-batch step may run when its declaration says nothing (it also gets no more
than the batch's time that remains)."""


@dataclass(frozen=True)
class DeviceStep:
    """One step of the GPU batch: a run of an experiment's stage in its own process.

    `order` places the step in the batch (lower first, across experiments); `max_s` caps its time
    (it also never gets more than the batch has left); `arguments` are extra command-line flags of
    the experiment (e.g. `("--backend", "torch")`). `chapter` None means the experiment's first.
    `upstreams` names the projects whose manifests the step reads: the batch promises each one's
    sha256, as written earlier in the same batch (`--upstream-sha256 ID=SHA`)."""

    name: str
    experiment: str
    order: float
    stage: str | None = None
    chapter: str | None = None
    arguments: tuple[str, ...] = ()
    max_s: float = DEFAULT_STEP_MAX_S
    upstreams: tuple[str, ...] = ()

    def argv(self, *, run_mode: str, label: str, results_dir: str, model_source: str,
             time_limit_s: float | None = None) -> list[str]:
        """The command line of this step after `python -m tools.experiments` (the model and the
        device follow from the run mode)."""
        argv = ["run", self.experiment, "--run-mode", run_mode, "--label", label, "--results-dir", str(results_dir),
                "--model-source", model_source]
        if self.chapter:
            argv += ["--chapter", self.chapter]
        if self.stage:
            argv += ["--stage", self.stage]
        if time_limit_s is not None:
            argv += ["--time-limit-s", f"{time_limit_s:.0f}"]
        return argv + list(self.arguments)


Declared = tuple[str, ...] | str | None


@dataclass(frozen=True)
class Experiment:
    """What the registry knows of one experiment.

    - `runner`: `"module:function"`, called as `function(plan, sink, log=None)`; it writes through
      the sink (or adopts what it wrote) and may return anything (the sink's records are the result).
    - `stages`: the values a plan's `stage` may take, in run order; `default_stage` when the plan
      names none. `variants`: the names a plan may select (a tuple, or `"module:function"` called
      with `(chapter, run_mode)`), empty when the experiment has none.
    - `arguments`: `"module:function"` adding the experiment's own command-line flags to a parser;
      their values reach the runner as `plan.options`.
    - `record_folder`: the folder under the results root that holds its records (None: the
      chapter's catalog slug). `shared_by`: a sentence for the asset registry when several chapters
      read one record.
    - `mechanism`: the names of the chapter functions its runner takes from `plan.mechanism` (the
      learner's exercise functions, passed by the notebook); a plan naming any other is refused.
    """

    name: str
    title: str
    chapters: tuple[str, ...]
    runner: str
    stages: tuple[str, ...] = ("run",)
    default_stage: str | None = None
    variants: Declared = ()
    arguments: str | None = None
    run_modes: tuple[str, ...] = RUN_MODES
    record_folder: str | None = None
    shared_by: str | None = None
    device_steps: tuple[DeviceStep, ...] = ()
    mechanism: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").isalnum():
            raise ConfigError(f"experiment name must be letters, digits and '_', got {self.name!r}")
        if not self.chapters or not self.stages:
            raise ConfigError(f"experiment {self.name} must name its chapters and stages")
        if self.default_stage is not None and self.default_stage not in self.stages:
            raise ConfigError(f"experiment {self.name}: default stage {self.default_stage!r} is not one of its stages")
        for step in self.device_steps:
            if step.experiment != self.name:
                raise ConfigError(f"device step {step.name} belongs to {step.experiment}, declared by {self.name}")
            if step.stage is not None and step.stage not in self.stages:
                raise ConfigError(f"device step {step.name}: unknown stage {step.stage!r} of {self.name}")

    def declared_variants(self, chapter: str, run_mode: str) -> tuple[str, ...]:
        if isinstance(self.variants, str):
            return tuple(load_runner(self.variants)(chapter, run_mode))
        return tuple(self.variants or ())

    def add_arguments(self, parser: Any) -> None:
        """Add the experiment's own flags (if it has any) to an argparse parser."""
        if self.arguments:
            load_runner(self.arguments)(parser)

    def check_plan(self, plan: Plan) -> Plan:
        """Refuse a plan this experiment cannot run, before any work; fill the default stage."""
        if plan.experiment != self.name:
            raise ConfigError(f"plan of experiment {plan.experiment!r} given to {self.name!r}")
        if plan.chapter not in self.chapters:
            raise ConfigError(f"experiment {self.name} serves chapters {', '.join(self.chapters)}, "
                              f"not {plan.chapter!r}")
        if plan.run_mode not in self.run_modes:
            raise ConfigError(f"experiment {self.name} runs in {' or '.join(self.run_modes)}, not {plan.run_mode!r}.")
        stage = plan.stage or self.default_stage
        if stage is not None and stage not in self.stages:
            raise ConfigError(f"unknown stage {stage!r} of experiment {self.name}; choose one of "
                              f"{', '.join(self.stages)}.")
        unknown_functions = sorted(set(plan.mechanism.functions) - set(self.mechanism))
        if unknown_functions:
            raise ConfigError(f"experiment {self.name} takes the mechanism functions {list(self.mechanism)}, "
                              f"not {unknown_functions}")
        if plan.variants:
            known = self.declared_variants(plan.chapter, "cpu_smoke" if plan.run_mode == "dry_run" else plan.run_mode)
            unknown = [name for name in plan.variants if name not in known]
            if unknown:
                raise ConfigError(f"unknown variant(s) {unknown} of experiment {self.name}; choose from {list(known)}.")
        return plan if stage == plan.stage else plan.replace(stage=stage)


def _extra_packages() -> list[str]:
    return [name.strip() for name in os.environ.get(EXTRA_PACKAGES_ENV, "").split(os.pathsep) if name.strip()]


def _declaration_modules() -> list[tuple[str, bool]]:
    """`(module name, required)` of every declaration: the packages of tools.experiments (a package
    without `experiment.py` is not an experiment), then the extra packages (which must have one)."""
    here = [str(Path(__file__).resolve().parent)]
    found = [(f"{__package__}.{info.name}.{DECLARATION_MODULE}", False)
             for info in sorted(pkgutil.iter_modules(here), key=lambda item: item.name) if info.ispkg]
    return found + [(f"{name}.{DECLARATION_MODULE}", True) for name in _extra_packages()]


def _import_declaration(module_name: str, required: bool):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not required and error.name == module_name:
            return None
        raise


def all_experiments() -> dict[str, Experiment]:
    """Every registered experiment by name, in package order. Duplicate names are an error."""
    experiments: dict[str, Experiment] = {}
    for module_name, required in _declaration_modules():
        module = _import_declaration(module_name, required)
        if module is None:
            continue
        declared = getattr(module, "EXPERIMENTS", None)
        if not isinstance(declared, (tuple, list)) or not all(isinstance(item, Experiment) for item in declared):
            raise ConfigError(f"{module_name} must define EXPERIMENTS, a tuple of Experiment")
        for experiment in declared:
            if experiment.name in experiments:
                raise ConfigError(f"experiment {experiment.name!r} is registered twice ({module_name})")
            experiments[experiment.name] = experiment
    return experiments


def get_experiment(name: str) -> Experiment:
    experiments = all_experiments()
    if name not in experiments:
        raise ConfigError(f"unknown experiment {name!r}; registered: {', '.join(experiments) or 'none'}.")
    return experiments[name]


def device_steps(experiments: dict[str, Experiment] | None = None) -> list[DeviceStep]:
    """Every device-batch step of every experiment, in batch order (`order`, then name)."""
    experiments = all_experiments() if experiments is None else experiments
    steps = [step for experiment in experiments.values() for step in experiment.device_steps]
    names = [step.name for step in steps]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"device steps named twice: {', '.join(duplicates)}")
    return sorted(steps, key=lambda step: (step.order, step.name))


def experiments_of_chapter(chapter_id: str, experiments: dict[str, Experiment] | None = None) -> list[Experiment]:
    """The experiments whose records a chapter has (for the asset registry and the chapter pages)."""
    experiments = all_experiments() if experiments is None else experiments
    return [experiment for experiment in experiments.values() if chapter_id in experiment.chapters]

