"""Where a sequence ends: the last valid position of each row of a 0/1 mask.

A reward head reads the last non-padding token of each sequence, and a token-level reward puts the
score on the last valid response token; both are the position of the last 1 of a mask row, whether
padding sits on the right, on the left or in the middle (tokens a tool inserted).
"""

from __future__ import annotations

import torch


def last_valid_positions(mask: torch.Tensor) -> list[int]:
    """The index of the last 1 of every row; ValueError when a row has none."""
    valid = mask.bool()
    if not bool(valid.any(dim=1).all()):
        raise ValueError("every row needs at least one valid position")
    return [int(row.nonzero().max()) for row in valid]


def read_last(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """values[b, last valid position of row b] for every row b (a [batch] tensor, gradients kept)."""
    positions = last_valid_positions(mask)
    return values[torch.arange(len(positions), device=values.device), positions]
