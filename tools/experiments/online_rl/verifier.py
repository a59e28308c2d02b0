"""integer-answer-v1: the verifiable reward of the arithmetic tasks.

Four outcomes, decided in this order: an unfinished reply (the generation hit its token limit) is
`truncated` and never parsed; a finished reply whose final line is not the canonical decimal form
of an integer is a `format_error`; otherwise the integer is `correct` or `wrong`. Only `correct`
earns reward 1.0, so neither a truncation nor a format failure can create a reward difference.
"""

from __future__ import annotations

from tools.errors import ConfigError

VERIFIER_ID = "integer-answer-v1"
OUTCOMES = ("correct", "wrong", "format_error", "truncated")


def final_line(response: str) -> str:
    """The last line of a reply once trailing whitespace is removed, itself stripped."""
    return response.rstrip().split("\n")[-1].strip()


def canonical_integer(text: str) -> int | None:
    """The integer whose `str()` is exactly `text`, or None ("-0", "+5", "007", "４２", "1_0" are not)."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if str(value) == text else None


def verify_integer_answer(response: str, label: int, finished: bool) -> dict:
    """`{"outcome", "parsed", "reward"}` of one reply under integer-answer-v1 (module docstring)."""
    if not isinstance(response, str):
        raise ConfigError(f"response must be a str, got {type(response).__name__}")
    if isinstance(label, bool) or not isinstance(label, int):
        raise ConfigError(f"label must be an int, got {label!r}")
    if not isinstance(finished, bool):
        raise ConfigError(f"finished must be a bool, got {finished!r}")
    if not finished:
        return {"outcome": "truncated", "parsed": None, "reward": 0.0}
    parsed = canonical_integer(final_line(response))
    if parsed is None:
        return {"outcome": "format_error", "parsed": None, "reward": 0.0}
    outcome = "correct" if parsed == label else "wrong"
    return {"outcome": outcome, "parsed": parsed, "reward": 1.0 if outcome == "correct" else 0.0}
