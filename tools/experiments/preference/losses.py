"""The preference losses the update loops of the preference chapters use (DPO and KTO).

They compute the same quantities as the chapters' exercises (which the learner writes and TRL
checks): the DPO logistic loss on the implicit-reward margin, and KTO's per-example losses against a
reference point. The reference side is always detached.
"""

from __future__ import annotations


def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta: float) -> dict:
    """Mean -logsigmoid(beta * h) with h the log-ratio margin; implicit rewards, margins (detached) and
    the pair accuracy (share of margins > 0)."""
    import torch.nn.functional as F

    chosen = policy_chosen - reference_chosen.detach()
    rejected = policy_rejected - reference_rejected.detach()
    margins = (beta * (chosen - rejected)).detach()
    return {"loss": -F.logsigmoid(beta * (chosen - rejected)).mean(), "chosen_rewards": (beta * chosen).detach(),
            "rejected_rewards": (beta * rejected).detach(), "margins": margins,
            "accuracy": int((margins > 0).sum()) / margins.numel()}


def kto_loss(policy_logps, reference_logps, desirable, z0, beta: float, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> dict:
    """KTO's weighted per-example losses against the detached reference point z0, averaged over every example."""
    import torch

    ratios = policy_logps - reference_logps.detach()
    anchor = z0.detach()
    losses = torch.where(desirable, desirable_weight * (1 - torch.sigmoid(beta * (ratios - anchor))),
                         undesirable_weight * (1 - torch.sigmoid(beta * (anchor - ratios))))
    return {"loss": losses.mean(), "losses": losses, "rewards": (beta * ratios).detach()}


def kto_reference_point(policy_matrix, reference_matrix) -> dict:
    """z0 from the pairs (i, i - 1 mod n) of the prompt x completion log-probability matrices, detached and
    clamped at 0, in the shape of chapter PT-KTO's exercise: `{"z0", "raw_mean", "pairs"}`."""
    import torch

    n = policy_matrix.shape[0]
    rows = torch.arange(n)
    raw = (policy_matrix - reference_matrix).detach()[rows, (rows - 1) % n].mean()
    return {"z0": raw.clamp(min=0), "raw_mean": float(raw),
            "pairs": [[int(i), int(j)] for i, j in zip(rows, (rows - 1) % n)]}
