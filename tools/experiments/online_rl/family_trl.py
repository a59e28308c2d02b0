"""TRL 1.16's GRPOTrainer driven with any of its loss settings, for PT-GRPO-FAMILY's framework check.

Nothing of TRL is copied: a trainer is built on the given model with the configuration asked for, and its
own `compute_loss` runs on the batch we give it (TRL computes the per-token log-probabilities itself; they
are returned, so the chapter's functions see exactly the same numbers), or its own generation step runs on
our prompts (`mask_truncated_completions` is applied there). Chapter 18's `trl_reference` fixes the
configuration to its two aggregations; this module passes every field through.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

LOGGED = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "kl", "entropy")


def _constant_rewards(completions, **_):
    """A reward function for checks that never read the rewards."""
    return [0.0] * len(completions)


def grpo_trainer(model, tokenizer, folder: str, *, reward_funcs=_constant_rewards, **config):
    """A GRPOTrainer on `model` (CPU, one process, no logging), with `config` passed to GRPOConfig."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    settings = {"per_device_train_batch_size": 2, "num_generations": 2, "max_completion_length": 8,
                "temperature": 1.0, "beta": 0.0, **config}
    args = GRPOConfig(output_dir=folder, report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                      disable_tqdm=True, **settings)
    return GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, processing_class=tokenizer,
                       train_dataset=Dataset.from_dict({"prompt": ["unused"] * settings["per_device_train_batch_size"]}))


def per_token_logps(trainer, model, batch: dict):
    """TRL's own per-token log-probabilities of the batch's completions (no graph)."""
    import torch

    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            model, torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
            torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1), batch["completion_ids"].shape[1])
    return logps.detach().clone()


def loss_on_batch(model, tokenizer, batch: dict, **config) -> dict[str, Any]:
    """TRL's GRPO loss and its logged clip rates and KL on `batch` (prompt_ids / prompt_mask left-padded,
    completion_ids / completion_mask right-padded, advantages [batch], and as the configuration needs:
    old_per_token_logps, ref_per_token_logps, num_items_in_batch)."""
    import torch

    with tempfile.TemporaryDirectory() as folder:
        trainer = grpo_trainer(model, tokenizer, folder, **config)
        model.eval()
        inputs = {key: value for key, value in batch.items() if value is not None}
        with torch.no_grad():
            loss = trainer.compute_loss(model, inputs)
        metrics = trainer._metrics["eval"]
        return {"loss": float(loss), **{name: float(metrics[name][-1]) for name in LOGGED if metrics.get(name)}}


def generated_batch(model, tokenizer, prompts: list[str], group_size: int, *, seed: int = 0, **config) -> dict:
    """TRL's own generation and scoring of `prompts` (`group_size` completions each): its completion ids and
    completion mask (after `mask_truncated_completions`, when the configuration sets it), and which of its
    completions ended without an end-of-turn or padding token."""
    import torch

    rows = [{"prompt": prompt} for prompt in prompts for _ in range(group_size)]
    with tempfile.TemporaryDirectory() as folder:
        trainer = grpo_trainer(model, tokenizer, folder, per_device_train_batch_size=len(rows),
                               num_generations=group_size, seed=seed, **config)
        model.eval()
        torch.manual_seed(seed)
        with torch.no_grad():
            inputs = trainer._generate_and_score_completions(rows)
        ends = set(trainer.eos_token_ids) | {tokenizer.pad_token_id}
        ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        lengths = [int(row.sum()) for row in (ids != tokenizer.pad_token_id).long()]
        ended = [bool(length) and int(ids[row, length - 1]) in ends for row, length in enumerate(lengths)]
        return {"completion_ids": ids.clone(), "completion_mask": mask.clone(), "ended": ended}
