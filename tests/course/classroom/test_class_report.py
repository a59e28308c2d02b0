"""The class report: pass rates, the hardest exercise with its tie-breaks, the most failed tests."""

from __future__ import annotations

from types import SimpleNamespace

from tools.course.classroom.report import (
    exercise_statistics,
    failing_tests,
    hardest_exercise,
    score_summary,
    write_class_report,
)

EXERCISES = ["alpha", "beta", "gamma"]


def outcome(student, failed_tests=(), status="graded"):
    """Each exercise has a visible test (1 point) and a hidden test `h_<exercise>` (2 points)."""
    if status != "graded":
        return SimpleNamespace(student=student, status=status, reason="corrupt notebook", score=None,
                               max_score=None, exercises=[])
    items = []
    for exercise in EXERCISES:
        tests = []
        for kind, name, points in (("visible", f"test_{exercise}", 1.0), ("hidden", f"h_{exercise}", 2.0)):
            passed = name not in failed_tests
            tests.append({"exercise": exercise, "kind": kind, "name": name, "points": points,
                          "score": points if passed else 0.0, "passed": passed})
        score = sum(t["score"] for t in tests)
        items.append({"exercise": exercise, "score": score, "max_score": 3.0, "passed": score == 3.0, "tests": tests})
    return SimpleNamespace(student=student, status="graded", reason=None, exercises=items,
                           score=sum(i["score"] for i in items), max_score=9.0)


def test_pass_rates_and_the_hardest_exercise():
    outcomes = [outcome("a"), outcome("b", ["h_beta"]), outcome("c", ["h_beta", "test_gamma"]),
                outcome("d", ["test_alpha"]), outcome("x", status="failed")]
    rows = {row["exercise"]: row for row in exercise_statistics(outcomes, EXERCISES)}
    assert rows["beta"]["pass_rate"] == 0.5 and rows["alpha"]["pass_rate"] == 0.75 and rows["beta"]["graded"] == 4
    assert hardest_exercise(list(rows.values())) == "beta"


def test_ties_go_to_the_lower_mean_score_then_to_notebook_order():
    tie_on_rate = [outcome("a", ["test_alpha"]), outcome("b", ["h_gamma"]), outcome("c")]
    assert hardest_exercise(exercise_statistics(tie_on_rate, EXERCISES)) == "gamma"  # loses 2 points, not 1
    full_tie = [outcome("a", ["test_beta"]), outcome("b", ["test_gamma"])]
    assert hardest_exercise(exercise_statistics(full_tie, EXERCISES)) == "beta"
    assert hardest_exercise(exercise_statistics([outcome("x", status="failed")], EXERCISES)) is None


def test_a_class_with_full_marks_everywhere_has_no_hardest_exercise(tmp_path):
    outcomes = [outcome("a"), outcome("b"), outcome("x", status="failed")]
    assert hardest_exercise(exercise_statistics(outcomes, EXERCISES)) is None
    report = SimpleNamespace(chapter="TOY", slug="toy", outcomes=outcomes, jobs=1, wall_seconds=1.0)
    path, hardest = write_class_report(report, EXERCISES, tmp_path)
    text = path.read_text(encoding="utf-8")
    assert hardest is None and "**Hardest exercise: none**" in text and "Hardest exercise: `" not in text


def test_failing_tests_are_ranked_by_how_many_submissions_fail_them():
    outcomes = [outcome("a", ["h_beta", "test_gamma"]), outcome("b", ["h_beta"]), outcome("c", ["test_alpha"])]
    ranked = failing_tests(outcomes, EXERCISES)
    assert [(t["name"], t["failed"]) for t in ranked] == [("h_beta", 2), ("test_alpha", 1), ("test_gamma", 1)]
    assert ranked[0]["kind"] == "hidden" and abs(ranked[0]["fail_rate"] - 2 / 3) < 1e-9


def test_summary_and_report_files(tmp_path):
    outcomes = [outcome("a"), outcome("b", ["h_beta"]), outcome("c", ["h_alpha", "h_beta", "h_gamma"]),
                outcome("x", status="failed")]
    summary = score_summary(outcomes)
    assert (summary["graded"], summary["not_graded"], summary["full_marks"]) == (3, 1, 1)
    assert summary["mean"] == round((9 + 7 + 3) / 3, 3) and summary["median"] == 7
    assert summary["distribution"] == {"0-20%": 0, "20-40%": 1, "40-60%": 0, "60-80%": 1, "80-100%": 1}
    report = SimpleNamespace(chapter="TOY", slug="toy", outcomes=outcomes, jobs=2, wall_seconds=12.5)
    path, hardest = write_class_report(report, EXERCISES, tmp_path)
    text = path.read_text(encoding="utf-8")
    assert hardest == "beta" and "**Hardest exercise: `beta`**: 33% of graded submissions" in text
    assert "| `h_beta` | `beta` | hidden | 2 | 67% |" in text
    assert "| x | corrupt notebook |" in text
    assert (tmp_path / "class_report.png").stat().st_size > 5000
