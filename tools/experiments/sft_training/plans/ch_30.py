"""Chapter 30 (long-context fine-tuning): three row lengths over the same samples, padded vs packed.

Every variant trains the same adapter on the same examples in the same order; only the row length
and the batching differ. Padded rows hold one example each, right-padded to the row length; packed
rows hold as many whole examples as fit (first-fit), with `position_ids` restarting per example and
the block-diagonal causal mask (`packing.install_block_mask`, installed by `prepare`). Because the
boundary rule keeps packed examples apart, a packed variant's losses equal its padded twin's; the
`measure` hook adds an explicit proof (packed loss = sum of per-example losses, and the same batch
without the block mask) on the trained model.
"""

from __future__ import annotations

from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.data import batches
from tools.experiments.sft_training.packing import collate, install_block_mask, isolation_check

LENGTHS = {"cpu_smoke": (64, 128, 256), "real_gpu": (128, 256, 512)}
"""Row lengths per run mode; the arithmetic chats are about 50 tokens long (tiny and Qwen tokenizers)."""

STAGE = {
    "cpu_smoke": {"steps": 2, "batch_size": 4},
    "real_gpu": {"steps": 6, "batch_size": 2, "grad_accumulation": 4, "learning_rate": 5e-4},
}
"""Rows are built per micro-batch. real_gpu: 8 examples per step in micro-batches of 2, so that the
widest one (padded, 2 x 512 positions, float32 logits over a 151,936-token vocabulary) stays within
the PT-SFT-CUDA profile's 8 GiB (estimate: about 2 GiB weights, 2 GiB activations, 2 GiB logits
and their gradient; not yet measured on a GPU)."""

__all__ = ["collate", "prepare", "measure", "variants", "STAGE", "LENGTHS"]


def variants(run_mode: str) -> list[AdapterSpec]:
    """Padded then packed at each length, shortest length first."""
    return [AdapterSpec(f"{batching}_{length}", max_length=length, batching=batching)
            for length in LENGTHS[run_mode] for batching in ("padded", "packed")]


def prepare(model, spec: AdapterSpec):
    """Packed variants get the block-diagonal causal mask before the adapter is attached."""
    if spec.batching == "packed":
        install_block_mask(model)
    return model


def measure(model, spec: AdapterSpec, split, config, tokenizer) -> dict:
    """The first training step's examples: the isolation proof (packed variants), and the row layout."""
    first_step = [example for micro in batches(split.train, config.batch_size, 1, config.grad_accumulation)[0]
                  for example in micro]
    row_length = spec.max_length or config.max_length
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    result = {"batching": spec.batching, "row_length": row_length,
              "example_lengths": [len(example.input_ids) for example in first_step]}
    if spec.batching == "packed":
        result["isolation"] = isolation_check(model, first_step, row_length, pad_id, config.device)
    else:
        result["isolation"] = None  # one example per row: nothing to keep apart
    return result
