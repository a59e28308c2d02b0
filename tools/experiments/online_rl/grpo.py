"""The GRPO update loop: sample a group per prompt, verify, normalise inside groups, clip and step.

The mechanism functions are parameters (`verify`, `advantages_of`, `loss_of`), so a notebook runs the
loop with the learner's own functions and the command line with this package's. Groups that are not
scoreable are dropped before the loss (they carry no signal and would dilute a per-sequence mean);
the share of scoreable groups, the verifier outcomes and the clip rate of every update are recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.experiments.online_rl import advantages as advantages_module
from tools.experiments.online_rl import losses as losses_module
from tools.experiments.online_rl import verifier as verifier_module
from tools.experiments.online_rl.batch import pack, response_logprobs
from tools.experiments.online_rl.rollouts import greedy_exact_match, prompt_of, sample_replies

OUTCOMES = ("correct", "wrong", "format_error", "truncated")


@dataclass(frozen=True)
class GrpoSettings:
    """One GRPO run: group size, steps, prompts per step, updates per sampled batch, optimiser and sampling."""

    group_size: int = 4
    steps: int = 4
    prompts_per_step: int = 2
    updates_per_batch: int = 2
    learning_rate: float = 1e-3
    clip_eps: float = 0.2
    aggregation: str = "sequence"
    max_new_tokens: int = 8
    temperature: float = 1.0
    seed: int = 0

    def public(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Mechanism:
    """The three functions the loop calls; the package's own by default."""

    verify: Callable = verifier_module.verify_integer_answer
    advantages_of: Callable = advantages_module.group_advantages
    loss_of: Callable = losses_module.clipped_grpo_loss


def grpo_step(model, optimizer, tokenizer, tasks: Sequence, settings: GrpoSettings, mechanism: Mechanism,
              step: int) -> dict:
    """One sampled batch and its updates; the step's measurements."""
    import torch

    groups = sample_replies(model, tokenizer, [prompt_of(task) for task in tasks], settings.group_size,
                            max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                            seed=settings.seed * 1000 + step)
    verdicts = [[mechanism.verify(reply["text"], task.label, reply["finished"]) for reply in group]
                for task, group in zip(tasks, groups)]
    rewards = [[verdict["reward"] for verdict in group] for group in verdicts]
    normalised = mechanism.advantages_of(rewards)
    outcomes = [verdict["outcome"] for group in verdicts for verdict in group]
    record = {"step": step, "mean_reward": sum(sum(group) for group in rewards) / len(outcomes),
              "outcomes": {name: outcomes.count(name) for name in OUTCOMES},
              "scoreable_share": normalised["scoreable_share"], "rollouts": len(outcomes), "updates": [],
              "sample_texts": [reply["text"] for reply in groups[0][:4]]}
    prompts, responses, gains = [], [], []
    for group, values in zip(groups, normalised["advantages"]):
        if values is None:
            continue
        for reply, value in zip(group, values):
            prompts.append(reply["prompt_ids"])
            responses.append(reply["reply_ids"])
            gains.append(value)
    record["rollouts_in_loss"] = len(gains)
    if not gains:
        return record
    device = next(model.parameters()).device
    batch = {key: value.to(device) for key, value in pack(prompts, responses, tokenizer.pad_token_id).items()}
    mask = batch["completion_mask"].bool()
    advantages = torch.tensor(gains, dtype=torch.float32, device=device)
    with torch.no_grad():
        old = response_logprobs(model, batch)
    for _ in range(settings.updates_per_batch):
        out = mechanism.loss_of(response_logprobs(model, batch), old, advantages, mask, settings.clip_eps,
                                settings.aggregation)
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        optimizer.step()
        record["updates"].append({"loss": float(out["loss"].detach()), "clip_rate": out["clip_rate"],
                                  "response_tokens": out["response_tokens"]})
    return record


PACKAGE_MECHANISM = Mechanism()


def run_grpo(model, tokenizer, train_tasks: Sequence, eval_tasks: Sequence, settings: GrpoSettings,
             mechanism: Mechanism = PACKAGE_MECHANISM, *, log: Callable | None = None,
             judge: Callable = verifier_module.verify_integer_answer) -> dict:
    """Held-out exact match before, `settings.steps` GRPO steps on `train_tasks`, exact match after, and how
    many of the problems answered correctly before still are (the regression check).

    Training rewards come from `mechanism.verify`; held-out answers are judged by `judge` (the package's
    verifier by default), so a wrong learner verifier cannot make its own run look better."""
    import torch

    torch.manual_seed(settings.seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                                  weight_decay=0.0)
    before = greedy_exact_match(model, tokenizer, eval_tasks, judge, max_new_tokens=settings.max_new_tokens,
                                per_problem=True)
    steps = []
    for step in range(settings.steps):
        start = (step * settings.prompts_per_step) % len(train_tasks)
        tasks = [train_tasks[(start + offset) % len(train_tasks)] for offset in range(settings.prompts_per_step)]
        steps.append(grpo_step(model, optimizer, tokenizer, tasks, settings, mechanism, step))
        if log and (step % 6 == 5 or step == settings.steps - 1):  # every step is in the record
            last = steps[-1]
            clip = [round(update["clip_rate"], 3) for update in last["updates"]]
            log(f"step {step}: mean reward {last['mean_reward']:.2f}, scoreable {last['scoreable_share']:.2f}, "
                f"clip rates {clip}")
    after = greedy_exact_match(model, tokenizer, eval_tasks, judge, max_new_tokens=settings.max_new_tokens,
                               per_problem=True)
    known = [index for index, correct in enumerate(before.pop("correct")) if correct]
    kept = after.pop("correct")
    retained = {"correct_before": len(known), "still_correct_after": sum(kept[index] for index in known)}
    retained["share"] = retained["still_correct_after"] / len(known) if known else None
    return {"settings": settings.public(), "before": before, "after": after, "retained": retained, "steps": steps}
