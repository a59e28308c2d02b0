# mutant: per_row_mean_cross_entropy
# exercise: sequence_logprobs
# mistake: a learner's version reusing the SFT loss: labels -100 outside the response and cross_entropy per row, which gives the negative mean, not the summed log-probability.
import torch
import torch.nn.functional as F


def _labels(input_ids, response_mask, vocab):
    if not isinstance(response_mask, torch.Tensor) or response_mask.shape != input_ids.shape:
        raise ValueError("mask shape")
    if response_mask.dtype.is_floating_point or bool(((response_mask != 0) & (response_mask != 1)).any()):
        raise ValueError("mask values")
    if bool(((input_ids < 0) | (input_ids >= vocab)).any()) or bool(response_mask[:, 0].bool().any()):
        raise ValueError("ids or position 0")
    if not bool(response_mask.bool().any(dim=1).all()):
        raise ValueError("empty row")
    return input_ids.masked_fill(~response_mask.bool(), -100)


def sequence_logprobs(logits, input_ids, response_mask):
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or logits.dtype not in (torch.float32, torch.float64) \
            or logits.shape[0] == 0 or logits.shape[1] < 2:
        raise ValueError("logits")
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.int64 or input_ids.shape != logits.shape[:2]:
        raise ValueError("input_ids")
    labels = _labels(input_ids, response_mask, logits.shape[-1])
    rows = [-F.cross_entropy(logits[row, :-1], labels[row, 1:], ignore_index=-100) for row in range(logits.shape[0])]
    return torch.stack(rows)
