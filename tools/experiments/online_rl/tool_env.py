"""A small deterministic multi-turn tool environment: integer arithmetic with a calculator tool.

An episode is one task `a op b`. Each model turn is one action, read strictly after `.strip()`:
`CALC x op y` calls the calculator (observation `RESULT v`, or `ERROR division by zero`),
`ANSWER n` ends the episode (reward 1.0 when n is the task's answer, else 0.0; observation `END`),
anything else is answered `ERROR unknown action`. The episode is *terminated* by an answer and
*truncated* when `max_turns` actions passed without one; an answer on the last turn terminates.

`env_step(state, action)` is the whole transition on a plain-dict state; `CalculatorEnv` wraps a
step function behind gymnasium's `Env` interface (text observations and actions), so gymnasium's
environment checker can check a learner's step function too.
"""

from __future__ import annotations

import re
import string
from typing import Callable

from tools.errors import ConfigError

OPERATIONS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "//": lambda x, y: x // y}
STATE_KEYS = frozenset({"a", "op", "b", "turn", "max_turns", "done"})
CALC = re.compile(r"CALC (-?[0-9]+) (\+|-|\*|//) (-?[0-9]+)")
ANSWER = re.compile(r"ANSWER (-?[0-9]+)")
TEXT_CHARSET = "".join(char for char in string.printable if char not in "\t\r\x0b\x0c")
"""Characters of the observation and action spaces: printable ASCII and the newline."""
PROMPT = ("Compute {a} {op} {b}. You may call the calculator with a line CALC x op y (op is +, -, * or //); "
          "finish with a line ANSWER n.")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_state(state) -> None:
    """ConfigError unless `state` is a live episode state (see the module docstring)."""
    if not isinstance(state, dict) or set(state) != STATE_KEYS:
        raise ConfigError(f"state must be a dict with exactly the keys {sorted(STATE_KEYS)}")
    if not all(_is_int(state[key]) for key in ("a", "b", "turn", "max_turns")):
        raise ConfigError("a, b, turn and max_turns must be ints")
    if not isinstance(state["op"], str) or state["op"] not in OPERATIONS:
        raise ConfigError(f"op must be one of {sorted(OPERATIONS)}")
    if state["max_turns"] < 1 or not 0 <= state["turn"] < state["max_turns"]:
        raise ConfigError("need max_turns >= 1 and 0 <= turn < max_turns")
    if state["done"] is not False:
        raise ConfigError("the episode has ended (done must be False to take a step)")


def answer_of(state: dict) -> int:
    """The task's integer answer (Python arithmetic; // floors; a task never divides by zero)."""
    return OPERATIONS[state["op"]](state["a"], state["b"])


def env_step(state: dict, action: str) -> dict:
    """One transition: `{observation, reward, terminated, truncated, kind, state}` (module docstring)."""
    check_state(state)
    if not isinstance(action, str):
        raise ConfigError(f"action must be a str, got {type(action).__name__}")
    text = action.strip()
    reward, terminated = 0.0, False
    if (found := CALC.fullmatch(text)) is not None:
        x, op, y = int(found.group(1)), found.group(2), int(found.group(3))
        kind = "calc"
        observation = "ERROR division by zero" if op == "//" and y == 0 else f"RESULT {OPERATIONS[op](x, y)}"
    elif (found := ANSWER.fullmatch(text)) is not None:
        kind, observation, terminated = "answer", "END", True
        reward = 1.0 if int(found.group(1)) == answer_of(state) else 0.0
    else:
        kind, observation = "invalid", "ERROR unknown action"
    turn = state["turn"] + 1
    truncated = not terminated and turn == state["max_turns"]
    return {"observation": observation, "reward": reward, "terminated": terminated, "truncated": truncated,
            "kind": kind, "state": {**state, "turn": turn, "done": terminated or truncated}}


def _gymnasium():
    import gymnasium

    return gymnasium


class CalculatorEnv(_gymnasium().Env):
    """gymnasium's interface around a step function; `reset(seed=...)` draws a task from `tasks`."""

    metadata = {"render_modes": []}

    def __init__(self, tasks: list[tuple[int, str, int]], max_turns: int = 3, step_fn: Callable = env_step):
        from gymnasium import spaces

        if not tasks or any(op not in OPERATIONS or (op == "//" and b == 0) for _, op, b in tasks):
            raise ConfigError("tasks must be a non-empty list of (a, op, b) with a known op and no division by zero")
        if not _is_int(max_turns) or max_turns < 1:
            raise ConfigError(f"max_turns must be an int >= 1, got {max_turns!r}")
        self.tasks, self.max_turns, self.step_fn = list(tasks), max_turns, step_fn
        self.observation_space = spaces.Text(max_length=240, min_length=0, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=64, min_length=0, charset=TEXT_CHARSET)
        self.state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        a, op, b = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.state = {"a": a, "op": op, "b": b, "turn": 0, "max_turns": self.max_turns, "done": False}
        return PROMPT.format(a=a, op=op, b=b), {"answer": answer_of(self.state)}

    def step(self, action):
        if self.state is None:
            raise ConfigError("call reset() before step()")
        result = self.step_fn(dict(self.state), action)
        self.state = result["state"]
        return (result["observation"], float(result["reward"]), bool(result["terminated"]), bool(result["truncated"]),
                {"kind": result["kind"], "turn": self.state["turn"]})


def check_with_gymnasium(env) -> list[str]:
    """Run gymnasium's environment checker on `env`; the warnings it raised (it raises on failure)."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    return [str(warning.message) for warning in caught]
