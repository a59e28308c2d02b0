# mutant: counts_labels_before_the_shift
# exercise: shifted_token_nll
# mistake: counts the supervised tokens on the unshifted labels, so a label in column 0 that no position predicts inflates the count.
def shifted_token_nll(logits, labels, ignore_index=-100):
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or not logits.is_floating_point():
        raise ValueError("logits must be a floating [batch, time, vocab] tensor")
    if not isinstance(labels, torch.Tensor) or labels.dim() != 2 or labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError("labels must be an integer [batch, time] tensor")
    if tuple(logits.shape[:2]) != tuple(labels.shape) or labels.shape[1] < 2:
        raise ValueError("shapes disagree or too short")
    vocab = logits.shape[-1]
    targets = labels[:, 1:].long()
    mask = targets != ignore_index
    if bool(((targets < 0) | (targets >= vocab))[mask].any()):
        raise ValueError("target out of range")
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = -log_probs.gather(-1, torch.where(mask, targets, torch.zeros_like(targets)).unsqueeze(-1)).squeeze(-1)
    token_nll = torch.where(mask, picked, torch.zeros_like(picked))
    return {"token_nll": token_nll, "mask": mask, "supervised_tokens": int((labels != ignore_index).sum()),
            "unpredicted_labels": 0}
