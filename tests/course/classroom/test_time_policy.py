"""Time goes to the learner who spends it: only contention evidence earns a second attempt."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tools.course.classroom.batch import WorkerResult, class_time, learners_time, regrade_reason
from tools.course.classroom.contention import ContentionProbe, contention_evidence, run_delay_s
from tools.course.classroom.sandbox import Limits


def result(status="graded", reason=None, timeouts=(), totals=None) -> WorkerResult:
    boundary = {"timeouts": list(timeouts)}
    if totals is not None:
        boundary["totals"] = totals
    return WorkerResult("s", Path("/nonexistent"), Path("/nonexistent"), status, reason, None, 1.0,
                        boundary=boundary)


def cell(**measure) -> dict:
    return {"cell": "hidden_f_x", "role": "test", "side": "trusted", "wall_s": 30.0, "group_cpu_s": 0.0,
            "kernel_wait_s": 0.0, "trusted_wait_s": 0.0, "cpus": 1.0, "learner_s": 29.0, **measure}


@pytest.mark.parametrize("measure, starved", [
    ({}, False),  # the learner's function slept: nobody waited for a CPU
    ({"group_cpu_s": 29.5, "kernel_wait_s": 20.0}, False),  # it spent its quota (spinners queue behind each other)
    ({"group_cpu_s": 3.0, "kernel_wait_s": 12.0}, True),  # it wanted a CPU and the host gave it little
    ({"trusted_wait_s": 10.0, "learner_s": 1.0}, True),  # the trusted grader itself was starved
    ({"group_cpu_s": None, "kernel_wait_s": None, "trusted_wait_s": None}, False),  # nothing measured: no evidence
])
def test_a_timed_out_cell_is_graded_again_only_on_contention_evidence(measure, starved):
    assert (contention_evidence(cell(**measure)) is not None) is starved
    assert (regrade_reason(result(timeouts=[cell(**measure)])) is not None) is starved
    own = learners_time({"timeouts": [cell(**measure)]})
    assert own["cells"] == ([] if starved else ["hidden_f_x"])


def test_failures_that_earn_a_second_attempt_and_those_that_do_not():
    assert regrade_reason(result("failed", "grading worker exited -9: killed")) is not None
    assert regrade_reason(result("failed", "grading worker did not answer in time at start: ...")) is not None
    setup = ("grading worker error: GradingError: the chapter's setup cells failed in the trusted grader process: "
             "setup cell 0: CellTimeout: cell ran past the per-cell time limit")
    assert "setup" in regrade_reason(result("failed", setup))
    assert regrade_reason(result("failed", "nbgrader autograde failed: a cell raised")) is None
    killed = "killed at the per-notebook limit of 600 s"
    assert regrade_reason(result("failed", killed, totals={"wall_s": 600, "group_cpu_s": 590, "kernel_wait_s": 300,
                                                           "cpus": 1.0})) is None
    assert regrade_reason(result("failed", killed, totals={"wall_s": 600, "group_cpu_s": 1, "kernel_wait_s": 1,
                                                           "cpus": 1.0})) is None
    assert "waited" in regrade_reason(result("failed", killed, totals={"wall_s": 600, "group_cpu_s": 100,
                                                                       "kernel_wait_s": 400, "cpus": 1.0}))
    # a notebook that slept past its limit while its setup waited a little is its own
    assert regrade_reason(result("failed", killed, totals={"wall_s": 600, "group_cpu_s": 20, "kernel_wait_s": 200,
                                                           "cpus": 1.0})) is None


def test_the_class_time_is_set_against_its_budget():
    from tools.course.classroom.batch import Outcome

    outcomes = [Outcome("a", "graded", seconds=20.0), Outcome("b", "graded", seconds=50.0,
                                                              boundary={"learners_time": {"cells": ["x"], "seconds": 30.0}}),
                Outcome("c", "graded", seconds=25.0, regraded={"first_seconds": 40.0})]
    time_ = class_time(outcomes, Limits(cell_timeout_s=30, notebook_timeout_s=600), 2, 130.0)
    assert time_["budget_s"] == 1200 and time_["learner_timeouts"] == 1 and time_["learner_timeout_seconds"] == 30
    assert time_["graded_again"] == 1 and time_["first_attempt_seconds"] == 40 and time_["submission_seconds"] == 95


def test_the_probe_measures_a_waiting_process_and_a_groups_cpu(tmp_path):
    usage = tmp_path / "cpuacct.usage"
    usage.write_text("1000000000\n", encoding="ascii")
    probe = ContentionProbe(str(usage), 1.0)
    before = probe.sample(os.getpid(), None)
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        pass
    usage.write_text("1500000000\n", encoding="ascii")
    measure = probe.between(before, probe.sample(os.getpid(), None))
    assert measure["group_cpu_s"] == 0.5 and measure["wall_s"] >= 0.2 and measure["trusted_wait_s"] is None
    assert run_delay_s(os.getpid()) is None or measure["kernel_wait_s"] >= 0.0
    assert run_delay_s(None) is None and run_delay_s(2 ** 30) is None
