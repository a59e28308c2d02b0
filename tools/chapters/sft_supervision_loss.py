"""What the chapter-13 notebook (SFT supervision boundary and loss) runs around its three exercises.

The learner writes the mechanism: the label mask from the chat template, the shifted next-token
NLL and the two averages. This module holds the rest, so the notebook stays thin: the course's tiny
tokenizer found through the model cache, the token regions and figures of Steps 1-3, the fixed
batch, and the framework check of Step 5, which compares a loss built with the functions it is
given against `model(..., labels=...).loss` of transformers, values and gradients, within a stated
tolerance. Nothing here prints; the notebook shows what these functions return.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tools.core.environment import installed_version
from tools.data.arithmetic import generate_tasks
from tools.errors import ConfigError
from tools.models.architectures import TINY_MODEL_ID
from tools.models.cache import default_cache_dir
from tools.models.loading import load_causal_lm, model_identity, resolve_model

CHAPTER_ID = "13"
RECORD_STAGE = "loss_check"
IGNORE_INDEX = -100
FIXED_MAX_LENGTH = 96
FIXED_TASK_SEED = 101
LOSS_TOLERANCE = 1e-5
"""Largest absolute difference allowed between our loss and the model's, and between their gradients
(float32 on CPU: the two sums differ only in the order of additions)."""
MEASUREMENT_NOTE = ("equality check of loss definitions on a fixed batch; the tiny model has random weights, "
                    "so the loss values carry no quality meaning; not a GPU measurement")
SUPERVISED_REGIONS = ("assistant", "assistant_end")


# ---------------------------------------------------------------------------
# The tokenizer and the model, through the course's model cache
# ---------------------------------------------------------------------------

def load_tiny_tokenizer():
    """`(tokenizer, where)`: the course's tiny tokenizer from the model cache (`default_cache_dir()`,
    built there once), or, where no course checkout is visible (a grading sandbox shows only the
    `tools` package), the same tokenizer built in memory, with nothing written."""
    from transformers import AutoTokenizer

    try:
        cache = default_cache_dir()
    except ConfigError:
        from tools.models.builders import build_tiny_tokenizer

        return build_tiny_tokenizer(), "built in memory: no course checkout visible, nothing written"
    folder = resolve_model(TINY_MODEL_ID, cache_dir=cache)
    return AutoTokenizer.from_pretrained(folder), f"from the model cache {cache}, folder {folder.name}"


def load_step5_model(model_id: str, source: str, device: str):
    """`(model, tokenizer, identity)` of Step 5 in float32 on `device`, from `default_cache_dir()`."""
    import torch
    from transformers.utils import logging as transformers_logging

    folder = resolve_model(model_id, source=source, cache_dir=default_cache_dir())
    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # library code stays quiet: no loading bar in the notebook
    try:
        model, tokenizer = load_causal_lm(folder, dtype=torch.float32, device=device)
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    model.eval()  # no dropout: both losses see the same forward pass
    return model, tokenizer, model_identity(folder)


# ---------------------------------------------------------------------------
# Steps 1-3: what the chat template makes, and the two averages
# ---------------------------------------------------------------------------

def token_regions(ids: Sequence[int], tokenizer) -> list[str]:
    """The region of each token, read from the special tokens only: "header", "<role>",
    "<role>_end" (the <|im_end|> closing a turn of that role) or "separator"."""
    regions, role, state = [], None, "separator"
    for token_id in ids:
        text = tokenizer.decode([token_id])
        if text == "<|im_start|>":
            state, role = "header", None
            regions.append("header")
        elif state == "header":
            role = text.strip() if role is None else role
            regions.append("header")
            if text.endswith("\n"):
                state = "content"
        elif text == "<|im_end|>":
            regions.append(f"{role}_end")
            state = "separator"
        else:
            regions.append(role if state == "content" else "separator")
    return regions


REGION_COLORS = {"header": "#d9d9d9", "separator": "#f2f2f2", "system": "#9ecae1", "system_end": "#6baed6",
                 "user": "#fdd0a2", "user_end": "#fdae6b", "assistant": "#74c476", "assistant_end": "#238b45"}


def _shown(tokenizer, token_id: int) -> str:
    text = tokenizer.decode([token_id]).replace("\n", "\\n")
    return text.replace("<|im_start|>", "<start>").replace("<|im_end|>", "<end>")


def draw_token_regions(ids: Sequence[int], regions: Sequence[str], tokenizer, per_row: int = 14):
    """Figure: every token of a rendered conversation, coloured by its region."""
    import math

    import matplotlib.pyplot as plt

    rows = math.ceil(len(ids) / per_row)
    fig, ax = plt.subplots(figsize=(13, 0.75 * rows + 1.2))
    for position, (token_id, region) in enumerate(zip(ids, regions)):
        row, column = divmod(position, per_row)
        ax.add_patch(plt.Rectangle((column, -row), 0.95, 0.8, color=REGION_COLORS[region]))
        ax.text(column + 0.47, -row + 0.4, _shown(tokenizer, token_id), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, per_row)
    ax.set_ylim(-rows + 0.9, 0.9)
    ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in REGION_COLORS.values()]
    ax.legend(handles, list(REGION_COLORS), ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=8)
    ax.set_title("Chat template tokens by region (green = what SFT should supervise)")
    fig.tight_layout()
    return fig


def draw_causal_shift(ids: Sequence[int], regions: Sequence[str], tokenizer, tail: int = 10):
    """Figure: the last `tail` input tokens over the targets their positions predict (green = scored)."""
    import matplotlib.pyplot as plt

    start = max(len(ids) - tail, 0)
    ids, regions = list(ids)[start:], list(regions)[start:]
    texts = [_shown(tokenizer, token_id) for token_id in ids]
    fig, ax = plt.subplots(figsize=(13, 3))
    for column in range(len(ids)):
        ax.add_patch(plt.Rectangle((column, 1), 0.9, 0.7, color="#d9d9d9"))
        ax.text(column + 0.45, 1.35, texts[column], ha="center", va="center", fontsize=9)
        ax.text(column + 0.45, 1.85, f"x[{start + column}]", ha="center", va="center", fontsize=7)
        if column + 1 < len(ids):
            supervised = regions[column + 1] in SUPERVISED_REGIONS
            ax.add_patch(plt.Rectangle((column, 0), 0.9, 0.7, color="#74c476" if supervised else "#f2f2f2"))
            ax.text(column + 0.45, 0.35, texts[column + 1] if supervised else "-100", ha="center", va="center",
                    fontsize=9)
            ax.annotate("", xy=(column + 0.45, 0.72), xytext=(column + 1.45, 0.98),
                        arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.8})
        else:
            ax.text(column + 0.45, 0.35, "(no target)", ha="center", va="center", fontsize=8)
    ax.text(-0.1, 1.35, "input", ha="right", va="center")
    ax.text(-0.1, 0.35, "target", ha="right", va="center")
    ax.set_xlim(-1.2, len(ids))
    ax.set_ylim(-0.2, 2.1)
    ax.axis("off")
    ax.set_title("Position t predicts token t+1: logits[:, :-1] are scored against labels[:, 1:]")
    fig.tight_layout()
    return fig


def averaging_shares(lengths: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """Per sample with `n` supervised tokens: its share of the loss and the weight of one of its tokens,
    under the per-token average (n / N and 1 / N) and the per-sample average (1 / B and 1 / (B n))."""
    total, count = sum(lengths.values()), len(lengths)
    return {name: {"token_share": n / total, "sample_share": 1 / count,
                   "token_weight_per_token": 1 / total, "token_weight_per_sample": 1 / (count * n)}
            for name, n in lengths.items()}


def draw_averaging_shares(lengths: Mapping[str, int]):
    """Figure: each sample's share of the loss and one token's weight, per-token vs per-sample average."""
    import matplotlib.pyplot as plt

    shares = averaging_shares(lengths)
    names, positions = list(lengths), range(len(lengths))
    fig, (ax_share, ax_weight) = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (token_key, sample_key) in ((ax_share, ("token_share", "sample_share")),
                                        (ax_weight, ("token_weight_per_token", "token_weight_per_sample"))):
        ax.bar([p - 0.2 for p in positions], [shares[name][token_key] for name in names], width=0.4,
               label="per-token average")
        ax.bar([p + 0.2 for p in positions], [shares[name][sample_key] for name in names], width=0.4,
               label="per-sample average")
        ax.set_xticks(list(positions), [f"{name}\n({lengths[name]} tokens)" for name in names])
        ax.legend()
    ax_share.set_ylabel("share of the loss (sums to 1)")
    ax_share.set_title("How much each sample counts")
    ax_weight.set_yscale("log")
    ax_weight.set_ylabel("weight of one token (log scale)")
    ax_weight.set_title("How much each token counts")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The fixed batch
# ---------------------------------------------------------------------------

def fixed_conversations() -> dict[str, list[dict]]:
    """Three arithmetic conversations from the training seed 101 (the evaluation seed is never used)."""
    tasks = {task.task_id: task for task in generate_tasks(seed=FIXED_TASK_SEED, per_operation=1)}
    add, sub, mul, div = (tasks[key] for key in ("add-0", "sub-0", "mul-0", "floordiv-0"))
    quotient, remainder = divmod(div.a, div.b)
    worked = (f"{div.b} * {quotient} = {div.b * quotient}, and {div.a} - {div.b * quotient} = {remainder}, "
              f"which is less than {div.b}. So {div.a} // {div.b} = {div.label}.")
    return {
        "single_turn": [{"role": "user", "content": add.prompt}, {"role": "assistant", "content": str(add.label)}],
        "two_turns_with_system": [
            {"role": "system", "content": "You are a careful calculator."},
            {"role": "user", "content": sub.prompt}, {"role": "assistant", "content": str(sub.label)},
            {"role": "user", "content": mul.prompt}, {"role": "assistant", "content": str(mul.label)},
        ],
        "worked_answer_truncated": [
            {"role": "user", "content": f"Compute {div.a} // {div.b}. Show the steps, then the result."},
            {"role": "assistant", "content": worked},
        ],
    }


def collate_right_padded(examples: Sequence[Mapping], pad_token_id: int) -> dict:
    """Stack examples into `input_ids`, `attention_mask` and `labels` tensors, padded on the right
    (padding: pad_token_id, attention 0, label IGNORE_INDEX)."""
    import torch

    width = max(len(example["input_ids"]) for example in examples)
    input_ids = torch.full((len(examples), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        length = len(example["input_ids"])
        input_ids[row, :length] = torch.tensor(example["input_ids"])
        labels[row, :length] = torch.tensor(example["labels"])
        attention_mask[row, :length] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def build_fixed_batch(tokenizer, build_sft_example: Callable, max_length: int = FIXED_MAX_LENGTH):
    """`(examples, batch)`: the fixed conversations through `build_sft_example`, right-padded."""
    examples = {name: build_sft_example(messages, tokenizer, max_length=max_length)
                for name, messages in fixed_conversations().items()}
    return examples, collate_right_padded(list(examples.values()), tokenizer.pad_token_id)


def batch_table(examples: Mapping[str, Mapping], batch: Mapping, shifted_token_nll: Callable,
                reduce_sft_loss: Callable, tokenizer) -> str:
    """The fixed batch as text: per example its tokens, supervision, what truncation cut, its share
    under both averages (weights depend on the mask only, so no model is needed) and its supervised text."""
    import torch

    labels = batch["labels"]
    shift = shifted_token_nll(torch.zeros(*labels.shape, len(tokenizer)), labels)
    weights = {mode: reduce_sft_loss(shift["token_nll"], shift["mask"], mode)["sample_weights"]
               for mode in ("token", "sample")}
    lines = [f"batch shape {tuple(labels.shape)}, padding tokens {int((batch['attention_mask'] == 0).sum())}, "
             f"effective supervised tokens {shift['supervised_tokens']}",
             f"{'example':<26}{'tokens':>7}{'supervised':>11}{'cut by max_length':>18}{'token share':>12}"
             f"{'sample share':>13}"]
    for row, (name, example) in enumerate(examples.items()):
        lines.append(f"{name:<26}{len(example['input_ids']):>7}{example['supervised_tokens']:>11}"
                     f"{example['truncated_supervised_tokens']:>18}{weights['token'][row]:>12.3f}"
                     f"{weights['sample'][row]:>13.3f}")
    for name, example in examples.items():
        kept = [label for label in example["labels"] if label != IGNORE_INDEX]
        lines.append(f"{name:<26} supervised text: {tokenizer.decode(kept)!r}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Step 5: the framework check
# ---------------------------------------------------------------------------

def framework() -> dict:
    """What Step 5 compares with: the library, its installed version, the call and the tolerance."""
    return {"library": "transformers", "version": installed_version("transformers"),
            "reference_call": "model(input_ids=..., attention_mask=..., labels=...).loss",
            "tolerance_abs": LOSS_TOLERANCE}


def compare_with_model_loss(model, batch: Mapping, shifted_token_nll: Callable, reduce_sft_loss: Callable) -> dict:
    """One forward pass of `model` on `batch`; our per-token loss (from the functions given) against
    the model's own `labels=` loss, in value and in the gradient of every trainable parameter.

    Returns the two losses, their absolute difference, the largest gradient difference, whether both
    stay within LOSS_TOLERANCE, the per-sample average and the per-sample mean losses."""
    import torch

    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    output = model(**batch)
    shift = shifted_token_nll(output.logits, batch["labels"])
    per_token = reduce_sft_loss(shift["token_nll"], shift["mask"], "token")
    per_sample = reduce_sft_loss(shift["token_nll"], shift["mask"], "sample")
    model_grads = torch.autograd.grad(output.loss, trainable, retain_graph=True)
    our_grads = torch.autograd.grad(per_token["loss"], trainable)
    grad_diff = max(float((ours - theirs).abs().max()) for ours, theirs in zip(our_grads, model_grads))
    model_loss, our_loss = output.loss.item(), per_token["loss"].item()
    abs_diff = abs(model_loss - our_loss)
    return {"model_loss": model_loss, "per_token_loss": our_loss, "abs_diff": abs_diff,
            "grad_max_abs_diff": grad_diff, "tolerance": LOSS_TOLERANCE,
            "matches_model_loss": abs_diff <= LOSS_TOLERANCE and grad_diff <= LOSS_TOLERANCE,
            "effective_supervised_tokens": shift["supervised_tokens"], "unpredicted_labels": shift["unpredicted_labels"],
            "sample_mode_loss": per_sample["loss"].item(), "per_sample_loss": per_token["per_sample_loss"],
            "sample_weights": {"token": per_token["sample_weights"], "sample": per_sample["sample_weights"]}}


def learner_comparison(model, batch: Mapping, functions: Mapping[str, Callable]) -> dict:
    """The same comparison with the learner's own functions, or why it could not run
    (`not_implemented` while a TODO still raises NotImplementedError, `error` with its message)."""
    try:
        result = compare_with_model_loss(model, batch, functions["shifted_token_nll"], functions["reduce_sft_loss"])
    except NotImplementedError as error:
        return {"status": "not_implemented", "detail": str(error)}
    except Exception as error:  # a learner's bug is reported as data, the reference check still runs
        return {"status": "error", "detail": f"{type(error).__name__}: {error}"}
    return {"status": "matches" if result["matches_model_loss"] else "differs", **result}


def counterexample_losses(model, batch: Mapping) -> dict:
    """Two wrong supervision boundaries on the same batch: no causal shift, and every non-padding
    token supervised (the model's own loss with those labels)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits = model(**batch).logits.float()
        labels = batch["labels"]
        supervised = labels != IGNORE_INDEX
        no_shift = F.cross_entropy(logits[supervised], labels[supervised])
        all_tokens = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        every_token = model(**{**batch, "labels": all_tokens}).loss
    return {"no_shift_loss": float(no_shift), "all_tokens_supervised_loss": float(every_token)}


def record_body(examples: Mapping[str, Mapping], batch: Mapping, comparison: Mapping, learner: Mapping,
                counterexamples: Mapping, *, device: str, model: Mapping) -> dict:
    """The `loss_check` record's body (the header and runtime come from `ChapterContext.save_record`)."""
    return {
        "measurement": MEASUREMENT_NOTE,
        "inputs": {"conversations": fixed_conversations(), "max_length": FIXED_MAX_LENGTH,
                   "ignore_index": IGNORE_INDEX, "dtype": "float32", "device": device, "model": dict(model)},
        "framework": framework(),
        "results": {
            "examples": {name: {"tokens": len(example["input_ids"]), "supervised_tokens": example["supervised_tokens"],
                                "truncated_supervised_tokens": example["truncated_supervised_tokens"],
                                "assistant_spans": example["assistant_spans"]}
                         for name, example in examples.items()},
            "batch_shape": list(batch["input_ids"].shape),
            "padding_tokens": int((batch["attention_mask"] == 0).sum()),
            **dict(comparison),
            "counterexamples": dict(counterexamples),
            "learner_functions": dict(learner),
        },
    }


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a `loss_check` record (this run's or an earlier cpu_smoke one) in Step 5: the
    framework check, the counts and the counterexamples. Fields an older record lacks are skipped."""
    results, check = record["results"], record.get("framework")
    lines = [f"evidence level {record.get('evidence_level')}: an equality check of loss definitions, "
             "not a GPU measurement"]
    if check:
        lines.append(f"framework check: {check['library']} {check['version']}, {check['reference_call']}, "
                     f"tolerance {check['tolerance_abs']:g} (absolute)")
    lines.append(f"  reference functions: model loss {results['model_loss']:.6f} vs per-token loss "
                 f"{results['per_token_loss']:.6f}, |diff| {results['abs_diff']:.2e}, gradient max |diff| "
                 f"{results['grad_max_abs_diff']:.2e} -> matches: {results['matches_model_loss']}")
    learner = results.get("learner_functions")
    if learner:
        detail = (f"|diff| {learner['abs_diff']:.2e}, gradient max |diff| {learner['grad_max_abs_diff']:.2e}"
                  if "abs_diff" in learner else learner.get("detail", ""))
        lines.append(f"  your functions: {learner['status']} ({detail})")
    lines.append(f"effective supervised tokens {results['effective_supervised_tokens']} of "
                 f"{results['batch_shape'][0] * results['batch_shape'][1]} positions ({results['padding_tokens']} padding)")
    lines.append(f"per-sample average {results['sample_mode_loss']:.6f}; counterexamples: no shift "
                 f"{results['counterexamples']['no_shift_loss']:.6f}, all tokens supervised "
                 f"{results['counterexamples']['all_tokens_supervised_loss']:.6f}")
    return lines
