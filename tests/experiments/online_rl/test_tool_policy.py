"""PT-AGENTIC-RL's policy pieces: the episode's token segments match the chat template (observations under
the tool role), a candidate's score reads the assembled loss mask and turn ids, and the advantage's
baseline is the same quantity as the return and leaves the episode's own reward out."""

from __future__ import annotations

import math
import random

import pytest

from tools.experiments.online_rl import tool_chat, tool_policy, trajectories


@pytest.fixture(scope="module")
def lab(lab_models):
    from tools.models.loading import load_causal_lm

    return load_causal_lm(lab_models["lab"])


def test_segments_concatenate_to_the_templates_conversation_with_a_tool_role(lab):
    _, tokenizer = lab
    messages = [{"role": "user", "content": "Compute 23 * 4."}]
    segments = [tool_chat.prompt_segment(tokenizer, messages),
                tool_chat.model_segment(tokenizer, messages, "CALC 23 * 4"),
                tool_chat.tool_segment(tokenizer, messages, "CALC 23 * 4", "RESULT 92")]
    conversation = messages + [{"role": "assistant", "content": "CALC 23 * 4"}, {"role": "tool", "content": "RESULT 92"}]
    whole = tokenizer.apply_chat_template(conversation, tokenize=True, add_generation_prompt=True)
    assert [token for segment in segments for token in segment["token_ids"]] == list(getattr(whole, "input_ids", whole))
    assert tokenizer.decode(segments[1]["token_ids"]) == "CALC 23 * 4<|im_end|>", "the model's turn ends with its own end token"
    observation = tokenizer.decode(segments[2]["token_ids"])
    assert observation == "\n<|im_start|>tool\nRESULT 92<|im_end|>\n<|im_start|>assistant\n"
    assert "<|im_start|>user" not in observation, "observations are not the user's words"


def test_a_candidates_score_sums_only_its_own_turns_model_tokens(lab, one_cpu_thread):
    import torch

    model, tokenizer = lab
    messages = [{"role": "user", "content": "Compute 23 * 4."}]
    history = [tool_chat.prompt_segment(tokenizer, messages), tool_chat.model_segment(tokenizer, messages, "CALC 23 * 4"),
               tool_chat.tool_segment(tokenizer, messages, "CALC 23 * 4", "RESULT 92")]
    later = messages + [{"role": "assistant", "content": "CALC 23 * 4"}, {"role": "tool", "content": "RESULT 92"}]
    option = tool_chat.model_segment(tokenizer, later, "ANSWER 92")
    with torch.no_grad():
        (score,) = tool_policy.candidate_scores(model, [(history, [option])], trajectories.assemble_trajectory)
        ids = [token for segment in history + [option] for token in segment["token_ids"]]
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    start = len(ids) - len(option["token_ids"])
    expected = sum(float(torch.log_softmax(logits[position - 1], -1)[ids[position]]) for position in range(start, len(ids)))
    assert float(score[0]) == pytest.approx(expected, abs=1e-4)

    def every_token_in_the_last_turn(segments):
        assembled = trajectories.assemble_trajectory(segments)
        last = assembled["model_turns"] - 1
        return {**assembled, "loss_mask": [1] * len(assembled["loss_mask"]), "turn_ids": [last] * len(assembled["turn_ids"])}

    with torch.no_grad():
        (wrong,) = tool_policy.candidate_scores(model, [(history, [option])], every_token_in_the_last_turn)
    assert float(wrong[0]) < expected - 1.0, "a mask that lets the prompt and the tool's tokens in changes the score"


def test_a_successful_episodes_early_turn_keeps_a_positive_advantage_when_most_episodes_succeed():
    """gamma = 0.9 and 15 of 16 episodes succeed: the old baseline (the batch's mean reward 0.9375, own episode
    included, subtracted from the discounted return 0.9) gave the calculator turn -0.0375."""
    turn_ids = [[-1, 0, 0, -1, 1, 1]] * 15 + [[-1, 0, 0]]
    rewards = [1.0] * 15 + [0.0]
    advantages = tool_policy.episode_advantages(turn_ids, rewards, 0.9)
    assert 0.9 * 1.0 - sum(rewards) / len(rewards) < 0, "the case the old baseline got wrong"
    calc, answer = advantages[0]
    assert calc == pytest.approx(0.9 * (1.0 - 14 / 15)) and answer == pytest.approx(1.0 - 14 / 15)
    assert calc > 0 and answer > 0
    (failed,) = advantages[-1]
    assert failed == pytest.approx(0.0 - 1.0), "leave-one-out: the failed episode is compared with the 15 others"


def test_the_baseline_leaves_the_episodes_own_reward_out_and_uses_the_learners_attribution():
    advantages = tool_policy.episode_advantages([[0], [0]], [1.0, 0.0], 1.0)
    assert advantages == [[1.0], [-1.0]], "own episode included, the mean 0.5 would halve both"
    calls = []

    def spy(turn_ids, reward, gamma=1.0, baseline=0.0):
        calls.append((list(turn_ids), reward, gamma))
        return trajectories.attribute_reward(turn_ids, reward, gamma, baseline)

    tool_policy.episode_advantages([[0, 1], [0]], [1.0, 0.0], 0.5, spy)
    assert ([0, 1], 1.0, 0.5) in calls and ([0, 1], 0.0, 0.5) in calls and ([0], 1.0, 0.5) in calls
    with pytest.raises(ValueError):
        tool_policy.episode_advantages([[0]], [1.0], 0.9)


def test_shuffled_rewards_and_lockstep_episodes_are_seeded(lab, one_cpu_thread):
    model, tokenizer = lab
    tasks = tool_policy.make_tasks(3, 5)
    first = tool_policy.play_batch(model, tokenizer, tasks, tool_policy.PACKAGE_MECHANISM, max_turns=3, greedy=False,
                                   rng=random.Random(1), temperature=4.0)
    again = tool_policy.play_batch(model, tokenizer, tasks, tool_policy.PACKAGE_MECHANISM, max_turns=3, greedy=False,
                                   rng=random.Random(1), temperature=4.0)
    assert [e["actions"] for e in first] == [e["actions"] for e in again]
    for episode in first:
        assembled = trajectories.assemble_trajectory(episode["segments"])
        assert assembled["model_turns"] == len(episode["actions"]) == len(episode["turns"])
        assert episode["state"]["done"] and math.isfinite(episode["reward"])
    with pytest.raises(ValueError):
        tool_policy.ToolSettings(reward="none")
