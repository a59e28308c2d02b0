# mutant: divides_by_all_positions
# exercise: reduce_sft_loss
# mistake: divides the summed token losses by every position of the batch (padding and prompt included) instead of by the supervised tokens.
def reduce_sft_loss(token_nll, mask, mode="token"):
    if mode not in ("token", "sample"):
        raise ValueError("unknown mode")
    if not isinstance(token_nll, torch.Tensor) or not isinstance(mask, torch.Tensor) or token_nll.dim() != 2 \
            or tuple(token_nll.shape) != tuple(mask.shape) or mask.dtype != torch.bool:
        raise ValueError("token_nll and mask must be same-shape 2-D tensors, mask bool")
    counts = mask.sum(dim=1)
    if int(counts.sum()) == 0:
        raise ValueError("no supervised token")
    empty = [row for row, count in enumerate(counts) if int(count) == 0]
    clean = torch.where(mask, token_nll, torch.zeros_like(token_nll))
    if mode == "token":
        weights = torch.full_like(token_nll, 1.0 / token_nll.numel()) * mask
    else:
        non_empty = int((counts > 0).sum())
        weights = mask * (1.0 / (counts.clamp(min=1) * non_empty)).unsqueeze(1)
    loss = (weights * clean).sum()
    rows = clean.detach().sum(dim=1)
    return {"loss": loss, "token_weights": weights.detach(), "sample_weights": [float(w) for w in weights.sum(dim=1)],
            "per_sample_loss": [None if int(c) == 0 else float(rows[i] / int(c)) for i, c in enumerate(counts)],
            "empty_samples": empty}
