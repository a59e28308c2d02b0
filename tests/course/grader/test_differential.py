"""Differential hidden tests: the comparison rules, and a toy chapter whose mutant only they catch."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import strategies as st

from chapter_factory import TOY_HIDDEN, TOY_MUTANTS, make_toy_project
from tools.core.catalog import load_catalog
from tools.course.grader.differential import Mismatch, Reference, compare_call, difference
from tools.course.grader.build import build_source_notebook, uses_reference
from tools.course.grader.verify import verify_chapter

DIFFERENTIAL = '''
# %% hidden exercise=add_rates points=1 name=agrees_with_the_reference_on_generated_rates
# hint: any two numbers: the same sum of the same type, or the same error as the contract.
from hypothesis import strategies as st
numbers = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True))
reference.agrees("add_rates", st.tuples(numbers, numbers), cases=60)
'''
FLOAT_SUM = ("add_rates", "returns a float even for integer rates", [("    return a + b", "    return float(a + b)")])


def test_values_must_match_in_type_and_within_tolerance():
    assert difference(3, 3) is None and difference(0.1 + 0.2, 0.3) is None
    assert "expected int" in difference(3, 3.0)
    assert "expected bool" in difference(True, 1)
    assert difference(float("nan"), float("nan")) is None
    assert "keys differ" in difference({"a": 1}, {"a": 1, "b": 2})
    assert "[1]" in difference([1, 2], [1, 3])
    assert "expected a Tensor" in difference(torch.tensor(1.5), 1.5)
    assert "dtype" in difference(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))
    assert difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-9])) is None


def test_a_call_compares_values_exception_classes_and_untouched_inputs():
    def reference(items):
        if not items:
            raise ValueError("empty")
        return sorted(items)

    def sorts_in_place(items):
        if not items:
            raise ValueError("empty")
        items.sort()
        return items

    def wrong_error(items):
        if not items:
            raise KeyError("empty")
        return sorted(items)

    assert compare_call(reference, reference, ([3, 1],)) is None
    assert "changed its inputs" in compare_call(sorts_in_place, reference, ([3, 1],))
    assert "expected ValueError, got KeyError" in compare_call(wrong_error, reference, ([],))
    assert "expected ValueError" in compare_call(lambda items: [], reference, ([],))


def test_reference_agrees_counts_cases_and_reports_the_first_mismatch():
    namespace = {"math": math}
    exec("def half(x):\n    return x / 2\n", namespace)
    reference = Reference("def half(x):\n    return x / 2\n", namespace)
    assert reference.agrees("half", st.tuples(st.integers(-100, 100)), cases=30) is None  # never partial credit
    assert reference.cases_checked == {"half": 30}
    exec("def half(x):\n    return x // 2\n", namespace)  # the learner's slip
    with pytest.raises(Mismatch, match=r"half\(-?\d+\): result: expected float"):
        reference.agrees("half", st.tuples(st.integers(-100, 100)), cases=30)


class CountingChannel:
    """The learner's side in this process (the boundary's encoding), counting round trips."""

    def __init__(self, namespace: dict):
        from tools.course.grader.boundary import InProcessChannel

        self.inner, self.round_trips = InProcessChannel(namespace), 0

    def exchange(self, payload: bytes) -> bytes:
        self.round_trips += 1
        return self.inner.exchange(payload)


def _across_the_boundary(learner_source: str) -> tuple[Reference, CountingChannel]:
    from tools.course.grader.boundary import LearnerFunction

    learner = {"__name__": "__main__"}
    exec(learner_source, learner)
    channel = CountingChannel(learner)
    trusted = {"math": math, "half": LearnerFunction("half", channel, {})}
    return Reference("def half(x):\n    if x == 13:\n        raise KeyError(x)\n    return x / 2\n", trusted), channel


def test_across_the_boundary_agrees_sends_its_calls_in_batches_and_finds_the_same_first_mismatch():
    from tools.course.grader.differential import BATCH_CALLS

    draws = st.tuples(st.integers(-100, 100))
    reference, channel = _across_the_boundary("def half(x):\n    if x == 13:\n        raise KeyError(x)\n"
                                              "    return x / 2\n")
    assert reference.agrees("half", draws, cases=2 * BATCH_CALLS + 5) is None
    assert reference.cases_checked == {"half": 2 * BATCH_CALLS + 5} and channel.round_trips == 3
    namespace = {"math": math}  # the same slip, called in this process one call at a time
    exec("def half(x):\n    return x // 2 if x % 7 == 3 else x / 2\n", namespace)
    with pytest.raises(Mismatch) as local:
        Reference("def half(x):\n    if x == 13:\n        raise KeyError(x)\n    return x / 2\n", namespace).agrees(
            "half", draws, cases=150)
    reference, channel = _across_the_boundary("def half(x):\n    return x // 2 if x % 7 == 3 else x / 2\n")
    with pytest.raises(Mismatch) as batched:
        reference.agrees("half", draws, cases=150)
    assert str(batched.value) == str(local.value) and channel.round_trips <= 3


def test_across_the_boundary_a_batch_that_cannot_cross_whole_is_called_one_by_one():
    # every call's result is unencodable (a function): the batch is retried call by call, each a mismatch
    reference, channel = _across_the_boundary("def half(x):\n    return half\n")
    with pytest.raises(Mismatch, match="cannot cross the grading boundary"):
        reference.agrees("half", st.tuples(st.integers(0, 10)), cases=10)
    assert channel.round_trips == 2  # the batch, then the first call alone, which already disagrees


def test_the_build_gives_differential_tests_the_reference_and_nothing_else(tmp_path):
    root = make_toy_project(tmp_path, hidden=TOY_HIDDEN + DIFFERENTIAL)
    source = build_source_notebook(root, load_catalog(root)[0])
    hidden = [cell.source for cell in source.cells if cell.metadata.get("course", {}).get("hidden_test")]
    with_reference = [text for text in hidden if "Reference(" in text]
    assert len(with_reference) == 1 and "agrees_with_the_reference" in with_reference[0]
    assert "def add_rates" in with_reference[0] and "def halve" in with_reference[0]
    assert uses_reference("reference.agrees('x', s)") and not uses_reference("assert halve(3) == 1.5")


@pytest.mark.integration
def test_a_mutant_only_the_differential_test_catches_loses_points(tmp_path):
    root = make_toy_project(tmp_path, hidden=TOY_HIDDEN + DIFFERENTIAL,
                            mutants={**TOY_MUTANTS, "float_sum": FLOAT_SUM})
    report = verify_chapter(root, load_catalog(root)[0], log_dir=tmp_path / "logs")
    outcomes = {outcome.student: outcome for outcome in report.outcomes}
    assert report.passed and report.disagreements == []
    assert outcomes["reference"].total == outcomes["reference"].max_total == 6  # through nbgrader too
    float_sum = outcomes["mutant_float_sum"]
    assert float_sum.passed and float_sum.per_exercise["add_rates"] < report.max_per_exercise["add_rates"]
    assert float_sum.per_exercise["halve"] is None  # a mutant is judged on its own exercise only
    full = verify_chapter(root, load_catalog(root)[0], full=True, endless_loop=False, log_dir=tmp_path / "full")
    float_full = next(o for o in full.outcomes if o.student == "mutant_float_sum")
    assert float_full.per_exercise["add_rates"] == full.max_per_exercise["add_rates"] - 1  # only the differential test
    assert full.disagreements == []
