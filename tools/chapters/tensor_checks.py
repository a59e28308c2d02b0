"""Input checks the reward and PPO chapters' exercises share (setup cells import them).

Each check raises ValueError with a message naming the argument, and returns what it checked, so an
exercise can validate every argument in a few lines before it computes anything. Bools are never
numbers here, and a mask is a bool or integer tensor of 0/1 (a float mask is refused: it usually
means a probability or a weight was passed where a mask belongs).
"""

from __future__ import annotations

import math

import torch


def check_floating(name: str, value, shape=None) -> torch.Tensor:
    """A floating tensor (of `shape` when given) whose values are all finite."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, not {tuple(value.shape)}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite everywhere")
    return value


def check_batch_time(name: str, value) -> torch.Tensor:
    """A finite floating tensor [batch, time] with batch >= 1 and time >= 1."""
    check_floating(name, value)
    if value.dim() != 2 or value.shape[0] < 1 or value.shape[1] < 1:
        raise ValueError(f"{name} must be a floating tensor [batch, time] with batch >= 1 and time >= 1")
    return value


def check_like(name: str, value, like: torch.Tensor) -> torch.Tensor:
    """A finite tensor of `like`'s dtype and shape."""
    if not isinstance(value, torch.Tensor) or value.dtype != like.dtype or value.shape != like.shape:
        raise ValueError(f"{name} must be a tensor of dtype {like.dtype} and shape {tuple(like.shape)}")
    return check_floating(name, value)


def check_mask(name: str, mask, shape) -> torch.Tensor:
    """The mask as a bool tensor: a bool or integer tensor (not float) of `shape` holding only 0 and 1."""
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(shape) or mask.is_floating_point() \
            or mask.is_complex():
        raise ValueError(f"{name} must be a bool or integer tensor of shape {tuple(shape)}")
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(f"{name} may only hold 0 and 1")
    return mask.bool()


def check_number(name: str, value, low: float, high: float = math.inf):
    """An int or float (not bool), finite, in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise ValueError(f"{name} must be a finite number in [{low}, {high}] (not a bool)")
    return value
