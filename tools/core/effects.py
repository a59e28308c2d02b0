"""Effect sizes as a practitioner reports them: a paired difference over seeds with an interval.

A chapter that trains compares a treatment with a baseline or a control, run on the same seeds (the same
initial weights, data order and held-out problems per seed). The effect is the per-seed difference
`treatment[seed] - control[seed]`; its interval is Student's t over those differences (n - 1 degrees of
freedom), which with three to five seeds is wide, as it should be. An effect test asserts that the interval
lies beyond a stated margin (`holds`), so an effect that only one machine's arithmetic produces fails.

Records carry `paired_effect(...)` as it is (plain JSON), and the page prints `describe(effect)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tools.errors import ConfigError

EFFECT_METHOD = "student_t_over_paired_seed_differences"

# Two-sided critical values of Student's t, t_{(1 + confidence) / 2, df}, for df = 1..30 (standard tables).
_T_TABLE = {
    0.90: (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
           1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697),
    0.95: (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
           2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042),
    0.99: (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012, 2.977, 2.947,
           2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779, 2.771, 2.763, 2.756, 2.750),
}
_NORMAL = {0.90: 1.645, 0.95: 1.960, 0.99: 2.576}
DIRECTIONS = ("greater", "less")


def t_critical(confidence: float, degrees_of_freedom: int) -> float:
    """The two-sided critical value of Student's t (normal beyond 30 degrees of freedom)."""
    if confidence not in _T_TABLE:
        raise ConfigError(f"confidence must be one of {sorted(_T_TABLE)}, got {confidence!r}")
    if isinstance(degrees_of_freedom, bool) or not isinstance(degrees_of_freedom, int) or degrees_of_freedom < 1:
        raise ConfigError(f"degrees of freedom must be a positive int, got {degrees_of_freedom!r}")
    table = _T_TABLE[confidence]
    return table[degrees_of_freedom - 1] if degrees_of_freedom <= len(table) else _NORMAL[confidence]


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def paired_effect(treatment: Mapping[int, float], control: Mapping[int, float], *, confidence: float = 0.95,
                  metric: str | None = None) -> dict:
    """`treatment - control` per seed, their mean and a Student-t interval over the seeds.

    Both mappings are keyed by seed and must name the same seeds (at least two). Returns plain JSON:
    `{"metric", "seeds", "treatment", "control", "differences", "mean", "sd", "lower", "upper",
    "confidence", "method"}` (differences in seed order; `sd` the sample standard deviation)."""
    if not isinstance(treatment, Mapping) or not isinstance(control, Mapping):
        raise ConfigError("treatment and control must be mappings seed -> value")
    if set(treatment) != set(control):
        raise ConfigError(f"a paired effect needs the same seeds on both sides: {sorted(treatment)} vs {sorted(control)}")
    seeds = sorted(treatment)
    if len(seeds) < 2:
        raise ConfigError(f"a paired effect needs at least two seeds, got {seeds}")
    after = [_finite(f"treatment[{seed}]", treatment[seed]) for seed in seeds]
    before = [_finite(f"control[{seed}]", control[seed]) for seed in seeds]
    differences = [a - b for a, b in zip(after, before)]
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    half = t_critical(confidence, n - 1) * sd / math.sqrt(n)
    return {"metric": metric, "seeds": seeds, "treatment": after, "control": before, "differences": differences,
            "mean": mean, "sd": sd, "lower": mean - half, "upper": mean + half, "confidence": confidence,
            "method": EFFECT_METHOD}


def holds(effect: Mapping, margin: float = 0.0, direction: str = "greater") -> bool:
    """True when the whole interval lies beyond the margin: `lower > margin` ("greater") or
    `upper < -margin` ("less"). The margin is the smallest effect the page claims."""
    margin = _finite("margin", margin)
    if margin < 0:
        raise ConfigError(f"margin must be >= 0, got {margin!r}")
    if direction not in DIRECTIONS:
        raise ConfigError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    return effect["lower"] > margin if direction == "greater" else effect["upper"] < -margin


def equivalent(effect: Mapping, margin: float) -> bool:
    """True when the whole interval lies inside `(-margin, margin)`: the two arms are equivalent within the
    margin (an equivalence claim, e.g. "packing does not change the losses"; two one-sided tests at the
    interval's confidence). The margin is the largest difference the page calls no difference, and must
    be > 0: no interval lies inside an empty band."""
    margin = _finite("margin", margin)
    if margin <= 0:
        raise ConfigError(f"an equivalence margin must be > 0, got {margin!r}")
    return -margin < effect["lower"] and effect["upper"] < margin


def describe(effect: Mapping, digits: int = 3) -> str:
    """`+0.210 [+0.100, +0.320] (95 % interval over 3 seeds)`: numbers only; the page's sentence is its own."""
    form = f"{{:+.{digits}f}}"
    return (f"{form.format(effect['mean'])} [{form.format(effect['lower'])}, {form.format(effect['upper'])}] "
            f"({round(effect['confidence'] * 100)} % interval over {len(effect['seeds'])} seeds)")
