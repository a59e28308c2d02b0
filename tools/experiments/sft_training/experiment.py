"""The SFT training stage's entry in the experiment registry: one chapter plan per `plans/ch_<id>.py`,
one GPU-batch step per plan (see tools.experiments.registry)."""

from __future__ import annotations

from pathlib import Path

from tools.experiments.registry import DeviceStep, Experiment

PLANS_DIR = Path(__file__).parent / "plans"


def plan_chapters() -> tuple[str, ...]:
    """The chapter ids with a plan module, read from the file names (`ch_pt_kto.py` -> `PT-KTO`)."""
    return tuple(sorted(path.stem[3:].upper().replace("_", "-") for path in PLANS_DIR.glob("ch_*.py")))


MECHANISM = ("lora_trainable_count", "frozen_base_report", "judge_merge",  # 14
             "accumulate_gradients", "effective_update_check", "isolated_evaluation",  # 15
             "nf4_quantise", "nf4_reconstruct", "nf4_memory_account", "trainable_report",  # 26
             "pack_examples", "block_causal_mask", "waste_report",  # 30
             "adapter_scaling", "dora_forward", "largest_rank_within_budget")  # 31
"""Every chapter function some plan's stage runs (each plan's MECHANISM; plans.mechanism_names() reads
them, a test keeps the two equal); a plan refuses a function its own chapter does not take."""

EXPERIMENTS = (
    Experiment(
        name="sft_training",
        title="The SFT training stage the SFT and LoRA chapters share: a chapter's variants, one record each",
        chapters=plan_chapters(),
        runner="tools.experiments.sft_training.runner:run",
        variants="tools.experiments.sft_training.plans:variant_names",
        run_modes=("cpu_smoke", "real_gpu"),
        device_steps=tuple(DeviceStep(f"sft_{chapter}", "sft_training", order=40 + index, chapter=chapter)
                           for index, chapter in enumerate(plan_chapters())),
        mechanism=MECHANISM,
    ),
)
