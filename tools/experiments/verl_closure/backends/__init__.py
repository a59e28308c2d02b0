"""The experiment's backends behind one small interface.

A backend turns one group of the protocol into measurements: `torch` (transformers + peft, in this
process, CPU or one GPU) and `verl` (verl 0.9.1, FSDP actor + vLLM rollout, one child process per
group). `common` holds what both share (model, tokenizer, initial adapter, LoRA tensors).

`get_backend(name)` imports a backend's module when it is chosen: each pulls in its own heavy stack
(torch, transformers and peft; verl, ray and vLLM only inside a group process), and a preflight or
a reader of records needs neither.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Mapping, Protocol, Sequence

from tools.errors import ConfigError

BACKEND_MODULES = {
    "torch": "tools.experiments.verl_closure.backends.torch_backend",
    "verl": "tools.experiments.verl_closure.backends.verl_backend",
}


@dataclass(frozen=True)
class PreparedModel:
    """The model a run uses: its folder and identity, the tokenizer, and each group's initial adapter."""

    path: Path
    identity: Mapping[str, Any]
    tokenizer: Any
    """Has `prompt_ids(text)`, `answer_ids(text)` and `decode(ids)` (common.PromptTokenizer)."""
    adapters: Mapping[str, Path]


@dataclass(frozen=True)
class GroupRun:
    """Everything one group needs; the same for every backend."""

    group: str
    config: Any
    model: PreparedModel
    overrides: Sequence[str] | None
    requests: Sequence[Any]
    probe_requests: Sequence[Any]
    examples: Sequence[Any]
    tasks: Mapping[str, Any]
    frozen: Sequence[Mapping[str, Any]] | None
    clock: Callable[[], float]
    log: Callable[[str], None]
    workspace: Path

    @property
    def adapter(self) -> Path:
        return self.model.adapters[self.group]


class Backend(Protocol):
    """What the runner asks of a backend."""

    name: str
    parent_uses_cuda: bool
    """Whether this process itself uses CUDA (then the sampler may ask torch for the device's UUID)."""

    def prepare(self, config, workspace: Path) -> PreparedModel:
        """Resolve (or build) the model, load its tokenizer, write each group's initial adapter;
        raise ConfigError when this backend cannot run the model."""

    def runtime_context(self, config) -> ContextManager[dict]:
        """Process settings for the run (restored afterwards); yields what to record about them."""

    def group_overrides(self, config, group: str, model: PreparedModel) -> list[str] | None:
        """The group's verl overrides, or None for a backend without them."""

    def execute_group(self, run: GroupRun) -> dict:
        """Run one group of `protocol.run_group`; its result keeps the LoRA tensors (numpy)."""

    def details(self, config, model: PreparedModel) -> dict:
        """What the record says about this backend: engine, release, resume, compilation, ..."""


def get_backend(name: str) -> Backend:
    """The backend called `name` ("torch" or "verl"), its module imported on first use."""
    if name not in BACKEND_MODULES:
        raise ConfigError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name]).BACKEND
