"""Paired effects over seeds (tools.core.effects): the interval, the margin test and the refusals."""

from __future__ import annotations

import math

import pytest

from tools.core import effects
from tools.errors import ConfigError


def student_t_two_sided_mass(t: float, df: int, steps: int = 20000) -> float:
    """P(|T| <= t) for Student's t with df degrees of freedom, by Simpson's rule on the density."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(x: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))

    h = t / steps
    total = density(0) + density(t) + sum((4 if k % 2 else 2) * density(k * h) for k in range(1, steps))
    return 2 * total * h / 3


@pytest.mark.parametrize("confidence", [0.90, 0.95, 0.99])
@pytest.mark.parametrize("df", [1, 2, 3, 4, 9, 29])
def test_the_critical_values_cover_their_confidence(confidence, df):
    assert student_t_two_sided_mass(effects.t_critical(confidence, df), df) == pytest.approx(confidence, abs=2e-4)


def test_a_paired_effect_is_the_mean_difference_with_a_t_interval():
    effect = effects.paired_effect({0: 0.70, 1: 0.75, 2: 0.74}, {0: 0.50, 1: 0.52, 2: 0.55}, metric="exact_match")
    assert effect["seeds"] == [0, 1, 2]
    assert effect["differences"] == pytest.approx([0.20, 0.23, 0.19])
    assert effect["mean"] == pytest.approx(0.62 / 3)
    sd = math.sqrt(sum((d - 0.62 / 3) ** 2 for d in (0.20, 0.23, 0.19)) / 2)
    assert effect["sd"] == pytest.approx(sd)
    assert effect["lower"] == pytest.approx(0.62 / 3 - 4.303 * sd / math.sqrt(3))
    assert effect["upper"] == pytest.approx(0.62 / 3 + 4.303 * sd / math.sqrt(3))
    assert effects.holds(effect, 0.1) and not effects.holds(effect, 0.2)
    assert not effects.holds(effect, 0.0, "less")
    assert effects.describe(effect) == "+0.207 [+0.155, +0.258] (95 % interval over 3 seeds)"


def test_a_noisy_difference_does_not_hold_even_when_its_mean_is_positive():
    effect = effects.paired_effect({0: 0.71, 1: 0.46, 2: 0.64}, {0: 0.51, 1: 0.51, 2: 0.51})
    assert effect["mean"] > 0 and effect["lower"] < 0
    assert not effects.holds(effect)


def test_a_negative_effect_holds_downwards():
    effect = effects.paired_effect({0: 1.0, 1: 1.1, 2: 0.9, 3: 1.0}, {0: 2.0, 1: 2.2, 2: 2.1, 3: 2.0})
    assert effects.holds(effect, 0.5, "less") and not effects.holds(effect, 0.5)


def test_equivalence_needs_the_whole_interval_inside_the_margin():
    same = effects.paired_effect({0: 1.001, 1: 0.999, 2: 1.0005}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert effects.equivalent(same, 0.01) and not effects.equivalent(same, 0.001)
    shifted = effects.paired_effect({0: 1.05, 1: 1.06, 2: 1.04}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert not effects.equivalent(shifted, 0.03)  # a real difference is not equivalence, however tight
    noisy = effects.paired_effect({0: 1.02, 1: 0.97, 2: 1.01}, {0: 1.0, 1: 1.0, 2: 1.0})
    assert abs(noisy["mean"]) < 0.01 and not effects.equivalent(noisy, 0.03)  # a mean near 0 with a wide interval
    with pytest.raises(ConfigError, match="margin"):
        effects.equivalent(same, 0.0)


@pytest.mark.parametrize("treatment, control, message", [
    ({0: 1.0, 1: 2.0}, {0: 1.0, 2: 2.0}, "same seeds"),
    ({0: 1.0}, {0: 0.5}, "at least two seeds"),
    ({0: 1.0, 1: float("nan")}, {0: 0.5, 1: 0.5}, "finite"),
    ({0: 1.0, 1: True}, {0: 0.5, 1: 0.5}, "finite"),
    ([1.0, 2.0], {0: 0.5, 1: 0.5}, "mappings"),
])
def test_bad_inputs_are_refused(treatment, control, message):
    with pytest.raises(ConfigError, match=message):
        effects.paired_effect(treatment, control)


def test_bad_margins_directions_and_confidences_are_refused():
    effect = effects.paired_effect({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5})
    with pytest.raises(ConfigError, match="margin"):
        effects.holds(effect, -0.1)
    with pytest.raises(ConfigError, match="direction"):
        effects.holds(effect, 0.1, "up")
    with pytest.raises(ConfigError, match="confidence"):
        effects.paired_effect({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.5}, confidence=0.8)
