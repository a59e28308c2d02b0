"""Divergences between a student's and a frozen teacher's next-token distributions.

Logits are [batch, time, vocab] with position t holding the distribution of token t (already
shifted); `mask` [batch, time] marks the positions that count. Entries outside the mask may hold
anything and never reach a result: masked-out logits are replaced before any softmax. The teacher
never receives a gradient: its logits are detached.
"""

from __future__ import annotations

import math

from tools.errors import ConfigError

FLOAT_DTYPES = ("float32", "float64")


def _check_logits(student_logits, teacher_logits, mask) -> None:
    import torch

    if not isinstance(student_logits, torch.Tensor) or student_logits.dim() != 3 \
            or str(student_logits.dtype).removeprefix("torch.") not in FLOAT_DTYPES or student_logits.shape[-1] < 1:
        raise ConfigError("student_logits must be a float32 or float64 tensor [batch, time, vocab]")
    if not isinstance(teacher_logits, torch.Tensor) or teacher_logits.shape != student_logits.shape \
            or teacher_logits.dtype != student_logits.dtype:
        raise ConfigError("teacher_logits must have the student's shape and dtype")
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != tuple(student_logits.shape[:2]):
        raise ConfigError("mask must be a bool tensor [batch, time]")
    if not bool(mask.any()):
        raise ConfigError("the mask selects no position")


def _clean_log_probs(logits, mask, temperature: float = 1.0):
    import torch

    kept = torch.where(mask.unsqueeze(-1), logits, torch.zeros_like(logits))
    return torch.log_softmax(kept / temperature, dim=-1)


def token_reverse_kl(student_logits, teacher_logits, tokens, mask) -> dict:
    """Per-token KL(student || teacher), exact over the vocabulary, and its one-sample estimate
    log p_s(token) - log p_t(token) at the sampled tokens; zeros outside the mask."""
    import torch

    _check_logits(student_logits, teacher_logits, mask)
    if not isinstance(tokens, torch.Tensor) or tokens.shape != mask.shape or tokens.dtype.is_floating_point \
            or tokens.dtype in (torch.bool, torch.complex64, torch.complex128):
        raise ConfigError("tokens must be an integer tensor [batch, time]")
    vocab = student_logits.shape[-1]
    if bool(((tokens < 0) | (tokens >= vocab))[mask].any()):
        raise ConfigError(f"a sampled token lies outside [0, {vocab})")
    student = _clean_log_probs(student_logits, mask)
    teacher = _clean_log_probs(teacher_logits.detach(), mask)
    zeros = torch.zeros(mask.shape, dtype=student_logits.dtype)
    exact = torch.where(mask, (student.exp() * (student - teacher)).sum(dim=-1), zeros)
    index = torch.where(mask, tokens.long(), torch.zeros_like(tokens, dtype=torch.long)).unsqueeze(-1)
    sampled = torch.where(mask, (student.gather(-1, index) - teacher.gather(-1, index)).squeeze(-1), zeros)
    count = int(mask.sum())
    return {"token_kl": exact, "sampled_log_ratio": sampled, "mean_kl": exact.sum() / count, "tokens": count}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def generalized_jsd(student_logits, teacher_logits, mask, beta: float = 0.5, temperature: float = 1.0) -> dict:
    """GKD's generalised JSD per token (TRL's convention): M = beta * teacher + (1 - beta) * student,
    beta * KL(teacher || M) + (1 - beta) * KL(student || M); beta 0 is KL(teacher || student), beta 1
    is KL(student || teacher). `loss` is the mean over the masked positions."""
    import torch

    _check_logits(student_logits, teacher_logits, mask)
    if not _number(beta) or not 0 <= beta <= 1:
        raise ConfigError(f"beta must be a number in [0, 1], got {beta!r}")
    if not _number(temperature) or temperature <= 0:
        raise ConfigError(f"temperature must be a number > 0, got {temperature!r}")
    student = _clean_log_probs(student_logits, mask, temperature)
    teacher = _clean_log_probs(teacher_logits.detach(), mask, temperature)

    def kl(target, other):
        return (target.exp() * (target - other)).sum(dim=-1)

    if beta == 0:
        divergence = kl(teacher, student)
    elif beta == 1:
        divergence = kl(student, teacher)
    else:
        weight = torch.tensor(beta, dtype=student.dtype)
        mixture = torch.logsumexp(torch.stack([student + torch.log1p(-weight), teacher + torch.log(weight)]), dim=0)
        divergence = beta * kl(teacher, mixture) + (1 - beta) * kl(student, mixture)
    divergence = torch.where(mask, divergence, torch.zeros_like(divergence))
    return {"loss": divergence.sum() / int(mask.sum()), "token_divergence": divergence}


def mixed_distillation_loss(student_logits, teacher_logits, mask, on_policy: list[bool], lam: float) -> dict:
    """lam * (mean reverse KL of the on-policy sequences) + (1 - lam) * (that of the fixed ones)."""
    import torch

    _check_logits(student_logits, teacher_logits, mask)
    if not isinstance(on_policy, list) or len(on_policy) != mask.shape[0] or not all(isinstance(f, bool) for f in on_policy):
        raise ConfigError("on_policy must be a list of bools, one per sequence")
    if not _number(lam) or not 0 <= lam <= 1:
        raise ConfigError(f"lam must be a number in [0, 1], got {lam!r}")
    if not bool(mask.any(dim=1).all()):
        raise ConfigError("every sequence needs at least one position in the mask")
    if lam > 0 and not any(on_policy):
        raise ConfigError("lam > 0 needs at least one on-policy sequence")
    if lam < 1 and all(on_policy):
        raise ConfigError("lam < 1 needs at least one fixed sequence")
    student = _clean_log_probs(student_logits, mask)
    teacher = _clean_log_probs(teacher_logits.detach(), mask)
    token_kl = torch.where(mask, (student.exp() * (student - teacher)).sum(dim=-1), torch.zeros(mask.shape, dtype=student.dtype))
    sequence_kl = token_kl.sum(dim=1) / mask.sum(dim=1).to(student.dtype)
    flags = torch.tensor(on_policy)
    loss = torch.zeros((), dtype=student.dtype)
    parts = {}
    for name, chosen, weight in (("on_policy_kl", flags, lam), ("fixed_kl", ~flags, 1 - lam)):
        if bool(chosen.any()):
            part = sequence_kl[chosen].mean()
            parts[name] = float(part.detach())
            if weight > 0:
                loss = loss + weight * part
        else:
            parts[name] = None
    return {"loss": loss, "sequence_kl": [float(value) for value in sequence_kl.detach()], **parts}
