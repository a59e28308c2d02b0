"""Bradley-Terry reward modelling: the pairwise loss, temperature calibration and its error.

A reward model scores each response with one number r; the Bradley-Terry model says the chance that
a is preferred to b is sigmoid(r_a - r_b). Training minimises -log sigmoid(r_chosen - r_rejected
- margin) over preference pairs; calibration fits one temperature T on held-apart pairs so that
sigmoid((r_a - r_b) / T) means what it says, measured by the expected calibration error (ECE) over
equal-width probability bins. These are the stage's own implementations; the chapter's learner
writes the same with full input checks.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from tools.experiments.reward.masks import last_valid_positions


def pairwise_loss(chosen: torch.Tensor, rejected: torch.Tensor, margins: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over pairs of -log sigmoid(chosen - rejected - margin), computed stably."""
    difference = chosen - rejected
    if margins is not None:
        difference = difference - margins.to(difference.dtype)
    return -F.logsigmoid(difference).mean()


def sigmoid(z: float) -> float:
    """1 / (1 + exp(-z)) without overflow for any finite z."""
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    exp_z = math.exp(z)
    return exp_z / (1.0 + exp_z)


def softplus(z: float) -> float:
    """log(1 + exp(z)) without overflow."""
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


def pair_nll(margins: Sequence[float], labels: Sequence[bool], temperature: float = 1.0) -> float:
    """Mean negative log-likelihood of the labels (True: the first response is preferred) under
    p = sigmoid(margin / temperature)."""
    total = sum(softplus(-m / temperature) if label else softplus(m / temperature) for m, label in zip(margins, labels))
    return total / len(margins)


def calibration_bins(probabilities: Sequence[float], labels: Sequence[bool], n_bins: int) -> list[dict]:
    """Equal-width bins over [0, 1] (bin of p: min(floor(p * n_bins), n_bins - 1)); per non-empty bin its
    index, count, mean probability and observed frequency of True, in bin order."""
    bins: dict[int, list] = {}
    for probability, label in zip(probabilities, labels):
        bins.setdefault(min(int(probability * n_bins), n_bins - 1), []).append((probability, label))
    return [{"bin": index, "count": len(items), "mean_probability": sum(p for p, _ in items) / len(items),
             "frequency": sum(1 for _, y in items if y) / len(items)} for index, items in sorted(bins.items())]


def expected_calibration_error(probabilities: Sequence[float], labels: Sequence[bool], n_bins: int) -> float:
    """Sum over bins of (count / N) * |frequency - mean probability|."""
    total = len(probabilities)
    return sum(item["count"] / total * abs(item["frequency"] - item["mean_probability"])
               for item in calibration_bins(probabilities, labels, n_bins))


def fit_temperature(margins: Sequence[float], labels: Sequence[bool], temperatures: Sequence[float],
                    n_bins: int = 5) -> dict:
    """The temperature of `temperatures` with the lowest pair NLL (the smallest on ties), and the NLL and
    ECE at temperature 1 (before) and at the fitted one (after)."""
    best = min(sorted(temperatures), key=lambda temperature: pair_nll(margins, labels, temperature))

    def ece(temperature):
        return expected_calibration_error([sigmoid(m / temperature) for m in margins], labels, n_bins)

    return {"temperature": float(best), "nll_before": pair_nll(margins, labels, 1.0),
            "nll_after": pair_nll(margins, labels, best), "ece_before": ece(1.0), "ece_after": ece(best)}


def reward_loss(chosen_scores: torch.Tensor, chosen_mask: torch.Tensor, rejected_scores: torch.Tensor,
                rejected_mask: torch.Tensor, margins: torch.Tensor | None = None) -> dict:
    """The shape of the chapter's TODO 1, which the stage calls: each row read at the last 1 of its mask,
    `{"loss", "chosen_rewards", "rejected_rewards", "accuracy", "positions"}` (no input checks)."""
    chosen_at, rejected_at = last_valid_positions(chosen_mask), last_valid_positions(rejected_mask)
    rows = torch.arange(chosen_scores.shape[0], device=chosen_scores.device)
    chosen, rejected = chosen_scores[rows, chosen_at], rejected_scores[rows, rejected_at]
    return {"loss": pairwise_loss(chosen, rejected, margins), "chosen_rewards": chosen, "rejected_rewards": rejected,
            "accuracy": float((chosen > rejected).double().mean()),
            "positions": {"chosen": chosen_at, "rejected": rejected_at}}
