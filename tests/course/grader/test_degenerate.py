"""The two planted bodies every exercise gets: one that raises on every input, one that returns a constant."""

import pytest
import torch

from tools.course.grader.degenerate import (
    constant_solution,
    contract_error,
    degenerate_solutions,
    raising_solution,
)

REFERENCE = '''
def scaled(values, factor=2):
    """Each value times factor; an empty list or a bool factor is refused."""
    if not values:
        raise ValueError("values must not be empty")
    if isinstance(factor, bool):
        raise TypeError("factor must be a number")
    if factor == 0:
        raise ValueError("factor must not be zero")
    return {"scaled": [value * factor for value in values], "tensor": torch.tensor(values) * factor}
'''


def define(source, **names):
    namespace = {"torch": torch, **names}
    exec(source, namespace)
    return namespace["scaled"]


def test_the_raised_class_is_the_one_the_reference_raises_most_often():
    assert contract_error(REFERENCE, "scaled") == "ValueError"
    assert contract_error("def f(x):\n    raise TypeError('x')\n", "f") == "TypeError"
    assert contract_error("def f(x):\n    raise Custom('x')\n", "f") == "ValueError"  # a built-in class only
    assert contract_error("def f(x):\n    return x\n", "f") == "ValueError"


@pytest.mark.parametrize("args", [([1, 2],), ([],), ([1], True), (None,)])
def test_the_raising_body_refuses_every_input(args):
    scaled = define(raising_solution(REFERENCE, "scaled"))
    with pytest.raises(ValueError, match="planted solution"):
        scaled(*args)


def test_the_constant_body_returns_the_first_accepted_result_on_every_later_call():
    scaled = define(constant_solution(REFERENCE, "scaled"))
    assert scaled([]) is None  # the reference refuses it: no constant yet
    first = [1, 2]
    result = scaled(first, factor=3)
    assert result["scaled"] == [3, 6] and torch.equal(result["tensor"], torch.tensor([3, 6]))
    assert first == [1, 2]
    result["scaled"].append("changed by the caller")
    for args in (([5],), ([],), ([1], True), ("anything", 0)):
        again = scaled(*args)
        assert again["scaled"] == [3, 6] and torch.equal(again["tensor"], torch.tensor([3, 6]))


def test_the_constant_body_leaves_its_inputs_alone_even_when_the_reference_writes_into_them():
    reference = "def scaled(values):\n    values.append(0)\n    return len(values)\n"
    scaled = define(constant_solution(reference, "scaled"))
    values = [1, 2]
    assert scaled(values) == 3 and values == [1, 2]
    assert scaled([]) == 3


def test_both_bodies_keep_the_exercise_name():
    sources = degenerate_solutions(REFERENCE, "scaled")
    assert set(sources) == {"raises", "constant"}
    assert all(source.startswith("def scaled(") for source in sources.values())
