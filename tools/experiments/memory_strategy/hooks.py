"""Our saved-tensor hooks: observe what autograd keeps for backward and, for offload, move it to the host.

Every strategy runs under one `StrategyObserver`. Its pack hook sees each tensor autograd saves
during the forward pass and sorts it: a parameter (it lives anyway) is kept and not counted; an
activation is either kept on its device (its storage counted once) or, when the strategy offloads,
copied to host memory (`HostCopier`) and brought back in backward. Forward pre-hooks on the
checkpointable decoder layers count layer calls; a call during backward is a recomputation.

The hooks are pushed only while `observer.forward()` is active, so a hook pushed inside it (an
inner `save_on_cpu`, or checkpointing's own hooks inside each layer) takes those tensors over and
leaves no evidence here: what was not observed cannot be claimed (see `evidence.py`).

The offload copy is synchronous into pageable (non-pinned) host memory by default: the throughput
cost measured for offload and hybrid is this copy method's, not the best an offload can do. A host
allocation that fails (pinned memory is a scarce, page-locked resource) raises MemoryError, which
`tools.measure.training.run_with_oom_guard` records as an OOM of kind host_memory.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch import nn

from tools.experiments.memory_strategy.strategies import STRATEGY_PATHS, set_checkpointing, validate_strategy
from tools.errors import ConfigError
from tools.measure.training import MIB

OBSERVER_NAME = "tools.experiments.memory_strategy.hooks.StrategyObserver"


def offload_copy_method(pin_memory: bool) -> dict:
    """How the offload hook copies, as records state it (the throughput cost belongs to this method)."""
    return {
        "host_memory": "pinned" if pin_memory else "pageable",
        "copy": "non_blocking_on_the_current_stream" if pin_memory else "synchronous",
        "granularity": "one host copy per distinct saved view alive in the step",
        "cost_note": ("offload and hybrid step times include this implementation's copies, device to host in "
                      "forward (pack) and host to device in backward (unpack), on the compute stream; pinned "
                      "buffers with copies on a side stream could hide part of them"),
    }


def _pinning_available() -> bool:
    return torch.cuda.is_available()


def _allocate_host(size: torch.Size, *, dtype: torch.dtype, layout: torch.layout, pin_memory: bool) -> torch.Tensor:
    return torch.empty(size, dtype=dtype, layout=layout, device="cpu", pin_memory=pin_memory)


class HostCopier:
    """Copies saved activations to host memory and back; pinned only where CUDA can pin."""

    def __init__(self, pin_memory: bool = False):
        self.pin_memory = bool(pin_memory) and _pinning_available()

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        nbytes = tensor.numel() * tensor.element_size()
        try:
            host = _allocate_host(tensor.size(), dtype=tensor.dtype, layout=tensor.layout, pin_memory=self.pin_memory)
        except RuntimeError as error:
            kind = "pinned" if self.pin_memory else "pageable"
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise MemoryError(f"allocating {nbytes} bytes of {kind} host memory for an offloaded activation "
                              f"failed: {first_line}") from error
        with torch.no_grad():
            host.copy_(tensor, non_blocking=self.pin_memory)
        return host

    def to_device(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        return host.to(device, non_blocking=self.pin_memory)


def checkpointable_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers transformers can checkpoint (GradientCheckpointingLayer instances)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [module for module in model.modules() if isinstance(module, GradientCheckpointingLayer)]


def parameter_storages(model: nn.Module) -> set[int]:
    """Storage addresses of the model's parameters: a saved tensor on one of them is not an activation."""
    return {param.untyped_storage().data_ptr() for param in model.parameters()}


@dataclass
class _Step:
    """Counters of one forward/backward pair."""

    saved_tensor_count: int = 0
    parameter_saved_count: int = 0
    device_storages: dict = field(default_factory=dict)
    offloaded_tensor_count: int = 0
    host_offloaded_bytes: int = 0
    host_copy_devices: set = field(default_factory=set)
    host_copies: dict = field(default_factory=dict)
    host_copy_count: int = 0
    unpacked_count: int = 0
    restored_tensor_count: int = 0
    forward_layer_calls: int = 0
    recomputed_layer_calls: int = 0

    def as_evidence(self) -> dict:
        return {
            "saved_tensor_count": self.saved_tensor_count,
            "parameter_saved_count": self.parameter_saved_count,
            "device_saved_bytes": sum(self.device_storages.values()),
            "device_saved_storages": len(self.device_storages),
            "offloaded_tensor_count": self.offloaded_tensor_count,
            "host_copy_count": self.host_copy_count,
            "host_offloaded_bytes": self.host_offloaded_bytes,
            "host_copy_devices": sorted(self.host_copy_devices),
            "unpacked_count": self.unpacked_count,
            "restored_tensor_count": self.restored_tensor_count,
            "forward_layer_calls": self.forward_layer_calls,
            "recomputed_layer_calls": self.recomputed_layer_calls,
        }


def _view_key(tensor: torch.Tensor) -> tuple:
    storage = tensor.untyped_storage()
    return (storage.data_ptr(), tensor.storage_offset(), tuple(tensor.size()), tuple(tensor.stride()),
            tensor.dtype, tensor._version)


class StrategyObserver:
    """Saved-tensor hooks (observe, optionally offload) plus a per-layer forward-call counter.

    Use `forward()` around the forward pass and `backward()` around `loss.backward()`; each pair is
    one observed step. Create it once the model is on its device: parameters are recognised by
    their storage addresses at creation.
    """

    def __init__(self, model: nn.Module, declared_strategy: str, *, offload_saved_tensors: bool,
                 pin_memory: bool = False):
        self.model = model
        self.declared_strategy = validate_strategy(declared_strategy)
        self.offload_saved_tensors = bool(offload_saved_tensors)
        self.copier = HostCopier(pin_memory)
        self.layers = checkpointable_layers(model)
        self._parameter_ptrs = parameter_storages(model)
        self._phase: str | None = None
        self._step: _Step | None = None
        self._steps: list[dict] = []
        self._handles = [layer.register_forward_pre_hook(self._on_layer_forward) for layer in self.layers]

    # hooks -----------------------------------------------------------------
    def _on_layer_forward(self, module: nn.Module, args: Any) -> None:
        if self._step is None:
            return
        if self._phase == "forward":
            self._step.forward_layer_calls += 1
        elif self._phase == "backward":
            self._step.recomputed_layer_calls += 1

    def _pack(self, tensor: torch.Tensor) -> Any:
        step = self._step
        step.saved_tensor_count += 1
        storage = tensor.untyped_storage()
        if storage.data_ptr() in self._parameter_ptrs:
            step.parameter_saved_count += 1
            return ("kept", tensor)
        if self.offload_saved_tensors and tensor.layout == torch.strided:
            return ("host", tensor.device, self._host_copy(step, tensor), step)
        step.device_storages[storage.data_ptr()] = storage.nbytes()
        return ("kept", tensor)

    def _host_copy(self, step: _Step, tensor: torch.Tensor) -> torch.Tensor:
        # One copy per distinct saved view: several ops often save the same activation. The device
        # storage can be freed once copied and its address reused, so a cached copy is reused only
        # while the tensor first copied is still alive.
        key = _view_key(tensor)
        cached = step.host_copies.get(key)
        if cached is not None and cached[0]() is not None:
            host = cached[1]
        else:
            host = self.copier.to_host(tensor)
            step.host_copies[key] = (weakref.ref(tensor), host)
            step.host_copy_count += 1
            step.host_offloaded_bytes += host.untyped_storage().nbytes()
            step.host_copy_devices.add(str(host.device))
        step.offloaded_tensor_count += 1
        return host

    def _unpack(self, packed: Any) -> torch.Tensor:
        if self._step is not None:
            self._step.unpacked_count += 1
        if packed[0] == "kept":
            return packed[1]
        _, device, host, step = packed
        step.restored_tensor_count += 1
        return self.copier.to_device(host, device)

    # phases ----------------------------------------------------------------
    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        """Start a step: layer calls are forward calls; saved tensors are observed (or offloaded)."""
        if self._phase is not None:
            raise ConfigError("forward() entered while another phase is active; finish the step with backward().")
        self._step = _Step()
        self._phase = "forward"
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._phase = None

    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        """Finish the step: layer calls now are recomputation; the step's evidence is recorded."""
        if self._step is None or self._phase is not None:
            raise ConfigError("backward() needs a completed forward() of the same step.")
        self._phase = "backward"
        try:
            yield
        finally:
            self._phase = None
            self._steps.append(self._step.as_evidence())
            self._step.host_copies.clear()
            self._step = None

    def close(self) -> None:
        """Remove the layer hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def step_evidence(self) -> list[dict]:
        """Counters of every observed step, oldest first."""
        return [dict(step) for step in self._steps]

    def evidence(self) -> dict:
        """The observed path: the last step's counters, whether all steps agree, and device facts."""
        last = self._steps[-1] if self._steps else None
        compute_device = next(self.model.parameters()).device
        stable = ("device_saved_bytes", "saved_tensor_count", "offloaded_tensor_count",
                  "recomputed_layer_calls", "forward_layer_calls")
        return {
            "declared_strategy": self.declared_strategy,
            "observer": OBSERVER_NAME,
            "offload_hook_active": self.offload_saved_tensors,
            "pin_memory": self.copier.pin_memory,
            "offload_copy": offload_copy_method(self.copier.pin_memory) if self.offload_saved_tensors else None,
            "checkpoint_flag_set": bool(getattr(self.model, "is_gradient_checkpointing", False)),
            "checkpointable_layers": len(self.layers),
            "compute_device": str(compute_device),
            "host_distinct_from_device": compute_device.type != "cpu",
            "steps_observed": len(self._steps),
            "steps_consistent": bool(self._steps) and all(
                all(step[key] == last[key] for key in stable) for step in self._steps),
            "last_step": last,
            "device_saved_mb": None if last is None else last["device_saved_bytes"] / MIB,
            "host_offloaded_mb": None if last is None else last["host_offloaded_bytes"] / MIB,
        }


@contextlib.contextmanager
def observe_strategy(model: nn.Module, declared_strategy: str, *, offload_saved_tensors: bool,
                     pin_memory: bool = False) -> Iterator[StrategyObserver]:
    """Observe `model` under a declared strategy without changing how it checkpoints.

    The building block of `memory_strategy`; alone, it lets a test plant a context that declares a
    strategy it does not apply, which verification must then reject.
    """
    observer = StrategyObserver(model, declared_strategy, offload_saved_tensors=offload_saved_tensors,
                                pin_memory=pin_memory)
    try:
        yield observer
    finally:
        observer.close()


@contextlib.contextmanager
def memory_strategy(model: nn.Module, strategy: str, *, pin_memory: bool = False) -> Iterator[StrategyObserver]:
    """Apply `strategy` to a transformers causal LM for the block and observe it.

    checkpoint / hybrid turn on non-reentrant checkpointing of every decoder layer; offload / hybrid
    move every saved activation (not parameters) to host memory through our hook. The model's
    previous checkpointing state is restored on exit.
    """
    path = STRATEGY_PATHS[validate_strategy(strategy)]
    was_checkpointing = bool(getattr(model, "is_gradient_checkpointing", False))
    set_checkpointing(model, path["recompute"])
    try:
        with observe_strategy(model, strategy, offload_saved_tensors=path["offload"],
                              pin_memory=pin_memory) as observer:
            yield observer
    finally:
        set_checkpointing(model, was_checkpointing)
