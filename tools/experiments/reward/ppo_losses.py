"""PPO's two clipped losses over masked response tokens (token mean), as the stage computes them.

Chapter 16's learner writes the same with full input checks; the tests hold both to verl 0.9.1's
`compute_policy_loss_vanilla` and `compute_value_loss`.
"""

from __future__ import annotations

import torch

LOG_RATIO_BOUND = 20.0
"""verl's clamp of the per-token log-ratio before exp: exp(20) is finite in float32, exp(90) is not."""


def policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio: float) -> dict:
    """{"loss", "clip_fraction", "approx_kl"}: max(-A r, -A clip(r)) averaged over valid tokens, with
    r = exp of the log-ratio clamped to [-20, 20]; approx_kl the mean of minus the clamped log-ratio."""
    valid = response_mask.bool()
    count = max(int(valid.sum()), 1)
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_ratio, 1 + clip_ratio)
    per_token = torch.maximum(unclipped, clipped) * valid
    return {"loss": per_token.sum() / count,
            "clip_fraction": float(((clipped > unclipped) & valid).sum()) / count,
            "approx_kl": float((-log_ratio.detach() * valid).sum()) / count}


def value_loss(values, old_values, returns, response_mask, clip_range: float) -> dict:
    """{"loss", "clip_fraction"}: half the token mean of the larger squared error around old values."""
    valid = response_mask.bool()
    count = max(int(valid.sum()), 1)
    clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)
    unclipped = (values - returns) ** 2
    clipped = (clipped_values - returns) ** 2
    per_token = torch.maximum(unclipped, clipped) * valid
    return {"loss": 0.5 * per_token.sum() / count,
            "clip_fraction": float(((clipped > unclipped) & valid).sum()) / count}
