"""Fixed-length rows for chapter 30: right padding to the row length, or packing with boundary isolation.

Both strategies turn one micro-batch of SFT examples into rows of exactly `row_length` tokens:

- padded: one example per row, right-padded to the row length (padding never supervised);
- packed: examples placed first-fit, in order, into as few rows as possible; `position_ids`
  restart at 0 at every example (and at the padding tail of a row), and the first label of every
  example is -100, so no position is ever trained to predict the first token of the next example.

A third layout needs no padding and no mask at all: the padding-free row (`padding_free_batch`,
what transformers' `DataCollatorWithFlattening` and TRL's `padding_free=True` produce): every
example of the micro-batch one after another in a single row of exactly their total length,
`position_ids` restarting per example. FlashAttention's variable-length kernel reads the example
boundaries from `position_ids` (as `cu_seqlens`) and computes each example's own causal triangle:
no T x T mask exists, and the cost is the sum of the examples' squared lengths. Under sdpa or eager
attention a packed row needs the dense block-diagonal mask instead: T x T entries per row
(`dense_mask_bytes`: 1 GiB of bool per row at 32,768 tokens, 4 GiB as float32), and a mask of any
kind takes sdpa off its flash kernel. The dense mask fits short rows and every attention
implementation; long rows want the padding-free path on a FlashAttention build.

`position_ids` alone do not keep packed examples apart in transformers 5.9's Qwen2 with its
default attention (sdpa): a 2-D attention mask, or a key-value cache (`use_cache` defaults to
True, even in training mode), switches its packed-sequence detection off. `install_block_mask`
therefore gives the decoder a block-diagonal causal mask built from `position_ids` whenever a
batch carries them; `isolation_check` proves on a real model that the packed loss equals the sum
of the per-example losses.
"""

from __future__ import annotations

import torch

from tools.errors import ConfigError
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, Example, pad_batch
from tools.experiments.sft_training.training import supervised_loss_sum

SUPPORTED_ATTENTION = ("sdpa", "eager")
HOOK_ATTRIBUTE = "_course_block_mask_hook"


def first_fit_rows(lengths: list[int], row_length: int) -> list[list[int]]:
    """Indices of the examples in each row: every example, in order, goes into the first row that
    still has room for all of it (a new row when none has); an example is never split."""
    if isinstance(row_length, bool) or not isinstance(row_length, int) or row_length < 1:
        raise ConfigError(f"row_length must be an integer >= 1, got {row_length!r}")
    rows, used = [], []
    for index, length in enumerate(lengths):
        if length < 1 or length > row_length:
            raise ConfigError(f"example {index} has {length} tokens; a row holds 1 to {row_length}")
        for row, filled in enumerate(used):
            if filled + length <= row_length:
                rows[row].append(index)
                used[row] += length
                break
        else:
            rows.append([index])
            used.append(length)
    return rows


def padded_batch(examples: list[Example], row_length: int, pad_id: int) -> dict:
    """One example per row, right-padded to exactly `row_length` tokens (no `position_ids`: the
    model's default 0, 1, 2, ... is right for one example per row)."""
    too_long = [len(example.input_ids) for example in examples if len(example.input_ids) > row_length]
    if not examples or too_long:
        raise ConfigError(f"need examples of at most {row_length} tokens, got lengths {too_long or 'none'}")
    batch = pad_batch(examples, pad_id)
    extra = row_length - batch["input_ids"].shape[1]
    if extra:
        batch["input_ids"] = torch.nn.functional.pad(batch["input_ids"], (0, extra), value=pad_id)
        batch["labels"] = torch.nn.functional.pad(batch["labels"], (0, extra), value=IGNORE_INDEX)
        batch["attention_mask"] = torch.nn.functional.pad(batch["attention_mask"], (0, extra), value=0)
    return batch


def packed_batch(examples: list[Example], row_length: int, pad_id: int) -> dict:
    """First-fit packed rows of exactly `row_length` tokens: `input_ids`, `labels` (-100 on each
    example's first token and on padding), `position_ids` (0, 1, ... per example and for the padding
    tail), `attention_mask` (1 on real tokens: it counts them; the boundary rule is the block mask)."""
    rows = first_fit_rows([len(example.input_ids) for example in examples], row_length)
    shape = (len(rows), row_length)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    labels = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.long)
    for row, members in enumerate(rows):
        cursor = 0
        for index in members:
            example = examples[index]
            length = len(example.input_ids)
            ids[row, cursor:cursor + length] = torch.tensor(example.input_ids)
            labels[row, cursor:cursor + length] = torch.tensor(example.labels)
            labels[row, cursor] = IGNORE_INDEX
            positions[row, cursor:cursor + length] = torch.arange(length)
            mask[row, cursor:cursor + length] = 1
            cursor += length
        positions[row, cursor:] = torch.arange(row_length - cursor)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels, "position_ids": positions}


def pack_examples(examples: list[dict], row_length: int, pad_id: int) -> dict:
    """Chapter 30's contract, the package's copy: first-fit packed rows of `{"input_ids", "labels"}`
    dicts as lists (`input_ids`, `labels`, `position_ids`, `attention_mask`, `rows`, `real_tokens`,
    `padded_tokens`); see `packed_batch` for the layout."""
    rows = first_fit_rows([len(example["input_ids"]) for example in examples], row_length)
    packed = {"input_ids": [], "labels": [], "position_ids": [], "attention_mask": []}
    for members in rows:
        ids, labels, positions = [], [], []
        for index in members:
            ids += examples[index]["input_ids"]
            labels += [IGNORE_INDEX, *examples[index]["labels"][1:]]
            positions += range(len(examples[index]["input_ids"]))
        tail = row_length - len(ids)
        packed["input_ids"].append(ids + [pad_id] * tail)
        packed["labels"].append(labels + [IGNORE_INDEX] * tail)
        packed["position_ids"].append(positions + list(range(tail)))
        packed["attention_mask"].append([1] * len(ids) + [0] * tail)
    real = sum(len(example["input_ids"]) for example in examples)
    return {**packed, "rows": rows, "real_tokens": real, "padded_tokens": len(rows) * row_length - real}


def packed_rows(examples: list[Example], row_length: int, pad_id: int, pack=None, with_rows: bool = False):
    """A packed micro-batch of stage examples as long tensors, laid out by `pack` (chapter 30's
    pack_examples: the learner's; None: this module's); with `with_rows`, also the example indices of
    each row as `pack` placed them."""
    packed = (pack or pack_examples)([{"input_ids": list(example.input_ids), "labels": list(example.labels)}
                                      for example in examples], row_length, pad_id)
    batch = {key: torch.tensor(packed[key], dtype=torch.long)
             for key in ("input_ids", "attention_mask", "labels", "position_ids")}
    return (batch, [list(row) for row in packed["rows"]]) if with_rows else batch


def waste_report(runs: list[dict]) -> dict:
    """Chapter 30's contract, the package's copy: per run its padded tokens, padding share and rates
    (None when not timed), sorted by length then strategy; the packed / padded gain per length."""
    rows = []
    for run in runs:
        real, slots, seconds = run["real_tokens"], run["token_slots"], run["seconds"]
        rows.append({"strategy": run["strategy"], "max_length": run["max_length"], "real_tokens": real,
                     "token_slots": slots, "padded_tokens": slots - real, "padding_share": (slots - real) / slots,
                     "effective_tokens_per_s": None if seconds is None else real / seconds,
                     "slot_tokens_per_s": None if seconds is None else slots / seconds})
    rows.sort(key=lambda row: (row["max_length"], row["strategy"]))
    rate = {(row["strategy"], row["max_length"]): row["effective_tokens_per_s"] for row in rows}
    gains = {}
    for length in sorted({row["max_length"] for row in rows}):
        packed, padded = rate.get(("packed", length)), rate.get(("padded", length))
        gains[length] = packed / padded if packed is not None and padded else None
    return {"rows": rows, "packing_gain": gains}


def padding_free_batch(examples: list[Example]) -> dict:
    """All examples in one row of exactly their total length, no padding: `input_ids`, `labels`
    (-100 on each example's first token), `position_ids` (0, 1, ... per example) and an all-ones
    `attention_mask` (it counts the tokens; a model must not receive it: a 2-D mask turns
    transformers' packed-sequence detection off). The layout of DataCollatorWithFlattening."""
    if not examples:
        raise ConfigError("a padding-free row needs at least one example")
    ids, labels, positions = [], [], []
    for example in examples:
        ids += example.input_ids
        labels += [IGNORE_INDEX, *example.labels[1:]]
        positions += range(len(example.input_ids))
    row = {"input_ids": ids, "labels": labels, "position_ids": positions, "attention_mask": [1] * len(ids)}
    return {key: torch.tensor([value], dtype=torch.long) for key, value in row.items()}


def dense_mask_bytes(row_length: int, rows: int = 1, element_bytes: int = 1) -> int:
    """Bytes of a dense [rows, 1, T, T] attention mask (bool: 1 byte per entry; float32: 4)."""
    for name, value in (("row_length", row_length), ("rows", rows), ("element_bytes", element_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return rows * row_length * row_length * element_bytes


def collate(examples: list[Example], pad_id: int, spec: AdapterSpec, config: StageConfig, pack=None) -> dict:
    """The stage's `collate` hook: rows of `spec.max_length` (else the stage's max_length) tokens;
    packed rows laid out by `pack` (chapter 30's pack_examples) when given."""
    row_length = spec.max_length or config.max_length
    if spec.batching in ("packed", "packed_unisolated"):
        return packed_batch(examples, row_length, pad_id) if pack is None else packed_rows(examples, row_length,
                                                                                           pad_id, pack)
    return padded_batch(examples, row_length, pad_id)


def block_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """Bool [batch, 1, time, time]: query i may attend key j when j <= i and no restart of
    `position_ids` (a 0) lies in (j, i]. Every row must start at 0 and each next value is the
    previous one plus 1, or 0."""
    if not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2 or position_ids.is_floating_point():
        raise ConfigError("position_ids must be an integer tensor [batch, time]")
    steps = position_ids[:, 1:] - position_ids[:, :-1]
    if bool((position_ids[:, 0] != 0).any()) or bool(((steps != 1) & (position_ids[:, 1:] != 0)).any()):
        raise ConfigError("position_ids must start at 0 and either count up by 1 or restart at 0")
    segments = (position_ids == 0).cumsum(dim=1)
    time = position_ids.shape[1]
    causal = torch.ones(time, time, dtype=torch.bool, device=position_ids.device).tril()
    return (causal & (segments[:, :, None] == segments[:, None, :])).unsqueeze(1)


class BlockMaskHook:
    """A forward pre-hook of the decoder: when a call carries `position_ids`, its attention mask
    becomes the block-diagonal causal mask (bool for sdpa, additive for eager). `enabled = False`
    turns it off, e.g. to measure what packing without isolation does. `mask(position_ids)` builds the
    bool mask (chapter 30's block_causal_mask: the learner's, or this module's)."""

    def __init__(self, attention: str, mask=None):
        if attention not in SUPPORTED_ATTENTION:
            raise ConfigError(f"packed batches need one of the attention implementations {SUPPORTED_ATTENTION}, "
                              f"got {attention!r}")
        self.attention = attention
        self.mask = mask or block_causal_mask
        self.enabled = True
        self.calls = 0

    def __call__(self, module, args, kwargs):
        position_ids = kwargs.get("position_ids")
        if not self.enabled or position_ids is None:
            return None
        allowed = self.mask(position_ids)
        if self.attention == "eager":
            dtype = module.get_input_embeddings().weight.dtype
            allowed = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
                ~allowed, torch.finfo(dtype).min)
        self.calls += 1
        return args, {**kwargs, "attention_mask": allowed}


def _decoder(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder()


def install_block_mask(model, mask=None) -> BlockMaskHook:
    """Give `model`'s decoder the block mask hook (once), building its masks with `mask`; the plan's
    `prepare` calls this for packed variants."""
    decoder = _decoder(model)
    existing = getattr(decoder, HOOK_ATTRIBUTE, None)
    if existing is not None:
        return existing
    hook = BlockMaskHook(model.config._attn_implementation, mask)
    decoder.register_forward_pre_hook(hook, with_kwargs=True)
    setattr(decoder, HOOK_ATTRIBUTE, hook)
    return hook


def block_mask_hook(model) -> BlockMaskHook | None:
    """The hook `install_block_mask` gave this model (through a peft wrapper too), or None."""
    return getattr(_decoder(model), HOOK_ATTRIBUTE, None)


def _forward(model, batch, device) -> tuple[float, torch.Tensor]:
    """(summed supervised token loss, logits on the CPU) of one batch, without gradients."""
    with torch.no_grad():
        loss_sum, _ = supervised_loss_sum(model, batch, device)
        inputs = {key: value.to(device) for key, value in batch.items() if key != "labels"}
        logits = model(**inputs).logits.float().cpu()
    return float(loss_sum), logits


def _packed_logit_diff(examples, packed_logits, separate_logits, rows) -> float:
    """Largest |logit difference| between each example alone and the same tokens inside its packed row
    (`rows`: the example indices of each row, in placement order)."""
    largest = 0.0
    for row, members in enumerate(rows):
        cursor = 0
        for index in members:
            length = len(examples[index].input_ids)
            inside = packed_logits[row, cursor:cursor + length]
            largest = max(largest, float((inside - separate_logits[index][0, :length]).abs().max()))
            cursor += length
    return largest


def isolation_check(model, examples: list[Example], row_length: int, pad_id: int, device, *,
                    loss_tolerance: float = 1e-5, logit_tolerance: float = 1e-4, pack=None) -> dict:
    """Is every packed example computed as if it were alone, by the model as it is? Eval mode, no gradients.

    Compares the packed batch with each example run alone: the summed supervised token loss
    (relative difference at most `loss_tolerance`) and every logit of every real token (absolute
    difference at most `logit_tolerance`). The same packed batch is also run with the block mask
    switched off (what `position_ids` with a 2-D mask give): the cross-contamination the mask prevents.
    The packed batch is laid out by `pack` (chapter 30's pack_examples), as the stage's collate did."""
    hook = block_mask_hook(model)
    if hook is None:
        raise ConfigError("the model has no block mask: call install_block_mask(model) first")
    was_training = model.training
    model.eval()
    try:
        packed, rows = packed_rows(examples, row_length, pad_id, pack, with_rows=True)
        alone = [_forward(model, pad_batch([example], pad_id), device) for example in examples]
        per_example = sum(loss for loss, _ in alone)
        isolated_sum, isolated_logits = _forward(model, packed, device)
        enabled, hook.enabled = hook.enabled, False
        try:
            unmasked_sum, unmasked_logits = _forward(model, packed, device)
        finally:
            hook.enabled = enabled
    finally:
        model.train(was_training)
    separate = [logits for _, logits in alone]
    scale = max(abs(per_example), 1e-12)
    relative = abs(isolated_sum - per_example) / scale
    logit_diff = _packed_logit_diff(examples, isolated_logits, separate, rows)
    return {"examples": len(examples), "rows": int(packed["input_ids"].shape[0]), "row_length": row_length,
            "per_example_loss_sum": per_example, "packed_loss_sum": isolated_sum, "relative_loss_diff": relative,
            "max_abs_logit_diff": logit_diff, "loss_tolerance": loss_tolerance, "logit_tolerance": logit_tolerance,
            "isolated": relative <= loss_tolerance and logit_diff <= logit_tolerance,
            "without_block_mask": {
                "packed_loss_sum": unmasked_sum, "relative_loss_diff": abs(unmasked_sum - per_example) / scale,
                "max_abs_logit_diff": _packed_logit_diff(examples, unmasked_logits, separate, rows)}}
