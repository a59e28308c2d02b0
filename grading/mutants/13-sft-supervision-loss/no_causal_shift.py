# mutant: no_causal_shift
# exercise: shifted_token_nll
# mistake: scores the logits of position t against the label of the same position t, so the model is asked to copy its input.
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
    same = labels[:, :-1].long()
    same_mask = same != ignore_index
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = -log_probs.gather(-1, torch.where(same_mask, same, torch.zeros_like(same)).unsqueeze(-1)).squeeze(-1)
    token_nll = torch.where(same_mask, picked, torch.zeros_like(picked))
    return {"token_nll": token_nll, "mask": same_mask, "supervised_tokens": int(same_mask.sum()),
            "unpredicted_labels": int((labels[:, 0] != ignore_index).sum())}
