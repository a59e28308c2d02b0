# mutant: loss_constant
# exercise: pairwise_reward_loss
# mistake: returns a fixed answer of the right types whatever the input.
def pairwise_reward_loss(chosen_scores, chosen_mask, rejected_scores, rejected_mask, margins=None):
    batch = chosen_scores.shape[0]
    zeros = torch.zeros(batch, dtype=chosen_scores.dtype)
    return {"loss": torch.tensor(math.log(2), dtype=chosen_scores.dtype), "chosen_rewards": zeros,
            "rejected_rewards": zeros.clone(), "accuracy": 0.5, "positions": {"chosen": [0] * batch, "rejected": [0] * batch}}
