"""What the preference chapters (50, 17, PT-KTO, 51) share around a learner's functions: the TRL framework
checks' comparison, record body and summary lines, and the line that says which functions Step 5 ran.

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


_SOURCE_WORDS = {"learner": "your", "reference": "the notebook's reference", "package": "the package's"}


def functions_ran_line(described: Mapping[str, Mapping]) -> str:
    """`Step 5 ran your dpo_loss; the notebook's reference judge_beta_sweep` from a record's
    `mechanism.describe(...)` (`{name: {"source", "code_sha256"}}`)."""
    grouped: dict[str, list[str]] = {}
    for name, entry in sorted(described.items()):
        digest = entry.get("code_sha256")
        grouped.setdefault(entry["source"], []).append(f"{name} ({digest[:8] if digest else 'no source'})")
    parts = [f"{_SOURCE_WORDS.get(source, source)} {', '.join(grouped[source])}"
             for source in ("learner", "reference", "package") if source in grouped]
    return "Step 5 ran " + "; ".join(parts)
