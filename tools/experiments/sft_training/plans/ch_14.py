"""Chapter 14 (LoRA target modules): three target sets at the same rank on the same data.

Each variant trains a rank-8 LoRA on attention q/v, on every attention projection, or on every
linear layer. After training, `measure` records what the chapter teaches, with the chapter's own
functions (MECHANISM: the learner's from the notebook, else the package's copies): the analytic
count of trainable adapter parameters (`lora_trainable_count`) beside peft's own count, the frozen
base judged from tensor snapshots taken before the first step and after the last
(`frozen_base_report`), and merge equivalence (`merge_and_unload` vs the unmerged adapter) in
float32 and bfloat16 judged by `judge_merge`. The runner's own hashes stay in every record
(`hashes`) as independent evidence.
"""

from __future__ import annotations

from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec
from tools.experiments.sft_training.lab_curves import (
    CurvePlan,
    curve_data,
    measurement_context,
    one_thread,
    train_curve,
)
from tools.experiments.sft_training.lora_evidence import count_check, merge_checks

MECHANISM = ("lora_trainable_count", "frozen_base_report", "judge_merge")
_snapshots: dict[str, dict] = {}
"""Variant name -> the adapter-wrapped model's tensors before its first step (kept by `attached`)."""


def defaults() -> dict:
    """The package's copies of the chapter's functions (what a run without a notebook uses)."""
    from tools.experiments.sft_training.adapters import frozen_base_report
    from tools.experiments.sft_training.counting import lora_trainable_count
    from tools.experiments.sft_training.merging import judge_merge

    return {"lora_trainable_count": lora_trainable_count, "frozen_base_report": frozen_base_report,
            "judge_merge": judge_merge}

RANK, ALPHA = 8, 16.0
TARGET_SETS = {
    "attention_qv": ("q_proj", "v_proj"),
    "attention_all": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "all_linear": QWEN2_LINEAR_MODULES,
}
STAGE = {"cpu_smoke": {"model_id": "lab"}, "real_gpu": {"steps": 30, "batch_size": 8, "learning_rate": 2e-4}}


def variants(run_mode: str) -> list[AdapterSpec]:
    """The same rank, alpha and data for every target set; only `target_modules` differs."""
    return [AdapterSpec(name, rank=RANK, alpha=ALPHA, target_modules=targets) for name, targets in TARGET_SETS.items()]


def attached(model, spec) -> None:
    """Keep a copy of every tensor of the adapter-wrapped model before its first step."""
    from tools.experiments.sft_training.adapters import tensor_snapshot

    _snapshots[spec.name] = tensor_snapshot(model)


def measure(model, spec, split, config, tokenizer, *, functions=None) -> dict:
    """Count check, frozen-base report and merge equivalence of the trained adapter, each with the
    chapter's function (the trained model is not changed)."""
    from tools.experiments.sft_training.adapters import tensor_snapshot

    functions = functions or defaults()
    before = _snapshots.pop(spec.name)
    return {"count": count_check(model, spec, functions["lora_trainable_count"]),
            "frozen": functions["frozen_base_report"](before, tensor_snapshot(model)),
            "merge": merge_checks(model, split, config, tokenizer, functions["judge_merge"])}


# ---- the effect on the lab model (Step 5's curves; tests/chapters/test_lab_effects.py) --------------------

EFFECT = CurvePlan(steps=30, batch_size=16, learning_rate=7e-4, eval_every=5, eval_problems=128, heldout_problems=256)
"""Equal rank, alpha, steps, data order and learning rate for every target set; only the targets differ."""
EFFECT_SEEDS = (0, 1, 2)


def peft_all_linear(model) -> dict:
    """Which modules peft's `target_modules="all-linear"` wraps on `model` (a copy is wrapped)."""
    import copy

    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear"))
    names = sorted({name.rsplit(".", 1)[-1] for name, module in wrapped.named_modules() if hasattr(module, "lora_A")
                    and name.rsplit(".", 1)[-1] != "lora_A"})
    return {"modules": names, "equals_qwen2_linear": set(names) == set(QWEN2_LINEAR_MODULES),
            "lm_head_targeted": "lm_head" in names}


def effect(seeds=EFFECT_SEEDS, plan: CurvePlan = EFFECT, model_id: str = "lab") -> dict:
    """Each target set trained from the lab model on the task it does not know, one curve per seed
    (all in this process); with peft's own trainable count and its `all-linear` selection."""
    import copy

    from tools.experiments.sft_training.adapters import attach
    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    folder = resolve_model(model_id)
    with one_thread():
        base, tokenizer = load_causal_lm(folder, dtype="float32")
        data = curve_data(tokenizer, plan)
        variants = {}
        for spec in variants_for_effect():
            curves = []
            for seed in seeds:
                model = attach(copy.deepcopy(base), spec, seed)
                curves.append(train_curve(model, data, plan, seed))
            variants[spec.name] = {"target_modules": list(spec.target_modules),
                                   "trainable_parameters": curves[0]["trainable_parameters"], "curves": curves}
        selection = peft_all_linear(base)
    return {"plan": plan.public(), "model": model_identity(folder), **measurement_context(), "data": data.manifest,
            "seeds": list(seeds),
            "variants": variants, "peft_all_linear": selection}


def variants_for_effect() -> list[AdapterSpec]:
    return [AdapterSpec(name, rank=RANK, alpha=ALPHA, target_modules=targets) for name, targets in TARGET_SETS.items()]
