"""`grading verify` on the toy chapter: the matrix holds, a weak grader is caught, and the oracle grades as nbgrader does."""

import time

import pytest

from chapter_factory import TOY_HIDDEN, TOY_MUTANTS, make_toy_project
from tools.core.catalog import load_catalog
from tools.course.grader.oracle import _shell, execute_cell, run_oracle, score_cell
from tools.course.grader.verify import (
    GradingError,
    disagreements,
    format_matrix,
    verify_chapter,
)

EQUIVALENT = ("halve", "a correct rewrite the tests cannot tell apart", [("    return x / 2", "    return x * 0.5")])
FREE_POINT = '''
# %% hidden exercise=add_rates points=1 name=refuses_infinity
# hint: an infinite rate is refused (a test with no valid input: a body that only raises passes it).
try:
    add_rates(float("inf"), 1)
except ValueError:
    pass
else:
    raise AssertionError("inf accepted")
'''


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory):
    return make_toy_project(tmp_path_factory.mktemp("toy"), hidden=TOY_HIDDEN + FREE_POINT,
                            mutants={**TOY_MUTANTS, "equivalent": EQUIVALENT})


@pytest.fixture(scope="module")
def toy_report(toy_root):
    return verify_chapter(toy_root, load_catalog(toy_root)[0], log_dir=toy_root / "logs")


@pytest.fixture(scope="module")
def toy_full_report(toy_root):
    """The full matrix, endless loop included, under a 3 s cell timeout: the course's one loop probe."""
    config = toy_root / "grading" / "nbgrader_config.py"
    original = config.read_text(encoding="utf-8")
    config.write_text(original + "c.Execute.timeout = 3\n", encoding="utf-8")
    try:
        return verify_chapter(toy_root, load_catalog(toy_root)[0], full=True, log_dir=toy_root / "logs_full")
    finally:
        config.write_text(original, encoding="utf-8")


def outcome(report, student):
    return next(item for item in report.outcomes if item.student == student)


@pytest.mark.integration
def test_stub_scores_zero_and_reference_full_through_nbgrader_and_the_oracle(toy_report):
    assert outcome(toy_report, "stub").total == 0 and outcome(toy_report, "stub").graded_by == "nbgrader+oracle"
    assert outcome(toy_report, "reference").total == outcome(toy_report, "reference").max_total == 6
    assert toy_report.nbgrader_submissions == 3 and toy_report.disagreements == []


@pytest.mark.integration
def test_each_real_mutant_loses_points_on_its_exercise(toy_report):
    for name, (exercise, _, _) in TOY_MUTANTS.items():
        result = outcome(toy_report, f"mutant_{name}")
        assert result.graded_by == "oracle"
        assert result.passed and result.per_exercise[exercise] < toy_report.max_per_exercise[exercise]


@pytest.mark.integration
def test_every_exercise_gets_a_raising_and_a_constant_body_that_must_keep_nothing(toy_report):
    for exercise, other in (("add_rates", "halve"), ("halve", "add_rates")):
        for kind in ("raises", "constant"):
            result = outcome(toy_report, f"{kind}_{exercise}")
            assert result.graded_by == "oracle" and result.expectation == "near_zero"
            assert result.per_exercise[other] is None  # judged on its own exercise, every test of it run
    assert outcome(toy_report, "constant_add_rates").per_exercise["add_rates"] == 0  # the visible test tries two sums
    assert outcome(toy_report, "raises_halve").passed and outcome(toy_report, "constant_halve").passed


@pytest.mark.integration
def test_a_test_with_no_valid_input_gives_a_raising_body_points_and_fails_verification(toy_report):
    raising = outcome(toy_report, "raises_add_rates")
    assert raising.per_exercise["add_rates"] == 1 and not raising.passed  # refuses_infinity, 1 of 3 points
    assert "must keep <= 0.3 of add_rates's points" in raising.detail
    assert "raises_add_rates" in format_matrix(toy_report)


@pytest.mark.integration
def test_edited_or_deleted_test_cells_gain_nothing(toy_report):
    assert outcome(toy_report, "tampered_stub").total == 0 and outcome(toy_report, "tampered_stub").passed


@pytest.mark.integration
def test_every_mutant_is_planted_again_with_each_argument_overwritten_in_place(toy_report):
    overwritten = {o.student: o for o in toy_report.outcomes if "+overwrite_" in o.student}
    assert {"mutant_no_nan_check+overwrite_undeclared", "mutant_floor_division+overwrite_undeclared"} <= set(overwritten)
    assert all(o.expectation == "loses_points" for o in overwritten.values())
    assert all(o.passed for name, o in overwritten.items() if not name.startswith("mutant_equivalent"))


@pytest.mark.integration
def test_a_mutant_that_loses_nothing_fails_verification(toy_report):
    assert not outcome(toy_report, "mutant_equivalent").passed
    assert not toy_report.passed
    matrix = format_matrix(toy_report)
    assert "mutant_equivalent" in matrix and "FAIL" in matrix.splitlines()[-1]


@pytest.mark.integration
def test_full_mode_grades_everything_through_nbgrader_and_the_oracle_agrees(toy_full_report):
    mutants = [o for o in toy_full_report.outcomes if o.student.startswith("mutant_") and "+" not in o.student]
    assert mutants and all(o.graded_by == "nbgrader+oracle" for o in mutants)
    # the overwrite variants meet the trusted boundary ("changed its inputs"), which the oracle has and
    # plain `nbgrader autograde` does not: the oracle alone judges them
    overwriting = [o for o in toy_full_report.outcomes if o.student.startswith("mutant_") and "+" in o.student]
    assert overwriting and all(o.graded_by == "oracle" for o in overwriting)
    passed = {o.student: o.passed for o in mutants}
    assert all(o.passed == passed[o.student.split("+")[0]] for o in overwriting)  # as its mutant alone
    assert toy_full_report.disagreements == []
    tampered = [o for o in toy_full_report.outcomes if o.student.startswith("tampered_mutant_")]
    assert tampered and tampered[0].passed


def test_a_disagreement_between_oracle_and_nbgrader_is_reported():
    nbgrader = {"alice": {"test_a": (1.0, 1.0), "hidden_a_x": (0.0, 2.0)}}
    oracle = {"alice": {"test_a": (1.0, 1.0), "hidden_a_x": (2.0, 2.0)}, "bob": {"test_a": (0.0, 1.0)}}
    assert disagreements(nbgrader, oracle) == ["alice hidden_a_x: oracle (2.0, 2.0) vs nbgrader (0.0, 2.0)"]


@pytest.mark.integration
def test_the_endless_loop_is_stopped_by_the_cell_timeout_and_scores_zero(toy_root, toy_full_report):
    loop = outcome(toy_full_report, "endless_loop")
    assert loop.total == 0 and loop.passed and loop.max_total == 6 and not loop.regraded
    log = (toy_root / "logs_full" / "verify_toy.log").read_text(encoding="utf-8")
    assert "Timeout waiting for execute reply (3s)" in log  # the 3 s cell limit stopped it, not the 30 s of the course


def test_the_oracle_scores_cells_by_nbgraders_rules():
    shell = _shell()
    cell = {"grade_id": "t", "points": 2, "source": ""}
    assert score_cell(cell, execute_cell(shell, "x = 1", 5)) == (2.0, 2.0)
    assert score_cell(cell, execute_cell(shell, "assert x == 2", 5)) == (0.0, 2.0)
    assert score_cell(cell, execute_cell(shell, "import sys; print('careful', file=sys.stderr)", 5)) == (0.0, 2.0)
    assert score_cell(cell, execute_cell(shell, "0.5", 5)) == (0.5, 2.0)  # a number is partial credit, in points
    assert score_cell(cell, execute_cell(shell, "import time\nwhile True: time.sleep(0.01)", 1)) == (0.0, 2.0)


@pytest.mark.slow
def test_an_oracle_submission_that_hangs_is_stopped_and_scores_zero(toy_root):
    from tools.course.grader.build import build_source_notebook

    source = build_source_notebook(toy_root, load_catalog(toy_root)[0])
    started = time.monotonic()
    results = run_oracle(source, {"sleeper": {"add_rates": "import time\ntime.sleep(600)"}}, cell_timeout_s=30,
                         submission_timeout_s=3)
    assert results["sleeper"].timed_out and sum(s for s, _ in results["sleeper"].scores.values()) == 0
    assert time.monotonic() - started < 300  # a hang guard: the sleep would last 600 s


def test_too_few_mutants_is_an_error(tmp_path):
    root = make_toy_project(tmp_path, mutants=dict(list(TOY_MUTANTS.items())[:2]))
    with pytest.raises(GradingError, match="need >= 5"):
        verify_chapter(root, load_catalog(root)[0])


SLOW = '''
# %% hidden exercise=halve points=1 name=slow_but_correct
# hint: halving 10 gives 5.
import time
time.sleep(2)
assert halve(10) == 5
'''


@pytest.mark.integration
def test_a_verdict_a_time_limit_cut_is_graded_again_with_longer_limits_and_says_so(tmp_path):
    root = make_toy_project(tmp_path, hidden=TOY_HIDDEN + SLOW)
    config = root / "grading" / "nbgrader_config.py"
    config.write_text(config.read_text(encoding="utf-8") + "c.Execute.timeout = 1\n", encoding="utf-8")
    report = verify_chapter(root, load_catalog(root)[0], log_dir=tmp_path / "logs")
    reference = outcome(report, "reference")
    assert reference.regraded and reference.passed and "graded again, 10 s per cell" in reference.detail
    assert reference.total == reference.max_total == 6
    assert report.passed and report.disagreements == [], format_matrix(report)
    assert "graded again" in format_matrix(report)
