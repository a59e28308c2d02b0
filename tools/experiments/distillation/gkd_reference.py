"""TRL's GKD `generalized_jsd_loss` on the logits we give it (a static method: no trainer, no model)."""

from __future__ import annotations

import os


def trl_generalized_jsd(student_logits, teacher_logits, mask, beta: float, temperature: float) -> float:
    """TRL's loss with reduction "batchmean": labels -100 outside the mask, so the sum over the masked
    positions divided by their number."""
    import torch

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.gkd import GKDTrainer

    labels = torch.where(mask, torch.zeros(mask.shape, dtype=torch.long), torch.full(mask.shape, -100))
    with torch.no_grad():
        loss = GKDTrainer.generalized_jsd_loss(student_logits, teacher_logits, labels=labels, beta=beta,
                                               temperature=temperature, reduction="batchmean")
    return float(loss)
