# mutant: probabilities_not_logs
# exercise: dpo_loss
# mistake: a learner's version that forms the odds from exponentiated log-probabilities and logs the sigmoid, never detaching the reference.
import math

import torch


def _finite_vectors(*tensors):
    first = tensors[0]
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or len(tensor) == 0 \
                or tensor.dtype not in (torch.float32, torch.float64) or tensor.shape != first.shape \
                or tensor.dtype != first.dtype or not torch.isfinite(tensor.detach()).all():
            raise ValueError("bad log-probabilities")


def dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    _finite_vectors(policy_chosen, policy_rejected, reference_chosen, reference_rejected)
    if type(beta) not in (int, float) or not math.isfinite(beta) or beta <= 0:
        raise ValueError("beta")
    chosen_ratio = torch.exp(policy_chosen) / torch.exp(reference_chosen)
    rejected_ratio = torch.exp(policy_rejected) / torch.exp(reference_rejected)
    good, bad = beta * torch.log(chosen_ratio), beta * torch.log(rejected_ratio)
    loss = torch.mean(-torch.log(torch.sigmoid(good - bad)))
    return {"loss": loss, "chosen_rewards": good.detach(), "rejected_rewards": bad.detach(),
            "margins": (good - bad).detach(), "accuracy": float((good > bad).float().mean())}
