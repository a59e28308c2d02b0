"""Chapter 51's round settings are refused before any work when a judge or a control judge is unknown."""

from __future__ import annotations

import copy

import pytest

from tools.errors import ConfigError
from tools.experiments.preference import online_runs


def settings_with(**changes) -> dict:
    settings = copy.deepcopy(online_runs.DEFAULTS["cpu_smoke"])
    settings["rounds"][0].update(changes)
    return settings


def test_the_defaults_pass_and_round_one_has_a_verifier_control():
    online_runs.check_rounds(online_runs.DEFAULTS["cpu_smoke"])
    assert online_runs.DEFAULTS["cpu_smoke"]["rounds"][0]["control_judge"] == "verifier"


@pytest.mark.parametrize("changes, field", [({"judge": "oracle"}, "judge"), ({"control_judge": "oracle"}, "control_judge"),
                                            ({"control_judge": None}, "control_judge")])
def test_an_unknown_judge_is_refused(changes, field):
    with pytest.raises(ConfigError, match=f"round 1: {field} must be one of"):
        online_runs.check_rounds(settings_with(**changes))


def test_the_control_pairs_the_same_replies_under_its_own_judge():
    task = online_runs.round_tasks({"problems": {"three_digit": 1}, "train_seed": 202})[0]
    right, wrong = str(task.label), str(task.label + 1)
    assert online_runs.judge_score(task, right, "inverted_three_digit") == 0
    assert online_runs.judge_score(task, right, "verifier") == 1
    assert online_runs.judge_score(task, wrong, "verifier") == 0


def test_the_real_gpu_guard_and_gate_read_enough_problems_that_one_is_well_below_the_threshold():
    """48 guard problems made one problem worth 0.021 against a max_drop of 0.05; now one problem is at most a
    tenth of it, on the evaluation set too, and the splits really hold that many problems."""
    from tools.experiments.preference.online_runs import DEFAULTS

    settings = DEFAULTS["real_gpu"]
    assert 1 / settings["guard_problems"] <= settings["max_drop"] / 10
    assert 1 / settings["eval_problems"] <= settings["max_drop"] / 10
    evaluation = online_runs.lab_task_slice("heldout", settings["eval_problems"], settings["eval_seed"],
                                            answers="two_digit")
    guard = online_runs.lab_task_slice("validation", settings["guard_problems"], settings["guard_seed"],
                                       answers="three_digit")
    assert (len(evaluation), len(guard)) == (settings["eval_problems"], settings["guard_problems"])
    assert len({task.task_id for task in evaluation}) == len(evaluation)
