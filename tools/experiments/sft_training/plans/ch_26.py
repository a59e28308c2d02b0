"""Chapter 26 (QLoRA): the same LoRA adapter on a frozen NF4 base and on a bf16 base.

Both variants train the same adapter (rank 8, alpha 16, every linear layer of every decoder block)
with bfloat16 compute; they differ only in how the base's linear weights are stored. `prepare`
casts the base to bfloat16 and, for `nf4_base`, swaps its decoder linear layers for bitsandbytes'
NF4 `Linear4bit` (double quantisation, blocksize 64); `measure` records which tensors are 4-bit and
frozen, which train, and the base's bytes (see quantisation.py).
"""

from __future__ import annotations

from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec
from tools.experiments.sft_training.quantisation import measure, prepare  # noqa: F401  (the plan's hooks)

ADAPTER = {"method": "lora", "rank": 8, "alpha": 16.0, "target_modules": QWEN2_LINEAR_MODULES,
           "compute_dtype": "bfloat16"}
"""The adapter both variants train: QLoRA puts adapters on every linear layer."""

STAGE = {"cpu_smoke": {"steps": 4}, "real_gpu": {"steps": 12}}


def variants(run_mode: str) -> list[AdapterSpec]:
    """The bf16 base first (the reference), then the NF4 base; the same in every run mode."""
    return [AdapterSpec("bf16_base", **ADAPTER), AdapterSpec("nf4_base", base_quantisation="nf4", **ADAPTER)]
