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

from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.counting import largest_rank_within_budget, lora_parameter_count, model_shapes
from tools.experiments.sft_training.first_update import first_update, fresh_base
from tools.experiments.sft_training.lora_evidence import architecture_for, count_check, merge_checks
from tools.experiments.sft_training.variants import adapter_scaling, check_against_peft
from tools.models.architectures import LAB_MODEL_IDS
from tools.models.lab import recipe_for

RANK, ALPHA = 8, 16.0
RANKS = (1, 4, 16, 64)
METHODS = ("lora", "rslora", "dora")
TARGETS = ("q_proj", "v_proj")
STAGE = {"cpu_smoke": {"model_id": "lab", "steps": 16, "batch_size": 4},
         "real_gpu": {"steps": 40, "batch_size": 8, "learning_rate": 2e-4}}
"""cpu_smoke: the lab model, 16 steps of 4 examples (two passes over the 32 training chats; the last
8 steps see every example once: the chapter's late loss)."""


def budget_for(architecture) -> int:
    """The fixed budget: what LoRA trains at RANK on TARGETS."""
    return lora_parameter_count(architecture, TARGETS, RANK, "lora")["total"]


def budget_rank(architecture, method: str) -> int:
    return largest_rank_within_budget(budget_for(architecture), model_shapes(architecture, TARGETS), method)["rank"]


def planned_architecture(run_mode: str) -> dict:
    """The architecture the run mode trains: the plan's model (the lab model in cpu_smoke), else the stage default."""
    model_id = STAGE.get(run_mode, {}).get("model_id")
    return recipe_for(model_id).architecture() if model_id in LAB_MODEL_IDS else architecture_for(run_mode)


def variants(run_mode: str) -> list[AdapterSpec]:
    """The sweep (rank-major, then LoRA, rsLoRA, DoRA), then DoRA at the largest rank within LoRA's
    rank-8 budget (computed from the architecture the run mode trains; `measure` checks the budget on
    the model actually loaded)."""
    dora_rank = budget_rank(planned_architecture(run_mode), "dora")
    sweep = [AdapterSpec(f"{method}_r{rank}", method=method, rank=rank, alpha=ALPHA, target_modules=TARGETS)
             for rank in RANKS for method in METHODS]
    return sweep + [AdapterSpec(f"dora_r{dora_rank}_budget", method="dora", rank=dora_rank, alpha=ALPHA,
                                target_modules=TARGETS)]


def measure(model, spec, split, config, tokenizer) -> dict:
    """First update, scaling, counts against peft's and the budget, DoRA against peft's layer, merge equivalence."""
    count = count_check(model, spec)
    budget = budget_for(model.get_base_model().config)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return {"scaling": adapter_scaling(spec.method, spec.alpha, spec.rank),
            "first_update": first_update(fresh_base(model), config, spec, split, pad_id),
            "count": count, "budget": {"parameters": budget, "fits": count["analytic"] <= budget},
            "dora_forward": check_against_peft(model) if spec.method == "dora" else None,
            "merge": merge_checks(model, split, config, tokenizer)}
