"""PT-RLOO's library: the figures, the framework check against TRL's RLOOTrainer and its record, and the
online_rl implementations tied to the notebook's reference functions on generated inputs."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chapter_factory import REPO_ROOT
from tools.chapters import rloo as chapter
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.course.grader.differential import difference
from tools.experiments.online_rl import advantages, losses

matplotlib.use("Agg")

EXERCISES = ("filter_scoreable_groups", "leave_one_out_advantages", "sequence_clipped_loss")
SEARCH = settings(max_examples=150, derandomize=True, database=None, deadline=None)


@pytest.fixture(scope="module")
def reference():
    notebook = read_notebook(find_chapter("PT-RLOO", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def outcome(function, *args):
    try:
        return "value", function(*args)
    except ValueError as error:
        return "raised", type(error).__name__


def same(left, right) -> bool:
    return left[0] == right[0] and (left[0] == "raised" or difference(left[1], right[1]) is None)


def test_baselines_compared_shows_the_identity_and_the_batch_mean():
    compared = chapter.baselines_compared([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    for loo, centred in zip(compared["leave_one_out"], compared["group_mean"]):
        assert loo == pytest.approx([4 / 3 * value for value in centred])
    assert compared["batch_mean"] == [[0.5, 0.5, -0.5, 0.5], [-0.5, -0.5, 0.5, -0.5]]
    assert chapter.sequence_ratio(0.01, 60) == pytest.approx(math.exp(0.6))


@pytest.mark.parametrize("draw", ["groups", "baselines", "growth"])
def test_figures_draw(draw):
    figure = {"groups": lambda: chapter.draw_reward_groups({"a": [1.0, None], "b": [None, None]}, [False, False]),
              "baselines": lambda: chapter.draw_baselines({"easy": [1.0, 1.0, 0.0], "hard": [0.0, 1.0, 0.0]}),
              "growth": lambda: chapter.draw_sequence_ratio_growth()}[draw]()
    assert figure.axes
    matplotlib.pyplot.close(figure)


@pytest.mark.slow  # imports TRL (several seconds on a cold start)
def test_framework_check_matches_trl_and_catches_none_as_zero(reference, one_cpu_thread):
    check = chapter.compare_with_trl(reference["filter_scoreable_groups"], reference["leave_one_out_advantages"],
                                     reference["sequence_clipped_loss"])
    assert check["matches"], chapter.framework_lines(check)
    assert check["scoreable"] == [0, 2] and check["trl_groups_without_signal"] == [1]
    assert 0.0 < check["trl_clip_rate"] < 1.0, "the seeded noise must clip some responses and not others"

    def none_as_zero(groups):
        return reference["leave_one_out_advantages"]([[0.0 if r is None else r for r in group] for group in groups])

    wrong = chapter.compare_with_trl(reference["filter_scoreable_groups"], none_as_zero,
                                     reference["sequence_clipped_loss"])
    assert not wrong["matches"] and wrong["advantage_max_abs_diff"] > 0.1

    body = chapter.framework_record_body(check)
    text = json.dumps(body)
    assert str(REPO_ROOT) not in text
    lines = "\n".join(chapter.framework_summary({"evidence_level": "cpu_smoke", **json.loads(text)}))
    assert lines.startswith("evidence level cpu_smoke") and "matches: True" in lines


_groups = st.lists(st.lists(st.one_of(st.none(), st.integers(-3, 3), st.floats(-5, 5, allow_nan=False),
                                      st.sampled_from([True, float("nan")])), min_size=0, max_size=5),
                   min_size=0, max_size=4)


@SEARCH
@given(_groups)
def test_package_filter_and_advantages_agree_with_the_notebook(reference, groups):
    assert same(outcome(advantages.filter_scoreable_groups, groups), outcome(reference["filter_scoreable_groups"], groups))
    assert same(outcome(advantages.leave_one_out_advantages, groups),
                outcome(reference["leave_one_out_advantages"], groups))


@SEARCH
@given(st.integers(1, 3), st.integers(1, 5), st.integers(0, 10_000), st.sampled_from([0.1, 0.2, 0.5]),
       st.sampled_from([torch.float32, torch.float64]))
def test_package_sequence_loss_agrees_with_the_notebook(reference, batch, time, seed, clip, dtype):
    generator = torch.Generator().manual_seed(seed)
    logprobs = (-torch.rand(batch, time, generator=generator) * 3).to(dtype)
    old = logprobs + (torch.randn(batch, time, generator=generator) * 0.2).to(dtype)
    mask = torch.rand(batch, time, generator=generator) > 0.3
    mask[:, 0] = True
    gains = torch.randn(batch, generator=generator).to(dtype)
    assert same(outcome(losses.sequence_clipped_loss, logprobs, old, gains, mask, clip),
                outcome(reference["sequence_clipped_loss"], logprobs, old, gains, mask, clip))
