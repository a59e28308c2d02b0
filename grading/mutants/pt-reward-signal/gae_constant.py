# mutant: gae_constant
# exercise: gae_advantages
# mistake: returns zero advantages and zero returns of the right shape whatever the input.
def gae_advantages(rewards, values, response_mask, gamma, lam):
    return {"advantages": torch.zeros_like(rewards), "returns": torch.zeros_like(rewards)}
