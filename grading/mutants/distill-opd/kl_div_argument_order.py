# mutant: kl_div_argument_order
# exercise: mixed_distillation_loss
# mistake: calls F.kl_div(student_log_probs, teacher_probs) the way most tutorials do, which is the forward KL(teacher || student), and averages over the batch without separating the two kinds.
import torch
import torch.nn.functional as F


def mixed_distillation_loss(student_logits, teacher_logits, mask, on_policy, lam):
    if type(lam) is bool or not (0 <= lam <= 1) or len(on_policy) != student_logits.shape[0]:
        raise ValueError("bad arguments")
    student_log_probs = F.log_softmax(torch.nan_to_num(student_logits), dim=-1)
    with torch.no_grad():
        teacher_probs = F.softmax(torch.nan_to_num(teacher_logits), dim=-1)
    per_position = F.kl_div(student_log_probs, teacher_probs, reduction="none").sum(-1) * mask
    per_row = per_position.sum(1) / mask.sum(1)
    weights = torch.tensor([lam if flag else 1 - lam for flag in on_policy], dtype=per_row.dtype)
    fixed = [float(v) for v, flag in zip(per_row, on_policy) if not flag]
    online = [float(v) for v, flag in zip(per_row, on_policy) if flag]
    return {"loss": (weights * per_row).mean(), "sequence_kl": [float(v) for v in per_row.detach()],
            "on_policy_kl": sum(online) / len(online) if online else None,
            "fixed_kl": sum(fixed) / len(fixed) if fixed else None}
