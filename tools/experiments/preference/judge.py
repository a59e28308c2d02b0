"""Judges on the course's arithmetic task: the verifier as a score, and a pairwise judge.

A response is correct when the whole stripped response is one integer equal to the task's label
(`tools.data.arithmetic.score_response`). `PairwiseJudge` compares two responses to one task in the
order they are shown. It reads them with the verifier -- a correct response beats a wrong one, two
of the same kind tie -- except that, with probability `position_bias`, it does not read them and
names the first position, the way a lazy model judge does. Each verdict is drawn from a generator
seeded with the judge's seed and exactly what it is shown, so the same presentation always gets the
same verdict, and a judge with `position_bias=0` is the verifier itself.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from tools.data.arithmetic import ArithmeticTask, score_response
from tools.errors import ConfigError

VERDICTS = ("first", "second", "tie")


def is_correct(task: ArithmeticTask, response: str) -> bool:
    """The verifier: True when `response` is one whole integer equal to the task's label."""
    return bool(score_response(task, response)["correct"])


@dataclass(frozen=True)
class PairwiseJudge:
    """A verifier-based pairwise judge with a position bias in [0, 1]."""

    position_bias: float = 0.0
    seed: int = 0

    def __post_init__(self):
        bias = self.position_bias
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias) \
                or not 0 <= bias <= 1:
            raise ConfigError(f"position_bias must be a number in [0, 1], got {bias!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"the judge's seed must be an int, got {self.seed!r}")

    def verdict(self, task: ArithmeticTask, first: str, second: str) -> str:
        """"first", "second" or "tie" for the two responses as shown."""
        draw = random.Random(f"{self.seed}|{task.task_id}|{task.prompt}|{first}|{second}").random()
        if draw < self.position_bias:
            return "first"
        first_ok, second_ok = is_correct(task, first), is_correct(task, second)
        if first_ok == second_ok:
            return "tie"
        return "first" if first_ok else "second"
