"""The four activation-memory strategies: where the tensors autograd saves for backward wait.

| strategy   | decoder-layer internals          | everything else that is saved   |
|------------|----------------------------------|---------------------------------|
| baseline   | kept on the device               | kept on the device              |
| checkpoint | dropped, recomputed in backward  | kept on the device              |
| offload    | copied to host memory            | copied to host memory           |
| hybrid     | dropped, recomputed in backward  | copied to host memory           |

Recomputation uses the pinned transformers API (`gradient_checkpointing_enable` with
`use_reentrant=False`); offload is our own saved-tensor hook (`hooks.py`), so the two compose.
"""

from __future__ import annotations

from torch import nn

from tools.errors import ConfigError

STRATEGIES = ("baseline", "checkpoint", "offload", "hybrid")
STRATEGY_PATHS = {
    "baseline": {"recompute": False, "offload": False},
    "checkpoint": {"recompute": True, "offload": False},
    "offload": {"recompute": False, "offload": True},
    "hybrid": {"recompute": True, "offload": True},
}
CHECKPOINT_KWARGS = {"use_reentrant": False}
CHECKPOINT_API = ("PreTrainedModel.gradient_checkpointing_enable("
                  "gradient_checkpointing_kwargs={'use_reentrant': False})")


def validate_strategy(strategy: str) -> str:
    """Return `strategy` if it is one of STRATEGIES, else raise ConfigError."""
    if strategy not in STRATEGY_PATHS:
        raise ConfigError(f"unknown memory strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}.")
    return strategy


def recomputes(strategy: str) -> bool:
    return STRATEGY_PATHS[validate_strategy(strategy)]["recompute"]


def offloads(strategy: str) -> bool:
    return STRATEGY_PATHS[validate_strategy(strategy)]["offload"]


def set_checkpointing(model: nn.Module, enabled: bool) -> None:
    """Turn transformers' activation checkpointing of every decoder layer on or off.

    Layers checkpoint only in train() mode; the observer (hooks.py) proves whether they did.
    """
    if enabled:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise ConfigError(f"{type(model).__name__} does not support activation checkpointing.")
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(CHECKPOINT_KWARGS))
    elif getattr(model, "is_gradient_checkpointing", False):
        model.gradient_checkpointing_disable()
