"""TRL's GRPO and RLOO trainers driven on a batch we give them, for the chapters' framework checks.

Nothing of TRL is copied: a trainer is built on the given model (TRL patches the model's forward
with its fused LM head, so pass a model loaded for this check only), and its own `compute_loss` runs
on our batch. TRL computes the per-token log-probabilities itself; they are returned, so the
chapter's loss can be computed from exactly the same numbers. The trainers run on CPU with one
process; `model.eval()` keeps TRL's loss free of the gradient-accumulation divisor.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

TRL_GRPO_LOSS_TYPES = {"sequence": "grpo", "token": "bnpo"}
"""Our token aggregation -> TRL's GRPOConfig.loss_type that aggregates the same way."""


def _zero_reward(completions, **_):
    """A reward function for trainers whose rewards this module never asks for."""
    return [0.0] * len(completions)


def trl_version() -> str:
    import trl

    return trl.__version__


def _silence() -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def grpo_trainer(model, tokenizer, aggregation: str, clip_eps: float, folder: str):
    """A GRPOTrainer whose loss aggregates like `aggregation` ("sequence" or "token"), beta 0."""
    _silence()
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=folder, report_to=[], use_cpu=True, loss_type=TRL_GRPO_LOSS_TYPES[aggregation],
                      beta=0.0, epsilon=clip_eps, temperature=1.0, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, save_strategy="no", logging_strategy="no")
    return GRPOTrainer(model=model, reward_funcs=_zero_reward, args=args, processing_class=tokenizer,
                       train_dataset=Dataset.from_dict({"prompt": ["unused", "unused"]}))


def grpo_loss_on_batch(model, tokenizer, batch: dict, aggregation: str, clip_eps: float) -> dict[str, Any]:
    """TRL's GRPO loss, clip rate and per-token log-probs on `batch`.

    `batch`: prompt_ids / prompt_mask (left-padded), completion_ids / completion_mask (right-padded),
    advantages [batch], old_per_token_logps [batch, completion] (None: TRL's own log-probs, ratio 1).
    """
    import torch

    with tempfile.TemporaryDirectory() as folder:
        trainer = grpo_trainer(model, tokenizer, aggregation, clip_eps, folder)
        model.eval()
        inputs = {key: batch[key] for key in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask",
                                              "advantages")}
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model, torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1),
                torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1), batch["completion_ids"].shape[1])
            if batch.get("old_per_token_logps") is not None:
                inputs["old_per_token_logps"] = batch["old_per_token_logps"]
            loss = trainer.compute_loss(model, inputs)
        metrics = trainer._metrics["eval"]
        return {"loss": float(loss), "clip_rate": float(metrics["clip_ratio/region_mean"][-1]),
                "per_token_logps": logps.detach().clone(), "loss_type": TRL_GRPO_LOSS_TYPES[aggregation]}


def _fixed_rewards(completions, group_rewards, **_):
    """Reward of completion j: entry j % G of its prompt's fixed group (TRL lays a group out contiguously)."""
    return [rewards[index % len(rewards)] for index, rewards in enumerate(group_rewards)]


def rloo_trainer(model, tokenizer, group_size: int, prompts: int, clip_eps: float, folder: str, seed: int):
    """An RLOOTrainer with beta 0 (no KL in the reward), unnormalised advantages, rewards from the dataset."""
    _silence()
    from datasets import Dataset
    from trl import RLOOConfig, RLOOTrainer

    args = RLOOConfig(output_dir=folder, report_to=[], use_cpu=True, beta=0.0, epsilon=clip_eps, temperature=1.0,
                      num_generations=group_size, per_device_train_batch_size=group_size * prompts,
                      max_completion_length=6, normalize_advantages=False, save_strategy="no",
                      logging_strategy="no", seed=seed)
    return RLOOTrainer(model=model, reward_funcs=_fixed_rewards, args=args, processing_class=tokenizer,
                       train_dataset=Dataset.from_dict({"prompt": ["unused"], "group_rewards": [[0.0]]}))


def rloo_on_fixed_rewards(model, tokenizer, prompts: list[str], group_rewards: list[list[float | None]],
                          clip_eps: float, noise_std: float, seed: int = 0) -> dict[str, Any]:
    """TRL's RLOO on our prompts: it samples the completions, takes our fixed rewards (None: unscorable),
    computes its leave-one-out advantages, then its sequence-clipped loss. The sampling policy's
    per-token log-probs are TRL's own plus seeded noise of `noise_std` on the response tokens; TRL gets
    their sum per completion (its `old_logps`), and they are returned per token for our loss."""
    import torch

    group_size = len(group_rewards[0])
    if any(len(group) != group_size for group in group_rewards) or len(group_rewards) != len(prompts):
        raise ValueError("one group of equal size per prompt")
    rows = [{"prompt": prompt, "group_rewards": rewards} for prompt, rewards in zip(prompts, group_rewards)
            for _ in range(group_size)]
    with tempfile.TemporaryDirectory() as folder:
        trainer = rloo_trainer(model, tokenizer, group_size, len(prompts), clip_eps, folder, seed)
        model.eval()
        torch.manual_seed(seed)
        with torch.no_grad():
            inputs = trainer._generate_and_score_completions(rows)
            advantages = inputs["advantages"].detach().clone()
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1), inputs["completion_ids"].shape[1])
            mask = inputs["completion_mask"].bool()
            noise = torch.randn(logps.shape, generator=torch.Generator().manual_seed(seed)) * noise_std
            old_per_token = torch.where(mask, logps + noise, logps)
            inputs["old_logps"] = torch.where(mask, old_per_token, torch.zeros_like(logps)).sum(dim=1)
            loss = trainer.compute_loss(model, inputs)
        metrics = trainer._metrics["eval"]
        return {"advantages": [float(value) for value in advantages], "loss": float(loss),
                "clip_rate": float(metrics["clip_ratio/region_mean"][-1]), "per_token_logps": logps.detach().clone(),
                "completion_mask": mask, "old_per_token_logps": old_per_token}
