# mutant: gae_only_raise
# exercise: gae_advantages
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def gae_advantages(rewards, values, response_mask, gamma, lam):
    raise ValueError("not implemented")
