"""Each chapter's plan for the SFT stage: its variants and, optionally, stage settings and hooks.

A chapter's plan is the module `plans/ch_<id>.py` (ids lower-cased, '-' as '_'), defining
`variants(run_mode) -> list[AdapterSpec]` and optionally `STAGE` (StageConfig overrides per run
mode, a dict `{run_mode: {field: value}}`), `prepare(model, spec)`, `attached(model, spec)`,
`measure(model, spec, split, config, tokenizer)`, `collate(examples, pad_id, spec, config)`,
`accumulate(model, micro_batches)` and `evaluate(model, batches, optimizer, spec, split)` (see
runner.run_variant and training.train_variant). The notebook and the command line read the same plan.

A chapter whose exercises the stage runs (Step 5 runs the learner's functions) also defines
`MECHANISM`, the names of those functions, and `defaults()`, the package's own copy of each (same
contract; the command line and the GPU batch run them). Each hook that takes a keyword `functions`
receives them: `Plan.bound(mechanism)` resolves every name through `mechanism.function(name,
default)`, so no hook falls back on the package copy when the notebook passed a function, and
`Plan.described` is what every record of the run carries (where each function came from, and the
sha256 of its code).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field, replace
from functools import partial
from types import ModuleType
from typing import Callable, Mapping

from tools.errors import ConfigError

HOOKS = ("variants", "prepare", "attached", "measure", "collate", "accumulate", "evaluate")


@dataclass(frozen=True)
class Plan:
    chapter: str
    variants: Callable
    stage: dict
    prepare: Callable | None
    measure: Callable | None
    collate: Callable | None
    accumulate: Callable | None = None
    evaluate: Callable | None = None
    attached: Callable | None = None
    mechanism: tuple[str, ...] = ()
    defaults: Callable | None = None
    described: Mapping | None = None
    functions: Mapping[str, Callable] = field(default_factory=dict)

    def check_mechanism(self, mechanism) -> None:
        """ConfigError when `mechanism` passes a function this chapter's stage does not take."""
        unknown = sorted(set(mechanism.functions) - set(self.mechanism))
        if unknown:
            raise ConfigError(f"chapter {self.chapter}'s SFT stage takes the functions {list(self.mechanism)}, "
                              f"not {unknown}")

    def bound(self, mechanism=None) -> "Plan":
        """This plan with the chapter's functions resolved through `mechanism` (a
        tools.experiments.contract.Mechanism; None: the package's copies) and handed to every hook
        that takes `functions`. ConfigError, before any work, for a function the chapter does not take."""
        from tools.experiments.contract import Mechanism

        mechanism = mechanism if mechanism is not None else Mechanism()
        self.check_mechanism(mechanism)
        if not self.mechanism:
            return self
        defaults = self.defaults()
        functions = {name: mechanism.function(name, defaults[name]) for name in self.mechanism}
        hooks = {name: partial(hook, functions=functions) for name in HOOKS
                 if (hook := getattr(self, name)) is not None and "functions" in inspect.signature(hook).parameters}
        return replace(self, **hooks, functions=functions, described=mechanism.describe(defaults))


def module_name(chapter_id: str) -> str:
    return "ch_" + chapter_id.lower().replace("-", "_")


def plan_for(chapter_id: str) -> Plan:
    """The plan of `chapter_id`; ConfigError when the chapter has none."""
    try:
        module: ModuleType = importlib.import_module(f"{__name__}.{module_name(chapter_id)}")
    except ModuleNotFoundError as error:
        if error.name and error.name.endswith(module_name(chapter_id)):
            raise ConfigError(f"chapter {chapter_id} has no SFT plan ({__name__}.{module_name(chapter_id)})") from None
        raise
    mechanism = tuple(getattr(module, "MECHANISM", ()))
    if mechanism and not callable(getattr(module, "defaults", None)):
        raise ConfigError(f"chapter {chapter_id}'s plan names MECHANISM functions but has no defaults()")
    return Plan(chapter_id, module.variants, dict(getattr(module, "STAGE", {})), getattr(module, "prepare", None),
                getattr(module, "measure", None), getattr(module, "collate", None), getattr(module, "accumulate", None),
                getattr(module, "evaluate", None), getattr(module, "attached", None), mechanism,
                getattr(module, "defaults", None))


def mechanism_names() -> tuple[str, ...]:
    """Every function name some chapter's plan takes (the experiment's declaration), in plan order."""
    from tools.experiments.sft_training.experiment import plan_chapters

    names: list[str] = []
    for chapter_id in plan_chapters():
        names += [name for name in plan_for(chapter_id).mechanism if name not in names]
    return tuple(names)


REAL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def stage_config_for(chapter_id: str, run_mode: str, run_label: str, results_root, *, model_source: str = "local",
                     model_id: str | None = None, device: str | None = None):
    """The StageConfig of a chapter's run: the tiny model on the CPU in cpu_smoke, Qwen2.5-0.5B-Instruct
    on CUDA in real_gpu, then the plan's overrides for the mode. The notebook and the command line
    both build it here, so they run the same stage."""
    from tools.experiments.sft_training.config import StageConfig

    plan = plan_for(chapter_id)
    settings = {"model_id": model_id or ("tiny" if run_mode == "cpu_smoke" else REAL_MODEL),
                "device": device or ("cpu" if run_mode == "cpu_smoke" else "cuda"), **plan.stage.get(run_mode, {})}
    return StageConfig(chapter=chapter_id, run_mode=run_mode, run_label=run_label, results_root=results_root,
                       model_source=model_source, **settings)


def variant_names(chapter_id: str, run_mode: str) -> list[str]:
    """The names of a chapter's variants in `run_mode` (what a plan's `variants` may select)."""
    return [spec.name for spec in plan_for(chapter_id).variants(run_mode)]
