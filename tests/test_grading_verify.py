"""Tests of `grading verify` on the toy chapter: the matrix holds, and a weak grader is caught."""

import pytest

from chapter_factory import TOY_MUTANTS, make_toy_project
from tools.course.catalog import load_catalog
from tools.course.grading_verify import GradingError, format_matrix, verify_chapter

EQUIVALENT = ("halve", "a correct rewrite the tests cannot tell apart", "def halve(x):\n    return x * 0.5\n")


@pytest.fixture(scope="module")
def toy_report(tmp_path_factory):
    root = make_toy_project(tmp_path_factory.mktemp("toy"), mutants={**TOY_MUTANTS, "equivalent": EQUIVALENT})
    return verify_chapter(root, load_catalog(root)[0], log_dir=root / "logs")


def outcome(report, student):
    return next(item for item in report.outcomes if item.student == student)


def test_stub_scores_zero_and_reference_full(toy_report):
    assert outcome(toy_report, "stub").total == 0
    assert outcome(toy_report, "reference").total == outcome(toy_report, "reference").max_total == 5


def test_each_real_mutant_loses_points_on_its_exercise(toy_report):
    for name, (exercise, _, _) in TOY_MUTANTS.items():
        result = outcome(toy_report, f"mutant_{name}")
        assert result.passed and result.per_exercise[exercise] < toy_report.max_per_exercise[exercise]


def test_tampered_tests_gain_nothing_and_endless_loop_scores_zero(toy_report):
    tampered = [o for o in toy_report.outcomes if o.student.startswith("tampered_mutant_")]
    assert tampered and tampered[0].passed
    assert outcome(toy_report, "tampered_stub").total == 0
    assert outcome(toy_report, "endless_loop").total == 0 and outcome(toy_report, "endless_loop").passed


def test_a_mutant_that_loses_nothing_fails_verification(toy_report):
    assert not outcome(toy_report, "mutant_equivalent").passed
    assert not toy_report.passed
    matrix = format_matrix(toy_report)
    assert "mutant_equivalent" in matrix and "FAIL" in matrix.splitlines()[-1]


def test_too_few_mutants_is_an_error(tmp_path):
    root = make_toy_project(tmp_path, mutants=dict(list(TOY_MUTANTS.items())[:2]))
    with pytest.raises(GradingError, match="need >= 5"):
        verify_chapter(root, load_catalog(root)[0])
