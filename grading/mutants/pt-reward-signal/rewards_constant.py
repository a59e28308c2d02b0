# mutant: rewards_constant
# exercise: token_level_rewards
# mistake: returns zeros of the right shape and the last column as the score position whatever the input.
def token_level_rewards(scores, log_probs, ref_log_probs, response_mask, kl_coef, estimator="k1"):
    zeros = torch.zeros_like(log_probs)
    return {"kl": zeros, "rewards": zeros.clone(), "score_positions": [log_probs.shape[1] - 1] * log_probs.shape[0],
            "mean_kl": 0.0}
