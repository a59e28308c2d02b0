"""The DPO family's losses, as the package runs them when no notebook passes the learner's own.

The chapter PT-DPO-FAMILY has the learner write these three functions; its Step 5 trains with the
learner's versions (`plan.mechanism`), and the command line and the GPU batch use these. They compute
what TRL 1.16 computes (the chapter checks the learner's against TRL on the same tensors):

- `length_desensitised_logps`: sequence log-probabilities of a chosen and a rejected response, where the
  tokens of the longer response past the shorter one's length weigh `ld_alpha` (LD-DPO; TRL's `ld_alpha`);
  `None` gives the plain sums.
- `dpo_family_loss`: one loss per pair from the log-ratio margin h = (log pi_c - log ref_c) - (log pi_r -
  log ref_r): `sigmoid` (DPO), `hinge`, `ipo` (margins of per-token means, squared distance to 1 / (2 beta)),
  `robust` (unbiased under a label-flip rate), `cdpo` (conservative: label smoothing), plus RPO's SFT term
  (the chosen responses' token-mean negative log-likelihood, weighted by `rpo_alpha`).
- `reference_free_loss`: `simpo` (margin of per-token means minus gamma) and `orpo` (the odds-ratio term
  beside the SFT loss); no reference model.

Every function checks its inputs before computing, raises ConfigError (a ValueError) on bad ones, and
leaves its arguments as they were.
"""

from __future__ import annotations

import math

from tools.errors import ConfigError

PAIR_LOSSES = ("sigmoid", "hinge", "ipo", "robust", "cdpo")
SMOOTHED = ("robust", "cdpo")
REFERENCE_FREE = ("simpo", "orpo")


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _float_tensor(name: str, value, dim: int):
    import torch

    if not isinstance(value, torch.Tensor) or value.dim() != dim or value.dtype not in (torch.float32, torch.float64):
        raise ConfigError(f"{name} must be a float32 or float64 tensor with {dim} dimension(s)")
    if value.shape[0] == 0:
        raise ConfigError(f"{name} must not be empty")


def _lengths(name: str, value, size: int):
    import torch

    if not isinstance(value, torch.Tensor) or value.dtype != torch.int64 or tuple(value.shape) != (size,):
        raise ConfigError(f"{name} must be an int64 tensor [{size}]")
    if bool((value < 1).any()):
        raise ConfigError(f"{name} must count at least one token per response")


def length_desensitised_logps(chosen_token_logps, rejected_token_logps, chosen_mask, rejected_mask, ld_alpha=None):
    """`{"chosen", "rejected", "chosen_lengths", "rejected_lengths"}`: per pair, the weighted sums of the
    response tokens' log-probabilities (tokens past the shared length weigh `ld_alpha`) and the counts."""
    import torch

    _float_tensor("chosen_token_logps", chosen_token_logps, 2)
    _float_tensor("rejected_token_logps", rejected_token_logps, 2)
    if rejected_token_logps.dtype != chosen_token_logps.dtype or rejected_token_logps.shape[0] != chosen_token_logps.shape[0]:
        raise ConfigError("chosen and rejected log-probabilities need one dtype and one row per pair")
    for name, mask, logps in (("chosen_mask", chosen_mask, chosen_token_logps),
                              ("rejected_mask", rejected_mask, rejected_token_logps)):
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != logps.shape:
            raise ConfigError(f"{name} must be a bool tensor of its log-probabilities' shape")
        if not bool(mask.any(dim=1).all()):
            raise ConfigError(f"{name}: every response needs at least one token")
    if ld_alpha is not None and (not _number(ld_alpha) or not 0 <= ld_alpha <= 1):
        raise ConfigError(f"ld_alpha must be None or a number in [0, 1], got {ld_alpha!r}")

    chosen_lengths, rejected_lengths = chosen_mask.sum(dim=1), rejected_mask.sum(dim=1)
    shared = torch.minimum(chosen_lengths, rejected_lengths).unsqueeze(1)

    def weighted(logps, mask):
        values = torch.where(mask, logps, torch.zeros_like(logps))
        if ld_alpha is None:
            return values.sum(dim=1)
        position = mask.long().cumsum(dim=1)
        weights = torch.where(position <= shared, torch.ones_like(values), torch.full_like(values, float(ld_alpha)))
        return (values * weights).sum(dim=1)

    return {"chosen": weighted(chosen_token_logps, chosen_mask), "rejected": weighted(rejected_token_logps, rejected_mask),
            "chosen_lengths": chosen_lengths, "rejected_lengths": rejected_lengths}


def _check_sequences(sequences: dict, lengths: dict) -> None:
    import torch

    first = next(iter(sequences.values()))
    for name, value in sequences.items():
        _float_tensor(name, value, 1)
        if value.shape != first.shape or value.dtype != first.dtype:
            raise ConfigError("the sequence log-probabilities must share one shape and dtype")
        if not bool(torch.isfinite(value.detach()).all()):
            raise ConfigError(f"{name} holds a value that is not finite")
    for name, value in lengths.items():
        _lengths(name, value, first.shape[0])


def dpo_family_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, chosen_lengths,
                    rejected_lengths, loss_type, beta, label_smoothing=0.0, rpo_alpha=0.0):
    """`{"loss", "pair_losses", "sft_loss", "margins"}` of one DPO-family loss (module docstring)."""
    import torch
    import torch.nn.functional as F

    _check_sequences({"policy_chosen": policy_chosen, "policy_rejected": policy_rejected,
                      "reference_chosen": reference_chosen, "reference_rejected": reference_rejected},
                     {"chosen_lengths": chosen_lengths, "rejected_lengths": rejected_lengths})
    if not isinstance(loss_type, str) or loss_type not in PAIR_LOSSES:
        raise ConfigError(f"loss_type must be one of {PAIR_LOSSES}, got {loss_type!r}")
    if not _number(beta) or beta <= 0:
        raise ConfigError(f"beta must be a finite number > 0, got {beta!r}")
    if not _number(label_smoothing) or not 0 <= label_smoothing < 0.5:
        raise ConfigError(f"label_smoothing must be a number in [0, 0.5), got {label_smoothing!r}")
    if loss_type not in SMOOTHED and label_smoothing != 0:
        raise ConfigError(f"label_smoothing belongs to {SMOOTHED}; {loss_type} takes 0")
    if not _number(rpo_alpha) or rpo_alpha < 0:
        raise ConfigError(f"rpo_alpha must be a finite number >= 0, got {rpo_alpha!r}")

    chosen = policy_chosen - reference_chosen.detach()
    rejected = policy_rejected - reference_rejected.detach()
    margin = chosen - rejected
    eps = float(label_smoothing)
    if loss_type == "sigmoid":
        pair_losses = -F.logsigmoid(beta * margin)
    elif loss_type == "hinge":
        pair_losses = torch.relu(1 - beta * margin)
    elif loss_type == "ipo":
        per_token = chosen / chosen_lengths.to(chosen.dtype) - rejected / rejected_lengths.to(rejected.dtype)
        pair_losses = (per_token - 1 / (2 * beta)) ** 2
    elif loss_type == "robust":
        pair_losses = (-(1 - eps) * F.logsigmoid(beta * margin) + eps * F.logsigmoid(-beta * margin)) / (1 - 2 * eps)
    else:
        pair_losses = -(1 - eps) * F.logsigmoid(beta * margin) - eps * F.logsigmoid(-beta * margin)
    loss = pair_losses.mean()
    sft_loss = None
    if rpo_alpha > 0:
        sft_loss = -policy_chosen.sum() / chosen_lengths.sum().to(policy_chosen.dtype)
        loss = loss + rpo_alpha * sft_loss
    return {"loss": loss, "pair_losses": pair_losses, "sft_loss": sft_loss, "margins": margin.detach()}


def log1mexp(x):
    """log(1 - exp(x)) for x < 0, accurate near 0 and for very negative x."""
    import torch

    return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def reference_free_loss(policy_chosen, policy_rejected, chosen_lengths, rejected_lengths, loss_type, beta, gamma=0.0):
    """`{"loss", "pair_losses", "sft_loss", "margins"}` of SimPO or ORPO (module docstring)."""
    import torch.nn.functional as F

    _check_sequences({"policy_chosen": policy_chosen, "policy_rejected": policy_rejected},
                     {"chosen_lengths": chosen_lengths, "rejected_lengths": rejected_lengths})
    if not isinstance(loss_type, str) or loss_type not in REFERENCE_FREE:
        raise ConfigError(f"loss_type must be one of {REFERENCE_FREE}, got {loss_type!r}")
    if not _number(beta) or beta <= 0:
        raise ConfigError(f"beta must be a finite number > 0, got {beta!r}")
    if not _number(gamma) or gamma < 0:
        raise ConfigError(f"gamma must be a finite number >= 0, got {gamma!r}")
    if loss_type == "orpo" and gamma != 0:
        raise ConfigError("gamma belongs to simpo; orpo takes 0")
    chosen = policy_chosen / chosen_lengths.to(policy_chosen.dtype)
    rejected = policy_rejected / rejected_lengths.to(policy_rejected.dtype)
    if loss_type == "simpo":
        pair_losses = -F.logsigmoid(beta * (chosen - rejected) - gamma)
        return {"loss": pair_losses.mean(), "pair_losses": pair_losses, "sft_loss": None,
                "margins": (chosen - rejected).detach()}
    if bool((chosen.detach() >= 0).any()) or bool((rejected.detach() >= 0).any()):
        raise ConfigError("orpo needs every per-token mean log-probability below 0 (a probability below 1)")
    log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))
    pair_losses = -beta * F.logsigmoid(log_odds)
    sft_loss = -policy_chosen.sum() / chosen_lengths.sum().to(policy_chosen.dtype)
    return {"loss": sft_loss + pair_losses.mean(), "pair_losses": pair_losses, "sft_loss": sft_loss,
            "margins": log_odds.detach()}
