"""Timing a training step the way chapter 73 teaches: warm-up excluded, the device synchronised before
every clock read, repeats reported by their median and spread, throughput from real tokens.

A *device* here is anything with three methods: `step()` launches one training step, `synchronize()`
waits until every launched step has finished, `clock()` reads the host clock in seconds. Two kinds:

    DeviceClock            a real step on a real device (CUDA: `torch.cuda.synchronize`; CPU: `torch.cpu.synchronize`,
                           which returns at once because CPU kernels run before the call returns)
    SimulatedAsyncDevice   a deterministic model of an asynchronous accelerator on a virtual clock: a launch
                           costs the host `launch_s`, the work runs on the device afterwards, the first calls
                           cost more (warm-up). Its truth is known, so a timing procedure can be audited
                           on it; it is an `nn.Module` whose state lives in buffers, so it crosses the
                           grading boundary and its counters come back

and the package's copies of chapter 73's first two exercises (`time_steps`, `step_time_report`), which a
run without a notebook uses. Nothing here prints.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

QUANTILE_RULE = "linear interpolation between order statistics at q * (n - 1) (torch.quantile's default)"


# ---------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------

class SimulatedAsyncDevice(nn.Module):
    """A model of an asynchronous accelerator driven by a host thread, on a virtual clock.

    `step()` costs the host `launch_s` seconds and queues `work_s[k]` seconds of device work (k the
    call's index; calls past the end of `work_s` cost its last value): the work starts when both the
    host has launched it and the device has finished what was queued before. `synchronize()` moves the
    host clock to the moment the device is idle. `clock()` reads the host clock. With `work_s` longer
    than `launch_s`, a disciplined measurement of call k reads exactly `work_s[k]`.
    Counters (`launched`, `syncs`, `clock_reads`) and clocks are float64 / int64 buffers.
    """

    def __init__(self, work_s: Sequence[float], launch_s: float = 0.001):
        super().__init__()
        if isinstance(work_s, (str, bytes)) or not isinstance(work_s, Sequence) or not work_s:
            raise ValueError(f"work_s must be a non-empty sequence of seconds, got {work_s!r}")
        for value in (*work_s, launch_s):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"work and launch times must be finite numbers > 0, got {value!r}")
        self.register_buffer("work_s", torch.tensor([float(value) for value in work_s], dtype=torch.float64))
        self.register_buffer("launch_s", torch.tensor(float(launch_s), dtype=torch.float64))
        self.register_buffer("host_s", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("busy_until_s", torch.tensor(0.0, dtype=torch.float64))
        for name in ("launched", "syncs", "clock_reads"):
            self.register_buffer(name, torch.tensor(0, dtype=torch.int64))

    def work_of(self, index: int) -> float:
        """The device seconds of call `index` (0-based)."""
        return float(self.work_s[min(index, self.work_s.numel() - 1)])

    def step(self) -> None:
        work = self.work_of(int(self.launched))
        start = max(float(self.host_s), float(self.busy_until_s))
        self.busy_until_s.fill_(start + work)
        self.host_s.fill_(float(self.host_s) + float(self.launch_s))
        self.launched.add_(1)

    def synchronize(self) -> None:
        self.host_s.fill_(max(float(self.host_s), float(self.busy_until_s)))
        self.syncs.add_(1)

    def clock(self) -> float:
        self.clock_reads.add_(1)
        return float(self.host_s)

    def truth(self, warmup: int, repeats: int) -> list[float]:
        """What a disciplined measurement of `repeats` calls after `warmup` untimed ones reads."""
        return [self.work_of(warmup + index) for index in range(repeats)]


class DeviceClock:
    """A real training step behind the device interface: `step()` runs `step_fn`, `synchronize()` waits
    for the device, `clock()` is `time.perf_counter()`.

    `around_call(index, run)` (optional) wraps each call: it gets the call's 0-based index and a
    zero-argument function that runs the step, and returns the step's result; a stage uses it to profile
    one call or to reset the device's peak-memory counters before the first timed call. `host_seconds`
    keeps each call's host-side duration (on CUDA that is the launch, not the work).
    """

    def __init__(self, step_fn: Callable[[], Any], device: str | torch.device = "cpu", *,
                 around_call: Callable[[int, Callable[[], Any]], Any] | None = None):
        self.step_fn = step_fn
        self.device = torch.device(device)
        self.around_call = around_call
        self.calls = 0
        self.host_seconds: list[float] = []
        self.results: list[Any] = []

    def step(self) -> Any:
        index = self.calls
        self.calls += 1
        started = time.perf_counter()
        result = self.around_call(index, self.step_fn) if self.around_call is not None else self.step_fn()
        self.host_seconds.append(time.perf_counter() - started)
        self.results.append(result)
        return result

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        else:
            torch.cpu.synchronize()

    def clock(self) -> float:
        return time.perf_counter()


# ---------------------------------------------------------------------------
# The package's copies of chapter 73's exercises
# ---------------------------------------------------------------------------

def _count(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    return value


def time_steps(device, warmup, repeats):
    """Run `warmup` untimed steps, then time `repeats` steps one by one, synchronising the device
    immediately before every clock read; returns the `repeats` durations in seconds, in call order."""
    _count("warmup", warmup, 0)
    _count("repeats", repeats, 1)
    for _ in range(warmup):
        device.step()
    durations = []
    for _ in range(repeats):
        device.synchronize()
        started = device.clock()
        device.step()
        device.synchronize()
        durations.append(device.clock() - started)
    return durations


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of sorted values, interpolated linearly between the two neighbours of q * (n - 1)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def step_time_report(durations_s, attention_mask):
    """Median and spread of timed steps, and throughput from the real (non-pad) tokens of the batch."""
    if not isinstance(durations_s, list) or not durations_s:
        raise ValueError("durations_s must be a non-empty list of seconds")
    for value in durations_s:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"every duration must be a finite number > 0, got {value!r}")
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2 or attention_mask.numel() == 0:
        raise ValueError("attention_mask must be a non-empty 2-D tensor [batch, seq]")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise ValueError(f"attention_mask must hold bools or integers, got {attention_mask.dtype}")
    if bool(((attention_mask != 0) & (attention_mask != 1)).any()):
        raise ValueError("attention_mask values must be 0 (padding) or 1 (a real token)")
    real = int(attention_mask.sum())
    if real == 0:
        raise ValueError("attention_mask marks no real token")
    ordered = sorted(float(value) for value in durations_s)
    median, p25, p75 = quantile(ordered, 0.5), quantile(ordered, 0.25), quantile(ordered, 0.75)
    rows, padded = int(attention_mask.shape[0]), int(attention_mask.numel())
    return {
        "repeats": len(ordered), "median_s": median, "p25_s": p25, "p75_s": p75, "iqr_s": p75 - p25,
        "min_s": ordered[0], "max_s": ordered[-1], "relative_iqr": (p75 - p25) / median,
        "batch_size": rows, "real_tokens": real, "padded_tokens": padded, "pad_share": 1 - real / padded,
        "samples_per_s": rows / median, "real_tokens_per_s": real / median, "padded_tokens_per_s": padded / median,
    }
