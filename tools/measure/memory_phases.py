"""Peak memory per phase of a training step, with the peak reset at every phase start.

`torch.cuda.reset_peak_memory_stats()` sets the allocator's peak to what is allocated *now*;
`torch.cuda.max_memory_allocated()` then reads the highest total since. Chapter 73's third exercise
computes the same thing from an allocation trace, so it runs on any device:

    events = [("phase", "forward"), ("alloc", 4096), ("free", 1024), ("phase", "backward"), ...]

`phase_peaks` (the package's copy of that exercise) turns such a trace into one row per phase.
`profile_step` records the trace of one real call: the step runs under `torch.profiler` with
`profile_memory=True`, each phase inside `phase("name")` (a `record_function` range named
`phase:<name>`); the allocator's memory events of the chosen device (CPU, or CUDA's caching
allocator) become `alloc` / `free` events, phase starts become `phase` events. The profiler's own
running total (`Total Allocated`) of every event gives `profiler_phase_rows`: the same rows computed
by torch, which a learner's rows are checked against. On CUDA, `PhaseMarks` also reads
`torch.cuda.max_memory_allocated` after a `reset_peak_memory_stats` at each phase start: the
allocator's own answer (real_gpu only). Nothing here prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

PHASE, ALLOC, FREE = "phase", "alloc", "free"
PHASE_PREFIX = "phase:"
DEVICE_TYPES = {"cpu": 0, "cuda": 1}
"""The `Device Type` the profiler writes into a memory event (c10::DeviceType)."""


def phase_peaks(events, initial_bytes=0):
    """One row per phase of an allocation trace; the peak is reset to the current total at each phase start."""
    if isinstance(initial_bytes, bool) or not isinstance(initial_bytes, int) or initial_bytes < 0:
        raise ValueError(f"initial_bytes must be an int >= 0, got {initial_bytes!r}")
    if not isinstance(events, list):
        raise ValueError("events must be a list of (kind, value) pairs")
    current, rows, open_row = initial_bytes, [], None
    for index, event in enumerate(events):
        if not isinstance(event, (tuple, list)) or len(event) != 2:
            raise ValueError(f"event {index} must be a (kind, value) pair, got {event!r}")
        kind, value = event
        if kind == PHASE:
            if not isinstance(value, str) or not value:
                raise ValueError(f"event {index}: a phase name must be a non-empty str, got {value!r}")
            if open_row is not None:
                rows.append(_closed(open_row, current))
            open_row = {"phase": value, "start_bytes": current, "peak_bytes": current}
        elif kind in (ALLOC, FREE):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"event {index}: bytes must be an int >= 1, got {value!r}")
            current += value if kind == ALLOC else -value
            if current < 0:
                raise ValueError(f"event {index} frees more than is allocated")
            if open_row is not None:
                open_row["peak_bytes"] = max(open_row["peak_bytes"], current)
        else:
            raise ValueError(f"event {index}: unknown kind {kind!r}")
    if open_row is not None:
        rows.append(_closed(open_row, current))
    return rows


def _closed(row: dict, current: int) -> dict:
    return {**row, "end_bytes": current, "peak_above_start_bytes": row["peak_bytes"] - row["start_bytes"]}


def peaks_without_reset(events, initial_bytes=0) -> list[dict]:
    """The control: each phase's "peak" as a running maximum never reset (what reading
    `max_memory_allocated` without `reset_peak_memory_stats` between phases reports)."""
    rows, highest = [], initial_bytes
    for row in phase_peaks(events, initial_bytes):
        highest = max(highest, row["peak_bytes"])
        rows.append({**row, "peak_bytes": highest, "peak_above_start_bytes": highest - row["start_bytes"]})
    return rows


# ---------------------------------------------------------------------------
# Recording the trace of one real call
# ---------------------------------------------------------------------------

@dataclass
class PhaseMarks:
    """What a training step calls around each phase: `with marks.phase("forward"): ...`.

    Always a `record_function` range (the profiler finds the phases by it). While `cuda_rows` is being
    recorded (`recording` True, a CUDA device), each phase also synchronises, resets the allocator's
    peak and reads `memory_allocated` / `max_memory_allocated` at its end: torch's own per-phase rows.
    """

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    recording: bool = False
    cuda_rows: list[dict] = field(default_factory=list)

    @contextlib.contextmanager
    def phase(self, name: str):
        cuda = self.recording and self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            start = torch.cuda.memory_allocated(self.device)
        with torch.profiler.record_function(f"{PHASE_PREFIX}{name}"):
            yield
        if cuda:
            torch.cuda.synchronize(self.device)
            self.cuda_rows.append({"phase": name, "start_bytes": start,
                                   "peak_bytes": torch.cuda.max_memory_allocated(self.device),
                                   "end_bytes": torch.cuda.memory_allocated(self.device)})


@dataclass
class PhaseTrace:
    """The allocation trace of one profiled call on one device."""

    device_type: str
    events: list[tuple[str, Any]]
    initial_bytes: int
    profiler_rows: list[dict]
    memory_events: int

    def public(self) -> dict:
        return {"device_type": self.device_type, "initial_bytes": self.initial_bytes,
                "memory_events": self.memory_events, "trace_events": len(self.events),
                "profiler_phase_rows": self.profiler_rows}


def profile_step(run: Callable[[], Any], device: str | torch.device = "cpu") -> tuple[Any, PhaseTrace]:
    """Run `run()` once under the memory profiler; return its result and the allocation trace of `device`."""
    device = torch.device(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True, record_shapes=False) as profiler:
        result = run()
    handle, path = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    try:
        profiler.export_chrome_trace(path)
        with open(path, encoding="utf-8") as stream:
            trace = json.load(stream)
    finally:
        os.unlink(path)
    return result, trace_from_chrome(trace.get("traceEvents", []), device.type)


def trace_from_chrome(trace_events: list[dict], device_type: str = "cpu") -> PhaseTrace:
    """Allocation trace of one device from a profiler's chrome-trace events (see the module docstring)."""
    wanted = DEVICE_TYPES[device_type]
    memory = sorted((event for event in trace_events if event.get("name") == "[memory]"
                     and event.get("args", {}).get("Device Type") == wanted and event["args"].get("Bytes")),
                    key=lambda event: (float(event["ts"]), event["args"].get("Ev Idx", 0)))
    phases = sorted(((float(event["ts"]), event["name"][len(PHASE_PREFIX):]) for event in trace_events
                     if str(event.get("name", "")).startswith(PHASE_PREFIX) and event.get("ph") == "X"
                     and event.get("cat") == "user_annotation"),
                    key=lambda item: item[0])
    # The first event's total minus its own bytes is what was allocated before the call. CUDA's caching
    # allocator knows it (weights, optimizer state); the CPU reporter only counts what it saw while a
    # profiler was on, so on the CPU the trace starts from 0: the bytes allocated since the call began.
    offset = int(memory[0]["args"]["Total Allocated"]) - int(memory[0]["args"]["Bytes"]) if memory else 0
    initial = offset if device_type == "cuda" else 0
    events, rows, row, total = [], [], None, initial
    pending = list(phases)
    for event in memory:
        ts = float(event["ts"])
        while pending and pending[0][0] <= ts:
            row = _open_profiler_row(rows, row, pending.pop(0)[1], total, events)
        nbytes = int(event["args"]["Bytes"])
        events.append((ALLOC, nbytes) if nbytes > 0 else (FREE, -nbytes))
        total = int(event["args"]["Total Allocated"]) - offset + initial
        if row is not None:
            row["peak_bytes"] = max(row["peak_bytes"], total)
    while pending:
        row = _open_profiler_row(rows, row, pending.pop(0)[1], total, events)
    if row is not None:
        rows.append(_closed(row, total))
    return PhaseTrace(device_type, events, initial, rows, len(memory))


def _open_profiler_row(rows: list[dict], row: dict | None, name: str, total: int, events: list) -> dict:
    if row is not None:
        rows.append(_closed(row, total))
    events.append((PHASE, name))
    return {"phase": name, "start_bytes": total, "peak_bytes": total}


def rows_agree(learner_rows: list[dict], torch_rows: list[dict]) -> dict:
    """Do two lists of phase rows match field by field? `{"agrees", "max_abs_diff_bytes", "compared"}`."""
    keys = ("start_bytes", "peak_bytes", "end_bytes")
    if [row.get("phase") for row in learner_rows] != [row.get("phase") for row in torch_rows]:
        return {"agrees": False, "max_abs_diff_bytes": None, "compared": 0}
    diffs = [abs(int(mine[key]) - int(theirs[key])) for mine, theirs in zip(learner_rows, torch_rows) for key in keys]
    return {"agrees": not any(diffs), "max_abs_diff_bytes": max(diffs, default=0), "compared": len(torch_rows)}
