"""Chapter 14 (LoRA target modules): three target sets at the same rank on the same data.

Each variant trains a rank-8 LoRA on attention q/v, on every attention projection, or on every
linear layer. After training, `measure` records what the chapter teaches: the analytic count of
trainable adapter parameters beside peft's own count, and merge equivalence (`merge_and_unload`
vs the unmerged adapter) in float32 and bfloat16. The hashes that prove the base frozen are in
every record already (`hashes`, written by the runner).
"""

from __future__ import annotations

from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec
from tools.experiments.sft_training.lora_evidence import count_check, merge_checks

RANK, ALPHA = 8, 16.0
TARGET_SETS = {
    "attention_qv": ("q_proj", "v_proj"),
    "attention_all": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "all_linear": QWEN2_LINEAR_MODULES,
}
STAGE = {"real_gpu": {"steps": 30, "batch_size": 8, "learning_rate": 2e-4}}


def variants(run_mode: str) -> list[AdapterSpec]:
    """The same rank, alpha and data for every target set; only `target_modules` differs."""
    return [AdapterSpec(name, rank=RANK, alpha=ALPHA, target_modules=targets) for name, targets in TARGET_SETS.items()]


def measure(model, spec, split, config, tokenizer) -> dict:
    """Count check and merge equivalence of the trained adapter (the trained model is not changed)."""
    return {"count": count_check(model, spec), "merge": merge_checks(model, split, config, tokenizer)}
