# mutant: policy_only_raise
# exercise: ppo_policy_loss
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def ppo_policy_loss(log_probs, old_log_probs, advantages, response_mask, clip_ratio=0.2):
    raise ValueError("not implemented")
