"""Chapter 18's library: the figures, the framework check against TRL's GRPOTrainer, its record, and the
online_rl implementations tied to the notebook's reference functions on generated inputs."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT

from tools.chapters import grpo_rlvr as chapter
from tools.core.catalog import find_chapter
from tools.core.environment import installed_version
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.course.grader.differential import difference
from tools.experiments.online_rl import advantages, losses, verifier

EXERCISES = ("verify_integer_answer", "group_advantages", "clipped_grpo_loss")
SEARCH = settings(max_examples=150, derandomize=True, database=None, deadline=None)


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the names its setup cell imports."""
    notebook = read_notebook(find_chapter("18", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def outcome(function, *args, **kwargs):
    try:
        return "value", function(*args, **kwargs)
    except ValueError as error:
        return "raised", type(error).__name__


def same(left, right) -> bool:
    if left[0] != right[0]:
        return False
    return left[0] == "raised" or difference(left[1], right[1]) is None


def test_scoreable_probability_is_one_minus_the_uniform_groups():
    assert chapter.scoreable_probability(0.5, 2) == 0.5
    assert chapter.scoreable_probability(0.0, 8) == 0.0 and chapter.scoreable_probability(1.0, 4) == 0.0
    assert chapter.scoreable_probability(0.1, 8) > chapter.scoreable_probability(0.1, 4) > chapter.scoreable_probability(0.1, 2)


def test_clipped_objective_and_weights_follow_the_formulas():
    assert chapter.clipped_objective(1.5, 1.0, 0.2) == 1.2 and chapter.clipped_objective(1.5, -1.0, 0.2) == -1.5
    assert chapter.clipped_objective(0.5, -1.0, 0.2) == -0.8 and chapter.clipped_objective(0.5, 1.0, 0.2) == 0.5
    weights = chapter.aggregation_weights({"a": 2, "b": 6})
    assert weights["a"] == {"sequence": 0.25, "token": 0.125} and weights["b"]["sequence"] == pytest.approx(1 / 12)


def test_both_groups_sample_the_same_rollouts_per_step_in_every_run_mode():
    """The matched budget: the minimal group gets three times the prompts of the extended group, so each step
    samples as many replies; an override of prompts_per_step is recorded in the settings."""
    from tools.experiments.online_rl.grpo_stage import PLANS, settings_for

    for run_mode in ("cpu_smoke", "real_gpu"):
        extended, _ = settings_for(run_mode, "extended", 0)
        minimal, _ = settings_for(run_mode, "minimal", 0)
        assert extended.group_size * extended.prompts_per_step == minimal.group_size * minimal.prompts_per_step \
            == PLANS[run_mode]["rollouts_per_step"]
        assert minimal.prompts_per_step == 3 * extended.prompts_per_step
    assert settings_for("real_gpu", "extended", 0)[0].prompts_per_step == 2, "the original course's scale"
    assert settings_for("cpu_smoke", "minimal", 0, {"prompts_per_step": 5})[0].prompts_per_step == 5


def test_the_real_gpu_decision_reads_enough_held_out_problems_that_one_is_well_below_the_threshold():
    """8 held-out problems made one problem worth 0.125, more than twice the +0.05 threshold; now one problem is
    at most a tenth of it, and no held-out problem is also a training problem."""
    from tools.experiments.online_rl.grpo_stage import MIN_EXACT_MATCH_GAIN, PLANS, tasks_for

    train, held_out, info = tasks_for("Qwen/Qwen2.5-0.5B-Instruct", PLANS["real_gpu"])
    assert 1 / len(held_out) <= MIN_EXACT_MATCH_GAIN / 10 and len(held_out) >= 390
    assert not {(t.operation, t.a, t.b) for t in train} & {(t.operation, t.a, t.b) for t in held_out}
    assert info["held_out_dropped_as_seen"] == 400 - len(held_out)


@pytest.mark.parametrize("draw", ["scoreable", "objective", "weights", "groups"])
def test_figures_draw(draw):
    figure = {"scoreable": lambda: chapter.draw_scoreable_share(),
              "objective": lambda: chapter.draw_clipped_objective(0.2),
              "weights": lambda: chapter.draw_aggregation_weights({"a": 2, "b": 9}),
              "groups": lambda: chapter.draw_group_advantages({"mixed": [1.0, 0.0], "same": [1.0, 1.0]},
                                                              {"mixed": [0.7, -0.7], "same": None})}[draw]()
    assert figure.axes
    matplotlib.pyplot.close(figure)


def test_framework_replies_cover_the_four_outcomes(reference):
    outcomes = {reference["verify_integer_answer"](text, group["task"].label, finished)["outcome"]
                for group in chapter.framework_replies() for text, finished in group["replies"]}
    assert outcomes == {"correct", "wrong", "format_error", "truncated"}


@pytest.mark.slow  # imports TRL (several seconds on a cold start)
def test_framework_check_matches_trl_and_catches_a_wrong_aggregation(reference, one_cpu_thread):
    check = chapter.compare_with_trl(reference["verify_integer_answer"], reference["group_advantages"],
                                     reference["clipped_grpo_loss"])
    assert check["matches"], chapter.framework_lines(check)
    assert check["framework"]["version"] == installed_version("trl") == "1.16.0"
    for item in check["aggregations"].values():
        assert item["loss_abs_diff"] <= chapter.FRAMEWORK_TOLERANCE
        assert 0.0 < item["trl_clip_rate"] < 1.0, "the seeded noise must exercise the clip"
    sequence, token = check["aggregations"]["sequence"], check["aggregations"]["token"]
    assert abs(sequence["trl_loss"] - token["trl_loss"]) > 1e-3, "the two aggregations must differ on this batch"

    def every_position(logprobs, old, gains, mask, clip_eps=0.2, aggregation="sequence"):
        result = reference["clipped_grpo_loss"](logprobs, old, gains, mask, clip_eps, aggregation)
        return {**result, "loss": result["loss"] * mask.sum() / mask.numel()}

    wrong = chapter.compare_with_trl(reference["verify_integer_answer"], reference["group_advantages"], every_position)
    assert not wrong["matches"], "a loss divided by every position must fail the framework check"

    body = chapter.framework_record_body(check)
    text = json.dumps(body)
    assert str(REPO_ROOT) not in text and body["results"]["matches"] is True
    lines = "\n".join(chapter.framework_summary({"evidence_level": "cpu_smoke", **json.loads(text)}))
    assert lines.startswith("evidence level cpu_smoke") and "matches: True" in lines and "'grpo'" in lines


_replies = st.one_of(st.integers(-50, 50).map(str), st.sampled_from(["+4", "04", "-0", "４", "4.", "1_0", "", "x"]),
                     st.text(alphabet="0123456789-+ \n\t.x", max_size=8))


@SEARCH
@given(st.one_of(st.tuples(_replies, st.integers(-50, 50), st.booleans()),
                 st.tuples(st.sampled_from(["4", None, 4]), st.sampled_from([4, True, 4.0]), st.sampled_from([True, 1]))))
def test_package_verifier_agrees_with_the_notebook(reference, drawn):
    assert same(outcome(verifier.verify_integer_answer, *drawn), outcome(reference["verify_integer_answer"], *drawn))


_rewards = st.one_of(st.integers(-2, 2), st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, 1.0, None, True]))


@SEARCH
@given(st.lists(st.lists(_rewards, min_size=0, max_size=5), min_size=0, max_size=4), st.booleans(),
       st.sampled_from([1e-4, 0.5, 0, True]))
def test_package_group_advantages_agree_with_the_notebook(reference, groups, scale, eps):
    assert same(outcome(advantages.group_advantages, groups, scale, eps),
                outcome(reference["group_advantages"], groups, scale, eps))


@SEARCH
@given(st.integers(1, 3), st.integers(1, 4), st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.5]),
       st.sampled_from(["sequence", "token"]), st.sampled_from([torch.float32, torch.float64]))
def test_package_loss_agrees_with_the_notebook(reference, batch, time, seed, clip, aggregation, dtype):
    generator = torch.Generator().manual_seed(seed)
    logprobs = (-torch.rand(batch, time, generator=generator) * 3).to(dtype)
    old = logprobs + (torch.randn(batch, time, generator=generator) * 0.5).to(dtype)
    mask = torch.rand(batch, time, generator=generator) > 0.3
    mask[:, 0] = True
    gains = torch.randn(batch, generator=generator).to(dtype)
    ours = outcome(losses.clipped_grpo_loss, logprobs, old, gains, mask, clip, aggregation)
    assert same(ours, outcome(reference["clipped_grpo_loss"], logprobs, old, gains, mask, clip, aggregation))


EFFECT_SEEDS = (0, 1, 2, 3, 4)
GAIN_MARGIN = 0.03
"""Calibrated under both numerics profiles (lr 3e-5, 24 steps x 96 rollouts): held-out gains of the extended
group 0.070-0.094 (pinned AVX2) and 0.107-0.112 (generic), of the minimal group 0.038-0.094 and 0.106-0.109;
the spread of the per-seed gains across seeds and profiles is about 0.02, below this margin."""
ROLLOUTS_MARGIN = 20.0
"""Rollouts entering the loss per step, extended minus minimal: 37-44 measured on both profiles."""


@pytest.fixture(scope="module")
def grpo_runs(lab_models):
    """Both variants of cpu_smoke's plan on every effect seed, each from the same lab weights."""
    import torch

    from tools.experiments.online_rl.grpo_stage import run_variant, variant_summary

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {}
        for seed in EFFECT_SEEDS:
            for variant in ("extended", "minimal"):
                record = run_variant(chapter.STEP5_CPU_MODEL, "local", "cpu", variant, seed, "cpu_smoke")
                assert record["status"] == "ok", record.get("error")
                runs[variant, seed] = (record, variant_summary(record))
        return runs
    finally:
        torch.set_num_threads(before)


@pytest.mark.effect
@pytest.mark.slow
def test_grpo_raises_the_lab_models_held_out_exact_match_over_seeds(grpo_runs):
    """Step 5.2's effect, paired over seeds against the untrained model (the baseline row): both groups raise
    held-out exact match (810 problems never trained on) by more than the margin, and the records hold
    what the page reads (steps, scoreable share, clip rate, the regression check)."""
    from tools.core import effects

    for variant in ("extended", "minimal"):
        after = {seed: grpo_runs[variant, seed][1]["exact_match_after"] for seed in EFFECT_SEEDS}
        before = {seed: grpo_runs[variant, seed][1]["exact_match_before"] for seed in EFFECT_SEEDS}
        gain = effects.paired_effect(after, before, metric="held-out exact match")
        assert effects.holds(gain, GAIN_MARGIN), (variant, effects.describe(gain), gain["differences"])
    for (variant, seed), (record, summary) in grpo_runs.items():
        assert record["tasks"]["held_out"] == 810 and record["rollouts_per_step"] == 96
        series = chapter.grpo_series(record)
        assert len(series["scoreable_share"]) == record["settings"]["steps"] == 24
        assert all(0.0 <= share <= 1.0 for share in series["scoreable_share"])
        assert all(value is None or 0.0 <= value <= 1.0 for value in series["clip_rate"])
        assert 0.5 <= summary["retained_share"] <= 1.0, "most problems answered before stay answered"


@pytest.mark.effect
@pytest.mark.slow
def test_at_the_same_rollout_budget_the_larger_group_puts_more_rollouts_in_the_loss_but_wins_less_than_a_threshold(
        grpo_runs):
    """The control of the group-size claim: G = 6 x 16 prompts against G = 2 x 48 prompts, 96 rollouts per step
    each. Measured, not asserted: the larger group sends about twice as many rollouts into the loss (its groups
    are scoreable more often), yet its held-out gain over the smaller group stays below the decision
    threshold (+0.05) on both numerics profiles."""
    from tools.core import effects
    from tools.experiments.online_rl.grpo_stage import MIN_EXACT_MATCH_GAIN

    def by_seed(variant, key):
        return {seed: grpo_runs[variant, seed][1][key] for seed in EFFECT_SEEDS}

    in_loss = effects.paired_effect(by_seed("extended", "rollouts_in_loss_mean"), by_seed("minimal", "rollouts_in_loss_mean"))
    assert effects.holds(in_loss, ROLLOUTS_MARGIN), effects.describe(in_loss)
    gap = effects.paired_effect(by_seed("extended", "exact_match_gain"), by_seed("minimal", "exact_match_gain"))
    assert gap["mean"] < MIN_EXACT_MATCH_GAIN and not effects.holds(gap, MIN_EXACT_MATCH_GAIN), effects.describe(gap)


@pytest.mark.effect
@pytest.mark.slow
def test_a_planted_loss_that_forgot_its_minus_sign_changes_step5(lab_models, one_cpu_thread, tmp_path):
    """Step 5 runs the learner's functions: the notebook's run(plan), once with the course's functions and once
    with a learner's clipped_grpo_loss that returns the objective instead of the loss (the mutant
    objective_not_negated). The planted run's records say the loss was the learner's, its held-out exact
    match falls, and the decision is no longer accept_mechanism."""
    from planted_functions import learner_mechanism

    from tools.experiments.contract import Limits, Mechanism, Plan, run

    outcomes = {}
    for name, mechanism in (("course", Mechanism()), ("planted", learner_mechanism("18", "objective_not_negated", tmp_path))):
        plan = Plan(experiment=chapter.GRPO_EXPERIMENT, chapter="18", run_mode="cpu_smoke", label=f"planted-{name}",
                    results_dir=tmp_path / name, model=chapter.STEP5_CPU_MODEL, variants=("extended",),
                    limits=Limits(cpu_threads=1), mechanism=mechanism)
        outcomes[name] = {ref.stage: ref.load() for ref in run(plan)}
    course, planted = outcomes["course"], outcomes["planted"]
    assert course["grpo_extended"]["mechanism"]["clipped_grpo_loss"]["source"] == "package"
    assert planted["grpo_extended"]["mechanism"]["clipped_grpo_loss"]["source"] == "learner"
    assert planted["decision"]["mechanism"]["verify_integer_answer"]["source"] == "package"
    assert course["decision"]["decision"]["decision"] == "accept_mechanism", course["decision"]["summaries"]
    (summary,) = planted["decision"]["summaries"]
    assert summary["exact_match_gain"] < 0 and planted["decision"]["decision"]["decision"] != "accept_mechanism", summary
