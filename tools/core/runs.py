"""Run modes, run labels, evidence levels and the number checks every stage applies to its inputs.

A notebook or command calls these before any work: an unknown mode, a placeholder label or a
non-finite rate stops it with a ConfigError that says how to fix it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tools.errors import ConfigError

RUN_MODES = ("dry_run", "cpu_smoke", "real_gpu")

EVIDENCE_LEVELS = {"dry_run": None, "cpu_smoke": "cpu_smoke", "real_gpu": "real_gpu"}

PLACEHOLDER_LABEL = "replace_with_unique_label"

_PLACEHOLDER_WORDS = ("replace", "placeholder", "changeme", "change_me", "todo", "xxx", "your_label")

_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,95}$")


def validate_run_mode(run_mode: str) -> str:
    """Return `run_mode` if it is one of RUN_MODES, else raise ConfigError."""
    if run_mode not in RUN_MODES:
        raise ConfigError(f"unknown RUN_MODE {run_mode!r}; choose one of {', '.join(RUN_MODES)}.")
    return run_mode


def is_placeholder_label(label: str) -> bool:
    """True when `label` is the template placeholder or looks like one."""
    lowered = str(label).lower()
    return lowered == PLACEHOLDER_LABEL or any(word in lowered for word in _PLACEHOLDER_WORDS)


def validate_run_label(label: str) -> str:
    """Return `label` if it can name records: 3-96 characters of [A-Za-z0-9_.-], not a placeholder."""
    if not isinstance(label, str) or not _LABEL_PATTERN.match(label):
        raise ConfigError(
            f"invalid RUN_LABEL {label!r}: use 3-96 characters of letters, digits, '_', '.', '-', "
            "starting with a letter or digit (e.g. 'h200_rl_system_v1')."
        )
    if is_placeholder_label(label):
        raise ConfigError(f"RUN_LABEL {label!r} is a placeholder; set a unique label for this run.")
    return label


def evidence_level(run_mode: str) -> str | None:
    """The evidence level a record written in `run_mode` carries (None for dry_run)."""
    return EVIDENCE_LEVELS[validate_run_mode(run_mode)]


def require_finite(name: str, value: Any, *, minimum: float | None = None, positive: bool = False) -> float:
    """Return `value` as a float, raising ConfigError if it is not finite or out of range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if positive and number <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value!r}")
    return number


def validate_choice(name: str, value: Any, options: tuple | list) -> Any:
    """Return `value` if it is one of `options`, else raise ConfigError naming the parameter."""
    if value not in options:
        raise ConfigError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, options))}.")
    return value
