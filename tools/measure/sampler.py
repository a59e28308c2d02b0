"""A background thread that samples whole-device GPU memory and host memory, and aligns the
samples to stage events.

GPU memory is what the device reports as used (NVML when available, the device found by its UUID,
else `torch.cuda.mem_get_info`), so it covers every process and an inference engine's own pool;
torch's allocator counters are not used because they miss memory an engine maps itself (vLLM
sleep mode). Host memory is the machine's used memory (total - available, psutil). Times come
from one monotonic clock shared with the stage events. A phase in which no sample fell has
`sample_count` 0 and `null` peaks: a measurement not taken is never 0. `wait_for_memory_settle`
waits, with a timeout, until device memory is back near a baseline (between two experiment groups).
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

UUID_PREFIXES = ("GPU-", "MIG-")


def _visible_entry(device_index: int, visible: str | None) -> str | None:
    """The CUDA_VISIBLE_DEVICES entry behind CUDA ordinal `device_index` (None when the variable is unset)."""
    if visible is None or not visible.strip():
        return None
    entries = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if device_index >= len(entries):
        raise ConfigError(f"CUDA device {device_index} is not visible: CUDA_VISIBLE_DEVICES={visible!r}")
    return entries[device_index]


def _torch_device_uuid(device_index: int) -> str | None:
    """The UUID CUDA gives torch's device `device_index` (bare, without GPU-/MIG-), or None without CUDA."""
    try:  # torch is optional here: the sampler also serves processes that never load it
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    uuid = getattr(torch.cuda.get_device_properties(device_index), "uuid", None)
    return None if uuid is None else str(uuid)


def _nvml_uuid(nvml, handle) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _handle_by_uuid(nvml, uuid: str):
    """The NVML handle of a GPU or MIG UUID; a prefix of a UUID (as CUDA accepts) matches one device."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    except nvml.NVMLError:
        pass
    matches = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        candidates = [handle]
        try:
            count = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        except nvml.NVMLError:
            count = 0
        for slot in range(count):
            try:
                candidates.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
            except nvml.NVMLError:
                continue
        matches += [candidate for candidate in candidates if _nvml_uuid(nvml, candidate).startswith(uuid)]
    if len(matches) != 1:
        raise ConfigError(f"{len(matches)} NVML devices match UUID {uuid!r}; give the full GPU-/MIG- UUID")
    return matches[0]


def nvml_device_handle(nvml, device_index: int = 0, *, visible: str | None = None,
                       torch_uuid: str | None = None) -> tuple[object, dict]:
    """The NVML handle of CUDA ordinal `device_index`, and how it was found.

    NVML numbers physical GPUs in PCI bus order, while CUDA numbers the visible devices (fastest
    first unless CUDA_DEVICE_ORDER=PCI_BUS_ID), so an index alone can name the wrong GPU. In order:
    a CUDA_VISIBLE_DEVICES entry that is a GPU-/MIG- UUID; the UUID torch reports for the device
    (`torch_uuid`, tried as GPU- then MIG-); a numeric CUDA_VISIBLE_DEVICES entry or, without the
    variable, the ordinal itself (PCI bus order assumed, said in the description).
    """
    entry = _visible_entry(device_index, visible)
    if entry is not None and entry.startswith(UUID_PREFIXES):
        handle, mapping = _handle_by_uuid(nvml, entry), "CUDA_VISIBLE_DEVICES uuid"
    elif torch_uuid is not None:
        handle = None
        for prefix in UUID_PREFIXES:
            try:
                handle = _handle_by_uuid(nvml, torch_uuid if torch_uuid.startswith(UUID_PREFIXES) else prefix + torch_uuid)
                break
            except (ConfigError, nvml.NVMLError):
                continue
        if handle is None:
            raise ConfigError(f"NVML has no device with torch's UUID {torch_uuid!r}")
        mapping = "torch device uuid"
    else:
        index = int(entry) if entry is not None else device_index
        if entry is not None and not entry.isdigit():
            raise ConfigError(f"cannot read CUDA_VISIBLE_DEVICES entry {entry!r}: use an index or a GPU-/MIG- UUID")
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        mapping = "index (PCI bus order assumed)"
    try:
        is_mig = bool(nvml.nvmlDeviceIsMigDeviceHandle(handle))
    except nvml.NVMLError:
        is_mig = False
    return handle, {"gpu_device_uuid": _nvml_uuid(nvml, handle), "gpu_mapping": mapping, "gpu_mig": is_mig}


def nvml_gpu_probe(device_index: int = 0, *, use_torch: bool = False) -> tuple[Callable[[], float], dict] | None:
    """A function returning the device's used memory in MiB via NVML and how the device was found,
    or None without NVML or a GPU. `use_torch` asks torch for the device's UUID (only where the process
    uses CUDA anyway: it initialises CUDA)."""
    try:  # pynvml is optional: without it the sampler falls back to torch, then to null
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle, description = nvml_device_handle(
            pynvml, device_index, visible=os.environ.get("CUDA_VISIBLE_DEVICES"),
            torch_uuid=_torch_device_uuid(device_index) if use_torch else None)
    except (pynvml.NVMLError, ConfigError):
        return None

    def read() -> float:
        return pynvml.nvmlDeviceGetMemoryInfo(handle).used / MIB

    return read, description


def torch_gpu_probe(device_index: int = 0) -> Callable[[], float] | None:
    """Used memory of the whole device from `torch.cuda.mem_get_info` (free/total), or None without CUDA."""
    try:  # torch is optional here: the sampler also serves processes that never load it
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
    try:  # psutil is optional: without it host memory is null, never 0
        import psutil
    except ImportError:
        return None

    def read() -> float:
        memory = psutil.virtual_memory()
        return (memory.total - memory.available) / MIB

    return read


def gpu_memory_reader(device: str = "cuda", device_index: int = 0, *,
                      use_torch: bool = False) -> tuple[Callable[[], float] | None, dict]:
    """A function returning the device's used memory in MiB, and its description.

    NVML (the device found by UUID, see `nvml_device_handle`), else `torch.cuda.mem_get_info`,
    else None (always None for device "cpu").
    """
    if device == "cpu":
        return None, {"gpu_source": None}
    found = nvml_gpu_probe(device_index, use_torch=use_torch)
    if found is not None:
        read, description = found
        return read, {"gpu_source": "nvml", **description}
    read = torch_gpu_probe(device_index)
    return read, {"gpu_source": "torch.cuda.mem_get_info" if read is not None else None}


def default_probe(device: str = "cuda", device_index: int = 0, *, use_torch: bool = False) -> tuple[Probe, dict]:
    """The best available probe for `device` and a description of its sources (see `gpu_memory_reader`)."""
    gpu_read, gpu_description = gpu_memory_reader(device, device_index, use_torch=use_torch)
    gpu_source = gpu_description["gpu_source"]
    host_read = host_memory_probe()

    def probe() -> tuple[float | None, float | None]:
        return (gpu_read() if gpu_read else None, host_read() if host_read else None)

    description = {
        **gpu_description,
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
                 description: Mapping[str, Any] | None = None, use_torch: bool = False):
        if not interval_s > 0:
            raise ConfigError(f"interval_s must be positive, got {interval_s!r}")
        if probe is None:
            probe, detected = default_probe(device, use_torch=use_torch)
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
# Waiting for memory to come back
# ---------------------------------------------------------------------------

def wait_for_memory_settle(read_mb: Callable[[], float], *, baseline_mb: float, margin_mb: float, timeout_s: float,
                           interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic,
                           sleep: Callable[[float], None] = time.sleep) -> dict:
    """Poll `read_mb` until it is at most `baseline_mb + margin_mb`, or `timeout_s` has passed.

    Returns `{baseline_mb, margin_mb, timeout_s, waited_s, last_mb, settled}`; `settled` is False
    after a timeout (the caller records it, it does not raise). A process that ended (e.g. an
    inference engine after `ray.shutdown()`) may hand its memory back only later.
    """
    for name, value in (("margin_mb", margin_mb), ("timeout_s", timeout_s), ("interval_s", interval_s)):
        if not (isinstance(value, (int, float)) and value >= 0 and value == value):
            raise ConfigError(f"{name} must be a non-negative number, got {value!r}")
    start = clock()
    while True:
        last = float(read_mb())
        waited = clock() - start
        if last <= baseline_mb + margin_mb:
            settled = True
            break
        if waited >= timeout_s:
            settled = False
            break
        sleep(interval_s)
    return {"baseline_mb": float(baseline_mb), "margin_mb": float(margin_mb), "timeout_s": float(timeout_s),
            "waited_s": waited, "last_mb": last, "settled": settled}


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
