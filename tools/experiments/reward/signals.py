"""Reward signals for PPO on response tokens: per-token KL, token-level rewards, GAE, whitening.

These are the stage's own implementations (the PPO stage and the chapters' figures use them); the
chapters' learners write the same mechanisms with full input checks, and the tests hold both to
verl 0.9.1 (`verl_reference`). Masks are [batch, time] tensors of 0/1: a 0 marks a position that is
not the policy's token (padding, or a token a tool inserted), which every function here skips.
"""

from __future__ import annotations

import torch

from tools.experiments.reward.masks import last_valid_positions

KL_CLAMP_LOG_RATIO = 20.0
KL_CLAMP_K3 = 10.0
WHITEN_EPS = 1e-8


def kl_estimate(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str = "k1") -> torch.Tensor:
    """Per-token KL estimate of the policy from the reference on sampled tokens: k1 = log p - log p_ref;
    k3 = exp(d) - d - 1 with d = log p_ref - log p clamped to [-20, 20], the result capped at 10."""
    if estimator == "k1":
        return log_probs - ref_log_probs
    if estimator == "k3":
        delta = (ref_log_probs - log_probs).clamp(-KL_CLAMP_LOG_RATIO, KL_CLAMP_LOG_RATIO)
        return (torch.exp(delta) - delta - 1).clamp(max=KL_CLAMP_K3)
    raise ValueError(f"unknown KL estimator {estimator!r} (k1 or k3)")


def token_rewards(scores: torch.Tensor, log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
                  response_mask: torch.Tensor, kl_coef: float, estimator: str = "k1") -> dict:
    """`{"rewards", "kl", "score_positions", "mean_kl"}`: -kl_coef * KL on every valid token, plus the
    sequence score on the last valid token; 0 elsewhere. mean_kl: the mean over responses of each
    response's mean KL over its valid tokens."""
    valid = response_mask.bool()
    kl = torch.where(valid, kl_estimate(log_probs, ref_log_probs, estimator), torch.zeros_like(log_probs))
    rewards = -kl_coef * kl
    positions = last_valid_positions(response_mask)
    rewards[torch.arange(len(positions)), positions] += scores.to(rewards.dtype)
    mean_kl = float((kl.sum(dim=1) / valid.sum(dim=1)).mean())
    return {"rewards": rewards, "kl": kl, "score_positions": positions, "mean_kl": mean_kl}


def gae(rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor, gamma: float, lam: float) -> dict:
    """`{"advantages", "returns"}` by generalised advantage estimation over the valid tokens of each row:
    a masked position is skipped (its reward and value are not used, and it does not discount), and
    both outputs are 0 there. returns = advantages + values on valid tokens."""
    valid = response_mask.bool()
    batch, time = rewards.shape
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
    running = torch.zeros_like(next_value)
    for t in reversed(range(time)):
        here = valid[:, t]
        step = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * running
        running = torch.where(here, step, running)
        next_value = torch.where(here, values[:, t], next_value)
        advantages[:, t] = torch.where(here, step, torch.zeros_like(step))
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return {"advantages": advantages, "returns": returns}


def masked_whiten(values: torch.Tensor, response_mask: torch.Tensor, eps: float = WHITEN_EPS) -> torch.Tensor:
    """(values - mean) / sqrt(var + eps) with the mean and the unbiased variance over valid positions
    only; 0 at masked positions. Needs at least two valid positions."""
    valid = response_mask.bool()
    picked = values[valid]
    if picked.numel() < 2:
        raise ValueError("whitening needs at least two valid tokens")
    mean = picked.mean()
    variance = ((picked - mean) ** 2).sum() / (picked.numel() - 1)
    return torch.where(valid, (values - mean) * torch.rsqrt(variance + eps), torch.zeros_like(values))


def kl_share(kl: torch.Tensor, response_mask: torch.Tensor, kl_coef: float, scores: torch.Tensor) -> float:
    """The share of the reward's absolute mass that the KL penalty carries:
    kl_coef * sum|kl| / (kl_coef * sum|kl| + sum|score|) over valid tokens; 0.0 when both are 0."""
    penalty = float(kl_coef * kl[response_mask.bool()].abs().sum())
    total = penalty + float(scores.abs().sum())
    return penalty / total if total > 0 else 0.0


CONSTANT_TOLERANCE = 1e-6
"""Valid advantages whose spread (max - min) is at most this times max(1, their largest |value|) count as
all equal: whitening would leave only rounding noise."""


def constant(advantages: torch.Tensor, response_mask: torch.Tensor) -> bool:
    """Whether the valid advantages are all equal within `CONSTANT_TOLERANCE` (all 0 is one case)."""
    picked = advantages[response_mask.bool()]
    return float(picked.max() - picked.min()) <= CONSTANT_TOLERANCE * max(1.0, float(picked.abs().max()))


def gate(advantages: torch.Tensor, response_mask: torch.Tensor, kl: torch.Tensor, kl_coef: float, scores: torch.Tensor,
         max_kl_share: float = 0.5) -> dict:
    """The diagnostic gate: `{"kl_share", "reasons", "decision"}` with the reasons "kl_dominated"
    (share above the limit) and "constant_advantages" (the valid advantages all equal within the
    tolerance: no signal survives whitening), in that order."""
    share = kl_share(kl, response_mask, kl_coef, scores)
    reasons = []
    if share > max_kl_share:
        reasons.append("kl_dominated")
    if constant(advantages, response_mask):
        reasons.append("constant_advantages")
    return {"kl_share": share, "reasons": reasons, "decision": "reject" if reasons else "accept"}


def whiten_and_gate(advantages: torch.Tensor, response_mask: torch.Tensor, kl: torch.Tensor, kl_coef: float,
                    scores: torch.Tensor, max_kl_share: float = 0.5) -> dict:
    """`masked_whiten` and `gate` in one call, with the valid advantages' mean and standard deviation: the
    shape of the chapter's TODO 3 (`{"whitened", "advantage_mean", "advantage_std", "kl_share", "reasons",
    "decision"}`), which the signal stage calls."""
    picked = advantages[response_mask.bool()]
    return {"whitened": masked_whiten(advantages, response_mask), "advantage_mean": float(picked.mean()),
            "advantage_std": float(picked.std()), **gate(advantages, response_mask, kl, kl_coef, scores, max_kl_share)}
