"""Each chapter's plan for the SFT stage: its variants and, optionally, stage settings and hooks.

A chapter's plan is the module `plans/ch_<id>.py` (ids lower-cased, '-' as '_'), defining
`variants(run_mode) -> list[AdapterSpec]` and optionally `STAGE` (StageConfig overrides per run
mode, a dict `{run_mode: {field: value}}`), `prepare(model, spec)`, `measure(model, spec,
split, config, tokenizer)` and `collate(examples, pad_id, spec, config)` (see runner.run_variant). The notebook and the command line read the same plan.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from tools.errors import ConfigError


@dataclass(frozen=True)
class Plan:
    chapter: str
    variants: Callable
    stage: dict
    prepare: Callable | None
    measure: Callable | None
    collate: Callable | None


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
    return Plan(chapter_id, module.variants, dict(getattr(module, "STAGE", {})), getattr(module, "prepare", None),
                getattr(module, "measure", None), getattr(module, "collate", None))


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
