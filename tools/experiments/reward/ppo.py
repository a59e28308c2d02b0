"""PPO with a value model on arithmetic tasks, rewarded by the strict verifier.

One iteration: sample responses from the policy, score them (1 for a correct complete integer, else
0), compute the reference's log-probs for the KL penalty and the value model's values, build token
rewards and GAE advantages (`signals`), then run a few epochs of minibatch updates of the clipped
policy and value losses (`ppo_losses`). The reference is a frozen copy of the starting policy; the
value model starts from the policy's backbone with a zero head. Greedy exact-match on held-out tasks
is measured before and after training. Nothing here prints: progress goes to `log`.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass

import torch

from tools.data.arithmetic import ArithmeticTask
from tools.experiments.reward import ppo_losses, rollouts, signals
from tools.experiments.reward.value_model import ValueModel, frozen_copy


@dataclass(frozen=True)
class PpoConfig:
    iterations: int = 6
    tasks_per_iteration: int = 8
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

    def public(self) -> dict:
        return asdict(self)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def ppo_iteration(policy, reference, value_model, tokenizer, optimizers, tasks: list[ArithmeticTask],
                  config: PpoConfig, seed: int) -> dict:
    """Sample, score, build the signal and update; return the iteration's measurements."""
    batch = rollouts.generate(policy, tokenizer, [task for task in tasks for _ in range(config.samples_per_task)],
                              max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=seed)
    mask = batch.response_mask
    with torch.no_grad():
        old_log_probs = rollouts.response_log_probs(policy, batch).cpu()
        ref_log_probs = rollouts.response_log_probs(reference, batch).cpu()
        old_values = rollouts.response_values(value_model, batch).cpu()
    signal = signals.token_rewards(batch.scores, old_log_probs, ref_log_probs, mask, config.kl_coef)
    estimate = signals.gae(signal["rewards"], old_values, mask, config.gamma, config.lam)
    advantages = (signals.masked_whiten(estimate["advantages"], mask) if int(mask.sum()) > 1
                  else estimate["advantages"])
    policy_optimizer, value_optimizer = optimizers
    order = random.Random(seed).sample(range(len(batch.tasks)), len(batch.tasks))
    losses, value_losses, clip_fractions, kls = [], [], [], []
    policy.train()
    value_model.train()
    for _ in range(config.epochs):
        for start in range(0, len(order), config.minibatch):
            rows = order[start:start + config.minibatch]
            part = batch.rows(rows)
            index = torch.as_tensor(rows)
            device = next(policy.parameters()).device
            new_log_probs = rollouts.response_log_probs(policy, part)
            pg = ppo_losses.policy_loss(new_log_probs, old_log_probs[index].to(device), advantages[index].to(device),
                                        part.response_mask.to(device), config.clip_ratio)
            vf = ppo_losses.value_loss(rollouts.response_values(value_model, part), old_values[index].to(device),
                                       estimate["returns"][index].to(device), part.response_mask.to(device),
                                       config.clip_range)
            policy_optimizer.zero_grad(set_to_none=True)
            value_optimizer.zero_grad(set_to_none=True)
            (pg["loss"] + vf["loss"]).backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.grad_clip)
            torch.nn.utils.clip_grad_norm_(value_model.parameters(), config.grad_clip)
            policy_optimizer.step()
            value_optimizer.step()
            losses.append(float(pg["loss"].detach()))
            value_losses.append(float(vf["loss"].detach()))
            clip_fractions.append(pg["clip_fraction"])
            kls.append(pg["approx_kl"])
    policy.eval()
    value_model.eval()
    return {"mean_score": float(batch.scores.mean()), "mean_kl_to_reference": signal["mean_kl"],
            "policy_loss": _mean(losses), "value_loss": _mean(value_losses),
            "value_loss_first_minibatch": value_losses[0], "clip_fraction": _mean(clip_fractions),
            "approx_kl": _mean(kls), "response_tokens": int(mask.sum())}


def train_ppo(policy, tokenizer, train_tasks: list[ArithmeticTask], eval_tasks: list[ArithmeticTask],
              config: PpoConfig, seed: int, *, log=None, deadline: float | None = None) -> dict:
    """PPO on `policy` (trained in place) for `config.iterations`; held-out exact-match before and
    after, one history entry per iteration. With a `deadline` (time.monotonic), no iteration starts
    that the last one's duration projects past it; the result says how many ran."""
    say = log or (lambda _: None)
    torch.manual_seed(seed)
    reference = frozen_copy(policy)
    value_model = ValueModel(policy).to(next(policy.parameters()).device)
    optimizers = (torch.optim.AdamW(policy.parameters(), lr=config.policy_lr, weight_decay=0.0),
                  torch.optim.AdamW(value_model.parameters(), lr=config.value_lr, weight_decay=0.0))
    before = rollouts.exact_match(policy, tokenizer, eval_tasks, max_new_tokens=config.max_new_tokens)
    say(f"  seed {seed}: held-out exact-match before PPO {before['exact_match']:.3f}")
    rng = random.Random(seed)
    history = []
    for iteration in range(config.iterations):
        if deadline is not None and history and time.monotonic() + history[-1]["seconds"] > deadline:
            say(f"  seed {seed}: stopped after {len(history)} iterations, the next would pass the time limit")
            break
        started = time.perf_counter()
        tasks = rng.sample(train_tasks, min(config.tasks_per_iteration, len(train_tasks)))
        step = ppo_iteration(policy, reference, value_model, tokenizer, optimizers, tasks, config,
                             seed * 1000 + iteration)
        step.update(iteration=iteration, seconds=time.perf_counter() - started)
        history.append(step)
        say(f"  seed {seed} iteration {iteration}: score {step['mean_score']:.3f}, value loss {step['value_loss']:.4f}, "
            f"clip fraction {step['clip_fraction']:.3f}, approx KL {step['approx_kl']:.4f}")
    after = rollouts.exact_match(policy, tokenizer, eval_tasks, max_new_tokens=config.max_new_tokens)
    say(f"  seed {seed}: held-out exact-match after PPO {after['exact_match']:.3f}")
    return {"seed": seed, "exact_match_before": before["exact_match"], "exact_match_after": after["exact_match"],
            "eval_tasks": len(eval_tasks), "history": history, "iterations_run": len(history),
            "stopped_by_time_limit": len(history) < config.iterations,
            "value_loss_first": history[0]["value_loss"], "value_loss_last": history[-1]["value_loss"]}
