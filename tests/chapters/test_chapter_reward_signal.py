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
    assert [(item["gamma"], item["lam"]) for item in result["gae"]] == [(1.0, 0.95), (0.9, 0.95), (0.9, 1.0)]
    random = chapter.compare_with_verl(_random_batch(5), reference, kl_coef=0.5, settings=((0.9, 0.7), (0.5, 0.0)))
    assert random["matches"], random

    def whiten_with_padding(advantages, response_mask, kl, kl_coef, scores, max_kl_share=0.5):
        out = reference["whiten_and_gate"](advantages, torch.ones_like(response_mask), kl, kl_coef, scores, max_kl_share)
        return out

    wrong = chapter.compare_with_verl(chapter.example_batch(), {**reference, "whiten_and_gate": whiten_with_padding})
    assert not wrong["matches"] and wrong["whitened_max_abs_diff"] > 1e-3, "whitening over padding must fail the check"
    info = chapter.framework()
    assert info["library"] == "verl" and info["version"] == "0.9.1" and info["tolerance_abs"] == chapter.FRAMEWORK_TOLERANCE


@pytest.mark.slow  # imports verl (several seconds)
def test_far_moved_tokens_reach_the_k3_clamps_and_still_match_verl(reference):
    """The example batch never reaches k3's clamp (|d| > 20) or its cap (10); the far batch does on valid tokens,
    and a k3 without the cap, or a discount applied across masked positions, fails the check there."""
    far = chapter.far_batch()
    clamps = chapter.k3_clamps(far)
    assert clamps["log_ratio_clamped"] >= 2 and clamps["capped"] >= 4, clamps
    assert chapter.k3_clamps(chapter.example_batch())["capped"] == 0
    result = chapter.compare_with_verl(far, reference, kl_coef=0.3)
    assert result["matches"], result

    def k3_uncapped(scores, log_probs, ref_log_probs, response_mask, kl_coef, estimator="k1"):
        out = reference["token_level_rewards"](scores, log_probs, ref_log_probs, response_mask, kl_coef, estimator)
        if estimator == "k3":
            delta = (ref_log_probs - log_probs).clamp(-20.0, 20.0)
            kl = torch.where(response_mask.bool(), torch.exp(delta) - delta - 1, torch.zeros_like(delta))
            out = {**out, "kl": kl}
        return out

    wrong = chapter.compare_with_verl(far, {**reference, "token_level_rewards": k3_uncapped})
    assert not wrong["matches"] and wrong["estimators"]["k3"]["kl_max_abs_diff"] > 1.0

    def discount_every_position(rewards, values, response_mask, gamma, lam):
        return reference["gae_advantages"](rewards, values, torch.ones_like(response_mask), gamma, lam)

    steps = chapter.compare_with_verl(chapter.example_batch(), {**reference, "gae_advantages": discount_every_position})
    assert not steps["matches"] and steps["gae"][1]["returns_max_abs_diff"] > 1e-3, "gamma < 1 exposes a masked step"


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


def test_the_gate_rejects_equal_advantages_that_are_not_zero(reference):
    """Issue 32: constant advantages whiten to about -1e-12 and a gate that asks for exact zeros accepts them."""
    batch = chapter.example_batch()
    mask, scores = batch["response_mask"], batch["scores"]
    no_kl = torch.zeros_like(batch["log_probs"])
    for dtype in (torch.float64, torch.float32):
        flat = torch.full((3, 6), 0.7, dtype=dtype)
        result = reference["whiten_and_gate"](flat, mask, no_kl.to(dtype), 0.0, scores.to(dtype))
        assert result["reasons"] == ["constant_advantages"] and result["decision"] == "reject", (dtype, result)
    short = reference["whiten_and_gate"](torch.full((2, 3), 0.7), torch.ones(2, 3, dtype=torch.long),
                                         torch.zeros(2, 3), 0.0, torch.ones(2))
    assert short["decision"] == "reject"
    varied = batch["values"] * 1e-3
    assert reference["whiten_and_gate"](varied, mask, no_kl, 0.0, scores)["reasons"] == []


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


EFFECT_SEEDS = (0, 1, 2)


@pytest.mark.effect
@pytest.mark.slow  # the stage on the lab model's rollouts, three seeds in one record (about 10 s each on one core)
def test_on_lab_rollouts_the_gate_accepts_the_baseline_and_rejects_every_control_for_every_seed(lab_models, tmp_path,
                                                                                              one_cpu_thread):
    """The stage on real rollouts of the lab student, seeds 0, 1 and 2: on every seed GAE advantages that are
    not constant, a KL term that is not zero (the policy has drifted from the reference), verl's KL penalty
    (k1 and k3) and GAE (gamma 1 and 0.9) equal on the same tensors, the baseline accepted and the three
    controls rejected (KL-dominated; every advantage 0; every advantage 1, which the old exact-zero gate
    accepted); and the paired effect on the KL share (control minus baseline) beyond KL_SHARE_MARGIN.

    Measured (see the page): under the pinned profile (AVX2, committed weights) and the generic one (lab
    models pretrained under it) the KL share of the control is about 0.99 and the baseline's about 0.3 on
    every seed."""
    from tools.core import effects
    from tools.experiments.contract import Plan, run

    plan = Plan(experiment="reward_signal", chapter="PT-REWARD-SIGNAL", run_mode="cpu_smoke", label="effect",
                results_dir=tmp_path, model="lab", seeds=EFFECT_SEEDS)
    (ref,) = run(plan)
    record = ref.load()
    assert record["decision"]["decision"] == "accept_mechanism", record["decision"]
    for entry in record["per_seed"]:
        by_name = {item["name"]: item for item in entry["candidates"]}
        baseline, seed = by_name["kl0.05_gae"], entry["seed"]
        assert baseline["decision"] == "accept" and baseline["advantage_std"] > 0.1 and baseline["mean_kl"] > 0.01, seed
        assert 0.0 < entry["rollouts"]["pass_rate"] < 1.0, seed
        assert by_name["kl20_k3_gae"]["reasons"] == ["kl_dominated"], seed
        assert by_name["no_reward_no_baseline"]["reasons"] == ["constant_advantages"], seed
        same = by_name["same_score_no_baseline"]
        assert same["reasons"] == ["constant_advantages"] and same["advantage_abs_max"] == 1.0, seed
        framework = entry["framework"]
        assert max(framework[key] for key in ("rewards_max_abs_diff", "kl_max_abs_diff", "whitened_max_abs_diff",
                                              "returns_max_abs_diff")) < 1e-9, (seed, framework)
    found = record["effects"]["kl_share_control_over_baseline"]
    assert effects.holds(found, chapter.KL_SHARE_MARGIN), effects.describe(found)
    assert len(list(tmp_path.rglob("*.json"))) == 1
    assert any("kl0.05_gae" in line for line in chapter.matrix_lines(record))
    assert len(chapter.effect_sentences(record)) == 2
    figure = chapter.draw_matrix(record)
    assert figure.axes
    matplotlib.pyplot.close(figure)


@pytest.mark.effect
@pytest.mark.slow  # the stage on the lab model's rollouts twice, one seed each
def test_a_planted_exact_zero_gate_changes_the_step5_decision(lab_models, tmp_path, one_cpu_thread):
    """Step 5 runs the learner's functions: the same run(plan) the notebook calls, once with the chapter's reference
    gate and once with a planted mistake (grading mutant `exact_zero_only`: the gate of issue 32, which rejects only
    advantages that are exactly 0). On real rollouts the control in which every response scores 1 has advantages
    that are all exactly 1: the reference rejects it, the planted gate accepts it, and the stage decision changes."""
    from planted import learner_mechanism, mutant, references

    from tools.experiments.contract import Plan, run

    namespace = {"math": math, "torch": torch, **{name: getattr(tensor_checks, name) for name in dir(tensor_checks)
                                                  if name.startswith("check_")}}
    taught = references("PT-REWARD-SIGNAL", EXERCISES, namespace)
    name, wrong = mutant("PT-REWARD-SIGNAL", "exact_zero_only", namespace)
    outcomes = {}
    for label, functions in (("reference", taught), ("planted", {**taught, name: wrong})):
        plan = Plan(experiment="reward_signal", chapter="PT-REWARD-SIGNAL", run_mode="cpu_smoke", label=label,
                    results_dir=tmp_path, model="lab", seeds=(0,), mechanism=learner_mechanism(functions))
        (ref,) = run(plan)
        outcomes[label] = ref.load()
    verdicts = {label: {item["name"]: item["decision"] for item in record["per_seed"][0]["candidates"]}
                for label, record in outcomes.items()}
    assert outcomes["reference"]["mechanism"]["whiten_and_gate"]["source"] == "learner"
    assert outcomes["reference"]["decision"]["decision"] == "accept_mechanism", verdicts["reference"]
    assert verdicts["planted"]["same_score_no_baseline"] == "accept"
    assert outcomes["planted"]["decision"]["decision"] == "reject"


LEARNER_GAE = '''def gae_advantages(rewards, values, response_mask, gamma, lam):
    """A learner's version: walks each row's valid positions in Python, from the last one back."""
    check_batch_time("rewards", rewards)
    check_like("values", values, rewards)
    valid = check_mask("response_mask", response_mask, rewards.shape)
    check_number("gamma", gamma, 0, 1)
    check_number("lam", lam, 0, 1)
    advantages = torch.zeros_like(rewards)
    for row in range(rewards.shape[0]):
        positions = [t for t in range(rewards.shape[1]) if bool(valid[row, t])]
        running, next_value = 0.0, 0.0
        for t in reversed(positions):
            delta = float(rewards[row, t]) + gamma * next_value - float(values[row, t])
            running = delta + gamma * lam * running
            advantages[row, t] = running
            next_value = float(values[row, t])
    returns = torch.where(valid, advantages + values, torch.zeros_like(values))
    return {"advantages": advantages, "returns": returns}
'''


@pytest.mark.slow  # papermill-executes the whole chapter in cpu_smoke (verl import, three seeds of the stage)
def test_the_notebook_runs_step5_with_the_learners_own_function(tmp_path):
    """A copy of the notebook whose gae_advantages exercise holds a correct learner implementation written
    differently from the reference, executed in cpu_smoke as `make run` does: the keep-own cell keeps it, Step 5
    runs it (the records say "learner" for it and "reference" for the two stubs), and the stage still accepts."""
    import json

    from tools.core.catalog import find_chapter
    from tools.course.cells import write_notebook
    from tools.course.runs.runner import run_chapter

    chapter = find_chapter("PT-REWARD-SIGNAL", REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    (cell,) = [cell for cell in notebook.cells if "exercise" in cell.metadata.get("tags", [])
               and cell.metadata["course"]["exercise"] == "gae_advantages"]
    cell.source = LEARNER_GAE
    write_notebook(notebook, chapter.notebook_path(tmp_path))
    results = tmp_path / "results"
    outcome = run_chapter(tmp_path, chapter, run_mode="cpu_smoke", label="pytest_learner", results_dir=results,
                          output_dir=tmp_path / "executed")
    assert outcome.status == "passed", (outcome.failed_cell, outcome.error)
    records = {path.name: json.loads(path.read_text(encoding="utf-8")) for path in results.rglob("*.json")}
    (matrix,) = [record for name, record in records.items() if "signal_matrix" in name]
    (framework,) = [record for name, record in records.items() if "framework_check" in name]
    expected = {"token_level_rewards": "reference", "gae_advantages": "learner", "whiten_and_gate": "reference"}
    assert {name: item["source"] for name, item in matrix["mechanism"].items()} == expected
    assert {name: item["source"] for name, item in framework["mechanism"].items()} == expected
    assert matrix["decision"]["decision"] == "accept_mechanism", matrix["decision"]
    executed = read_notebook(tmp_path / "executed" / chapter.notebook_path(REPO_ROOT).name)
    shown = "".join(output.get("text", "") for cell in executed.cells if cell.cell_type == "code"
                    for output in cell.get("outputs", []))
    assert "Step 5 will run your gae_advantages" in shown and "gae_advantages (learner)" in shown
