"""Chapter 30 (long-context fine-tuning): three row lengths over the same samples, padded vs packed.

cpu_smoke starts from the `lab` model (a tiny Qwen2 pretrained in code on two-digit sums) and
reaches rows of 2,048 tokens; real_gpu reaches 8,192. Every step's wall time is recorded; the
chapter drops the first WARMUP_STEPS steps and reports the median and spread of the rest.

Every variant trains the same adapter on the same examples in the same order; only the row length
and the batching differ. Padded rows hold one example each, right-padded to the row length; packed
rows hold as many whole examples as fit (first-fit), with `position_ids` restarting per example and
the block-diagonal causal mask (`packing.install_block_mask`, installed by `prepare`). Because the
boundary rule keeps packed examples apart, a packed variant's losses equal its padded twin's; the
`measure` hook adds an explicit proof (packed loss = sum of per-example losses, and the same batch
without the block mask) on the trained model.
"""

from __future__ import annotations

from tools.experiments.sft_training import packing
from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.data import batches
from tools.experiments.sft_training.packing import install_block_mask, isolation_check

MECHANISM = ("pack_examples", "block_causal_mask", "waste_report")
"""The chapter's functions the stage runs: `pack_examples` lays out every packed micro-batch (and the
isolation proof's), `block_causal_mask` builds the packed rows' attention mask, and the chapter
decides with `waste_report` (tools.chapters.sft_long_context.decide)."""


def defaults() -> dict:
    """The package's copies of the chapter's functions (what a run without a notebook uses)."""
    return {"pack_examples": packing.pack_examples, "block_causal_mask": packing.block_causal_mask,
            "waste_report": packing.waste_report}

LENGTHS = {"cpu_smoke": (128, 512, 2048), "real_gpu": (512, 2048, 8192)}
"""Row lengths per run mode; the arithmetic chats are about 50 tokens long (tiny and Qwen tokenizers),
so a packed row of T tokens could hold about T / 50 of them, and holds at most a micro-batch's."""

WARMUP_STEPS = 1
"""Steps whose wall time is left out of the throughput (first calls allocate and warm caches)."""

STAGE = {
    "cpu_smoke": {"model_id": "lab", "steps": 4, "batch_size": 4},
    "real_gpu": {"steps": 9, "batch_size": 4, "grad_accumulation": 2, "learning_rate": 5e-4},
}
"""Rows are built per micro-batch (4 examples), so at 512 tokens and beyond a packed micro-batch is
one row and a padded one four. cpu_smoke: 4 steps, 3 timed. real_gpu: 8 examples per step, 8
timed steps. Estimate, not measured on a GPU: float32 logits over Qwen2.5's 151,936-token
vocabulary take 4 x 8,192 x 151,936 x 4 B = 19.9 GB for a padded 8,192-token micro-batch (5 GB
for a packed one) before their gradient, beyond the PT-SFT-CUDA profile's 8 GiB: on such a card
those variants record `oom` and the decision says `tune`; a larger card runs them."""

def variants(run_mode: str) -> list[AdapterSpec]:
    """Padded then packed at each length, shortest length first; then the negative control: packed rows
    at the shortest length without the block mask (the same rows, position restarts and boundary labels)."""
    shortest = LENGTHS[run_mode][0]
    return [AdapterSpec(f"{batching}_{length}", max_length=length, batching=batching)
            for length in LENGTHS[run_mode] for batching in ("padded", "packed")] + [
        AdapterSpec(f"packed_unisolated_{shortest}", max_length=shortest, batching="packed_unisolated")]


def prepare(model, spec: AdapterSpec, *, functions=None):
    """Packed variants get the block-diagonal causal mask (built by the chapter's `block_causal_mask`)
    before the adapter is attached; the unisolated control does not."""
    if spec.batching == "packed":
        install_block_mask(model, (functions or defaults())["block_causal_mask"])
    return model


def collate(examples, pad_id: int, spec: AdapterSpec, config, *, functions=None) -> dict:
    """Rows of the variant's length: padded, or packed by the chapter's `pack_examples`."""
    return packing.collate(examples, pad_id, spec, config, pack=(functions or defaults())["pack_examples"])


def measure(model, spec: AdapterSpec, split, config, tokenizer, *, functions=None) -> dict:
    """The first training step's examples: the isolation proof (packed variants), and the row layout."""
    first_step = [example for micro in batches(split.train, config.batch_size, 1, config.grad_accumulation)[0]
                  for example in micro]
    row_length = spec.max_length or config.max_length
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    result = {"batching": spec.batching, "row_length": row_length, "warmup_steps": WARMUP_STEPS,
              "example_lengths": [len(example.input_ids) for example in first_step]}
    if spec.batching == "packed":
        result["isolation"] = isolation_check(model, first_step, row_length, pad_id, config.device,
                                              pack=(functions or defaults())["pack_examples"])
    else:
        result["isolation"] = None  # padded: one example per row; the control: no mask to prove
    return result
