"""A chapter notebook's Step 5 on the shared SFT training stage: the same plan the command line runs.

`stage_config(run, plan, model_source)` builds the StageConfig exactly as
`python -m tools.experiments.sft_training` does (tiny model on the CPU in cpu_smoke,
Qwen2.5-0.5B-Instruct on CUDA in real_gpu, then the plan's overrides for the mode);
`run_plan` runs the plan's variants through the experiment contract (`tools.experiments.contract.run`)
with the chapter's functions (`mechanism`: the learner's from the notebook, see
tools.chapters.mechanism) and returns their records; `mechanism_lines` says which functions ran;
`plan_lines` is what dry_run prints instead (no model is loaded); `gpu_command` is the command line
of the same stage.
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.chapters.context import ChapterContext
from tools.core.records import lineage_entry
from tools.errors import ConfigError
from tools.experiments.sft_training.config import StageConfig
from tools.experiments.contract import Mechanism, RecordSink
from tools.experiments.contract import Plan as ContractPlan
from tools.experiments.contract import run as run_experiment
from tools.experiments.sft_training.plans import REAL_MODEL, Plan, plan_for, stage_config_for


def stage_config(run: ChapterContext, plan: Plan | None = None, model_source: str = "local") -> StageConfig:
    """The stage settings of this run, as the command line builds them (ConfigError in dry_run: it trains nothing)."""
    if not run.writes_records:
        raise ConfigError("dry_run trains nothing: use cpu_smoke or real_gpu")
    return stage_config_for(run.chapter_id, run.run_mode, run.run_label, run.results_root, model_source=model_source)


def variant_stages(chapter_id: str, run_mode: str) -> list[str]:
    """The record stages the plan's variants write (`sft_<variant>`)."""
    mode = run_mode if run_mode != "dry_run" else "cpu_smoke"
    return [f"sft_{spec.name}" for spec in plan_for(chapter_id).variants(mode)]


def run_plan(run: ChapterContext, model_source: str = "local", mechanism: Mechanism | None = None,
             ) -> tuple[list[dict], list[dict]]:
    """Run the chapter's plan through `tools.experiments.contract.run` with the chapter's functions
    (`mechanism`; None: the package's copies); returns (`{variant, path, sha256, status}` per variant,
    the records read back), in variant order. ConfigError in dry_run (it trains nothing)."""
    if not run.writes_records:
        raise ConfigError("dry_run trains nothing: use cpu_smoke or real_gpu")
    plan = ContractPlan(experiment="sft_training", chapter=run.chapter_id, run_mode=run.run_mode, label=run.run_label,
                        results_dir=run.results_root, model_source=model_source,
                        mechanism=mechanism if mechanism is not None else Mechanism())
    references = run_experiment(plan, RecordSink.from_context(run))
    written = [{"variant": ref.stage.removeprefix("sft_"), "path": ref.path, "sha256": ref.sha256, "status": ref.status}
               for ref in references]
    records = [json.loads(Path(item["path"]).read_text(encoding="utf-8")) for item in written]
    return written, records


def mechanism_lines(records: list[dict]) -> list[str]:
    """Which of the chapter's functions the stage ran, read from the records: one line per source."""
    described = next((record.get("mechanism") for record in records if record.get("mechanism")), None)
    if not described:
        return ["the stage ran none of the chapter's functions"]
    grouped: dict[str, list[str]] = {}
    for name, item in described.items():
        grouped.setdefault(item["source"], []).append(name)
    words = {"learner": "yours", "reference": "the notebook's reference", "package": "the package's copy"}
    return [f"Step 5 ran {words.get(source, source)}: {', '.join(names)}" for source, names in grouped.items()]


def lineage(run: ChapterContext, written: list[dict]) -> list[dict]:
    """`{path, sha256}` of every variant record, relative to the results root."""
    return [lineage_entry(item["path"], run.results_root) for item in written]


def gpu_command(chapter_id: str, label: str = "<unique_label>", model_source: str = "random_init") -> str:
    return (f"python -m tools.experiments.sft_training --chapter {chapter_id} --run-mode real_gpu --label {label}"
            + ("" if model_source == "local" else f" --model-source {model_source}"))


def plan_lines(chapter_id: str, run_mode: str = "cpu_smoke") -> list[str]:
    """What the stage would run, read from the plan (nothing is loaded or trained)."""
    plan = plan_for(chapter_id)
    lines = []
    for mode in ("cpu_smoke", "real_gpu"):
        model_id = plan.stage.get(mode, {}).get("model_id")
        model = (f"{model_id or 'tiny'} offline model on the CPU" if mode == "cpu_smoke"
                 else f"{model_id or REAL_MODEL} on CUDA")
        lines.append(f"{mode}: {model}; stage overrides {plan.stage.get(mode, {})}")
        for spec in plan.variants(mode):
            lines.append(f"  {spec.name}: {spec.method} r{spec.rank} alpha {spec.alpha:g} on {','.join(spec.target_modules)}, "
                         f"batching {spec.batching}, max_length {spec.max_length or 'stage default'}")
    lines.append(f"GPU command line (same plan): {gpu_command(chapter_id)}")
    return lines
