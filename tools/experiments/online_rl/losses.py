"""Clipped policy-gradient losses on sampled responses.

`clipped_grpo_loss`: the token-level clipped surrogate of GRPO, -min(rho * A, clip(rho) * A) with
rho = exp(logprobs - old_logprobs) per response token, aggregated either per sequence (each
response's token mean, then the mean over responses: TRL's loss_type "grpo") or per token (one
mean over every response token of the batch: TRL's "bnpo"). The clip rate is the share of response
tokens where the clip is active: rho above 1 + eps with A > 0, or below 1 - eps with A < 0.

Entries outside the mask never reach a result, even when they hold nan or inf.
"""

from __future__ import annotations

import math

from tools.errors import ConfigError

AGGREGATIONS = ("sequence", "token")


def _check_batch(logprobs, old_logprobs, advantages, mask) -> None:
    import torch

    if not isinstance(logprobs, torch.Tensor) or logprobs.dim() != 2 or logprobs.dtype not in (torch.float32, torch.float64):
        raise ConfigError("logprobs must be a float32 or float64 tensor [batch, time]")
    if not isinstance(old_logprobs, torch.Tensor) or old_logprobs.dtype != logprobs.dtype \
            or old_logprobs.shape != logprobs.shape:
        raise ConfigError("old_logprobs must be a tensor of logprobs' shape and dtype")
    if not isinstance(advantages, torch.Tensor) or advantages.dtype != logprobs.dtype \
            or tuple(advantages.shape) != (logprobs.shape[0],):
        raise ConfigError("advantages must be a tensor [batch] of logprobs' dtype")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != logprobs.shape:
        raise ConfigError("mask must be a bool tensor of logprobs' shape")
    if logprobs.shape[0] == 0 or not bool(mask.any(dim=1).all()):
        raise ConfigError("every response needs at least one token in the mask")
    if not bool(torch.isfinite(advantages).all()):
        raise ConfigError("advantages must be finite")


def clipped_grpo_loss(logprobs, old_logprobs, advantages, mask, clip_eps: float = 0.2,
                      aggregation: str = "sequence") -> dict:
    """`{"loss", "clip_rate", "response_tokens"}` of the clipped surrogate (module docstring)."""
    import torch

    _check_batch(logprobs, old_logprobs, advantages, mask)
    if isinstance(clip_eps, bool) or not isinstance(clip_eps, (int, float)) or not math.isfinite(clip_eps) \
            or not 0 < clip_eps < 1:
        raise ConfigError(f"clip_eps must be a number in (0, 1), got {clip_eps!r}")
    if not isinstance(aggregation, str) or aggregation not in AGGREGATIONS:
        raise ConfigError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    zeros = torch.zeros_like(logprobs)
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), zeros)
    ratio = torch.exp(log_ratio)
    gain = advantages.unsqueeze(1)
    surrogate = torch.minimum(ratio * gain, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * gain)
    token_loss = torch.where(mask, -surrogate, zeros)
    counts = mask.sum(dim=1)
    if aggregation == "sequence":
        loss = (token_loss.sum(dim=1) / counts.to(logprobs.dtype)).mean()
    else:
        loss = token_loss.sum() / counts.sum().to(logprobs.dtype)
    clipped = ((ratio > 1 + clip_eps) & (gain > 0)) | ((ratio < 1 - clip_eps) & (gain < 0))
    tokens = int(counts.sum())
    return {"loss": loss, "clip_rate": int((clipped & mask).sum()) / tokens, "response_tokens": tokens}


def sequence_clipped_loss(logprobs, old_logprobs, advantages, mask, clip_eps: float = 0.2) -> dict:
    """RLOO's sequence-level clipped loss: one ratio per response, exp of the summed token log-ratios.

    `{"loss": mean over responses of -min(rho A, clip(rho) A), "clip_rate": share of responses whose
    clip is active, "ratios": each response's rho as a Python float}`."""
    import torch

    _check_batch(logprobs, old_logprobs, advantages, mask)
    if isinstance(clip_eps, bool) or not isinstance(clip_eps, (int, float)) or not math.isfinite(clip_eps) \
            or not 0 < clip_eps < 1:
        raise ConfigError(f"clip_eps must be a number in (0, 1), got {clip_eps!r}")
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs)).sum(dim=1)
    ratio = torch.exp(log_ratio)
    surrogate = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * advantages)
    clipped = ((ratio > 1 + clip_eps) & (advantages > 0)) | ((ratio < 1 - clip_eps) & (advantages < 0))
    return {"loss": (-surrogate).mean(), "clip_rate": int(clipped.sum()) / len(ratio),
            "ratios": [float(value) for value in ratio.detach()]}
