"""What chapters 14 (LoRA target modules) and 31 (LoRA variants) share in their notebooks.

* Models to look at and to check against peft without loading weights: the tiny Qwen2
  architecture built in memory (random weights, a fraction of a second), and Qwen2.5-0.5B-Instruct's
  architecture on PyTorch's `meta` device (shapes only, no memory).
* Step 5: the chapter's SFT plan run through the shared stage (`tools.experiments.sft_training`),
  the records read back, and a verdict per variant computed from them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tools.chapters import own_runs, sft_stage
from tools.chapters.context import ChapterContext
from tools.experiments.sft_training.merging import BFLOAT16_ACCEPT_SPACINGS, BFLOAT16_TUNE_SPACINGS, bf16_spacing
from tools.experiments.sft_training.plans import Plan
from tools.models.architectures import (
    LAB_MODEL_IDS,
    QWEN25_05B_INSTRUCT,
    RANDOM_INIT_ARCHITECTURES,
    TINY_ARCHITECTURE,
    TINY_MODEL_ID,
    TINY_TOKENIZER_VOCAB_TARGET,
)

ORDER = {"accept": 0, "tune": 1, "reject": 2}
VERDICT = {"accept": "accept_mechanism", "tune": "tune", "reject": "reject"}


# ---- models to look at -------------------------------------------------------------------------

def architecture(model_id: str = TINY_MODEL_ID) -> dict:
    """The config numbers of the tiny model, a lab model or Qwen2.5-0.5B-Instruct (as plain dicts)."""
    if model_id == TINY_MODEL_ID:
        return {**TINY_ARCHITECTURE, "vocab_size": TINY_TOKENIZER_VOCAB_TARGET}
    if model_id in LAB_MODEL_IDS:  # built in code: its folder's config (built first when missing)
        from transformers import AutoConfig

        from tools.models.loading import resolve_model

        return AutoConfig.from_pretrained(resolve_model(model_id)).to_dict()
    return dict(RANDOM_INIT_ARCHITECTURES[model_id])


def _qwen2(model_id: str, device: str | None, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**architecture(model_id))
    torch.manual_seed(seed)
    if device == "meta":
        with torch.device("meta"):
            return Qwen2ForCausalLM(config)
    return Qwen2ForCausalLM(config).eval()


def tiny_model(seed: int = 0):
    """The tiny Qwen2 architecture with seeded random weights, built in memory (no files)."""
    return _qwen2(TINY_MODEL_ID, None, seed)


def meta_model(model_id: str = QWEN25_05B_INSTRUCT):
    """A Qwen2 architecture on the meta device: every shape, no weights, no memory."""
    return _qwen2(model_id, "meta", 0)


def with_adapter(model, target_modules, rank: int, method: str = "lora", alpha: float = 16.0, seed: int = 0):
    """A copy of `model` wrapped by peft with the variant's adapter (the model itself is untouched)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0,
                        use_rslora=method == "rslora", use_dora=method == "dora", bias="none")
    return get_peft_model(copy.deepcopy(model), config)


def peft_trainable(model, target_modules, rank: int, method: str = "lora") -> int:
    """peft's own count of trainable parameters for the adapter on a copy of `model`."""
    return int(with_adapter(model, target_modules, rank, method).get_nb_trainable_parameters()[0])


def linear_layers(model, layer: int = 0) -> list[tuple[str, int, int]]:
    """`(name, in_features, out_features)` of the linear layers of one decoder layer, in model order."""
    import torch

    block = model.model.layers[layer]
    return [(name.split(".")[-1], module.in_features, module.out_features)
            for name, module in block.named_modules() if isinstance(module, torch.nn.Linear)]


def peft_version() -> str:
    import peft

    return peft.__version__


# ---- Step 5: the shared SFT stage --------------------------------------------------------------

def stage_names(plan: Plan, run_mode: str) -> list[str]:
    """The record stages the plan writes (one per variant); in dry_run those of cpu_smoke."""
    return [f"sft_{spec.name}" for spec in plan.variants("cpu_smoke" if run_mode == "dry_run" else run_mode)]


def run_plan(run: ChapterContext, model_source: str = "local", mechanism=None) -> list[dict]:
    """Run the chapter's plan (every variant, one write-once record each) with the chapter's functions
    (`mechanism`: the learner's from the notebook; None: the package's copies); ConfigError in dry_run."""
    return sft_stage.run_plan(run, model_source, mechanism)[0]


def gpu_command(chapter_id: str, label: str = "<new_label>") -> str:
    return sft_stage.gpu_command(chapter_id, label)


def read_written(written: list[dict]) -> list[dict]:
    """The records a run has just written, in variant order."""
    return [json.loads(Path(item["path"]).read_text(encoding="utf-8")) for item in written]


def latest_records(chapter_id: str, stages: list[str], root: Path | None = None) -> list[dict]:
    """For each stage, the newest cpu_smoke record in the default results folder (stages without one skipped)."""
    found = (own_runs.latest_record(chapter_id, stage, root=root) for stage in stages)
    return [record for _, record in filter(None, found)]


# ---- verdicts, computed from records -----------------------------------------------------------

def variant_verdict(record: dict) -> dict:
    """The decision of one variant's record: `mechanism` (accept / reject, with reasons), the merge
    decision per dtype, and `decision`: reject when the mechanism fails, else the worst merge decision
    (accept shown as accept_mechanism)."""
    reasons = []
    if record.get("status") != "ok":
        reasons.append(f"status {record.get('status')}: {record.get('error')}")
    hashes = record.get("hashes") or {}
    if hashes and not hashes.get("base_unchanged"):
        reasons.append(f"base tensors changed: {hashes.get('changed_base_tensors')}")
    if hashes and not hashes.get("adapter_changed"):
        reasons.append("no adapter tensor changed")
    measured = record.get("chapter_measurements") or {}
    count = measured.get("count") or {}
    if count and not count.get("matches"):
        reasons.append(f"analytic count {count.get('analytic')} != peft {count.get('peft')}")
    frozen = measured.get("frozen")
    if frozen is not None and frozen.get("decision") != "frozen":
        reasons.append(f"frozen_base_report: {frozen.get('decision')} (changed base {frozen.get('changed_base')})")
    budget = measured.get("budget")
    if budget and spec_name(record).endswith("_budget") and not budget.get("fits"):
        reasons.append(f"the budget variant trains {count.get('analytic')} parameters, over the budget "
                       f"{budget.get('parameters')}")
    scaling = measured.get("scaling")
    if scaling and scaling.get("matches") is False:
        reasons.append(f"adapter_scaling says {scaling.get('scaling')}, peft's layers apply {scaling.get('applied_by_peft')}")
    dora = measured.get("dora_forward")
    if dora and dora.get("layer") and not dora.get("matches"):
        reasons.append(f"DoRA forward differs from peft by {dora.get('max_abs_diff')}")
    merge = {dtype: judged.get("decision") for dtype, judged in (measured.get("merge") or {}).items()}
    if merge.get("float32") not in (None, "accept"):
        reasons.append(f"float32 merge: {merge['float32']}")
    mechanism = "reject" if reasons or not measured else "accept"
    worst = max([mechanism, *[value for value in merge.values() if value in ORDER]], key=ORDER.__getitem__)
    return {"variant": (record.get("variant") or {}).get("name"), "mechanism": VERDICT[mechanism],
            "merge": merge, "decision": VERDICT["reject" if mechanism == "reject" else worst], "reasons": reasons}


def spec_name(record: dict) -> str:
    return (record.get("variant") or {}).get("name") or ""


def bf16_drift_in_spacings(judged: dict) -> float | None:
    """A bfloat16 merge judgement's largest difference in bfloat16 spacings at its logit scale."""
    if judged.get("drift_in_spacings") is not None:
        return judged["drift_in_spacings"]
    if judged.get("max_abs_diff") is None or judged.get("logit_scale") is None:
        return None
    return judged["max_abs_diff"] / bf16_spacing(judged["logit_scale"])


def _fmt(value, pattern: str = "{:.4f}") -> str:
    return "null" if value is None else pattern.format(value)


def summary_table(records: list[dict]) -> str:
    """One line per variant: adapter, counts, losses, step time, peak, merges, verdict."""
    header = (f"{'variant':<16}{'method':<8}{'r':>3}{'trainable':>11}{'peft':>9}{'eval before':>13}{'after':>9}"
              f"{'step ms':>9}{'peak GiB':>10}  {'merge fp32':<11}{'merge bf16':<11}{'bf16 spacings':>14}  decision")
    lines = [header]
    for record in records:
        variant, verdict = record.get("variant") or {}, variant_verdict(record)
        measured = record.get("measurements") or {}
        count = (record.get("chapter_measurements") or {}).get("count") or {}
        merge = (record.get("chapter_measurements") or {}).get("merge") or {}
        drift = bf16_drift_in_spacings(merge.get("bfloat16") or {})
        lines.append(
            f"{variant.get('name', '?'):<16}{variant.get('method', '?'):<8}{variant.get('rank', 0):>3}"
            f"{count.get('analytic', 'null')!s:>11}{count.get('peft', 'null')!s:>9}"
            f"{_fmt(measured.get('eval_loss_before')):>13}{_fmt(measured.get('eval_loss_after')):>9}"
            f"{_fmt(measured.get('step_time_ms_mean'), '{:.0f}'):>9}"
            f"{_fmt((record.get('comparable') or {}).get('peak_allocated_gib'), '{:.2f}'):>10}  "
            f"{verdict['merge'].get('float32', 'null')!s:<11}{verdict['merge'].get('bfloat16', 'null')!s:<11}"
            f"{_fmt(drift, '{:.1f}'):>14}  {verdict['decision']}")
        if verdict["reasons"]:
            lines.append(f"{'':<16}reasons: {'; '.join(verdict['reasons'])}")
    return "\n".join(lines)


def evidence_header(records: list[dict], written: bool, chapter_id: str) -> str:
    """Which run the table shows, labelled with its evidence level (or how to produce one)."""
    if not records:
        return ("your run: none yet (dry_run writes nothing and no cpu_smoke record of this chapter exists); "
                "set RUN_MODE = \"cpu_smoke\" and a new RUN_LABEL, or run `python -m tools.course run --chapter "
                f"{chapter_id} --run-mode cpu_smoke`")
    first = records[0]
    level = first.get("evidence_level") or first.get("run_mode")
    model = (first.get("config") or {}).get("model_id") or "tiny"
    note = (f"cpu_smoke: the {model!r} model built offline, on a CPU; not a GPU measurement"
            if level == "cpu_smoke" else f"{level}, weights {(first.get('model') or {}).get('weights')}")
    which = "your run" if written else "your latest cpu_smoke run (this dry_run wrote nothing)"
    return f"{which}: label {first.get('run_label')!r}, {note}"


def draw_adapter_results(records: list[dict]):
    """Step 5's variants side by side: trainable adapter parameters (with the budget, when a record
    has one), held-apart eval loss before and after, and the bf16 merge drift against its thresholds."""
    import matplotlib.pyplot as plt

    names = [(r.get("variant") or {}).get("name", "?") for r in records]
    measured = [r.get("chapter_measurements") or {} for r in records]
    counts = [((m.get("count") or {}).get("analytic") or 0) for m in measured]
    budget = next(((m.get("budget") or {}).get("parameters") for m in measured if m.get("budget")), None)
    before = [(r.get("measurements") or {}).get("eval_loss_before") or 0 for r in records]
    after = [(r.get("measurements") or {}).get("eval_loss_after") or 0 for r in records]
    drift = [max(bf16_drift_in_spacings((m.get("merge") or {}).get("bfloat16") or {}) or 0.0, 1e-3) for m in measured]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    axes[0].bar(names, counts, color="#6baed6")
    if budget:
        axes[0].axhline(budget, color="red", linestyle="--", label="budget")
        axes[0].legend(fontsize=8)
    axes[0].set_title("trainable adapter parameters")
    positions = range(len(names))
    axes[1].bar([p - 0.2 for p in positions], before, width=0.4, label="before")
    axes[1].bar([p + 0.2 for p in positions], after, width=0.4, label="after")
    axes[1].set_xticks(list(positions), names)
    axes[1].set_title("held-apart eval loss")
    axes[1].legend(loc="lower left", fontsize=8)
    axes[2].bar(names, drift, color="#fd8d3c")
    axes[2].axhline(BFLOAT16_ACCEPT_SPACINGS, color="green", linestyle="--", label=f"accept ({BFLOAT16_ACCEPT_SPACINGS})")
    axes[2].axhline(BFLOAT16_TUNE_SPACINGS, color="red", linestyle="--", label=f"tune ({BFLOAT16_TUNE_SPACINGS})")
    axes[2].set_yscale("log")
    axes[2].set_title("bf16 merge: max |diff| in bf16 spacings at the logit scale")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    return fig
