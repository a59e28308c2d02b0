"""Differential hidden tests: the learner's function against the reference, on generated inputs.

A hidden test that uses the name `reference` gets, from `grading build`, a first line that builds
it from the chapter's reference-solution cells (hidden from the release, like the test itself):

    reference = Reference(<reference cells>, globals())

and then checks the learner's function against the reference on inputs drawn by a hypothesis
strategy, valid and invalid alike:

    reference.agrees("transfer_ledger", st.tuples(edges(), placements()), cases=200)

For each generated argument tuple both functions run on their own deep copies of it. They must
return the same value (same types: an int is not a float, a 0-dim tensor is not a float; floats
within 1e-9 relative, tensors of the same dtype and shape within 1e-6) or raise the same class of
exception, and the learner must not change its arguments. The search is seeded (`DRAW_SEED`), so
a submission gets the same verdict every time it is graded. When the learner's function lives across
the grading boundary (class grading and the oracle: a `boundary.LearnerFunction`), every draw is made
first and the learner's calls cross in batches of `BATCH_CALLS` per round trip; the outcomes are
compared in draw order, so the verdict and the first mismatch are those of a call-by-call comparison.

Each differential test names the contract clauses its generator must reach, as predicates on the
drawn arguments:

    reference.agrees("pipeline_capacity", calls, cases=200, clauses={
        "a rate is a bool": lambda stage_rates, arrival, per_unit: any(type(r) is bool for r in stage_rates.values()),
        "arrival is negative": lambda stage_rates, arrival, per_unit: arrival < 0,
    })

Grading ignores them. `grading build` runs each chapter's differential tests once in coverage mode
(`python -m tools.course.grader.differential`, the reference alone, the same seeded draws) and
counts, per test, the cases that reach each clause, the cases the reference accepts (valid input)
and those it refuses; a clause no case reaches, a test that names no clause, or a test without one
valid case (a body that only raises would pass it) fails the build. It also reports, per clause, the
classes of hard values (`hard_values`: non-finite items by position, inexact floats, bools, empty and
one-item containers, special characters) that the cases reaching it contain.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from tools.course.grader.codec import is_tensor
from tools.errors import GradingError

FLOAT_REL_TOL, FLOAT_ABS_TOL = 1e-9, 1e-12
TENSOR_RTOL, TENSOR_ATOL = 1e-6, 1e-8
DEFAULT_CASES = 100
DRAW_SEED = 18
"""Every `agrees` call draws from this seed: the cases follow from the strategy alone, not from the
source of this module (hypothesis's `derandomize` would hash it), so editing the grader does not
move the cases a chapter's clause coverage was counted on."""


class Mismatch(AssertionError):
    """The learner's function and the reference disagree on a generated input."""


def difference(expected: Any, actual: Any, where: str = "result") -> str | None:
    """Why `actual` is not the same value as `expected`, or None when it is."""
    if is_tensor(expected) or is_tensor(actual):
        if not (is_tensor(expected) and is_tensor(actual)):
            return f"{where}: expected a {type(expected).__name__}, got a {type(actual).__name__}"
        if expected.dtype != actual.dtype or tuple(expected.shape) != tuple(actual.shape):
            return (f"{where}: expected a tensor of dtype {expected.dtype} and shape {tuple(expected.shape)}, "
                    f"got dtype {actual.dtype} and shape {tuple(actual.shape)}")
        import torch

        if not torch.allclose(actual.detach().double().cpu(), expected.detach().double().cpu(), rtol=TENSOR_RTOL,
                              atol=TENSOR_ATOL, equal_nan=True):
            return f"{where}: tensor values differ"
        return None
    if type(expected) is not type(actual):
        return f"{where}: expected {type(expected).__name__} {expected!r}, got {type(actual).__name__} {actual!r}"
    if isinstance(expected, float):
        same = (math.isnan(expected) and math.isnan(actual)) or math.isclose(
            expected, actual, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)
        return None if same else f"{where}: expected {expected!r}, got {actual!r}"
    if isinstance(expected, Mapping):
        if set(expected) != set(actual):
            missing, extra = sorted(map(str, set(expected) - set(actual))), sorted(map(str, set(actual) - set(expected)))
            return f"{where}: keys differ (missing {missing}, unexpected {extra})"
        for key in expected:
            found = difference(expected[key], actual[key], f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)):
        if len(expected) != len(actual):
            return f"{where}: expected {len(expected)} items, got {len(actual)}"
        for index, (left, right) in enumerate(zip(expected, actual)):
            found = difference(left, right, f"{where}[{index}]")
            if found:
                return found
        return None
    if isinstance(expected, (set, frozenset)):
        return None if expected == actual else f"{where}: expected {sorted(map(repr, expected))}, got {sorted(map(repr, actual))}"
    return None if expected == actual else f"{where}: expected {expected!r}, got {actual!r}"


def _outcome(function: Callable, args: tuple, kwargs: dict) -> tuple[str, Any]:
    try:
        return "value", function(*args, **kwargs)
    except Exception as error:  # the exception class is the outcome being compared
        return "raised", error


def compare_call(learner: Callable, reference: Callable, args: tuple, kwargs: dict | None = None, *,
                 check_inputs: bool = True) -> str | None:
    """Run both on deep copies of the arguments; return why they disagree, or None."""
    kwargs = kwargs or {}
    expected = _outcome(reference, *copy.deepcopy((args, kwargs)))
    learner_args = copy.deepcopy((args, kwargs))
    actual = _outcome(learner, *learner_args)
    return compare_outcomes(expected, actual, (args, kwargs), learner_args, check_inputs=check_inputs)


def compare_outcomes(expected_outcome: tuple[str, Any], actual_outcome: tuple[str, Any], arguments: tuple,
                     learner_arguments: tuple, *, check_inputs: bool = True) -> str | None:
    """Why the reference's and the learner's outcomes (`_outcome`) of one call disagree, or None;
    `learner_arguments` is the learner's copy of `arguments` after its call."""
    (expected_kind, expected), (actual_kind, actual) = expected_outcome, actual_outcome
    if expected_kind == "raised":
        if actual_kind != "raised":
            return f"expected {type(expected).__name__} ({expected}), got the value {actual!r}"
        if not isinstance(actual, type(expected)):
            return f"expected {type(expected).__name__}, got {type(actual).__name__}: {actual}"
        return None
    if actual_kind == "raised":
        return f"expected the value {expected!r}, got {type(actual).__name__}: {actual}"
    found = difference(expected, actual)
    if found:
        return found
    if check_inputs:
        changed = difference(arguments, learner_arguments, "arguments after the call")
        if changed:
            return f"the function changed its inputs ({changed})"
    return None


@contextlib.contextmanager
def _environment_free_generation():
    """Generation that depends on the seed alone: hypothesis mixes into a few draws literals it
    collects from the local modules loaded in the process (which differ between an instructor's
    checkout, the grading sandbox and CI) and caches them under `.hypothesis/` in the working
    folder. Both are switched off here, so a submission gets the same inputs everywhere and the
    submission folder stays untouched."""
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir
    from hypothesis.internal.conjecture import providers

    empty = providers.Constants()
    original = providers._get_local_constants
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()
    set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "course-hypothesis")
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()
        set_hypothesis_home_dir(None)


ALL_CASES = "(all cases)"
"""The key of `CallCoverage.hard` for the classes of every drawn case, whatever clause it reaches."""


@dataclass
class CallCoverage:
    """How the seeded draws of one `agrees` call reach its named clauses (coverage mode)."""

    test: str
    exercise: str
    function: str
    cases: int = 0
    valid: int = 0  # cases the reference accepts (returns a value)
    refused: int = 0  # cases the reference refuses (raises)
    clauses: dict[str, int] | None = None  # None: the call names no clause
    hard: dict[str, list[str]] | None = None  # clause (or ALL_CASES) -> hard-value classes its cases contain


class _CoverageLog:
    """Collects `CallCoverage` while the build runs the differential tests with the reference alone."""

    def __init__(self):
        self.calls: list[CallCoverage] = []
        self.test, self.exercise = "", ""

    def start(self, name: str, clauses: dict | None) -> CallCoverage:
        call = CallCoverage(self.test, self.exercise, name, clauses=None if clauses is None else dict.fromkeys(clauses, 0),
                            hard={ALL_CASES: [], **{clause: [] for clause in clauses or ()}})
        self.calls.append(call)
        return call


_coverage: _CoverageLog | None = None
"""Set only inside the coverage run of `grading build`; None while grading."""


def _reaches(predicate: Callable, args: tuple, kwargs: dict) -> bool:
    try:
        return bool(predicate(*args, **kwargs))
    except Exception:  # a predicate that cannot read an (invalid) input: that case does not reach it
        return False


def _checked_clauses(clauses) -> dict[str, Callable] | None:
    if clauses is None:
        return None
    if not isinstance(clauses, dict) or not clauses or not all(
            isinstance(key, str) and key.strip() and callable(value) for key, value in clauses.items()):
        raise TypeError("clauses must be a non-empty dict {clause name: predicate(*args, **kwargs) -> bool}")
    return clauses


class Reference:
    """The reference implementations of a chapter, defined apart from the learner's functions."""

    def __init__(self, source: str, learner_namespace: dict):
        self._source = source
        self._learner = learner_namespace
        self._namespace: dict | None = None
        self.cases_checked: dict[str, int] = {}

    def __call__(self, name: str) -> Callable:
        if self._namespace is None:
            namespace = dict(self._learner)  # setup-cell imports and helpers, never the learner's versions
            exec(compile(self._source, "<reference solution>", "exec"), namespace)
            self._namespace = namespace
        return self._namespace[name]

    def agrees(self, name: str, arguments, *, cases: int = DEFAULT_CASES, check_inputs: bool = True,
               clauses: dict[str, Callable] | None = None) -> None:
        """Check the learner's `name` against the reference on `cases` draws of `arguments` (a
        hypothesis strategy of argument tuples, or of `(args, kwargs)` pairs when it yields a
        2-tuple whose second item is a dict); raise Mismatch on the first disagreement.

        `clauses` (`{clause name: predicate}`, each predicate called as `predicate(*args, **kwargs)`
        on a drawn call) names the contract clauses the draws must reach; only the build's coverage
        run evaluates them (see the module docstring).

        Returns None on purpose: a grade cell whose last line shows a number is partial credit to
        nbgrader. The number of inputs checked is kept in `cases_checked`."""
        from hypothesis import HealthCheck, Phase, given, seed, settings

        clauses = _checked_clauses(clauses)
        counting = _coverage.start(name, clauses) if _coverage is not None else None
        learner = self._learner.get(name)
        if not callable(learner):
            raise Mismatch(f"{name} is not defined")
        reference = self(name)
        seen, batch = [], []
        batched = counting is None and callable(getattr(learner, "call_many", None))

        @seed(DRAW_SEED)
        @settings(max_examples=cases, database=None, deadline=None, report_multiple_bugs=False,
                  phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
        @given(arguments)
        def check(drawn):
            args, kwargs = drawn if (isinstance(drawn, tuple) and len(drawn) == 2 and isinstance(drawn[1], dict)
                                     and isinstance(drawn[0], tuple)) else (tuple(drawn), {})
            seen.append(1)
            if counting is not None:
                _count(counting, reference, args, kwargs, clauses)
                return
            if batched:  # compared below, after one round trip for every drawn call
                batch.append((args, kwargs))
                return
            _raise_on(name, args, kwargs, compare_call(learner, reference, args, kwargs, check_inputs=check_inputs))

        with _environment_free_generation():
            check()
        if batched:
            _compare_batch(name, learner, reference, batch, check_inputs)
        self.cases_checked[name] = len(seen)


BATCH_CALLS = 64
"""Calls of a learner's function sent across the grading boundary in one round trip."""


def _raise_on(name: str, args: tuple, kwargs: dict, problem: str | None) -> None:
    if problem:
        shown = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        raise Mismatch(f"{name}({shown[:600]}): {problem}")


def _compare_batch(name: str, learner, reference: Callable, cases: list[tuple[tuple, dict]],
                   check_inputs: bool) -> None:
    """The learner's function lives across the grading boundary (`boundary.LearnerFunction`): its calls
    go in batches of `BATCH_CALLS` per round trip, and the outcomes are compared in draw order, so the
    first disagreement is the one a call-by-call comparison finds. A batch whose reply cannot cross
    whole (every outcome unencodable, e.g. past the reply's size cap) is called again one call at a time."""
    from tools.course.grader.codec import LearnerError

    for start in range(0, len(cases), BATCH_CALLS):
        chunk = cases[start:start + BATCH_CALLS]
        learner_copies = [copy.deepcopy(case) for case in chunk]
        actual = learner.call_many(learner_copies)
        if len(chunk) > 1 and all(kind == "raised" and isinstance(value, LearnerError) for kind, value in actual):
            for args, kwargs in chunk:
                _raise_on(name, args, kwargs, compare_call(learner, reference, args, kwargs, check_inputs=check_inputs))
            continue
        for (args, kwargs), learner_arguments, outcome in zip(chunk, learner_copies, actual):
            expected = _outcome(reference, *copy.deepcopy((args, kwargs)))
            _raise_on(name, args, kwargs, compare_outcomes(expected, outcome, (args, kwargs), learner_arguments,
                                                           check_inputs=check_inputs))


def _count(call: CallCoverage, reference: Callable, args: tuple, kwargs: dict, clauses: dict | None) -> None:
    """Coverage mode: run the reference alone on one drawn call; count the clauses it reaches and note
    the hard-value classes (`hard_values`) of the cases that reach each."""
    from tools.course.grader.hard_values import HARD_CLASSES, hard_classes

    def note(key: str) -> None:
        call.hard[key] = [name for name in HARD_CLASSES if name in classes or name in call.hard[key]]

    call.cases += 1
    classes = hard_classes(args, kwargs)
    note(ALL_CASES)
    kind, _ = _outcome(reference, *copy.deepcopy((args, kwargs)))
    if kind == "value":
        call.valid += 1
    else:
        call.refused += 1
    for clause, predicate in (clauses or {}).items():
        if _reaches(predicate, args, kwargs):
            call.clauses[clause] += 1
            note(clause)


# ---------------------------------------------------------------------------
# The coverage run of `grading build` (a process of its own: it runs the chapter's setup cells)
# ---------------------------------------------------------------------------

COVERAGE_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
                "PYTHONDONTWRITEBYTECODE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_clause_coverage(cells: list[dict], *, timeout_s: float = 1800.0) -> list[CallCoverage]:
    """Run `cells` (`{"source", "test", "exercise"}` in notebook order; `test` set on the differential
    tests) in a fresh process with coverage mode on; return what each `agrees` call reached."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="clause-coverage-") as folder:
        completed = subprocess.run([sys.executable, "-m", "tools.course.grader.differential"], input=json.dumps(cells),
                                   capture_output=True, text=True, cwd=folder, env={**os.environ, **COVERAGE_ENV},
                                   timeout=timeout_s, check=False)
    lines = completed.stdout.strip().splitlines()
    if completed.returncode != 0 or not lines:
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-15:])
        raise GradingError(f"the clause-coverage run exited {completed.returncode}:\n{tail}")
    payload = json.loads(lines[-1])
    if payload.get("error"):
        raise GradingError(payload["error"])
    return [CallCoverage(**call) for call in payload["calls"]]


def _coverage_main() -> int:
    """Inside the coverage process: execute the cells, counting every `agrees` call."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from traitlets.config import Config

    cells = json.loads(sys.stdin.read())
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.showtraceback = shell.showsyntaxerror = lambda *args, **kwargs: None
    from tools.course.grader import (
        differential,  # the module the cells import (this file runs as __main__)
    )

    log = differential._coverage = differential._CoverageLog()
    error = None
    for cell in cells:
        log.test, log.exercise = cell.get("test") or "", cell.get("exercise") or ""
        with capture_output(display=False):
            result = shell.run_cell(cell["source"], store_history=False)
        failure = result.error_before_exec or result.error_in_exec
        if failure is not None:
            where = f"differential test {cell['test']}" if cell.get("test") else f"cell {cell.get('name', '?')}"
            error = f"{where} failed with the reference solution: {type(failure).__name__}: {str(failure)[:500]}"
            break
    sys.stdout.write("\n" + json.dumps({"calls": [asdict(call) for call in log.calls], "error": error}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(_coverage_main())
