"""The classes of hard values a drawn call contains, for the build's per-clause report.

A differential test's generator should draw, for every clause, the values a learner's code most often
gets wrong: non-finite floats at every position of a sequence (not only the last), floats whose decimal
form binary arithmetic cannot hold exactly, bools where numbers go, empty and one-item containers, and
strings with the characters that splitting and stripping treat specially. `hard_classes` names the
classes one call's arguments contain; `grading build` reports, per clause, which classes the cases that
reach it contain, so an author sees at a glance which clause is only ever tried on easy values.
Values on bin, band and threshold edges depend on the contract: the tests name those as clauses.
"""

from __future__ import annotations

import math
import unicodedata
from fractions import Fraction
from typing import Any

from tools.course.grader.codec import is_tensor

NON_FINITE_SCALAR = "non-finite scalar"
NON_FINITE_FIRST = "non-finite first item"
NON_FINITE_INTERIOR = "non-finite interior item"
NON_FINITE_LAST = "non-finite last item"
INEXACT_FLOAT = "inexact float"
NEGATIVE_ZERO = "negative zero"
BOOL_VALUE = "bool"
EMPTY = "empty container"
SINGLE_ITEM = "one-item sequence"
SPECIAL_TEXT = "special characters"

HARD_CLASSES = (NON_FINITE_SCALAR, NON_FINITE_FIRST, NON_FINITE_INTERIOR, NON_FINITE_LAST, INEXACT_FLOAT,
                NEGATIVE_ZERO, BOOL_VALUE, EMPTY, SINGLE_ITEM, SPECIAL_TEXT)
"""Every class `hard_classes` can name, in report order."""

NON_FINITE_CLASSES = (NON_FINITE_SCALAR, NON_FINITE_FIRST, NON_FINITE_INTERIOR, NON_FINITE_LAST)
SPECIAL_CHARACTERS = frozenset("\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\xa0\u2028\u2029\u3000\u200b\ufeff")
"""Whitespace `str.split()` splits on beyond the space, and invisible characters `strip()` keeps."""
MAX_ITEMS = 4096
"""At most this many items of one container or tensor are looked at (drawn inputs are small)."""


def _float_classes(value: float) -> set[str]:
    if not math.isfinite(value):
        return {NON_FINITE_SCALAR}
    found = set()
    if value == 0 and math.copysign(1.0, value) < 0:
        found.add(NEGATIVE_ZERO)
    if Fraction(repr(value)) != Fraction(value):
        found.add(INEXACT_FLOAT)
    return found


def _text_classes(value: str) -> set[str]:
    special = (value != value.strip(" ") or any(char in SPECIAL_CHARACTERS for char in value)
               or any(unicodedata.category(char) == "Nd" and not char.isascii() for char in value))
    return {SPECIAL_TEXT} if special else set()


def _position(index: int, length: int) -> str:
    return NON_FINITE_FIRST if index == 0 else NON_FINITE_LAST if index == length - 1 else NON_FINITE_INTERIOR


def _tensor_classes(value: Any) -> set[str]:
    import torch

    if value.numel() == 0:
        return {EMPTY}
    if value.dtype == torch.bool:
        return {BOOL_VALUE}
    found = set()
    if value.dim() >= 1 and value.shape[-1] == 1:
        found.add(SINGLE_ITEM)
    if not (value.is_floating_point() or value.is_complex()):
        return found
    flat = value.detach().reshape(-1, value.shape[-1] if value.dim() else 1)[:MAX_ITEMS].to("cpu")
    bad = ~torch.isfinite(flat)
    if value.dim() == 0:
        return found | ({NON_FINITE_SCALAR} if bool(bad.any()) else set()) | _float_classes(float(flat.reshape(())))
    for row, column in bad.nonzero().tolist():
        found.add(_position(column, flat.shape[1]))
    for item in flat.reshape(-1)[:MAX_ITEMS].tolist():
        if isinstance(item, float):
            found |= _float_classes(item) - {NON_FINITE_SCALAR}
    return found


def _sequence_classes(items: list, depth: int) -> set[str]:
    if not items:
        return {EMPTY}
    found = {SINGLE_ITEM} if len(items) == 1 else set()
    for index, item in enumerate(items[:MAX_ITEMS]):
        inner = _classes(item, depth + 1)
        if NON_FINITE_SCALAR in inner and len(items) > 1:
            inner = (inner - {NON_FINITE_SCALAR}) | {_position(index, len(items))}
        found |= inner
    return found


def _classes(value: Any, depth: int = 0) -> set[str]:
    if depth > 8:
        return set()
    if isinstance(value, bool):
        return {BOOL_VALUE}
    if isinstance(value, float):
        return _float_classes(value)
    if isinstance(value, str):
        return _text_classes(value)
    if is_tensor(value):
        return _tensor_classes(value)
    if isinstance(value, (list, tuple)):
        return _sequence_classes(list(value), depth)
    if isinstance(value, dict):
        if not value:
            return {EMPTY}
        found = set()
        for key, item in list(value.items())[:MAX_ITEMS]:
            found |= _classes(key, depth + 1) | _classes(item, depth + 1)
        return found
    if isinstance(value, (set, frozenset)):
        return {EMPTY} if not value else set().union(*(_classes(item, depth + 1) for item in list(value)[:MAX_ITEMS]))
    return set()


def hard_classes(args: tuple, kwargs: dict) -> frozenset[str]:
    """The hard-value classes one call's arguments contain (the argument list itself is not a sequence:
    a lone non-finite argument is a scalar, not a first item)."""
    found: set[str] = set()
    for value in [*args, *kwargs.values()]:
        found |= _classes(value)
    return frozenset(found)
