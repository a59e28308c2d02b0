"""How noisy a policy-gradient estimate is under two baselines, measured on the same samples.

Each draw samples a group of answers for every prompt, scores them, and forms the REINFORCE
estimate g = (1/N) sum_i A_i grad log pi(y_i | x_i) once per baseline, from the same answers and the
same per-answer gradients: `leave_one_out` (A_i = r_i minus the mean of the other valid rewards of its
group) and `batch_mean` (A_i = r_i minus the mean of every valid reward of the draw). Over the draws,
the total variance of each estimate (the trace of its covariance) is measured; answers without a
reward (None) get no advantage under either baseline.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tools.experiments.online_rl.batch import pack, response_logprobs
from tools.experiments.online_rl.rollouts import prompt_of, sample_replies


def batch_mean_advantages(group_rewards: list[list[float | None]]) -> list[list[float | None]]:
    """r minus the mean of every valid reward of the batch (all prompts together); None stays None."""
    valid = [reward for group in group_rewards for reward in group if reward is not None]
    mean = sum(valid) / len(valid) if valid else 0.0
    return [[None if reward is None else float(reward - mean) for reward in group] for group in group_rewards]


def estimate_gradients(model, batch: dict, weights: dict[str, Sequence[float]], parameters: list) -> dict:
    """One flat gradient vector per baseline: grad of (1/N) sum_i w_i * sum_t log pi(y_it)."""
    import torch

    mask = batch["completion_mask"].bool()
    token_logprobs = response_logprobs(model, batch)
    sequence_logprobs = torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs)).sum(dim=1)
    results = {}
    names = list(weights)
    for index, name in enumerate(names):
        coefficients = torch.tensor(weights[name], dtype=sequence_logprobs.dtype)
        surrogate = (coefficients * sequence_logprobs).sum() / len(coefficients)
        grads = torch.autograd.grad(surrogate, parameters, retain_graph=index < len(names) - 1, allow_unused=True)
        results[name] = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                   for g, p in zip(grads, parameters)])
    return results


def gradient_variance(model, tokenizer, tasks: Sequence, *, group_size: int, draws: int, max_new_tokens: int,
                      verify: Callable, leave_one_out: Callable, temperature: float = 1.0, seed: int = 0) -> dict:
    """Total variance of the gradient estimate under the leave-one-out and the batch-mean baseline."""
    import torch

    parameters = [p for p in model.parameters() if p.requires_grad]
    estimates = {"leave_one_out": [], "batch_mean": []}
    rewards_seen, mixed_groups = [], 0
    for draw in range(draws):
        groups = sample_replies(model, tokenizer, [prompt_of(task) for task in tasks], group_size,
                                max_new_tokens=max_new_tokens, temperature=temperature, seed=seed * 10_007 + draw)
        rewards = [[verify(reply["text"], task.label, reply["finished"])["reward"] for reply in group]
                   for task, group in zip(tasks, groups)]
        rewards_seen += [reward for group in rewards for reward in group]
        mixed_groups += sum(len(set(group)) > 1 for group in rewards)
        weights = {"leave_one_out": leave_one_out(rewards)["advantages"], "batch_mean": batch_mean_advantages(rewards)}
        flat = {name: [0.0 if value is None else value for group in values for value in group]
                for name, values in weights.items()}
        replies = [reply for group in groups for reply in group]
        batch = pack([reply["prompt_ids"] for reply in replies], [reply["reply_ids"] for reply in replies],
                     tokenizer.pad_token_id)
        for name, vector in estimate_gradients(model, batch, flat, parameters).items():
            estimates[name].append(vector)
    result = {}
    for name, vectors in estimates.items():
        stacked = torch.stack(vectors)
        result[name] = {"total_variance": float(stacked.var(dim=0, unbiased=True).sum()),
                        "mean_norm": float(stacked.mean(dim=0).norm())}
    return {"baselines": result, "draws": draws, "answers_per_draw": group_size * len(tasks),
            "mean_reward": sum(rewards_seen) / len(rewards_seen), "mixed_group_share": mixed_groups / (draws * len(tasks)),
            "variance_ratio": result["leave_one_out"]["total_variance"] / result["batch_mean"]["total_variance"]
            if result["batch_mean"]["total_variance"] > 0 else None}
