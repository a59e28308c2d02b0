"""How noisy a policy-gradient estimate is under two baselines, measured on the same samples.

Each draw samples a group of answers for every prompt, scores them, and forms the REINFORCE
estimate g = (1/N) sum_i A_i grad log pi(y_i | x_i) once per baseline, from the same answers and the
same per-answer gradients: `leave_one_out` (A_i = r_i minus the mean of the other valid rewards of its
group) and `batch_mean` (A_i = r_i minus the mean of every valid reward of the draw). Over the draws,
the total variance of each estimate (the trace of its covariance) is measured; answers without a
reward (None) get no advantage under either baseline. Other baselines can be passed by name
(`baselines`): `no_baseline_advantages` (REINFORCE on the raw rewards), `wrong_only_advantages` (a
constant baseline of 1) and `group_mean_advantages` (r minus the mean of its own group, r included) are here; `mean_gradients` compares the mean
gradients of two baselines (cosine, norm ratio, projection). Every weighting of a draw is formed from the same
per-answer gradients, which also give each answer's gradient norm; `ratio_split` splits a variance ratio into
the part the rewards alone explain, the part the per-answer gradient norms add, and what is left.
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


def no_baseline_advantages(group_rewards: list[list[float | None]]) -> list[list[float | None]]:
    """The raw rewards as advantages (plain REINFORCE, no baseline); None stays None."""
    return [[None if reward is None else float(reward) for reward in group] for group in group_rewards]


def wrong_only_advantages(group_rewards: list[list[float | None]]) -> list[list[float | None]]:
    """r - 1: a constant baseline of 1, so that with 0/1 rewards only the unrewarded answers carry
    weight (-1 each); the counterpart of `no_baseline_advantages`, where only the rewarded ones do."""
    return [[None if reward is None else float(reward - 1.0) for reward in group] for group in group_rewards]


def group_mean_advantages(group_rewards: list[list[float | None]]) -> list[list[float | None]]:
    """r minus the mean of the valid rewards of its own group, r itself included; None stays None."""
    result = []
    for group in group_rewards:
        valid = [reward for reward in group if reward is not None]
        mean = sum(valid) / len(valid) if valid else 0.0
        result.append([None if reward is None else float(reward - mean) for reward in group])
    return result


def mean_gradients(first, second) -> dict:
    """How the mean gradient `second` relates to `first`: cosine, |second| / |first| and the
    projection <second, first> / |first|^2 (the scale of `second` along `first`)."""
    import torch

    first_norm, second_norm = float(first.norm()), float(second.norm())
    if first_norm == 0.0 or second_norm == 0.0:
        return {"cosine": None, "norm_ratio": None, "projection": None}
    return {"cosine": float(torch.dot(first, second) / (first_norm * second_norm)),
            "norm_ratio": second_norm / first_norm, "projection": float(torch.dot(first, second)) / first_norm ** 2}


def answer_gradients(model, batch: dict, parameters: list):
    """One flat gradient vector per answer, stacked [answers, parameters]: grad of sum_t log pi(y_it)
    (each answer forwarded alone, so no answer's graph is walked twice)."""
    import torch

    rows = []
    for index in range(batch["completion_ids"].shape[0]):
        one = {key: value[index:index + 1] for key, value in batch.items()}
        mask = one["completion_mask"].bool()
        token_logprobs = response_logprobs(model, one)
        total = torch.where(mask, token_logprobs, torch.zeros_like(token_logprobs)).sum()
        grads = torch.autograd.grad(total, parameters, allow_unused=True)
        rows.append(torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                               for g, p in zip(grads, parameters)]))
    return torch.stack(rows)


def ratio_split(weights_top, weights_bottom, squared_norms, measured_top: float, measured_bottom: float) -> dict:
    """Split the measured variance ratio top / bottom of two weightings of the same answers into three
    factors whose product is the measured ratio:
    `advantage_part` = sum w_top^2 / sum w_bottom^2 (from the rewards alone: what the ratio would be if
    every answer's gradient were equally large and the answers uncorrelated); `norm_part` = (sum w_top^2
    |g|^2 / sum w_top^2) / (sum w_bottom^2 |g|^2 / sum w_bottom^2) (how the per-answer gradient norms,
    weighted by each weighting, change it); `residual` = measured / (advantage_part * norm_part) (what the
    uncorrelated approximation misses: the mean gradient and the correlations between answers).
    None where a denominator is 0."""
    top = sum(w * w for w in weights_top)
    bottom = sum(w * w for w in weights_bottom)
    top_norm = sum(w * w * n for w, n in zip(weights_top, squared_norms))
    bottom_norm = sum(w * w * n for w, n in zip(weights_bottom, squared_norms))
    if min(top, bottom, top_norm, bottom_norm, measured_bottom) <= 0:
        return {"measured": None, "advantage_part": None, "norm_part": None, "residual": None}
    measured = measured_top / measured_bottom
    advantage_part = top / bottom
    norm_part = (top_norm / top) / (bottom_norm / bottom)
    return {"measured": measured, "advantage_part": advantage_part, "norm_part": norm_part,
            "residual": measured / (advantage_part * norm_part)}


def gradient_variance(model, tokenizer, tasks: Sequence, *, group_size: int, draws: int, max_new_tokens: int,
                      verify: Callable, leave_one_out: Callable, temperature: float = 1.0, seed: int = 0,
                      baselines: dict[str, Callable] | None = None, keep_means: bool = False) -> dict:
    """Total variance of the gradient estimate under the leave-one-out and the batch-mean baseline,
    and any further `baselines` (name -> advantages of the draw's group rewards), from one gradient per
    answer (`answer_gradients`), so that every weighting of a draw uses the same per-answer gradients.
    Also returned: every answer's reward, weights and squared gradient norm (`answers`), the share p of
    rewarded answers, and the per-outcome gradient norms (mean |g| and mean |g|^2 over the rewarded and
    over the unrewarded answers). With `keep_means`, each baseline's mean gradient vector is returned
    under `mean_vectors` (not JSON)."""
    import torch

    parameters = [p for p in model.parameters() if p.requires_grad]
    advantage_functions = {"leave_one_out": lambda rewards: leave_one_out(rewards)["advantages"],
                           "batch_mean": batch_mean_advantages, **(baselines or {})}
    estimates = {name: [] for name in advantage_functions}
    answers = {"reward": [], "squared_norm": [], "weights": {name: [] for name in advantage_functions}}
    mixed_groups = 0
    for draw in range(draws):
        groups = sample_replies(model, tokenizer, [prompt_of(task) for task in tasks], group_size,
                                max_new_tokens=max_new_tokens, temperature=temperature, seed=seed * 10_007 + draw)
        rewards = [[verify(reply["text"], task.label, reply["finished"])["reward"] for reply in group]
                   for task, group in zip(tasks, groups)]
        mixed_groups += sum(len(set(group)) > 1 for group in rewards)
        weights = {name: function(rewards) for name, function in advantage_functions.items()}
        flat = {name: [0.0 if value is None else float(value) for group in values for value in group]
                for name, values in weights.items()}
        replies = [reply for group in groups for reply in group]
        batch = pack([reply["prompt_ids"] for reply in replies], [reply["reply_ids"] for reply in replies],
                     tokenizer.pad_token_id)
        per_answer = answer_gradients(model, batch, parameters)
        for name, vector in flat.items():
            estimates[name].append(torch.tensor(vector, dtype=per_answer.dtype) @ per_answer / len(vector))
            answers["weights"][name] += vector
        answers["reward"] += [reward for group in rewards for reward in group]
        answers["squared_norm"] += [float(value) for value in (per_answer.double() ** 2).sum(dim=1)]
    result, means = {}, {}
    for name, vectors in estimates.items():
        stacked = torch.stack(vectors)
        means[name] = stacked.mean(dim=0)
        result[name] = {"total_variance": float(stacked.var(dim=0, unbiased=True).sum()),
                        "mean_norm": float(means[name].norm())}
    scored = [reward for reward in answers["reward"] if reward is not None]

    def outcome_norms(keep) -> dict:
        picked = [norm for reward, norm in zip(answers["reward"], answers["squared_norm"])
                  if reward is not None and keep(reward)]
        return {"answers": len(picked), "mean_squared_norm": sum(picked) / len(picked) if picked else None,
                "mean_norm": sum(value ** 0.5 for value in picked) / len(picked) if picked else None}

    extra = {"mean_vectors": means} if keep_means else {}
    return {**extra, "baselines": result, "draws": draws, "answers_per_draw": group_size * len(tasks),
            "mean_reward": sum(scored) / len(scored), "mixed_group_share": mixed_groups / (draws * len(tasks)),
            "answers": answers,
            "gradient_norms": {"rewarded": outcome_norms(lambda reward: reward > 0),
                               "unrewarded": outcome_norms(lambda reward: reward <= 0)},
            "variance_ratio": result["leave_one_out"]["total_variance"] / result["batch_mean"]["total_variance"]
            if result["batch_mean"]["total_variance"] > 0 else None}
