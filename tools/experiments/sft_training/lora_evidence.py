"""What chapters 14 and 31 add to an SFT variant's record (their plans' `measure` hooks call these).

* `count_check`: the analytic count of trainable adapter parameters (counting.py, from the base
  model's config) beside peft's own `get_nb_trainable_parameters`; they must be equal.
* `merge_checks`: merge equivalence (merging.py) in float32 and bfloat16 on the first evaluation
  batch, on copies of the trained model.
"""

from __future__ import annotations

import torch

from tools.errors import ConfigError
from tools.experiments.sft_training.counting import lora_parameter_count
from tools.experiments.sft_training.data import pad_batch
from tools.experiments.sft_training.merging import merge_equivalence
from tools.models.architectures import QWEN25_05B_INSTRUCT, RANDOM_INIT_ARCHITECTURES, TINY_ARCHITECTURE

MERGE_DTYPES = ("float32", "bfloat16")


def architecture_for(run_mode: str) -> dict:
    """The architecture a run mode trains by default (tiny in cpu_smoke, Qwen2.5-0.5B in real_gpu)."""
    if run_mode == "cpu_smoke":
        return dict(TINY_ARCHITECTURE)
    if run_mode == "real_gpu":
        return dict(RANDOM_INIT_ARCHITECTURES[QWEN25_05B_INSTRUCT])
    raise ConfigError(f"the SFT stage trains in cpu_smoke or real_gpu, not {run_mode!r}")


def count_check(peft_model, spec, trainable_count=None) -> dict:
    """`{"analytic", "peft", "matches", "per_layer"}` for the variant's adapter on this model. The
    analytic count is `trainable_count(config dict, target_modules, rank)` (chapter 14's
    lora_trainable_count: a LoRA adapter) when given, else the package's count of `spec.method`."""
    config = peft_model.get_base_model().config
    if trainable_count is not None:
        counted = trainable_count(config.to_dict(), list(spec.target_modules), spec.rank)
    else:
        counted = lora_parameter_count(config, spec.target_modules, spec.rank, spec.method)
    trainable, _ = peft_model.get_nb_trainable_parameters()
    return {"analytic": counted["total"], "peft": int(trainable), "matches": counted["total"] == int(trainable),
            "per_layer": counted["per_layer"], "layers": config.num_hidden_layers}


def merge_checks(peft_model, split, config, tokenizer, judge=None) -> dict:
    """Merge equivalence per dtype on the first evaluation batch (real positions only), judged by `judge`
    (chapter 14's judge_merge; None: merging.judge_merge)."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = pad_batch(split.evaluation[:config.batch_size], pad_id)
    batch = {key: value.to(torch.device(config.device)) for key, value in batch.items()}
    return {dtype: merge_equivalence(peft_model, batch, dtype, judge) for dtype in MERGE_DTYPES}
