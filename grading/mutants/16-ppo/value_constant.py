# mutant: value_constant
# exercise: ppo_value_loss
# mistake: returns a zero loss whatever the input.
def ppo_value_loss(values, old_values, returns, response_mask, clip_range=0.2):
    return {"loss": torch.zeros((), dtype=values.dtype), "clip_fraction": 0.0}
