"""PT-REWARD-SIGNAL's library: the example, the figures, the stage's own signals and the verl check."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT
from tools.chapters import reward_signal as chapter
from tools.chapters import tensor_checks
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.experiments.reward import signals
from tools.experiments.reward.masks import last_valid_positions

EXERCISES = ("token_level_rewards", "gae_advantages", "whiten_and_gate")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, with the names its setup cell imports."""
    notebook = read_notebook(find_chapter("PT-REWARD-SIGNAL", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch, **{name: getattr(tensor_checks, name) for name in dir(tensor_checks)
                                                  if name.startswith("check_")}}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def _random_batch(seed: int, batch: int = 4, time: int = 7) -> dict:
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, time, generator=generator) > 0.3).long()
    mask[:, 0] = 1
    return {"scores": torch.randn(batch, generator=generator, dtype=torch.float64),
            "log_probs": -torch.rand(batch, time, generator=generator, dtype=torch.float64) * 3,
            "ref_log_probs": -torch.rand(batch, time, generator=generator, dtype=torch.float64) * 3,
            "values": torch.randn(batch, time, generator=generator, dtype=torch.float64), "response_mask": mask}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stage_signals_agree_with_the_chapter_reference(reference, seed):
    """The stage and the figures use `signals`; it must compute what the learner is taught."""
    batch = _random_batch(seed)
    for estimator in ("k1", "k3"):
        ours = signals.token_rewards(batch["scores"], batch["log_probs"], batch["ref_log_probs"],
                                     batch["response_mask"], 0.2, estimator)
        taught = reference["token_level_rewards"](batch["scores"], batch["log_probs"], batch["ref_log_probs"],
                                                  batch["response_mask"], 0.2, estimator)
        assert torch.equal(ours["rewards"], taught["rewards"]) and ours["score_positions"] == taught["score_positions"]
        assert ours["mean_kl"] == pytest.approx(taught["mean_kl"], rel=1e-12)
    stage = signals.gae(ours["rewards"], batch["values"], batch["response_mask"], 0.99, 0.9)
    taught = reference["gae_advantages"](ours["rewards"], batch["values"], batch["response_mask"], 0.99, 0.9)
    assert torch.allclose(stage["advantages"], taught["advantages"], atol=1e-12)
    assert torch.allclose(stage["returns"], taught["returns"], atol=1e-12)
    gated = reference["whiten_and_gate"](stage["advantages"], batch["response_mask"], ours["kl"], 0.2, batch["scores"])
    assert torch.allclose(signals.masked_whiten(stage["advantages"], batch["response_mask"]), gated["whitened"], atol=1e-12)
    assert signals.kl_share(ours["kl"], batch["response_mask"], 0.2, batch["scores"]) == pytest.approx(gated["kl_share"])


@pytest.mark.slow  # imports verl (several seconds)
def test_framework_check_matches_verl_and_catches_a_wrong_whitening(reference):
    result = chapter.compare_with_verl(chapter.example_batch(), reference)
    assert result["matches"] and result["max_abs_diff"] <= chapter.FRAMEWORK_TOLERANCE
    assert set(result["estimators"]) == {"k1", "k3"}
    random = chapter.compare_with_verl(_random_batch(5), reference, kl_coef=0.5, gamma=0.9, lam=0.7)
    assert random["matches"], random

    def whiten_with_padding(advantages, response_mask, kl, kl_coef, scores, max_kl_share=0.5):
        out = reference["whiten_and_gate"](advantages, torch.ones_like(response_mask), kl, kl_coef, scores, max_kl_share)
        return out

    wrong = chapter.compare_with_verl(chapter.example_batch(), {**reference, "whiten_and_gate": whiten_with_padding})
    assert not wrong["matches"] and wrong["whitened_max_abs_diff"] > 1e-3, "whitening over padding must fail the check"
    info = chapter.framework()
    assert info["library"] == "verl" and info["version"] == "0.9.1" and info["tolerance_abs"] == chapter.FRAMEWORK_TOLERANCE


def test_example_batch_has_the_three_shapes_of_mask():
    batch = chapter.example_batch()
    mask = batch["response_mask"]
    assert mask[0].all() and mask[1].tolist() == [1, 1, 1, 1, 0, 0] and mask[2].tolist() == [1, 1, 0, 0, 1, 1]
    assert last_valid_positions(mask) == [5, 3, 5]
    assert all(value.dtype == torch.float64 for key, value in batch.items() if key != "response_mask")


def test_kl_share_rises_with_the_coefficient():
    shares = chapter.kl_share_curve(chapter.example_batch(), [0.01, 0.1, 1.0, 10.0])
    assert shares == sorted(shares) and shares[0] < 0.05 and shares[-1] > 0.9


def test_figures_draw():
    batch = chapter.example_batch()
    rewards = signals.token_rewards(batch["scores"], batch["log_probs"], batch["ref_log_probs"], batch["response_mask"],
                                    0.2)["rewards"]
    figures = [chapter.draw_token_rewards(batch, 0.2), chapter.draw_gae_lambdas(batch, rewards, 2),
               chapter.draw_whitening(batch["values"], batch["response_mask"]),
               chapter.draw_kl_share(batch, [0.01, 0.1, 1.0], 0.5)]
    for figure in figures:
        assert figure.axes
        matplotlib.pyplot.close(figure)


@pytest.mark.parametrize("call", [
    lambda: tensor_checks.check_mask("m", torch.ones(2, 2), (2, 2)),
    lambda: tensor_checks.check_mask("m", torch.full((2, 2), 2), (2, 2)),
    lambda: tensor_checks.check_mask("m", torch.ones(2, 3, dtype=torch.long), (2, 2)),
    lambda: tensor_checks.check_number("x", True, 0),
    lambda: tensor_checks.check_number("x", float("nan"), 0),
    lambda: tensor_checks.check_number("x", 2, 0, 1),
    lambda: tensor_checks.check_batch_time("x", torch.zeros(3)),
    lambda: tensor_checks.check_batch_time("x", torch.zeros(0, 2)),
    lambda: tensor_checks.check_like("x", torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.float64)),
    lambda: tensor_checks.check_floating("x", torch.tensor([1.0, float("inf")])),
    lambda: tensor_checks.check_floating("x", [1.0]),
])
def test_tensor_checks_refuse_with_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_tensor_checks_return_what_they_checked():
    mask = torch.tensor([[1, 0]])
    assert tensor_checks.check_mask("m", mask, (1, 2)).tolist() == [[True, False]]
    assert tensor_checks.check_number("x", 1, 0, 1) == 1
    value = torch.zeros(2, 3)
    assert tensor_checks.check_batch_time("x", value) is value and tensor_checks.check_like("y", value, value) is value


@pytest.mark.effect
@pytest.mark.slow  # three runs of the stage on the lab model's rollouts (about 10 s each on one core)
def test_on_lab_rollouts_the_gate_accepts_the_baseline_and_rejects_both_controls_for_every_seed(lab_models, tmp_path,
                                                                                               one_cpu_thread):
    """The stage on real rollouts of the lab student, seeds 0, 1 and 2: GAE advantages that are not zero,
    a KL term that is not zero (the policy has drifted from the reference), verl's KL penalty and GAE
    equal on the same tensors, the baseline accepted, the KL-dominated control (share above 0.9) and the
    signal without reward or baseline (all-zero advantages) rejected."""
    from tools.experiments.contract import Plan, run

    for seed in (0, 1, 2):
        plan = Plan(experiment="reward_signal", chapter="PT-REWARD-SIGNAL", run_mode="cpu_smoke", label=f"effect{seed}",
                    results_dir=tmp_path, model="lab", seeds=(seed,))
        (ref,) = run(plan)
        record = ref.load()
        by_name = {item["name"]: item for item in record["candidates"]}
        baseline = by_name["kl0.05_gae"]
        assert record["decision"]["decision"] == "accept_mechanism", (seed, record["decision"])
        assert baseline["decision"] == "accept" and baseline["advantage_std"] > 0.1 and baseline["mean_kl"] > 0.01, seed
        assert 0.0 < record["rollouts"]["pass_rate"] < 1.0, seed
        assert by_name["kl20_k3_gae"]["reasons"] == ["kl_dominated"] and by_name["kl20_k3_gae"]["kl_share"] > 0.9, seed
        assert by_name["no_reward_no_baseline"]["reasons"] == ["zero_advantages"], seed
        framework = record["framework"]
        assert max(framework["rewards_max_abs_diff"], framework["whitened_max_abs_diff"],
                   framework["returns_max_abs_diff"]) < 1e-9, (seed, framework)
    assert len(list(tmp_path.rglob("*.json"))) == 3
    assert any("kl0.05_gae" in line for line in chapter.matrix_lines(record))
    figure = chapter.draw_matrix(record)
    assert figure.axes
    matplotlib.pyplot.close(figure)
