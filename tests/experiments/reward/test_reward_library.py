"""tools.experiments.reward's building blocks: masks, signals' gate, Bradley-Terry, heads, rollouts, value model, PPO losses."""

from __future__ import annotations

import math

import pytest
import torch

from tools.data.lab_tasks import sample_problems
from tools.experiments.reward import bradley_terry, ppo_losses, rollouts, signals, verl_reference
from tools.experiments.reward.heads import load_reward_model, pad_rows, token_scores
from tools.experiments.reward.masks import last_valid_positions, read_last
from tools.experiments.reward.value_model import ValueModel, frozen_copy


@pytest.fixture
def tiny(tiny_model, tiny_tokenizer, one_cpu_thread):
    """The session's tiny model and tokenizer, read only (sampling restores the model's mode)."""
    return tiny_model, tiny_tokenizer


def test_last_valid_positions_for_every_padding_and_read_last_keeps_gradients():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    assert last_valid_positions(mask) == [1, 2, 2]
    values = torch.arange(9, dtype=torch.float64).reshape(3, 3).requires_grad_(True)
    read = read_last(values, mask)
    assert read.tolist() == [1.0, 5.0, 8.0]
    read.sum().backward()
    assert values.grad.sum() == 3
    with pytest.raises(ValueError):
        last_valid_positions(torch.tensor([[1, 0], [0, 0]]))


def test_signal_gate_rejects_kl_domination_and_constant_advantages():
    mask = torch.tensor([[1, 1, 0]])
    advantages = torch.tensor([[0.5, -0.5, 9.0]], dtype=torch.float64)
    kl = torch.tensor([[0.25, -0.25, 40.0]], dtype=torch.float64)
    scores = torch.tensor([-1.0], dtype=torch.float64)
    assert signals.gate(advantages, mask, kl, 2.0, scores) == {"kl_share": 0.5, "reasons": [], "decision": "accept"}
    assert signals.gate(advantages, mask, kl, 2.1, scores)["reasons"] == ["kl_dominated"]
    zero = signals.gate(torch.zeros(1, 3, dtype=torch.float64), mask, kl, 0.0, scores)
    assert zero["reasons"] == ["constant_advantages"] and zero["kl_share"] == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_advantages_that_are_not_zero_are_rejected_too(dtype):
    """Constant advantages whiten to rounding noise (about 1e-12, not exactly 0), so a gate that only asks for
    exact zeros accepts a signal with nothing in it; the gate judges the spread with a tolerance."""
    mask = torch.ones(2, 3, dtype=torch.long)
    flat = torch.full((2, 3), 0.7, dtype=dtype)
    whitened = signals.masked_whiten(flat, mask)
    assert float(whitened.abs().max()) < 1e-3, "nothing but rounding noise survives whitening"
    no_kl, scores = torch.zeros(2, 3, dtype=dtype), torch.ones(2, dtype=dtype)
    assert signals.gate(flat, mask, no_kl, 0.0, scores)["reasons"] == ["constant_advantages"]
    assert signals.gate(flat * 1000.0, mask, no_kl, 0.0, scores)["reasons"] == ["constant_advantages"]
    varied = flat.clone()
    varied[1, 2] += 1e-3
    assert signals.gate(varied, mask, no_kl, 0.0, scores)["reasons"] == [], "a real difference is a signal"


def test_bradley_terry_is_stable_and_calibration_bins_are_equal_width():
    loss = bradley_terry.pairwise_loss(torch.tensor([-1000.0]), torch.tensor([0.0]))
    assert math.isfinite(float(loss)) and float(loss) == pytest.approx(1000.0)
    assert bradley_terry.sigmoid(-800.0) == 0.0 and bradley_terry.sigmoid(800.0) == 1.0
    bins = bradley_terry.calibration_bins([0.05, 0.15, 0.95, 1.0], [False, True, True, True], 5)
    assert [item["bin"] for item in bins] == [0, 4] and bins[1]["count"] == 2


def test_reward_head_reads_the_token_transformers_reads(tiny_model_dir, one_cpu_thread):
    model, tokenizer = load_reward_model(tiny_model_dir)
    rows = [[5, 6, 7, 8], [9, 10]]
    for side in ("right", "left"):
        ids, mask = pad_rows(rows, tokenizer.pad_token_id, side)
        with torch.no_grad():
            ours = read_last(token_scores(model, ids, mask), mask)
            theirs = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
        assert torch.allclose(ours, theirs, atol=1e-6), side


def test_rollouts_mask_the_response_up_to_its_end_and_log_probs_match_a_plain_forward(tiny):
    model, tokenizer = tiny
    tasks = sample_problems("add", "train", 4, seed=5)
    batch = rollouts.generate(model, tokenizer, tasks, max_new_tokens=5, temperature=1.0, seed=3)
    assert batch.sequences.shape[0] == len(tasks) == len(batch.texts) == len(batch.correct)
    assert batch.response_mask.shape == (len(tasks), batch.sequences.shape[1] - batch.prompt_width)
    for row in batch.response_mask:
        ones = row.nonzero().flatten().tolist()
        assert ones == list(range(len(ones))) and ones, "the response mask is a prefix of the response"
    log_probs = rollouts.response_log_probs(model, batch)
    assert log_probs.shape == batch.response_mask.shape and float(log_probs[batch.response_mask == 0].abs().sum()) == 0
    row = 0
    length = int(batch.attention_mask[row].sum())
    prompt_start = int((batch.attention_mask[row, :batch.prompt_width] == 0).sum())
    ids = batch.sequences[row, prompt_start:prompt_start + length][None]
    with torch.no_grad():
        plain = torch.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
    first = batch.prompt_width - prompt_start
    expected = plain[0, first - 1, ids[0, first]]
    assert float(log_probs[row, 0]) == pytest.approx(float(expected), abs=1e-4), "left padding must not shift positions"


def test_value_model_starts_at_zero_and_frozen_copy_never_trains(tiny):
    model, tokenizer = tiny
    value_model = ValueModel(model)
    batch = rollouts.generate(model, tokenizer, sample_problems("add", "train", 3, seed=6), max_new_tokens=3,
                              temperature=1.0, seed=1)
    assert float(rollouts.response_values(value_model, batch).abs().sum()) == 0.0
    frozen = frozen_copy(model)
    assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())
    assert value_model.backbone is not model.base_model, "the critic has its own backbone"


@pytest.mark.slow  # imports verl (several seconds)
def test_stage_ppo_losses_match_verl():
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=generator, dtype=torch.float64)
    new = old + (torch.rand(3, 5, generator=generator, dtype=torch.float64) - 0.5)
    advantages = torch.randn(3, 5, generator=generator, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    ours = ppo_losses.policy_loss(new, old, advantages, mask, 0.2)
    theirs = verl_reference.policy_loss(new, old, advantages, mask, 0.2)
    assert float(ours["loss"]) == pytest.approx(float(theirs["loss"]), abs=1e-9)
    assert ours["clip_fraction"] == pytest.approx(theirs["clip_fraction"], abs=1e-8)
    values, returns = torch.randn(3, 5, generator=generator, dtype=torch.float64), torch.randn(3, 5, generator=generator,
                                                                                               dtype=torch.float64)
    ours = ppo_losses.value_loss(values, old, returns, mask, 0.2)
    theirs = verl_reference.value_loss(values, old, returns, mask, 0.2)
    assert float(ours["loss"]) == pytest.approx(float(theirs["loss"]), abs=1e-9)
