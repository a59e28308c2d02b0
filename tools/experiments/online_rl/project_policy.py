"""The policy side of project 85: 62's delivered adapter checked and loaded for training, one GRPO step behind
the coverage gate, greedy held-out measurement, and the candidate adapter written in peft's format.

A step samples a group of replies per prompt from the current policy, scores every reply with the
verifier integer-answer-v1, and hands the verdicts to the coverage gate (`rollout_coverage`, the
project's TODO 1) *before* any update: only when the gate allows the batch do the groups it calls
scoreable (every reply finished and parsed, rewards not all equal) get group-normalised advantages
(chapter 18's `group_advantages`) and the clipped GRPO loss (chapter 18's `clipped_grpo_loss`). A
truncated or unparsed reply never reaches the loss, so it cannot create a reward difference. Each
step records what the throughput accounting (TODO 2) reads: rollouts sampled and in the loss,
optimiser steps, how far the step moved the policy (the mean absolute change of the batch's
response-token log-probabilities, measured after its updates) and its wall seconds.

The negative control (`shuffle_rng`) runs the same step with the verdicts permuted across the whole
batch: the same rollouts, the same gate, the same number of updates, a reward that no longer says
which reply was right.
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from tools.errors import UpstreamRecordError
from tools.experiments.online_rl.advantages import group_advantages
from tools.experiments.online_rl.batch import pack, response_logprobs
from tools.experiments.online_rl.losses import clipped_grpo_loss
from tools.experiments.online_rl.rollouts import greedy_exact_match, prompt_of, sample_replies
from tools.experiments.online_rl.verifier import verify_integer_answer
from tools.models.adapters import file_hashes


OUTCOME_CODES = {"correct": "c", "wrong": "w", "format_error": "f", "truncated": "t"}
"""One letter per verifier outcome: a step's verdicts are recorded as one string per group ("cwwc...")."""


def outcome_codes(verdicts) -> list[str]:
    """A batch's verdicts as one string of outcome letters per group (the record's compact form)."""
    return ["".join(OUTCOME_CODES[verdict["outcome"]] for verdict in group) for group in verdicts]


def verdicts_of(codes) -> list[list[dict]]:
    """The verdicts back from their letters: integer-answer-v1 pays 1.0 for a correct reply and 0.0 otherwise."""
    outcomes = {letter: outcome for outcome, letter in OUTCOME_CODES.items()}
    return [[{"outcome": outcomes[letter], "reward": 1.0 if letter == "c" else 0.0} for letter in group]
            for group in codes]


@dataclass(frozen=True)
class StepSettings:
    """One arm's GRPO settings (the matched budget: both arms of a seed use the same)."""

    steps: int
    prompts_per_step: int
    group_size: int
    updates_per_batch: int
    learning_rate: float
    max_new_tokens: int
    clip_eps: float = 0.2
    temperature: float = 1.0
    min_scoreable_share: float = 0.5
    max_truncation: float = 0.1
    max_parse_failure: float = 0.1

    def public(self) -> dict:
        return asdict(self)


def adapter_sha256(model) -> str:
    """sha256 of a peft model's adapter tensors (names, dtypes, shapes and bytes), as 62 hashes its adapter."""
    import hashlib

    import torch
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_adapter_files(folder: Path, recorded: dict) -> None:
    """Refuse, before loading, an adapter folder whose files are not exactly those 62 recorded."""
    found = file_hashes(folder) if folder.is_dir() else {}
    wanted = {path: digest for path, digest in recorded.items() if path != "README.md"}
    bad = sorted(path for path in wanted if found.get(path) != wanted[path])
    if bad:
        raise UpstreamRecordError(f"project 62's adapter in {folder} does not match its manifest ({', '.join(bad)} "
                                  "missing or changed). Nothing was run. Fix: python -m tools.course run --chain 85 "
                                  "--run-mode <mode> --label <a new label>", stage="manifest")


def load_policy(base, folder: Path):
    """A trainable copy of `base` with 62's adapter attached (peft), in eval mode: no dropout, so the
    log-probabilities of an update are those of the policy that sampled."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(copy.deepcopy(base), str(folder), is_trainable=True)
    model.eval()
    return model


def held_out(model, tokenizer, problems: Sequence, max_new_tokens: int) -> dict:
    """Greedy exact match on `problems`, judged by the package's verifier (whatever trained the policy)."""
    return greedy_exact_match(model, tokenizer, problems, verify_integer_answer, max_new_tokens=max_new_tokens)


def grpo_step(model, optimizer, tokenizer, tasks: Sequence, settings: StepSettings, coverage_of: Callable, *,
              seed: int, shuffle_rng: random.Random | None = None) -> dict:
    """One sampled batch, the coverage gate, and (when allowed) its updates; the step's measurements."""
    import torch

    started = time.perf_counter()
    groups = sample_replies(model, tokenizer, [prompt_of(task) for task in tasks], settings.group_size,
                            max_new_tokens=settings.max_new_tokens, temperature=settings.temperature, seed=seed)
    verdicts = [[verify_integer_answer(reply["text"], task.label, reply["finished"]) for reply in group]
                for task, group in zip(tasks, groups)]
    if shuffle_rng is not None:
        flat = [verdict for group in verdicts for verdict in group]
        shuffle_rng.shuffle(flat)
        verdicts = [flat[index * settings.group_size:(index + 1) * settings.group_size] for index in range(len(tasks))]
    verdicts = [[{"outcome": v["outcome"], "reward": v["reward"]} for v in group] for group in verdicts]
    coverage = coverage_of(copy.deepcopy(verdicts), settings.min_scoreable_share, settings.max_truncation,
                           settings.max_parse_failure)
    rewards = [verdict["reward"] for group in verdicts for verdict in group]
    record = {"rollouts": len(rewards), "mean_reward": sum(rewards) / len(rewards),
              "verdicts": outcome_codes(verdicts),
              "coverage": coverage,
              "rollouts_in_loss": 0, "optimizer_steps": 0, "policy_change": None, "clip_rates": []}
    chosen = list(coverage["scoreable"]) if coverage["update_allowed"] else []
    if chosen:
        normalised = group_advantages([[verdict["reward"] for verdict in verdicts[index]] for index in chosen])
        prompts, responses, gains = [], [], []
        for index, values in zip(chosen, normalised["advantages"]):
            for reply, value in zip(groups[index], values or []):
                prompts.append(reply["prompt_ids"])
                responses.append(reply["reply_ids"])
                gains.append(value)
        if gains:
            device = next(model.parameters()).device
            batch = {key: value.to(device) for key, value in pack(prompts, responses, tokenizer.pad_token_id).items()}
            mask = batch["completion_mask"].bool()
            advantages = torch.tensor(gains, dtype=torch.float32, device=device)
            with torch.no_grad():
                old = response_logprobs(model, batch)
            for _ in range(settings.updates_per_batch):
                out = clipped_grpo_loss(response_logprobs(model, batch), old, advantages, mask, settings.clip_eps)
                optimizer.zero_grad(set_to_none=True)
                out["loss"].backward()
                optimizer.step()
                record["clip_rates"].append(out["clip_rate"])
            with torch.no_grad():
                new = response_logprobs(model, batch)
            record.update(rollouts_in_loss=len(gains), optimizer_steps=settings.updates_per_batch,
                          policy_change=float(((new - old).abs() * mask).sum() / mask.sum()))
    record["seconds"] = time.perf_counter() - started
    return record


def train_arm(model, tokenizer, problems: Sequence, settings: StepSettings, coverage_of: Callable, *, seed: int,
              control: bool) -> list[dict]:
    """`settings.steps` GRPO steps on `problems` (the same order for every seed and arm); the control
    arm shuffles the verdicts with its own seeded generator."""
    import torch

    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                                  weight_decay=0.0)
    shuffle_rng = random.Random(seed) if control else None
    steps = []
    for step in range(settings.steps):
        start = step * settings.prompts_per_step
        tasks = [problems[(start + offset) % len(problems)] for offset in range(settings.prompts_per_step)]
        steps.append({"step": step, **grpo_step(model, optimizer, tokenizer, tasks, settings, coverage_of,
                                                seed=seed * 1000 + step, shuffle_rng=shuffle_rng)})
    return steps
