# mutant: rewards_only_raise
# exercise: token_level_rewards
# mistake: a body that validates nothing and only raises ValueError, to prove the invalid-input tests give it no points.
def token_level_rewards(scores, log_probs, ref_log_probs, response_mask, kl_coef, estimator="k1"):
    raise ValueError("not implemented")
