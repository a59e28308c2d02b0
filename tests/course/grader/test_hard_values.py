"""The hard-value classes of a drawn call, which `grading build` reports per clause."""

from __future__ import annotations

import math

import pytest
import torch

from tools.course.grader.hard_values import (
    BOOL_VALUE,
    EMPTY,
    HARD_CLASSES,
    INEXACT_FLOAT,
    NEGATIVE_ZERO,
    NON_FINITE_FIRST,
    NON_FINITE_INTERIOR,
    NON_FINITE_LAST,
    NON_FINITE_SCALAR,
    SINGLE_ITEM,
    SPECIAL_TEXT,
    hard_classes,
)

NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("args, expected", [
    ((1, 2.5, "abc"), set()),
    ((NAN,), {NON_FINITE_SCALAR}),
    ((-INF, 3), {NON_FINITE_SCALAR}),
    (([NAN, 1.0, 2.0],), {NON_FINITE_FIRST}),
    (([1.0, INF, 2.0],), {NON_FINITE_INTERIOR}),
    (([1.0, 2.0, -INF],), {NON_FINITE_LAST}),
    (([NAN],), {SINGLE_ITEM, NON_FINITE_SCALAR}),
    (([[1.0, NAN], [NAN, 2.0]],), {NON_FINITE_FIRST, NON_FINITE_LAST}),
    ((0.1,), {INEXACT_FLOAT}),
    ((0.375, 1024.0, 2.0 ** -20), set()),
    ((1e300,), {INEXACT_FLOAT}),
    ((-0.0,), {NEGATIVE_ZERO}),
    ((True, 1), {BOOL_VALUE}),
    (([], {}), {EMPTY}),
    (("a b\tc",), {SPECIAL_TEXT}),
    ((" 12",), {SPECIAL_TEXT}),
    (("١٢",), {SPECIAL_TEXT}),
    (("a\u200bb",), {SPECIAL_TEXT}),
    (({"x": [0.5, NAN]},), {NON_FINITE_LAST}),
])
def test_each_class_is_named_where_it_stands(args, expected):
    assert hard_classes(args, {}) == expected


def test_tensors_name_non_finite_items_by_their_position_in_the_last_dimension():
    assert hard_classes((torch.tensor([[0.5, NAN, 0.25], [INF, 0.5, 0.5]]),), {}) == {NON_FINITE_INTERIOR,
                                                                                    NON_FINITE_FIRST}
    assert hard_classes((torch.tensor(NAN),), {}) == {NON_FINITE_SCALAR}
    assert hard_classes((torch.tensor([0.1], dtype=torch.float64),), {}) == {SINGLE_ITEM, INEXACT_FLOAT}
    assert hard_classes((torch.zeros(0),), {}) == {EMPTY}
    assert hard_classes((torch.tensor([True, False]),), {}) == {BOOL_VALUE}
    assert hard_classes((torch.tensor([1, 2, 3]),), {}) == set()


def test_keyword_arguments_count_and_every_class_is_in_the_report_order():
    assert hard_classes((), {"rate": [1.0, 2.0, NAN], "flag": True}) == {NON_FINITE_LAST, BOOL_VALUE}
    assert len(set(HARD_CLASSES)) == len(HARD_CLASSES) == 10
