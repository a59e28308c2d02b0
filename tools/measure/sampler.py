"""A background thread that samples whole-device GPU memory and host memory, and aligns the
samples to stage events.

GPU memory is what the device reports as used (NVML when available, else
`torch.cuda.mem_get_info`), so it covers every process and an inference engine's own pool;
torch's allocator counters are not used because they miss memory an engine maps itself (vLLM
sleep mode). Host memory is the machine's used memory (total - available, psutil). Times come
from one monotonic clock shared with the stage events. A phase in which no sample fell has
`sample_count` 0 and `null` peaks: a measurement not taken is never 0.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Mapping

from tools.errors import ConfigError

DEFAULT_INTERVAL_S = 0.25
MIB = 1024 * 1024

Probe = Callable[[], "tuple[float | None, float | None]"]
"""A sampling function: returns (gpu_used_mb, host_used_mb); either may be None."""


@dataclass(frozen=True)
class ResourceSample:
    """One sample: monotonic time `t` (seconds) and memory in MiB (None when not measurable)."""

    t: float
    gpu_used_mb: float | None
    host_used_mb: float | None


# ---------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------

def _physical_gpu_index(device_index: int) -> int:
    """NVML numbers physical GPUs; map a CUDA ordinal through CUDA_VISIBLE_DEVICES when it is numeric."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
        if device_index < len(entries) and entries[device_index].isdigit():
            return int(entries[device_index])
    return device_index


def nvml_gpu_probe(device_index: int = 0) -> Callable[[], float] | None:
    """A function returning the device's used memory in MiB via NVML, or None without NVML/GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_gpu_index(device_index))
    except pynvml.NVMLError:
        return None

    def read() -> float:
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB

    return read


def torch_gpu_probe(device_index: int = 0) -> Callable[[], float] | None:
    """Used memory of the whole device from `torch.cuda.mem_get_info` (free/total), or None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def read() -> float:
        free, total = torch.cuda.mem_get_info(device_index)
        return (total - free) / MIB

    return read


def host_memory_probe() -> Callable[[], float] | None:
    """Used host memory (total - available) in MiB via psutil, or None without psutil."""
    try:
        import psutil
    except ImportError:
        return None

    def read() -> float:
        memory = psutil.virtual_memory()
        return (memory.total - memory.available) / MIB

    return read


def default_probe(device: str = "cuda", device_index: int = 0) -> tuple[Probe, dict]:
    """The best available probe for `device` and a description of its sources.

    GPU: NVML, else `torch.cuda.mem_get_info`, else None (always None for device "cpu").
    """
    gpu_read, gpu_source = None, None
    if device != "cpu":
        gpu_read = nvml_gpu_probe(device_index)
        gpu_source = "nvml" if gpu_read is not None else None
        if gpu_read is None:
            gpu_read = torch_gpu_probe(device_index)
            gpu_source = "torch.cuda.mem_get_info" if gpu_read is not None else None
    host_read = host_memory_probe()

    def probe() -> tuple[float | None, float | None]:
        return (gpu_read() if gpu_read else None, host_read() if host_read else None)

    description = {
        "gpu_source": gpu_source,
        "gpu_scope": "whole device (all processes)" if gpu_source else None,
        "host_source": "psutil.virtual_memory (total - available)" if host_read else None,
        "host_scope": "whole machine" if host_read else None,
    }
    return probe, description


# ---------------------------------------------------------------------------
# Sampler thread
# ---------------------------------------------------------------------------

class ResourceSampler:
    """Samples `probe` every `interval_s` seconds on a daemon thread until stopped.

    Use as a context manager or call start()/stop(). A probe that raises is not hidden: the
    error is counted and its first message kept in `errors`, and sampling goes on.
    """

    def __init__(self, probe: Probe | None = None, *, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, device: str = "cuda",
                 description: Mapping[str, Any] | None = None):
        if not interval_s > 0:
            raise ConfigError(f"interval_s must be positive, got {interval_s!r}")
        if probe is None:
            probe, detected = default_probe(device)
            description = {**detected, **(description or {})}
        self.probe = probe
        self.interval_s = float(interval_s)
        self.clock = clock
        self.description = dict(description or {"gpu_source": "injected", "host_source": "injected"})
        self.samples: list[ResourceSample] = []
        self.errors: list[str] = []
        self.error_count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample_once(self) -> ResourceSample | None:
        """Take one sample now (also used by the thread)."""
        t = self.clock()
        try:
            gpu, host = self.probe()
        except Exception as error:  # noqa: BLE001 - recorded, not swallowed
            self.error_count += 1
            if len(self.errors) < 5:
                self.errors.append(f"{type(error).__name__}: {error}")
            return None
        sample = ResourceSample(t=t, gpu_used_mb=None if gpu is None else float(gpu),
                                host_used_mb=None if host is None else float(host))
        with self._lock:
            self.samples.append(sample)
        return sample

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(self.interval_s)

    def start(self) -> "ResourceSampler":
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[ResourceSample]:
        """Stop the thread and return the samples taken."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 4 * self.interval_s))
        return self.snapshot()

    def snapshot(self) -> list[ResourceSample]:
        with self._lock:
            return list(self.samples)

    def __enter__(self) -> "ResourceSampler":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def summary(self) -> dict:
        """Sampler settings, sources, sample and error counts."""
        return {"interval_s": self.interval_s, "clock": "time.monotonic", **self.description,
                "sample_count": len(self.samples), "error_count": self.error_count, "errors": list(self.errors)}


# ---------------------------------------------------------------------------
# Alignment
# ---------------------------------------------------------------------------

def _peak(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def peaks(samples: Iterable[ResourceSample]) -> dict:
    """`{sample_count, gpu_peak_mb, host_peak_mb}` over `samples` (peaks None when nothing was measured)."""
    chosen = list(samples)
    return {
        "sample_count": len(chosen),
        "gpu_peak_mb": _peak(s.gpu_used_mb for s in chosen),
        "host_peak_mb": _peak(s.host_used_mb for s in chosen),
    }


def samples_between(samples: Iterable[ResourceSample], start: float, end: float) -> list[ResourceSample]:
    """Samples with start <= t <= end."""
    return [s for s in samples if start <= s.t <= end]


def align_to_phases(samples: Iterable[ResourceSample], phases: Iterable[Mapping[str, Any]], *,
                    origin: float | None = None) -> dict:
    """Per phase (`{name, start, end}` on the sampler's clock): timing, sample count and peaks.

    A phase name seen twice gets a suffix (`name#2`). With `origin`, start/end are also
    reported relative to it.
    """
    chosen = list(samples)
    result: dict[str, dict] = {}
    for phase in phases:
        start, end = float(phase["start"]), float(phase["end"])
        if end < start:
            raise ConfigError(f"phase {phase['name']!r} ends before it starts ({end} < {start})")
        name = phase["name"]
        key, counter = name, 1
        while key in result:
            counter += 1
            key = f"{name}#{counter}"
        entry = {"duration_s": end - start}
        if origin is not None:
            entry.update(start_s=start - origin, end_s=end - origin)
        entry.update(peaks(samples_between(chosen, start, end)))
        result[key] = entry
    return result


def samples_as_dicts(samples: Iterable[ResourceSample], origin: float = 0.0) -> list[dict]:
    """Samples as plain dicts with `t_s` relative to `origin`."""
    rows = []
    for sample in samples:
        row = asdict(sample)
        row["t_s"] = row.pop("t") - origin
        rows.append(row)
    return rows
