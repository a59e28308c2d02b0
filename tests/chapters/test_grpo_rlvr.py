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


@pytest.mark.effect
@pytest.mark.slow
def test_grpo_raises_the_lab_models_held_out_exact_match_on_every_seed(lab_models, one_cpu_thread):
    """Step 5.2's effect: the extended group (G = 6) of cpu_smoke's plan, three seeds from the same lab
    weights; held-out exact match (810 problems never trained on) rises by at least 0.05 on every seed,
    and every step's scoreable share and clip rate are recorded."""
    from tools.experiments.online_rl.grpo_stage import run_variant, variant_summary

    gains = []
    for seed in (0, 1, 2):
        record = run_variant(chapter.STEP5_CPU_MODEL, "local", "cpu", "extended", seed, "cpu_smoke")
        assert record["status"] == "ok" and record["tasks"]["held_out"] == 810
        summary = variant_summary(record)
        series = chapter.grpo_series(record)
        assert len(series["scoreable_share"]) == record["settings"]["steps"] == 8
        assert all(0.0 <= share <= 1.0 for share in series["scoreable_share"])
        assert all(value is None or 0.0 <= value <= 1.0 for value in series["clip_rate"])
        assert summary["scoreable_share_mean"] > 0.5, "G = 6 on a half-learned task: most groups carry a signal"
        gains.append(summary["exact_match_gain"])
    assert min(gains) >= 0.05, gains
    assert sum(gains) / len(gains) >= 0.1, gains
