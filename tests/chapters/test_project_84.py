"""Project 84: the functions its stage decides with are the functions its notebook teaches.

The notebook's reference solution is executed on its own and compared, on generated inputs (valid and
not), with `tools.experiments.preference.offline_gates`: the same value (floats within 1e-9) or the same
exception class. A planted difference in one of them is caught (the comparison can fail)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from planted import references

from tools.experiments.preference import offline_gates

SETTINGS = settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
NAMES = ("admit_pairs", "independent_evaluation", "adoption_decision")


@pytest.fixture(scope="module")
def notebook():
    return references("84", NAMES, {"math": math, "NEXT_ACTIONS": offline_gates.NEXT_ACTIONS,
                                    "WILSON_Z": offline_gates.WILSON_Z})


def close(first, second) -> bool:
    if isinstance(first, float) and isinstance(second, float):
        return math.isclose(first, second, rel_tol=1e-9, abs_tol=1e-12)
    if type(first) is not type(second):
        return False
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(close(first[key], second[key]) for key in first)
    if isinstance(first, list):
        return len(first) == len(second) and all(close(a, b) for a, b in zip(first, second))
    return first == second


def same(library, taught, *arguments) -> None:
    try:
        expected = library(*arguments)
    except ValueError:
        with pytest.raises(ValueError):
            taught(*arguments)
        return
    assert close(taught(*arguments), expected), arguments


counts = st.one_of(st.integers(1, 40), st.sampled_from([0, True, 2.0, None]))
texts = st.sampled_from(["5", "4", " 5", "5\t", "Five", "5.", "the answer is 5", ""])


@st.composite
def admissions(draw):
    pairs = [{"id": draw(st.sampled_from([f"p{index}", f"p{index}", "p0", ""])), "prompt_tokens": draw(counts),
              "chosen_tokens": draw(counts), "rejected_tokens": draw(counts), "chosen": draw(texts),
              "rejected": draw(texts)} for index in range(draw(st.integers(0, 6)))]
    return (pairs, draw(st.sampled_from([8, 16, 24, 0, True])), draw(st.sampled_from([24, 30, 16])),
            draw(st.sampled_from([0, 0.0, 0.25, 0.5, 1, 1.5, float("nan")])), draw(st.sampled_from([1, 2, 4, 0])))


numbers = st.one_of(st.sampled_from([-1.0, -2.0, -1.5, 0.0]), st.floats(-8, 0), st.sampled_from([float("nan"), True]))


@st.composite
def evaluations(draw):
    items = []
    for index in range(draw(st.integers(1, 6))):
        prompt = draw(st.sampled_from(["a", "b", "c"]))
        for order in draw(st.sampled_from([("chosen_first", "rejected_first"), ("chosen_first",),
                                           ("rejected_first", "chosen_first", "rejected_first")])):
            items.append({"pair_id": f"q{index}", "prompt": prompt, "order": order,
                          **{key: draw(numbers) for key in ("policy_first", "policy_second", "reference_first",
                                                            "reference_second")}})
    train = draw(st.sampled_from([[], ["a"], ("b", "c"), ["a", "b", "c"], None, [1]]))
    return items, train


@st.composite
def decisions(draw):
    def effect():
        mean = draw(st.sampled_from([0.0, 0.02, -0.05, -0.1, 0.1]))
        half = draw(st.sampled_from([0.0, 0.01, 0.05]))
        found = {"mean": mean, "lower": mean - half, "upper": mean + half}
        if draw(st.integers(0, 9)) == 0:
            found[draw(st.sampled_from(["mean", "lower", "upper"]))] = draw(st.sampled_from([float("nan"), True, 9.0]))
        return found

    resources = {"peak_memory_bytes": draw(st.sampled_from([None, 10, 11, 9, -1])), "memory_budget_bytes": 10,
                 "adapter_bytes": draw(st.sampled_from([5, 6, 0])), "baseline_adapter_bytes": 5}
    evaluation = {"beats_chance": draw(st.sampled_from([True, False, 1])),
                  "interval": draw(st.sampled_from([None, [0.4, 0.6]]))}
    return ({"decision": draw(st.sampled_from(["accept", "tune", "reject", "adopt"]))}, evaluation, effect(), effect(),
            resources, draw(st.sampled_from([0, 0.05, 0.1, -0.1])))


@SETTINGS
@given(admissions())
def test_admit_pairs_is_the_notebooks(notebook, arguments):
    same(offline_gates.admit_pairs, notebook["admit_pairs"], *arguments)


@SETTINGS
@given(evaluations())
def test_independent_evaluation_is_the_notebooks(notebook, arguments):
    same(offline_gates.independent_evaluation, notebook["independent_evaluation"], *arguments)


@SETTINGS
@given(decisions())
def test_adoption_decision_is_the_notebooks(notebook, arguments):
    same(offline_gates.adoption_decision, notebook["adoption_decision"], *arguments)


def test_a_planted_difference_is_caught(notebook):
    """One order enough (a position-biased judge) against both orders: the comparison fails."""
    def one_order_enough(judgements, train_prompts):
        result = offline_gates.independent_evaluation(judgements, train_prompts)
        return {**result, "correct": result["correct"] + result["inconsistent"], "inconsistent": 0}

    position_judge = [{"pair_id": "p", "prompt": "x", "order": order, "policy_first": -1.0, "policy_second": -2.0,
                       "reference_first": -1.0, "reference_second": -1.0} for order in offline_gates.ORDERS]
    with pytest.raises(AssertionError):
        same(one_order_enough, notebook["independent_evaluation"], position_judge, [])
