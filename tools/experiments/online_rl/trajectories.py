"""Multi-turn trajectories: whose tokens they are, and how a terminal reward reaches each model turn.

`assemble_trajectory` concatenates a prompt, model turns and environment observations, with a loss
mask that is 1 only on the tokens the model produced (environment tokens are inserted text the
model never chose) and the model-turn index of every token. `attribute_reward` credits the episode's
terminal reward to the model turns, discounted by gamma per turn from the last one, minus a baseline.
"""

from __future__ import annotations

import math

from tools.errors import ConfigError

SOURCES = ("prompt", "model", "env")


def _is_token(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def assemble_trajectory(segments: list[dict]) -> dict:
    """`{input_ids, loss_mask, turn_ids, model_turns, env_tokens}` of ordered segments."""
    if not isinstance(segments, list) or not segments:
        raise ConfigError("segments must be a non-empty list")
    previous = None
    for index, segment in enumerate(segments):
        if not isinstance(segment, dict) or set(segment) != {"source", "token_ids"}:
            raise ConfigError(f"segment {index} must be a dict with exactly 'source' and 'token_ids'")
        source, ids = segment["source"], segment["token_ids"]
        if not isinstance(source, str) or source not in SOURCES:
            raise ConfigError(f"segment {index}: unknown source {source!r}")
        if not isinstance(ids, list) or not ids or not all(_is_token(token) for token in ids):
            raise ConfigError(f"segment {index}: token_ids must be a non-empty list of ints >= 0")
        allowed = {None: "prompt", "prompt": "model", "model": "env", "env": "model"}[previous]
        if source != allowed:
            raise ConfigError(f"segment {index}: {source!r} cannot follow {previous!r}")
        previous = source
    if previous == "prompt":
        raise ConfigError("no model segment: nothing to learn from")
    input_ids, loss_mask, turn_ids = [], [], []
    turn = -1
    for segment in segments:
        is_model = segment["source"] == "model"
        turn += is_model
        input_ids += segment["token_ids"]
        loss_mask += [int(is_model)] * len(segment["token_ids"])
        turn_ids += [turn if is_model else -1] * len(segment["token_ids"])
    return {"input_ids": input_ids, "loss_mask": loss_mask, "turn_ids": turn_ids, "model_turns": turn + 1,
            "env_tokens": sum(len(s["token_ids"]) for s in segments if s["source"] == "env")}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_turn_ids(turn_ids) -> int:
    """The number of model turns K, or ConfigError unless turn ids are -1 or 0..K-1 in contiguous runs."""
    if not isinstance(turn_ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in turn_ids):
        raise ConfigError("turn_ids must be a list of ints")
    expected, previous = 0, None
    for value in turn_ids:
        if value != -1 and value != previous:
            if value != expected:
                raise ConfigError(f"turn ids must run 0, 1, 2, ... in contiguous blocks; found {value}")
            expected += 1
        elif value < -1:
            raise ConfigError(f"invalid turn id {value}")
        previous = value
    if expected == 0:
        raise ConfigError("no model turn: nothing to credit")
    return expected


def attribute_reward(turn_ids: list[int], terminal_reward: float, gamma: float = 1.0, baseline: float = 0.0) -> dict:
    """`{turn_returns, turn_advantages, token_advantages}`: R * gamma**(K-1-k) per model turn k."""
    turns = check_turn_ids(turn_ids)
    if not _finite(terminal_reward) or not _finite(baseline):
        raise ConfigError("terminal_reward and baseline must be finite numbers")
    if not _finite(gamma) or not 0 < gamma <= 1:
        raise ConfigError(f"gamma must be a number in (0, 1], got {gamma!r}")
    returns = [float(terminal_reward * gamma ** (turns - 1 - turn)) for turn in range(turns)]
    advantages = [float(value - baseline) for value in returns]
    return {"turn_returns": returns, "turn_advantages": advantages,
            "token_advantages": [0.0 if turn == -1 else advantages[turn] for turn in turn_ids]}
