# mutant: unclipped_policy_gradient
# exercise: clipped_grpo_loss
# mistake: writes the plain policy-gradient loss -A * log pi averaged over all positions, with no ratio, no clip and no aggregation choice.
import torch


def clipped_grpo_loss(logprobs, old_logprobs, advantages, mask, clip_eps=0.2, aggregation="sequence"):
    if aggregation not in ("sequence", "token"):
        raise ValueError("unknown aggregation")
    weighted = -(advantages[:, None] * logprobs) * mask
    return {"loss": weighted.mean(), "clip_rate": 0.0, "response_tokens": int(mask.sum())}
