# mutant: gae_textbook_no_mask
# exercise: gae_advantages
# mistake: the textbook GAE over every position (next value = values[t + 1] whatever the mask says), masked only at the end.
def gae_advantages(rewards, values, response_mask, gamma, lam):
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    deltas = rewards + gamma * next_values - values
    advantages = deltas.clone()
    for t in range(deltas.shape[1] - 2, -1, -1):
        advantages[:, t] += gamma * lam * advantages[:, t + 1]
    keep = response_mask.to(rewards.dtype)
    return {"advantages": advantages * keep, "returns": (advantages + values) * keep}
