# mutant: balanced_class_average
# exercise: kto_loss
# mistake: a learner's loss that gives each class half of the total, whatever its size, on top of the class weights.
import math

import torch


def _vectors(first, second):
    for item in (first, second):
        if not isinstance(item, torch.Tensor) or item.dtype not in (torch.float32, torch.float64) or item.dim() != 1 \
                or len(item) == 0 or not torch.isfinite(item.detach()).all():
            raise ValueError("log-probabilities")
    if first.shape != second.shape or first.dtype != second.dtype:
        raise ValueError("mismatch")


def _checked(policy_logps, reference_logps, desirable, z0, numbers):
    _vectors(policy_logps, reference_logps)
    if not isinstance(desirable, torch.Tensor) or desirable.dtype != torch.bool or desirable.shape != policy_logps.shape:
        raise ValueError("labels")
    if not isinstance(z0, torch.Tensor) or z0.shape != () or z0.dtype != policy_logps.dtype \
            or not math.isfinite(z0.item()) or z0.item() < 0:
        raise ValueError("z0")
    if any(type(x) not in (int, float) or not math.isfinite(x) or x <= 0 for x in numbers):
        raise ValueError("numbers")


def kto_loss(policy_logps, reference_logps, desirable, z0, beta, desirable_weight=1.0, undesirable_weight=1.0):
    _checked(policy_logps, reference_logps, desirable, z0, (beta, desirable_weight, undesirable_weight))
    margin = beta * (policy_logps - reference_logps.detach() - z0.detach())
    per_example = torch.where(desirable, desirable_weight * torch.sigmoid(-margin), undesirable_weight * torch.sigmoid(margin))
    parts = [per_example[group].mean() for group in (desirable, ~desirable) if group.any()]
    return dict(loss=sum(parts) / len(parts), losses=per_example, rewards=beta * (policy_logps - reference_logps).detach())
