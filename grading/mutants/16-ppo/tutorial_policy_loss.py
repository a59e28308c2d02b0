# mutant: tutorial_policy_loss
# exercise: ppo_policy_loss
# mistake: the loop of many tutorials: the mean over every position (no mask) of -min(r A, clip(r) A), with no checks.
def ppo_policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio=0.2):
    r = (log_probs - old_log_probs).exp()
    surrogate = torch.min(r * advantages, torch.clamp(r, 1 - clip_ratio, 1 + clip_ratio) * advantages)
    frac = (torch.abs(r - 1) > clip_ratio).double().mean().item()
    kl = (old_log_probs - log_probs).mean().item()
    return {"loss": -surrogate.mean(), "clip_fraction": frac, "approx_kl": kl}
