# mutant: loss_only_raise
# exercise: pairwise_reward_loss
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def pairwise_reward_loss(chosen_scores, chosen_mask, rejected_scores, rejected_mask, margins=None):
    raise ValueError("not implemented")
