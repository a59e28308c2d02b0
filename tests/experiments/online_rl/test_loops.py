"""The model-agnostic loops of online_rl on the tiny model: sampling, the GRPO step and the gradient
variance measurement. Rewards come from small verifiers defined here, so the loops' mechanics are
checked without a model that can do arithmetic (the lab model's effects are tested per chapter)."""

from __future__ import annotations

import pytest
import torch

from tools.data.arithmetic import generate_tasks
from tools.experiments.online_rl.advantages import leave_one_out_advantages
from tools.experiments.online_rl.grpo import GrpoSettings, Mechanism, run_grpo
from tools.experiments.online_rl.rollouts import _cut, sample_replies
from tools.experiments.online_rl.variance import batch_mean_advantages, gradient_variance


@pytest.fixture()
def tiny(one_cpu_thread, fresh_tiny_model, tiny_tokenizer):
    return fresh_tiny_model, tiny_tokenizer


def odd_length_verifier(text, label, finished):
    """Reward 1 for a reply of odd length: a reward that varies inside a group."""
    return {"outcome": "correct" if len(text) % 2 else "wrong", "parsed": None, "reward": float(len(text) % 2)}


def prompt_only_verifier(text, label, finished):
    """Reward fixed by the task alone: every group is uniform, prompts differ."""
    return {"outcome": "correct", "parsed": None, "reward": float(label % 2)}


def test_replies_are_cut_at_their_first_eos():
    assert _cut([5, 6, 2, 7, 2], eos=2, pad=0) == ([5, 6, 2], True)
    assert _cut([5, 6, 0, 0], eos=2, pad=0) == ([5, 6], False)


def test_sampling_gives_groups_of_the_size_asked_and_is_seeded(tiny):
    model, tokenizer = tiny
    prompts = [task.prompt for task in generate_tasks(101, 1)[:2]]
    first = sample_replies(model, tokenizer, prompts, 3, max_new_tokens=5, seed=4)
    again = sample_replies(model, tokenizer, prompts, 3, max_new_tokens=5, seed=4)
    assert [len(group) for group in first] == [3, 3]
    assert [[reply["reply_ids"] for reply in group] for group in first] == \
           [[reply["reply_ids"] for reply in group] for group in again]
    assert all(1 <= len(reply["reply_ids"]) <= 5 for group in first for reply in group)


def test_grpo_updates_only_on_scoreable_groups_and_records_every_update(tiny):
    model, tokenizer = tiny
    before = [p.detach().clone() for p in model.parameters()]
    result = run_grpo(model, tokenizer, generate_tasks(101, 1), generate_tasks(7, 1)[:2],
                      GrpoSettings(group_size=4, steps=2, prompts_per_step=2, updates_per_batch=2, max_new_tokens=6),
                      Mechanism(verify=odd_length_verifier))
    assert len(result["steps"]) == 2 and result["before"]["tasks"] == 2
    updated = [step for step in result["steps"] if step["updates"]]
    assert updated, "odd/even reply lengths make some groups scoreable"
    assert all(len(step["updates"]) == 2 and step["scoreable_share"] > 0 for step in updated)
    assert all(0.0 <= update["clip_rate"] <= 1.0 for step in updated for update in step["updates"])
    assert updated[0]["updates"][0]["clip_rate"] == 0.0, "the first update of a batch has ratio 1 everywhere"
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))

    frozen = [p.detach().clone() for p in model.parameters()]
    uniform = run_grpo(model, tokenizer, generate_tasks(101, 1), generate_tasks(7, 1)[:1],
                       GrpoSettings(group_size=3, steps=1, max_new_tokens=4), Mechanism(verify=prompt_only_verifier))
    assert uniform["steps"][0]["scoreable_share"] == 0.0 and uniform["steps"][0]["updates"] == []
    assert all(torch.equal(a, b) for a, b in zip(frozen, model.parameters())), "no scoreable group, no update"


def test_batch_mean_advantages_subtract_the_mean_of_every_valid_reward():
    (first, missing), second = batch_mean_advantages([[1.0, None], [0.0, 0.0]])
    assert missing is None and first == pytest.approx(2 / 3) and second == pytest.approx([-1 / 3, -1 / 3])


def test_leave_one_out_removes_the_prompt_effect_the_batch_mean_keeps(tiny):
    model, tokenizer = tiny
    tasks = generate_tasks(101, 1)
    result = gradient_variance(model, tokenizer, tasks, group_size=3, draws=4, max_new_tokens=4,
                               verify=prompt_only_verifier, leave_one_out=leave_one_out_advantages)
    assert result["baselines"]["leave_one_out"]["total_variance"] == 0.0, "uniform groups: every LOO advantage is 0"
    assert result["baselines"]["batch_mean"]["total_variance"] > 0.0
    assert result["variance_ratio"] == 0.0 and result["mixed_group_share"] == 0.0
