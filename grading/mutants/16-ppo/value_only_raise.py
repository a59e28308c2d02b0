# mutant: value_only_raise
# exercise: ppo_value_loss
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def ppo_value_loss(values, old_values, returns, response_mask, clip_range=0.2):
    raise ValueError("not implemented")
