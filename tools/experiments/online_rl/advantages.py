"""Advantages from the rewards of a group of answers to one prompt.

GRPO normalises inside each group, (r - mean) / (std + eps) with the sample standard deviation, and
a group whose rewards do not vary is *not scoreable*: it carries no learning signal and is reported
as such instead of silently contributing zeros. RLOO uses the leave-one-out baseline: each valid
reward minus the mean of the other valid rewards of its group, so a group needs at least two valid
rewards (a reward of None is an answer that could not be scored).
"""

from __future__ import annotations

import math

from tools.errors import ConfigError


def _is_reward(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _check_groups(group_rewards, allow_missing: bool) -> None:
    if not isinstance(group_rewards, list) or not group_rewards:
        raise ConfigError("group_rewards must be a non-empty list of groups")
    for index, group in enumerate(group_rewards):
        if not isinstance(group, list) or not group:
            raise ConfigError(f"group {index} must be a non-empty list of rewards")
        for reward in group:
            if not (_is_reward(reward) or (allow_missing and reward is None)):
                raise ConfigError(f"group {index}: {reward!r} is not a finite reward")


def group_advantages(group_rewards: list[list[float]], scale_by_std: bool = True, eps: float = 1e-4) -> dict:
    """GRPO's group-normalised advantages; `None` for a group that is not scoreable."""
    _check_groups(group_rewards, allow_missing=False)
    if not isinstance(scale_by_std, bool):
        raise ConfigError(f"scale_by_std must be a bool, got {scale_by_std!r}")
    if not _is_reward(eps) or eps <= 0:
        raise ConfigError(f"eps must be a finite number > 0, got {eps!r}")
    advantages, scoreable = [], []
    for group in group_rewards:
        varies = len(group) >= 2 and max(group) != min(group)
        scoreable.append(varies)
        if not varies:
            advantages.append(None)
            continue
        mean = sum(group) / len(group)
        centred = [float(reward - mean) for reward in group]
        if scale_by_std:
            std = math.sqrt(sum(value * value for value in centred) / (len(group) - 1))
            centred = [value / (std + eps) for value in centred]
        advantages.append(centred)
    return {"advantages": advantages, "scoreable": scoreable,
            "scoreable_share": sum(scoreable) / len(group_rewards)}


def filter_scoreable_groups(group_rewards: list[list[float | None]]) -> dict:
    """Which groups can give leave-one-out advantages: those with at least two valid (not None) rewards."""
    _check_groups(group_rewards, allow_missing=True)
    counts = [sum(reward is not None for reward in group) for group in group_rewards]
    return {"scoreable": [index for index, count in enumerate(counts) if count >= 2], "valid_counts": counts,
            "no_valid_reward": [index for index, count in enumerate(counts) if count == 0],
            "single_valid_reward": [index for index, count in enumerate(counts) if count == 1]}


def leave_one_out_advantages(group_rewards: list[list[float | None]]) -> dict:
    """RLOO: each valid reward minus the mean of its group's other valid rewards; None where undefined."""
    _check_groups(group_rewards, allow_missing=True)
    advantages, baselines = [], []
    for group in group_rewards:
        valid = [reward for reward in group if reward is not None]
        if len(valid) < 2:
            advantages.append([None] * len(group))
            baselines.append([None] * len(group))
            continue
        total = sum(valid)
        group_baselines = [None if reward is None else (total - reward) / (len(valid) - 1) for reward in group]
        baselines.append([None if value is None else float(value) for value in group_baselines])
        advantages.append([None if reward is None else float(reward - baseline)
                           for reward, baseline in zip(group, group_baselines)])
    return {"advantages": advantages, "baselines": baselines}
