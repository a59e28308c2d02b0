"""Small predicates for the contract clauses that differential hidden tests name, and `each_of`.

A clause predicate reads one drawn call's arguments and says whether the call exercises the clause
(`reference.agrees(..., clauses={name: predicate})`, see `tools.course.grader.differential`). Most
contracts refuse the same few kinds of value; these helpers name them once, so a clause reads like
the contract:

    "a rate is a bool": lambda rates, arrival, per_unit: any(is_bool(v) for v in values(rates)),
    "arrival is not finite": lambda rates, arrival, per_unit: not_finite(arrival),

Each helper accepts any value (a predicate sees invalid inputs too) and never raises.

Hypothesis draws are not uniform (it favours the first items of `sampled_from` and repeats what it
drew before), so a defect that is one of sixty in a list may never be drawn. `each_of` makes a
strategy that draws every listed case exactly once (hypothesis enumerates a finite list it is
allowed to exhaust), each built in a context of its own random choices: a clause that a listed
case violates is reached by construction.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any


def is_bool(value: Any) -> bool:
    """A bool, which the contracts never accept for a number."""
    return isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def not_a_number(value: Any) -> bool:
    """Neither an int nor a float (None, a str, a list, ...); a bool counts as a number here: see is_bool."""
    return not isinstance(value, (int, float))


def not_finite(value: Any) -> bool:
    """A number that is NaN or infinite."""
    return is_number(value) and not math.isfinite(value)


def below(value: Any, limit: float, *, or_equal: bool = False) -> bool:
    """A finite number below `limit` (or at it, with `or_equal`)."""
    return is_number(value) and math.isfinite(value) and (value <= limit if or_equal else value < limit)


def is_blank(value: Any) -> bool:
    """A str with no visible character ('' or only whitespace)."""
    return isinstance(value, str) and not value.strip()


def not_a_str(value: Any) -> bool:
    return not isinstance(value, str)


def values(container: Any) -> list:
    """The values of a dict, the items of a list or tuple, else nothing."""
    if isinstance(container, dict):
        return list(container.values())
    if isinstance(container, (list, tuple)):
        return list(container)
    return []


def keys(container: Any) -> list:
    """The keys of a dict, else nothing."""
    return list(container) if isinstance(container, dict) else []


def dicts(container: Any) -> list[dict]:
    """The dict items of a list or tuple (e.g. the records or edges of a call), else nothing."""
    return [item for item in container if isinstance(item, dict)] if isinstance(container, (list, tuple)) else []


def near_but_not_equal(first: Any, second: Any, rel_tol: float = 1e-9) -> bool:
    """Two numbers that differ, but only by rounding (math.isclose within `rel_tol`)."""
    return (is_number(first) and is_number(second) and first != second
            and math.isclose(first, second, rel_tol=rel_tol))



def each_of(cases: list, build: Callable[[Any, random.Random], Any], *, variants: int = 1):
    """A hypothesis strategy that yields `build(case, rng)` once for every case and variant (give
    `agrees` at least `len(cases) * variants` cases). `rng` is a `random.Random` seeded from the
    case and the variant, for the context around the case (which stages, where the defect sits):
    the same case always gets the same context, and repeated entries get the same one."""
    from hypothesis import strategies as st

    entries = [(case, variant) for case in cases for variant in range(variants)]
    return st.sampled_from(entries).map(lambda entry: build(entry[0], random.Random(f"{entry[0]!r}/{entry[1]}")))
