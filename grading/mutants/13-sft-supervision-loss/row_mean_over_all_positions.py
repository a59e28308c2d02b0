# mutant: row_mean_over_all_positions
# exercise: reduce_sft_loss
# mistake: takes each sample's mean over all of its positions (masked zeros included), so in "sample" mode short replies in long rows are diluted.
def reduce_sft_loss(token_nll, mask, mode="token"):
    if mode != "token" and mode != "sample" or type(mode) is not str:
        raise ValueError("mode must be token or sample")
    if not (torch.is_tensor(token_nll) and torch.is_tensor(mask)):
        raise ValueError("tensors expected")
    if token_nll.ndim != 2 or token_nll.shape != mask.shape or mask.dtype is not torch.bool \
            or not torch.is_floating_point(token_nll):
        raise ValueError("token_nll must be floating [batch, positions] and mask a bool of the same shape")
    if not bool(mask.any()):
        raise ValueError("nothing supervised")
    zeroed = token_nll.masked_fill(~mask, 0.0)
    per_row = mask.sum(dim=1).tolist()
    supervised_rows = [row for row, n in enumerate(per_row) if n > 0]
    if mode == "token":
        loss = zeroed.sum() / sum(per_row)
        row_share = [n / sum(per_row) for n in per_row]
        weights = mask.to(token_nll.dtype) / sum(per_row)
    else:
        row_means = zeroed.sum(dim=1) / token_nll.shape[1]
        loss = row_means[supervised_rows].mean()
        row_share = [1 / len(supervised_rows) if n else 0.0 for n in per_row]
        weights = mask.to(token_nll.dtype) / (token_nll.shape[1] * len(supervised_rows))
    means = [float(zeroed[row].detach().sum()) / n if n else None for row, n in enumerate(per_row)]
    return {"loss": loss, "token_weights": weights.detach(), "sample_weights": row_share, "per_sample_loss": means,
            "empty_samples": [row for row, n in enumerate(per_row) if n == 0]}
