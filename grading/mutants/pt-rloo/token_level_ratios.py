# mutant: token_level_ratios
# exercise: sequence_clipped_loss
# mistake: reuses GRPO's token-level clipping and averages over tokens, so there is no sequence ratio at all.
import torch


def sequence_clipped_loss(logprobs, old_logprobs, advantages, mask, clip_eps=0.2):
    if not (0 < clip_eps < 1) or type(clip_eps) is bool:
        raise ValueError("clip_eps out of range")
    per_token = torch.exp(torch.nan_to_num(logprobs - old_logprobs.detach()))
    weight = advantages.unsqueeze(-1)
    objective = torch.min(per_token * weight, per_token.clamp(1 - clip_eps, 1 + clip_eps) * weight)
    count = mask.sum()
    share = float(((per_token - 1).abs() > clip_eps)[mask].float().mean())
    return {"loss": -(objective * mask).sum() / count, "clip_rate": share,
            "ratios": [float(row) for row in (per_token * mask).sum(dim=1) / mask.sum(dim=1)]}
