"""Clause coverage: each differential test names the contract clauses its seeded cases must reach, and the build counts them."""

from __future__ import annotations

import pytest
from chapter_factory import REPO_ROOT, TOY_HIDDEN, make_toy_project
from hypothesis import strategies as st

from tools.core.catalog import implemented_chapters, load_catalog
from tools.course.__main__ import main
from tools.course.grader import differential
from tools.course.grader.build import (
    clause_coverage,
    coverage_problems,
    coverage_rows,
    format_coverage,
    hard_class_rows,
    hidden_tests_path,
)
from tools.course.grader.differential import ALL_CASES, Reference
from tools.course.grader.hard_values import INEXACT_FLOAT, NON_FINITE_SCALAR

CLAUSED = '''
# %% hidden exercise=add_rates points=1 name=agrees_on_generated_rates
# hint: any two numbers: the same sum, or the same error.
from hypothesis import strategies as st
numbers = st.one_of(st.integers(-50, 50), st.sampled_from([float("nan"), float("inf"), 0.5]))
reference.agrees("add_rates", st.tuples(numbers, numbers), cases=60, clauses={
    "a is not finite": lambda a, b: not math.isfinite(a),
    "b is not finite": lambda a, b: not math.isfinite(b),
    "a float sum": lambda a, b: isinstance(a, float) and math.isfinite(a) and math.isfinite(b),
    "CLAUSE_UNDER_TEST": lambda a, b: PREDICATE_UNDER_TEST,
})
'''


def toy_with(clause: str = "a is negative", predicate: str = "a < 0", strategy: str | None = None) -> str:
    text = CLAUSED.replace("CLAUSE_UNDER_TEST", clause).replace("PREDICATE_UNDER_TEST", predicate)
    return TOY_HIDDEN + (text if strategy is None else text.replace("st.tuples(numbers, numbers)", strategy))


def toy_coverage(tmp_path, hidden):
    root = make_toy_project(tmp_path, hidden=hidden)
    chapter = load_catalog(root)[0]
    return root, clause_coverage(root, chapter)


def test_every_named_clause_is_counted_on_the_seeded_cases(tmp_path):
    _, calls = toy_coverage(tmp_path, toy_with())
    (call,) = calls
    assert (call.test, call.exercise, call.function, call.cases) == ("agrees_on_generated_rates", "add_rates", "add_rates", 60)
    assert call.valid + call.refused == 60 and call.valid > 0 and call.refused > 0
    assert set(call.clauses) == {"a is not finite", "b is not finite", "a float sum", "a is negative"}
    assert all(count > 0 for count in call.clauses.values()) and call.clauses["a is negative"] < 60
    assert coverage_problems("TOY", calls) == []
    table = format_coverage(coverage_rows("TOY", calls))
    assert "agrees_on_generated_rates" in table and "a is negative" in table and "<- none" not in table
    # the hard-value classes: nan and inf are drawn (as scalars), never an inexact float or a string
    assert call.hard[ALL_CASES] == [NON_FINITE_SCALAR]
    assert call.hard["a is not finite"] == [NON_FINITE_SCALAR] and call.hard["a is negative"] in ([], [NON_FINITE_SCALAR])
    rows = {row[3]: row[4] for row in hard_class_rows("TOY", calls)}
    assert INEXACT_FLOAT in rows["(never drawn)"] and NON_FINITE_SCALAR not in rows["(never drawn)"]


def test_a_clause_no_case_reaches_fails_the_build_naming_chapter_exercise_and_clause(tmp_path, monkeypatch, capsys):
    root, calls = toy_coverage(tmp_path, toy_with("a is a bool", "type(a) is bool"))
    assert calls[0].clauses["a is a bool"] == 0
    assert coverage_problems("TOY", calls) == [(
        "TOY, exercise add_rates, hidden test agrees_on_generated_rates: no generated case reaches the clause "
        "'a is a bool' (60 cases drawn)")]
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    assert main(["grading", "build"]) == 1
    out = capsys.readouterr().out
    assert "a is a bool" in out and "<- none" in out and "grading build FAILED: 1 clause-coverage problem(s)" in out
    assert "hard-value classes of TOY" in out and "(never drawn)" in out


def test_a_predicate_that_cannot_read_an_input_does_not_count_it(tmp_path):
    _, calls = toy_coverage(tmp_path, toy_with("a has a length", "len(a) >= 0"))
    assert calls[0].clauses["a has a length"] == 0  # numbers have no len(): every call raised inside the predicate


def test_a_test_that_names_no_clause_or_draws_no_valid_input_fails_the_build(tmp_path):
    unnamed = TOY_HIDDEN + '''
# %% hidden exercise=add_rates points=1 name=agrees_on_invalid_rates_only
# hint: non-finite rates are refused.
from hypothesis import strategies as st
reference.agrees("add_rates", st.tuples(st.just(float("nan")), st.integers()), cases=20)
'''
    _, calls = toy_coverage(tmp_path, unnamed)
    problems = coverage_problems("TOY", calls)
    assert len(problems) == 2
    assert "names no contract clause" in problems[0]
    assert "the reference refuses all 20 generated cases" in problems[1] and "only raises" in problems[1]


def test_a_chapter_without_differential_tests_needs_no_coverage_run(tmp_path):
    assert toy_coverage(tmp_path, TOY_HIDDEN)[1] == []


def test_the_coverage_run_draws_exactly_the_cases_grading_draws():
    strategy = st.tuples(st.lists(st.integers(-5, 5), max_size=4), st.one_of(st.none(), st.text(max_size=3)))
    namespace = {}
    exec("def pick(items, label):\n    return (sorted(items), label)\n", namespace)
    graded, counted = [], []
    learner = namespace["pick"]
    namespace["pick"] = lambda items, label: graded.append((list(items), label)) or learner(items, label)
    Reference("def pick(items, label):\n    return (sorted(items), label)\n", namespace).agrees(
        "pick", strategy, cases=40, clauses={"any": lambda items, label: True})
    differential._coverage = differential._CoverageLog()
    try:
        Reference("def pick(items, label):\n    return (sorted(items), label)\n", namespace).agrees(
            "pick", strategy, cases=40, clauses={"any": lambda items, label: counted.append((list(items), label)) or True})
        call = differential._coverage.calls[0]
    finally:
        differential._coverage = None
    assert len(graded) == 40 and graded == counted and call.cases == call.clauses["any"] == 40


@pytest.mark.parametrize("clauses", [{}, {"": lambda: True}, {"x": 1}, [("x", lambda: True)]])
def test_malformed_clauses_are_an_authoring_error(clauses):
    namespace = {}
    exec("def f(x):\n    return x\n", namespace)
    with pytest.raises(TypeError, match="clauses must be a non-empty dict"):
        Reference("def f(x):\n    return x\n", namespace).agrees("f", st.tuples(st.integers()), cases=3, clauses=clauses)


GRADED = [chapter for chapter in implemented_chapters(REPO_ROOT) if hidden_tests_path(REPO_ROOT, chapter).is_file()]


@pytest.mark.parametrize("chapter", GRADED, ids=[chapter.id for chapter in GRADED])
def test_every_differential_test_of_every_chapter_reaches_every_clause_it_names(chapter):
    calls = clause_coverage(REPO_ROOT, chapter)
    assert calls, f"{chapter.id} has no differential hidden test"
    problems = coverage_problems(chapter.id, calls)
    assert problems == [], "\n".join(problems) + "\n" + format_coverage(coverage_rows(chapter.id, calls))


def test_each_of_draws_every_listed_case_once_in_a_context_of_its_own():
    from tools.course.grader.clauses import each_of

    cases = [("valid", n) for n in range(5)] + [("bad", value) for value in (0, -1, True, None, "x", [1])]
    built = []

    def build(case, rng):
        built.append((case, rng.random()))
        return (case,)

    namespace = {}
    exec("def echo(case):\n    return case\n", namespace)
    Reference("def echo(case):\n    return case\n", namespace).agrees(
        "echo", each_of(cases, build, variants=2), cases=2 * len(cases), clauses={"any": lambda case: True})
    drawn = [case for case, _ in built]
    assert sorted(map(repr, drawn)) == sorted(map(repr, cases * 2))  # every case, each variant once
    contexts = {}
    for case, value in built:
        contexts.setdefault(repr(case), set()).add(value)
    assert all(len(values) == 2 for values in contexts.values())  # the two variants differ


def test_the_clause_helpers_read_any_value_without_raising():
    from tools.course.grader import clauses

    for value in (None, True, 0, -1.5, float("nan"), float("inf"), "", " a ", [1], {"k": 2}, (3,)):
        for helper in (clauses.is_bool, clauses.is_number, clauses.not_a_number, clauses.not_finite, clauses.is_blank,
                       clauses.not_a_str, clauses.values, clauses.keys, clauses.dicts):
            helper(value)
        clauses.below(value, 0)
        clauses.near_but_not_equal(value, 0.3)
    assert clauses.near_but_not_equal(0.1 + 0.2, 0.3) and not clauses.near_but_not_equal(0.3, 0.3)
    assert clauses.below(-1, 0) and not clauses.below(True, 2) and clauses.below(0, 0, or_equal=True)
    assert clauses.is_blank(" \t") and not clauses.is_blank("a") and not clauses.is_blank(None)
