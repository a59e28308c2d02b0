"""PPO with a value model on lab problems, rewarded by the strict verifier.

One iteration: sample responses from the policy, score them (1 for a correct complete integer, else
0), compute the reference's log-probs for the KL penalty and the value model's values, build token
rewards and GAE advantages (`signals`), then run a few epochs of minibatch updates of the clipped
policy and value losses (`ppo_losses`). The reference is a frozen copy of the starting policy; the
value model starts from the policy's backbone with a zero head. Greedy exact-match on held-out tasks
(`lab_sampling.exact_match`) is measured before and after training, and the critic's value loss on a
fixed probe batch (rollouts of the starting policy with their Monte Carlo returns) before training
and after every iteration: the training value loss of an iteration moves with the policy's success
rate (its floor is the variance of the 0/1 score), the probe's does not. `value_loss_first` is the
probe's loss of the critic as initialised, `value_loss_last` its mean over the last three iterations. Nothing here prints: progress
goes to `log`.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass

import torch

from tools.data.lab_tasks import LabProblem
from tools.errors import ConfigError
from tools.experiments.reward import ppo_losses, rollouts, signals
from tools.experiments.reward.value_model import ValueModel, frozen_copy
from tools.models import lab_sampling


REWARDS = ("verifier", "shuffled")
"""The PPO stage's rewards: the verifier's score of each response, or the same scores shuffled across the
iteration's batch (the negative control: the same mean reward and the same updates, no link between a
response and its reward)."""

PACKAGE_LOSSES = {"ppo_policy_loss": ppo_losses.policy_loss, "ppo_value_loss": ppo_losses.value_loss}
"""The loss functions a run uses when the caller passes none (the chapter's exercise names)."""


@dataclass(frozen=True)
class PpoConfig:
    iterations: int = 8
    tasks_per_iteration: int = 16
    samples_per_task: int = 4
    max_new_tokens: int = 6
    temperature: float = 1.0
    epochs: int = 2
    minibatch: int = 16
    policy_lr: float = 1e-4
    value_lr: float = 1e-3
    kl_coef: float = 0.02
    gamma: float = 1.0
    lam: float = 0.95
    clip_ratio: float = 0.2
    clip_range: float = 0.2
    grad_clip: float = 1.0
    probe_tasks: int = 64
    reward: str = "verifier"

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ConfigError(f"reward must be one of {REWARDS}, got {self.reward!r}")

    def public(self) -> dict:
        return asdict(self)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def shuffled_scores(scores: torch.Tensor, seed: int) -> torch.Tensor:
    """`scores` in a seeded random order: the control's rewards (the same values, no longer the response's)."""
    order = torch.randperm(len(scores), generator=torch.Generator().manual_seed(seed))
    return scores[order]


def ppo_iteration(policy, reference, value_model, tokenizer, optimizers, tasks: list[LabProblem],
                  config: PpoConfig, seed: int, losses: dict | None = None) -> dict:
    """Sample, score, build the signal and update with `losses` (`PACKAGE_LOSSES` by default);
    return the iteration's measurements."""
    losses = losses or PACKAGE_LOSSES
    batch = rollouts.generate(policy, tokenizer, [task for task in tasks for _ in range(config.samples_per_task)],
                              max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=seed)
    mask = batch.response_mask
    scores = batch.scores if config.reward == "verifier" else shuffled_scores(batch.scores, seed)
    with torch.no_grad():
        old_log_probs = rollouts.response_log_probs(policy, batch).cpu()
        ref_log_probs = rollouts.response_log_probs(reference, batch).cpu()
        old_values = rollouts.response_values(value_model, batch).cpu()
    signal = signals.token_rewards(scores, old_log_probs, ref_log_probs, mask, config.kl_coef)
    estimate = signals.gae(signal["rewards"], old_values, mask, config.gamma, config.lam)
    advantages = (signals.masked_whiten(estimate["advantages"], mask) if int(mask.sum()) > 1
                  else estimate["advantages"])
    policy_optimizer, value_optimizer = optimizers
    order = random.Random(seed).sample(range(len(batch.problems)), len(batch.problems))
    policy_losses, value_losses, clip_fractions, kls = [], [], [], []
    policy.train()
    value_model.train()
    for _ in range(config.epochs):
        for start in range(0, len(order), config.minibatch):
            rows = order[start:start + config.minibatch]
            part = batch.rows(rows)
            index = torch.as_tensor(rows)
            device = next(policy.parameters()).device
            new_log_probs = rollouts.response_log_probs(policy, part)
            pg = losses["ppo_policy_loss"](new_log_probs, old_log_probs[index].to(device),
                                           advantages[index].to(device), part.response_mask.to(device),
                                           config.clip_ratio)
            vf = losses["ppo_value_loss"](rollouts.response_values(value_model, part), old_values[index].to(device),
                                          estimate["returns"][index].to(device), part.response_mask.to(device),
                                          config.clip_range)
            policy_optimizer.zero_grad(set_to_none=True)
            value_optimizer.zero_grad(set_to_none=True)
            (pg["loss"] + vf["loss"]).backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
            torch.nn.utils.clip_grad_norm_(value_model.parameters(), config.grad_clip)
            policy_optimizer.step()
            value_optimizer.step()
            policy_losses.append(float(pg["loss"].detach()))
            value_losses.append(float(vf["loss"].detach()))
            clip_fractions.append(float(pg["clip_fraction"]))
            kls.append(float(pg["approx_kl"]))
    policy.eval()
    value_model.eval()
    return {"mean_score": float(batch.scores.mean()), "mean_kl_to_reference": signal["mean_kl"],
            "policy_loss": _mean(policy_losses), "value_loss": _mean(value_losses),
            "value_loss_first_minibatch": value_losses[0], "clip_fraction": _mean(clip_fractions),
            "approx_kl": _mean(kls), "response_tokens": int(mask.sum())}


def probe_batch(policy, tokenizer, problems: list[LabProblem], config: PpoConfig, seed: int):
    """Rollouts of the starting policy and their Monte Carlo returns (gamma 1, no KL yet: the verifier's
    score on every valid token)."""
    batch = rollouts.generate(policy, tokenizer, [problem for problem in problems for _ in range(config.samples_per_task)],
                              max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=seed)
    return batch, batch.scores[:, None] * batch.response_mask


def probe_value_loss(value_model, batch, returns) -> float:
    """0.5 * the mean squared error of the critic's values against `returns` over the valid tokens."""
    with torch.no_grad():
        values = rollouts.response_values(value_model, batch).cpu()
    mask = batch.response_mask.bool()
    return float(0.5 * ((values - returns)[mask] ** 2).mean())


def constant_value_loss(batch, returns) -> float:
    """The probe loss of the best constant critic (the mean return of the valid tokens everywhere): what a
    critic that learned only the level of the returns reaches."""
    picked = returns[batch.response_mask.bool()].double()
    return float(0.5 * ((picked - picked.mean()) ** 2).mean())


def train_ppo(policy, tokenizer, train_tasks: list[LabProblem], eval_tasks: list[LabProblem],
              config: PpoConfig, seed: int, *, probe_tasks: list[LabProblem] | None = None, losses: dict | None = None,
              log=None, deadline: float | None = None) -> dict:
    """PPO on `policy` (trained in place) for `config.iterations`; held-out exact-match before and
    after, one history entry per iteration. The critic's probe batch samples `probe_tasks` (by default
    problems drawn from `train_tasks`). With a `deadline` (time.monotonic), no iteration starts that
    the last one's duration projects past it; the result says how many ran."""
    say = log or (lambda _: None)
    torch.manual_seed(seed)
    reference = frozen_copy(policy)
    value_model = ValueModel(policy).to(next(policy.parameters()).device)
    optimizers = (torch.optim.AdamW(policy.parameters(), lr=config.policy_lr, weight_decay=0.0),
                  torch.optim.AdamW(value_model.parameters(), lr=config.value_lr, weight_decay=0.0))
    before = lab_sampling.exact_match(policy, tokenizer, problems=eval_tasks)
    say(f"  seed {seed} ({config.reward} reward): held-out exact-match before PPO {before['accuracy']:.3f}")
    rng = random.Random(seed)
    pool = probe_tasks if probe_tasks is not None else train_tasks
    probe, probe_returns = probe_batch(policy, tokenizer, random.Random(seed).sample(pool, min(config.probe_tasks, len(pool))),
                                       config, seed * 1000 + 999)
    probe_before = probe_value_loss(value_model, probe, probe_returns)
    history = []
    for iteration in range(config.iterations):
        if deadline is not None and history and time.monotonic() + history[-1]["seconds"] > deadline:
            say(f"  seed {seed}: stopped after {len(history)} iterations, the next would pass the time limit")
            break
        started = time.perf_counter()
        tasks = rng.sample(train_tasks, min(config.tasks_per_iteration, len(train_tasks)))
        step = ppo_iteration(policy, reference, value_model, tokenizer, optimizers, tasks, config,
                             seed * 1000 + iteration, losses)
        step.update(iteration=iteration, probe_value_loss=probe_value_loss(value_model, probe, probe_returns),
                    seconds=time.perf_counter() - started)
        history.append(step)
        say(f"  seed {seed} iteration {iteration}: score {step['mean_score']:.3f}, value loss {step['value_loss']:.4f}, "
            f"probe value loss {step['probe_value_loss']:.4f}, clip fraction {step['clip_fraction']:.3f}, "
            f"approx KL {step['approx_kl']:.4f}")
    after = lab_sampling.exact_match(policy, tokenizer, problems=eval_tasks)
    say(f"  seed {seed} ({config.reward} reward): held-out exact-match after PPO {after['accuracy']:.3f}")
    return {"seed": seed, "reward": config.reward, "exact_match_before": before["accuracy"],
            "exact_match_after": after["accuracy"], "eval_tasks": len(eval_tasks), "history": history,
            "iterations_run": len(history), "stopped_by_time_limit": len(history) < config.iterations,
            "probe": {"responses": len(probe.problems), "mean_score": float(probe.scores.mean()),
                      "constant_value_loss": constant_value_loss(probe, probe_returns)},
            "value_loss_first": probe_before, "value_loss_last": _mean([item["probe_value_loss"] for item in history[-3:]])}
