"""Chapter 31 (LoRA variants): LoRA, rsLoRA and DoRA at a fixed rank and at a fixed parameter budget.

At rank 8 on attention q/v: LoRA (scaling alpha/r), rsLoRA (alpha/sqrt(r)) and DoRA (LoRA plus a
trained magnitude per output). Then the fixed budget: the parameters LoRA trains at rank 8; DoRA's
magnitude vectors do not fit beside a rank-8 update, so its candidate takes the largest rank that
does (computed from the model's architecture, never typed). `measure` records each variant's
scaling, the analytic count against peft's and the budget, DoRA's forward pass against peft's layer,
and merge equivalence in float32 and bfloat16.
"""

from __future__ import annotations

from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.counting import largest_rank_within_budget, lora_parameter_count, model_shapes
from tools.experiments.sft_training.lora_evidence import architecture_for, count_check, merge_checks
from tools.experiments.sft_training.variants import adapter_scaling, check_against_peft

RANK, ALPHA = 8, 16.0
TARGETS = ("q_proj", "v_proj")
STAGE = {"real_gpu": {"steps": 30, "batch_size": 8, "learning_rate": 2e-4}}


def budget_for(architecture) -> int:
    """The fixed budget: what LoRA trains at RANK on TARGETS."""
    return lora_parameter_count(architecture, TARGETS, RANK, "lora")["total"]


def budget_rank(architecture, method: str) -> int:
    return largest_rank_within_budget(budget_for(architecture), model_shapes(architecture, TARGETS), method)["rank"]


def variants(run_mode: str) -> list[AdapterSpec]:
    """Three variants at rank 8, then DoRA at the largest rank within LoRA's rank-8 budget (computed
    from the architecture the run mode trains; `measure` checks the budget on the model actually loaded)."""
    dora_rank = budget_rank(architecture_for(run_mode), "dora")
    fixed_rank = [AdapterSpec(f"{method}_r{RANK}", method=method, rank=RANK, alpha=ALPHA, target_modules=TARGETS)
                  for method in ("lora", "rslora", "dora")]
    return fixed_rank + [AdapterSpec(f"dora_r{dora_rank}_budget", method="dora", rank=dora_rank, alpha=ALPHA,
                                     target_modules=TARGETS)]


def measure(model, spec, split, config, tokenizer) -> dict:
    """Scaling, counts against peft's and the budget, DoRA against peft's layer, merge equivalence."""
    count = count_check(model, spec)
    budget = budget_for(model.get_base_model().config)
    return {"scaling": adapter_scaling(spec.method, spec.alpha, spec.rank),
            "count": count, "budget": {"parameters": budget, "fits": count["analytic"] <= budget},
            "dora_forward": check_against_peft(model) if spec.method == "dora" else None,
            "merge": merge_checks(model, split, config, tokenizer)}
