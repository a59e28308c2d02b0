"""A value model: a copy of a causal LM's backbone with a one-output head at every position.

PPO's critic starts from the policy's own weights (so it understands the same text) and learns a
scalar per position. The head starts at zero, so the first values are 0 and the first advantages
are the plain returns. The reference policy is a frozen copy of the policy taken before training.
"""

from __future__ import annotations

import copy

import torch


class ValueModel(torch.nn.Module):
    """`forward(input_ids, attention_mask, position_ids) -> values [batch, time]` (float32)."""

    def __init__(self, causal_lm):
        super().__init__()
        self.backbone = copy.deepcopy(causal_lm.base_model)
        self.head = torch.nn.Linear(causal_lm.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask, position_ids=None):
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               position_ids=position_ids).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)


def frozen_copy(model):
    """A copy of `model` that never trains: eval mode, no parameter requires grad."""
    frozen = copy.deepcopy(model).eval()
    for parameter in frozen.parameters():
        parameter.requires_grad_(False)
    return frozen
