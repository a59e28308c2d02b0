# mutant: policy_constant
# exercise: ppo_policy_loss
# mistake: returns a zero loss and zero diagnostics whatever the input.
def ppo_policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio=0.2):
    return {"loss": torch.zeros((), dtype=log_probs.dtype), "clip_fraction": 0.0, "approx_kl": 0.0}
