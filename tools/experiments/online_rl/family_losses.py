"""The GRPO family's mechanisms, as the package runs them when no notebook passes the learner's own.

The chapter PT-GRPO-FAMILY has the learner write these four functions; its Step 5 trains with the
learner's versions (`plan.mechanism`), and the command line and the GPU batch use these. They compute
what TRL 1.16's GRPOTrainer and verl 0.9.1's `core_algos` compute (the chapter checks both):

- `aggregate_loss`: one number from per-token losses: `grpo` (each response's token mean, then the mean
  over responses; a response with no token left counts as 0), `bnpo` (one mean over the batch's tokens),
  `dr_grpo` (the token sum over responses times the longest allowed completion), `dapo` (the token sum over
  the number of tokens of the whole generation batch).
- `clipped_token_losses`: -min(rho' A, clip(rho, 1 - eps_low, 1 + eps_high) A) per token, rho' = min(rho,
  delta) when a two-sided `delta` is given; with a reference, the per-token KL estimate (k1 or k3), added to
  the loss with weight `beta` (beta 0: not in the loss); the clip rates, low, high and either.
- `fill_batch`: dynamic sampling with refill: walk the drawn groups in order, drop a group whose rewards do
  not vary, stop when `target_groups` are kept or `max_groups` were examined; overlong masking switches off
  the loss of the truncated responses of the kept groups.
- `importance_sampling_weights`: the trainer-over-sampler ratio per token or per sequence, truncated to
  [clip_min, clip_max] or set to 0 outside it (TRL's `vllm_importance_sampling_mode` values).

Entries outside a mask never reach a result, even nan or inf. Every function checks its inputs before
computing, raises ConfigError (a ValueError) on bad ones and leaves its arguments as they were.
"""

from __future__ import annotations

import math

from tools.errors import ConfigError

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
KL_ESTIMATORS = ("k1", "k3")
IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _count(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def _table(name: str, value, like=None):
    import torch

    if like is None:
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.dtype not in (torch.float32, torch.float64) \
                or value.shape[0] == 0 or value.shape[1] == 0:
            raise ConfigError(f"{name} must be a non-empty float32 or float64 tensor [batch, time]")
    elif not isinstance(value, torch.Tensor) or value.dtype != like.dtype or value.shape != like.shape:
        raise ConfigError(f"{name} must be a tensor of the same shape and dtype as the log-probabilities")


def _mask(mask, like):
    import torch

    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != like.shape:
        raise ConfigError("mask must be a bool tensor of the same shape as the per-token values")
    if not bool(mask.any()):
        raise ConfigError("the mask selects no token")


def aggregate_loss(token_losses, mask, loss_type, max_completion_length=None, num_items_in_batch=None):
    """One 0-dim loss from per-token losses under `loss_type` (module docstring)."""
    import torch

    _table("token_losses", token_losses)
    _mask(mask, token_losses)
    if not isinstance(loss_type, str) or loss_type not in LOSS_TYPES:
        raise ConfigError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    width, tokens = token_losses.shape[1], int(mask.sum())
    if loss_type == "dr_grpo":
        if not _count(max_completion_length) or max_completion_length < width:
            raise ConfigError(f"dr_grpo needs max_completion_length, an int >= the width {width}")
    elif max_completion_length is not None:
        raise ConfigError("max_completion_length belongs to dr_grpo")
    if loss_type == "dapo":
        if not _count(num_items_in_batch) or num_items_in_batch < tokens:
            raise ConfigError(f"dapo needs num_items_in_batch, an int >= the {tokens} tokens in the mask")
    elif num_items_in_batch is not None:
        raise ConfigError("num_items_in_batch belongs to dapo")
    values = torch.where(mask, token_losses, torch.zeros_like(token_losses))
    if loss_type == "grpo":
        counts = mask.sum(dim=1).clamp(min=1).to(values.dtype)
        return (values.sum(dim=1) / counts).mean()
    if loss_type == "bnpo":
        return values.sum() / tokens
    if loss_type == "dr_grpo":
        return values.sum() / (values.shape[0] * max_completion_length)
    return values.sum() / num_items_in_batch


def clipped_token_losses(logprobs, old_logprobs, advantages, mask, epsilon_low=0.2, epsilon_high=0.2, delta=None,
                         ref_logprobs=None, beta=0.0, kl_estimator="k3"):
    """`{"token_losses", "kl", "clip_low", "clip_high", "clip_region"}` (module docstring)."""
    import torch

    _table("logprobs", logprobs)
    _table("old_logprobs", old_logprobs, logprobs)
    _mask(mask, logprobs)
    if not isinstance(advantages, torch.Tensor) or advantages.dtype != logprobs.dtype \
            or tuple(advantages.shape) != (logprobs.shape[0],) or not bool(torch.isfinite(advantages).all()):
        raise ConfigError("advantages must be a finite tensor [batch] of the log-probabilities' dtype")
    if ref_logprobs is not None:
        _table("ref_logprobs", ref_logprobs, logprobs)
    for name, value in (("logprobs", logprobs), ("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs)):
        if value is not None and not bool(torch.isfinite(value.detach()[mask]).all()):
            raise ConfigError(f"{name} must be finite on the masked tokens")
    if not _number(epsilon_low) or not 0 < epsilon_low < 1:
        raise ConfigError(f"epsilon_low must be a number in (0, 1), got {epsilon_low!r}")
    if not _number(epsilon_high) or epsilon_high <= 0:
        raise ConfigError(f"epsilon_high must be a finite number > 0, got {epsilon_high!r}")
    if delta is not None and (not _number(delta) or delta <= 1 + epsilon_high):
        raise ConfigError(f"delta must be None or a number > 1 + epsilon_high, got {delta!r}")
    if not _number(beta) or beta < 0:
        raise ConfigError(f"beta must be a finite number >= 0, got {beta!r}")
    if beta > 0 and ref_logprobs is None:
        raise ConfigError("beta > 0 needs ref_logprobs")
    if not isinstance(kl_estimator, str) or kl_estimator not in KL_ESTIMATORS:
        raise ConfigError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")

    zeros = torch.zeros_like(logprobs)
    log_ratio = torch.where(mask, logprobs - old_logprobs.detach(), zeros)
    ratio = torch.exp(log_ratio)
    gain = advantages.unsqueeze(1)
    capped = ratio if delta is None else torch.clamp(ratio, max=delta)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    token_losses = -torch.minimum(capped * gain, clipped * gain)
    kl = None
    if ref_logprobs is not None:
        difference = torch.where(mask, ref_logprobs.detach() - logprobs, zeros)
        estimate = -difference if kl_estimator == "k1" else torch.exp(difference) - difference - 1
        if beta > 0:
            token_losses = token_losses + beta * estimate
        kl = torch.where(mask, estimate, zeros).detach()
    token_losses = torch.where(mask, token_losses, zeros)
    tokens = int(mask.sum())
    low = (ratio < 1 - epsilon_low) & (gain < 0) & mask
    high = (ratio > 1 + epsilon_high) & (gain > 0) & mask
    return {"token_losses": token_losses, "kl": kl, "clip_low": int(low.sum()) / tokens,
            "clip_high": int(high.sum()) / tokens, "clip_region": int((low | high).sum()) / tokens}


def fill_batch(groups, target_groups, max_groups, mask_truncated=True):
    """`{"kept", "dropped", "examined", "full", "loss_masks"}` of dynamic sampling (module docstring)."""
    if not isinstance(groups, list):
        raise ConfigError("groups must be a list of groups")
    for index, group in enumerate(groups):
        if not isinstance(group, list) or not group:
            raise ConfigError(f"group {index} must be a non-empty list of responses")
        for response in group:
            if not isinstance(response, dict) or set(response) != {"reward", "truncated"}:
                raise ConfigError(f"group {index}: every response is a dict with exactly reward and truncated")
            if not _number(response["reward"]) or not isinstance(response["truncated"], bool):
                raise ConfigError(f"group {index}: a reward is a finite number, truncated a bool")
    if not _count(target_groups) or target_groups < 1:
        raise ConfigError(f"target_groups must be an int >= 1, got {target_groups!r}")
    if not _count(max_groups) or max_groups < target_groups:
        raise ConfigError(f"max_groups must be an int >= target_groups, got {max_groups!r}")
    if not isinstance(mask_truncated, bool):
        raise ConfigError(f"mask_truncated must be a bool, got {mask_truncated!r}")
    kept, dropped, examined = [], [], 0
    for index, group in enumerate(groups[:max_groups]):
        if len(kept) == target_groups:
            break
        examined += 1
        rewards = [response["reward"] for response in group]
        (kept if max(rewards) != min(rewards) else dropped).append(index)
    masks = [[not (mask_truncated and response["truncated"]) for response in groups[index]] for index in kept]
    return {"kept": kept, "dropped": dropped, "examined": examined, "full": len(kept) == target_groups,
            "loss_masks": masks}


def importance_sampling_weights(trainer_logps, sampler_logps, mask, mode, clip_max=3.0, clip_min=None):
    """`{"weights", "changed"}`: per-token weights pi_trainer / pi_sampler under `mode` (module docstring), 0
    outside the mask, detached; `changed` the share of masked tokens whose weight is not the raw ratio."""
    import torch

    _table("trainer_logps", trainer_logps)
    _table("sampler_logps", sampler_logps, trainer_logps)
    _mask(mask, trainer_logps)
    for name, value in (("trainer_logps", trainer_logps), ("sampler_logps", sampler_logps)):
        if not bool(torch.isfinite(value.detach()[mask]).all()):
            raise ConfigError(f"{name} must be finite on the masked tokens")
    if not isinstance(mode, str) or mode not in IS_MODES:
        raise ConfigError(f"mode must be one of {IS_MODES}, got {mode!r}")
    if clip_max is None and clip_min is None:
        raise ConfigError("give clip_max, clip_min or both")
    if clip_max is not None and (not _number(clip_max) or clip_max <= 0):
        raise ConfigError(f"clip_max must be None or a finite number > 0, got {clip_max!r}")
    if clip_min is not None and (not _number(clip_min) or clip_min < 0
                                 or (clip_max is not None and clip_min >= clip_max)):
        raise ConfigError(f"clip_min must be None or a finite number in [0, clip_max), got {clip_min!r}")
    zeros = torch.zeros_like(trainer_logps)
    difference = torch.where(mask, trainer_logps.detach() - sampler_logps.detach(), zeros)
    if mode.startswith("sequence"):
        difference = difference.sum(dim=1, keepdim=True).expand_as(zeros)
    raw = torch.exp(difference)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    if mode.endswith("truncate"):
        weights = torch.clamp(raw, min=low, max=high)
    else:
        weights = torch.where((raw < low) | (raw > high), zeros, raw)
    weights = torch.where(mask, weights, zeros)
    changed = int(((weights != raw) & mask).sum()) / int(mask.sum())
    return {"weights": weights, "changed": changed}
