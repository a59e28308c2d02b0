"""Train one variant for a fixed number of steps and measure what the record needs.

`learning_rates` in the measurements are the optimiser's own `param_groups[0]["lr"]` as `step()`
read it, not the schedule's plan: a check of planned against applied rates can then fail.
The loss of a step is normalised by the supervised tokens of the whole step (every micro-batch of
the accumulation), so accumulating equals one large batch. Evaluation runs in eval mode without
gradients. Peak memory comes from `torch.cuda.max_memory_*` and the 0.25 s resource sampler on
CUDA; on a CPU both are None (not measured), never 0.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch
import torch.nn.functional as F

from tools.errors import ConfigError
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, Split, batches, pad_batch
from tools.measure.sampler import ResourceSampler, peaks

MIB = 2 ** 20


def supervised_loss_sum(model, batch, device) -> tuple:
    """(sum of the token losses of the supervised positions, their count) for one micro-batch."""

    inputs = {key: value.to(device) for key, value in batch.items()}
    extra = {"position_ids": inputs["position_ids"]} if "position_ids" in inputs else {}
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **extra).logits
    shifted_logits, shifted_labels = logits[:, :-1, :].float(), inputs["labels"][:, 1:]
    loss_sum = F.cross_entropy(shifted_logits.reshape(-1, shifted_logits.size(-1)), shifted_labels.reshape(-1),
                               ignore_index=IGNORE_INDEX, reduction="sum")
    return loss_sum, int((shifted_labels != IGNORE_INDEX).sum().item())


def evaluate(model, examples, batch_size: int, pad_id: int, device) -> float:
    """Mean supervised-token loss over `examples`, in eval mode and without gradients."""

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            loss_sum, tokens = supervised_loss_sum(model, pad_batch(examples[start:start + batch_size], pad_id), device)
            total, count = total + float(loss_sum), count + tokens
    model.train(was_training)
    return total / count


def learning_rate(config: StageConfig, step: int) -> float:
    if config.lr_schedule == "linear_decay":
        return config.learning_rate * (1.0 - step / config.steps)
    return config.learning_rate


def default_collate(examples, pad_id: int, spec: AdapterSpec, config: StageConfig) -> dict:
    """Right-padded micro-batches; a variant with `batching="packed"` needs its chapter's collate."""
    if spec.batching != "padded":
        raise ConfigError(f"variant {spec.name} packs its batches: its chapter plan must provide `collate`")
    return pad_batch(examples, pad_id)


def evaluation_batches(examples, batch_size: int, pad_id: int) -> list[dict]:
    """The evaluation examples as right-padded batches of `batch_size`, in order."""
    return [pad_batch(examples[start:start + batch_size], pad_id) for start in range(0, len(examples), batch_size)]


def train_variant(model, spec: AdapterSpec, split: Split, config: StageConfig, pad_id: int,
                  collate: Callable | None = None, *, accumulate: Callable | None = None,
                  evaluate_with: Callable | None = None) -> dict:
    """Fixed-seed training of an adapter-wrapped model; returns the measurements (status ok or failed).

    `collate(examples, pad_id, spec, config)` builds each micro-batch (`input_ids`, `attention_mask`,
    `labels`, optionally `position_ids`); the default pads on the right. `accumulate(model,
    micro_batches)` (a chapter's gradient accumulation, e.g. chapter 15's `accumulate_gradients`)
    leaves one step's gradient in `.grad` and returns `{"loss": float, ...}`; by default the stage's
    own loop does it (sum of token losses / the step's supervised count, per micro-batch).
    `evaluate_with(model, batches, optimizer, spec, split)` (a chapter's evaluation) returns the held-apart
    loss, or a dict with `"loss"` and what else it measured (kept under `evaluations`); by default
    the stage's `evaluate`."""
    collate = collate or default_collate

    device = torch.device(config.device)
    cuda = device.type == "cuda"
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    plan = batches(split.train, config.batch_size, config.steps, config.grad_accumulation)
    evaluations = {}

    def held_apart_loss(moment: str) -> float:
        if evaluate_with is None:
            return evaluate(model, split.evaluation, config.batch_size, pad_id, device)
        eval_batches = [{key: value.to(device) for key, value in batch.items()}
                        for batch in evaluation_batches(split.evaluation, config.batch_size, pad_id)]
        result = evaluate_with(model, eval_batches, optimizer, spec, split)
        if isinstance(result, dict):
            evaluations[moment] = {key: value for key, value in result.items() if key != "loss"}
            return float(result["loss"])
        return float(result)

    eval_before = held_apart_loss("before")
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    sampler = ResourceSampler(interval_s=config.sample_interval_s, device="cuda" if cuda else "cpu")
    losses, grad_norms, step_ms, rates, tokens_seen, slots_seen = [], [], [], [], 0, 0
    supervised_per_step, real_per_step, slots_per_step = [], [], []
    model.train()
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=spec.compute_dtype == "bfloat16")
    with sampler:
        started = time.perf_counter()
        for step, micro_batches in enumerate(plan):
            step_start = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step)
            padded = [collate(chunk, pad_id, spec, config) for chunk in micro_batches]
            supervised = sum(int((batch["labels"][:, 1:] != IGNORE_INDEX).sum()) for batch in padded)
            supervised_per_step.append(supervised)
            optimizer.zero_grad(set_to_none=True)
            step_loss = 0.0
            real_per_step.append(sum(int(batch["attention_mask"].sum()) for batch in padded))
            slots_per_step.append(sum(int(batch["input_ids"].numel()) for batch in padded))
            if accumulate is not None:
                with autocast:
                    step_loss = float(accumulate(model, [{key: value.to(device) for key, value in batch.items()}
                                                         for batch in padded])["loss"])
            for batch in padded:
                if accumulate is None:
                    with autocast:
                        loss_sum, _ = supervised_loss_sum(model, batch, device)
                    (loss_sum / supervised).backward()
                    step_loss += float(loss_sum.detach()) / supervised
                tokens_seen += int(batch["attention_mask"].sum())
                slots_seen += int(batch["input_ids"].numel())
            norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], float("inf"))
            applied = optimizer.param_groups[0]["lr"]  # what step() reads, whatever set it
            optimizer.step()
            if cuda:
                torch.cuda.synchronize(device)
            losses.append(step_loss)
            grad_norms.append(float(norm))
            rates.append(float(applied))
            step_ms.append((time.perf_counter() - step_start) * 1000.0)
        elapsed = time.perf_counter() - started
    samples = sampler.snapshot()
    eval_after = held_apart_loss("after")
    finite = all(math.isfinite(value) for value in [*losses, *grad_norms, eval_before, eval_after])
    return {
        "status": "ok" if finite else "failed",
        "error": None if finite else "a loss or gradient norm is not finite",
        "losses": losses, "grad_norms": grad_norms, "learning_rates": rates,
        "eval_loss_before": eval_before, "eval_loss_after": eval_after,
        "step_time_ms_mean": sum(step_ms) / len(step_ms), "step_time_ms": step_ms,
        "real_tokens_per_step": real_per_step, "token_slots_per_step": slots_per_step,
        "tokens_per_s": tokens_seen / elapsed if elapsed > 0 else None,
        "token_slots_per_s": slots_seen / elapsed if elapsed > 0 else None,
        "real_tokens": tokens_seen, "token_slots": slots_seen,
        "supervised_tokens_per_step": supervised_per_step,
        "peak_allocated_mib": torch.cuda.max_memory_allocated(device) / MIB if cuda else None,
        "peak_reserved_mib": torch.cuda.max_memory_reserved(device) / MIB if cuda else None,
        "sampled": {**peaks(samples), **sampler.summary()},
        "evaluations": evaluations or None,
    }
