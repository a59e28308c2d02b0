"""What the TRL framework checks of chapters 17, PT-KTO and 51 share: running a learner's functions
through the same comparison as the reference, the record body and the summary lines.

Each chapter module runs its own comparison (its trainer, its quantities); this module only wraps it:
`learner_result` turns a learner's unfinished or broken function into data instead of an exception,
`record_body` keeps everything but the live models, `summary_lines` shows a record in Step 5.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

MEASUREMENT = ("equality check of loss definitions on one batch of the tiny model (random weights); "
               "not a GPU measurement")


def learner_result(compare: Callable[[], Mapping]) -> dict:
    """`compare()` run with a learner's functions: `matches` / `differs` with the largest difference, or
    `not_implemented` while a TODO still raises NotImplementedError, or `error` with its message."""
    try:
        result = compare()
    except NotImplementedError as error:
        return {"status": "not_implemented", "detail": str(error)}
    except Exception as error:  # a learner's bug is reported as data; the reference check still stands
        return {"status": "error", "detail": f"{type(error).__name__}: {error}"}
    return {"status": "matches" if result["matches"] else "differs",
            "detail": f"max |difference| {result['max_abs_diff']:.2e}", "ours": dict(result["ours"])}


def record_body(check: Mapping, learner: Mapping) -> dict:
    """A `framework_check` record's body: the check without its live objects, and the learner's result."""
    return {"measurement": MEASUREMENT, "results": {key: value for key, value in check.items() if key != "step"},
            "learner_functions": dict(learner)}


def summary_lines(record: Mapping, lines_of: Callable[[Mapping], list[str]]) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    learner = record.get("learner_functions", {})
    level = f"evidence level {record.get('evidence_level')}: an equality check of loss definitions, not a GPU measurement"
    return [level, *lines_of(record["results"]),
            f"  your functions: {learner.get('status')} ({learner.get('detail', '')})"]
