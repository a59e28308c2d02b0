"""verl 0.9.1's reward-signal and PPO functions, called on the tensors a chapter gives them.

The chapters compare the learner's mechanism with `verl.trainer.ppo.core_algos` on the same tiny
inputs. Importing it pulls in verl's runtime dependencies (ray, tensordict, torchdata, codetiming),
which the CPU profile installs beside the dependency-free verl; the import takes several seconds,
so it happens on first use. Nothing here re-implements verl: each function calls verl's own code
and only converts what it returns into plain tensors and floats.
"""

from __future__ import annotations

from functools import lru_cache

from tools.core.environment import installed_version
from tools.experiments.reward.masks import last_valid_positions

KL_ESTIMATORS = {"k1": "kl", "k3": "low_var_kl"}
"""The course's names of the per-token KL estimators and verl's names for them."""

DUAL_CLIP_OFF = 1e9
"""verl's dual-clip bound (`clip_ratio_c`, default 3.0) set out of reach: the course's PPO loss is the
plain clipped surrogate, so the comparison switches verl's extra lower bound off."""


@lru_cache(maxsize=1)
def core_algos():
    """verl's `verl.trainer.ppo.core_algos` module (imported once, on first use)."""
    from verl.trainer.ppo import core_algos as module

    return module


def version() -> str | None:
    """The installed verl version (None when verl is not installed)."""
    return installed_version("verl")


def kl_token_rewards(scores, log_probs, ref_log_probs, response_mask, kl_coef: float, estimator: str):
    """`(rewards, kl)` as verl's PPO trainer builds them: `core_algos.kl_penalty` per token, times the
    response mask, and `token_level_rewards = token_level_scores - kl_coef * kld`, where the scores sit
    on the last valid token of each response (what `apply_kl_penalty` of verl's ray trainer does; that
    module does not import without verl's GPU serving stack, so the one line is repeated here)."""
    import torch

    mask = response_mask.to(log_probs.dtype)
    kld = core_algos().kl_penalty(log_probs, ref_log_probs, kl_penalty=KL_ESTIMATORS[estimator]) * mask
    last = torch.as_tensor(last_valid_positions(response_mask))
    token_level_scores = torch.zeros_like(log_probs)
    token_level_scores[torch.arange(len(last)), last] = scores.to(log_probs.dtype)
    return token_level_scores - kl_coef * kld, kld


def gae(rewards, values, response_mask, gamma: float, lam: float):
    """`(whitened_advantages, returns)` from `core_algos.compute_gae_advantage_return` (verl whitens
    the advantages over the response mask inside that function)."""
    return core_algos().compute_gae_advantage_return(rewards, values, response_mask.to(rewards.dtype), gamma, lam)


def policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio: float) -> dict:
    """verl's `compute_policy_loss_vanilla` (token-mean, dual clip out of reach): the loss tensor, the
    clip fraction and verl's approximate KL (`ppo_kl`). ActorConfig's own `clip_ratio_low/high` default
    to 0.2 and take precedence over `clip_ratio`, so both are set to the ratio asked for."""
    from verl.workers.config import ActorConfig

    config = ActorConfig(strategy="fsdp", clip_ratio=clip_ratio, clip_ratio_low=clip_ratio, clip_ratio_high=clip_ratio,
                         clip_ratio_c=DUAL_CLIP_OFF, rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    loss, metrics = core_algos().compute_policy_loss_vanilla(
        old_log_probs, log_probs, advantages, response_mask.to(log_probs.dtype), loss_agg_mode="token-mean",
        config=config)
    return {"loss": loss, "clip_fraction": metrics["actor/pg_clipfrac"], "approx_kl": metrics["actor/ppo_kl"]}


def value_loss(values, old_values, returns, response_mask, clip_range: float) -> dict:
    """verl's `compute_value_loss` (token-mean): the loss tensor and the value clip fraction."""
    loss, clip_fraction = core_algos().compute_value_loss(
        values, returns, old_values, response_mask.to(values.dtype), cliprange_value=clip_range,
        loss_agg_mode="token-mean")
    return {"loss": loss, "clip_fraction": float(clip_fraction)}
