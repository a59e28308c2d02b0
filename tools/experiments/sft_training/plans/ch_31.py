"""Chapter 31 (LoRA variants): a rank sweep of LoRA, rsLoRA and DoRA, and DoRA within LoRA's budget.

Rank sweep: at each rank of RANKS, LoRA (scaling alpha / r), rsLoRA (alpha / sqrt(r)) and DoRA (LoRA's
alpha / r plus a trained magnitude per output), all with one alpha, on attention q/v, at one
learning rate with the stage's AdamW. One alpha means matched effective scaling at rank 1 (both
alpha / 1): rsLoRA is not a larger step there, the two runs are the same run, and what differs at
higher ranks is only how the scaling follows the rank. Then the fixed budget: the parameters LoRA
trains at rank 8; DoRA's magnitude vectors do not fit beside a rank-8 update, so its candidate takes
the largest rank that does (computed from the model's architecture, never typed). `measure` records
each variant's first update (tools.experiments.sft_training.first_update: the stage's first step
repeated on a fresh copy), its scaling, the analytic count against peft's and the budget, DoRA's
forward pass against peft's layer, and merge equivalence in float32 and bfloat16.
"""

from __future__ import annotations

from tools.experiments.sft_training import counting, variants as family
from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.counting import lora_parameter_count, model_shapes
from tools.experiments.sft_training.first_update import first_update, fresh_base
from tools.experiments.sft_training.lab_curves import (
    CurvePlan,
    curve_data,
    measurement_context,
    one_thread,
    train_curve,
)
from tools.experiments.sft_training.lora_evidence import architecture_for, count_check, merge_checks
from tools.models.architectures import LAB_MODEL_IDS
from tools.models.lab import recipe_for

MECHANISM = ("adapter_scaling", "dora_forward", "largest_rank_within_budget")
"""The chapter's functions the stage runs: `largest_rank_within_budget` chooses the budget variant's
rank, `adapter_scaling` is recorded beside the scaling peft's layers really apply, and `dora_forward`
is compared with peft's DoRA layer on the trained weights."""


def defaults() -> dict:
    """The package's copies of the chapter's functions (what a run without a notebook uses)."""
    return {"adapter_scaling": family.adapter_scaling, "dora_forward": family.dora_forward,
            "largest_rank_within_budget": counting.largest_rank_within_budget}

RANK, ALPHA = 8, 16.0
RANKS = (1, 4, 16, 64)
METHODS = ("lora", "rslora", "dora")
TARGETS = ("q_proj", "v_proj")
STAGE = {"cpu_smoke": {"model_id": "lab", "steps": 32, "batch_size": 4, "learning_rate": 1e-3},
         "real_gpu": {"steps": 40, "batch_size": 8, "learning_rate": 2e-4}}
"""cpu_smoke: the lab model, 32 steps of 4 examples at 1e-3 (four passes over the 32 training chats;
the last 8 steps see every example once: the chapter's late loss).

The learning rate decides whether the rank-64 comparison shows rsLoRA learning faster or overshooting
(late training loss, LoRA r64 minus rsLoRA r64, seeds 0-11 of tests/chapters/test_lora_variants.py,
CPU numerics pinned to AVX2): at the stage's default 2e-3, rsLoRA's first update (sqrt(64) = 8 times
LoRA's) overshoots on some seeds: 16 steps gave -0.22 (seed 1) and -0.40 (seed 4), 32 steps -0.64
(seed 6) and -0.55 (seed 7). At 1e-3 every seed shows rsLoRA ahead: 16 steps +0.11 to +0.63, 32
steps +0.35 to +0.98 (mean 0.61), the setting kept here; at 5e-4 and 7e-4 (16 steps) +0.13 to +0.60."""


def budget_for(architecture) -> int:
    """The fixed budget: what LoRA trains at RANK on TARGETS."""
    return lora_parameter_count(architecture, TARGETS, RANK, "lora")["total"]


def budget_rank(architecture, method: str, largest_rank_within_budget=counting.largest_rank_within_budget) -> int:
    return largest_rank_within_budget(budget_for(architecture), model_shapes(architecture, TARGETS), method)["rank"]


def planned_architecture(run_mode: str) -> dict:
    """The architecture the run mode trains: the plan's model (the lab model in cpu_smoke), else the stage default."""
    model_id = STAGE.get(run_mode, {}).get("model_id")
    return recipe_for(model_id).architecture() if model_id in LAB_MODEL_IDS else architecture_for(run_mode)


def variants(run_mode: str, *, functions=None) -> list[AdapterSpec]:
    """The sweep (rank-major, then LoRA, rsLoRA, DoRA), then DoRA at the largest rank within LoRA's
    rank-8 budget (the chapter's `largest_rank_within_budget` on the architecture the run mode trains;
    `measure` checks the budget on the model actually loaded)."""
    dora_rank = budget_rank(planned_architecture(run_mode), "dora",
                            (functions or defaults())["largest_rank_within_budget"])
    sweep = [AdapterSpec(f"{method}_r{rank}", method=method, rank=rank, alpha=ALPHA, target_modules=TARGETS)
             for rank in RANKS for method in METHODS]
    return sweep + [AdapterSpec("dora_budget", method="dora", rank=dora_rank, alpha=ALPHA,
                                target_modules=TARGETS)]


def measure(model, spec, split, config, tokenizer, *, functions=None) -> dict:
    """First update, scaling (the chapter's against what peft's layers apply), counts against peft's and
    the budget, the chapter's DoRA forward against peft's layer, merge equivalence."""
    functions = functions or defaults()
    count = count_check(model, spec)
    budget = budget_for(model.get_base_model().config)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    scaling = functions["adapter_scaling"](spec.method, spec.alpha, spec.rank)
    applied = family.applied_scaling(model)
    return {"scaling": {**scaling, "applied_by_peft": applied,
                        "matches": applied is not None and abs(scaling["scaling"] - applied) <= 1e-9 * max(1.0, applied)},
            "first_update": first_update(fresh_base(model), config, spec, split, pad_id),
            "count": count, "budget": {"parameters": budget, "fits": count["analytic"] <= budget},
            "dora_forward": (family.check_against_peft(model, dora=functions["dora_forward"])
                             if spec.method == "dora" else None),
            "merge": merge_checks(model, split, config, tokenizer)}


# ---- the effect on the lab model (Step 5's curves; tests/chapters/test_lora_variants.py) ------------------

EFFECT = CurvePlan(steps=30, batch_size=16, learning_rate=1e-3, eval_every=5, eval_problems=128, heldout_problems=256)
"""Every variant: the same steps, rows per step, data order, learning rate and seed; only the method
(and with it the scaling) differs."""
EFFECT_SEEDS = (0, 1, 2)
EFFECT_RANK = 64
EFFECT_VARIANTS = ("lora", "rslora", "dora")


def effect(seeds=EFFECT_SEEDS, plan: CurvePlan = EFFECT, model_id: str = "lab", rank: int = EFFECT_RANK) -> dict:
    """LoRA, rsLoRA and DoRA at one high rank on q/v, each trained from the lab model on the task it does
    not know, one curve per seed (all in this process), at a matched budget."""
    import copy

    from tools.experiments.sft_training.adapters import attach
    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    folder = resolve_model(model_id)
    with one_thread():
        base, tokenizer = load_causal_lm(folder, dtype="float32")
        data = curve_data(tokenizer, plan)
        variants = {}
        for method in EFFECT_VARIANTS:
            spec = AdapterSpec(f"{method}_r{rank}", method=method, rank=rank, alpha=ALPHA, target_modules=TARGETS)
            curves = [train_curve(attach(copy.deepcopy(base), spec, seed), data, plan, seed) for seed in seeds]
            variants[spec.name] = {"method": method, "rank": rank, "scaling": spec.scaling,
                                   "trainable_parameters": curves[0]["trainable_parameters"], "curves": curves}
    return {"plan": plan.public(), "model": model_identity(folder), **measurement_context(), "data": data.manifest,
            "seeds": list(seeds),
            "variants": variants}
