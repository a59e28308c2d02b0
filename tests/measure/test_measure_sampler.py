"""Tests of tools.measure.sampler: injectable probe and clock, the thread, phase alignment."""

import sys
import threading
import time
import types

import pytest

from tools.measure import sampler as rs
from tools.errors import ConfigError


class StepClock:
    """A fake monotonic clock that returns preset times in order, then keeps the last one."""

    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0) if len(self.times) > 1 else self.times[0]


def test_sample_once_uses_the_injected_probe_and_clock():
    sampler = rs.ResourceSampler(lambda: (100.0, 2000.0), clock=StepClock([5.0]), interval_s=1.0)
    sample = sampler.sample_once()
    assert sample == rs.ResourceSample(t=5.0, gpu_used_mb=100.0, host_used_mb=2000.0)
    assert sampler.snapshot() == [sample]


def test_thread_samples_repeatedly_and_stops():
    calls = []

    def probe():
        calls.append(threading.current_thread().name)
        return None, 1.0

    sampler = rs.ResourceSampler(probe, interval_s=0.01)
    with sampler:
        deadline = time.monotonic() + 120  # a hang guard: three samples at 0.01 s come at once
        while len(sampler.snapshot()) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    count = len(sampler.snapshot())
    assert count >= 3
    assert set(calls) == {"resource-sampler"}
    time.sleep(0.05)
    assert len(sampler.snapshot()) == count  # stopped
    times = [s.t for s in sampler.snapshot()]
    assert times == sorted(times)


def test_probe_errors_are_counted_not_hidden():
    def broken():
        raise OSError("nvml went away")

    sampler = rs.ResourceSampler(broken, interval_s=1.0)
    assert sampler.sample_once() is None
    assert sampler.error_count == 1
    assert sampler.summary()["errors"] == ["OSError: nvml went away"]


def test_phase_without_samples_has_null_peaks_and_zero_count():
    samples = [rs.ResourceSample(1.0, 500.0, 3000.0), rs.ResourceSample(1.5, 700.0, 3100.0),
               rs.ResourceSample(4.0, 900.0, 2900.0)]
    phases = [{"name": "generation", "start": 0.9, "end": 2.0},
              {"name": "update", "start": 2.1, "end": 2.2},
              {"name": "weight_sync", "start": 3.5, "end": 4.5}]
    aligned = rs.align_to_phases(samples, phases, origin=0.5)
    assert aligned["generation"] == {"duration_s": pytest.approx(1.1), "start_s": pytest.approx(0.4),
                                     "end_s": pytest.approx(1.5), "sample_count": 2, "gpu_peak_mb": 700.0,
                                     "host_peak_mb": 3100.0}
    assert aligned["update"]["sample_count"] == 0
    assert aligned["update"]["gpu_peak_mb"] is None and aligned["update"]["host_peak_mb"] is None
    assert aligned["weight_sync"]["gpu_peak_mb"] == 900.0


def test_whole_run_peak_is_separate_from_phase_peaks():
    samples = [rs.ResourceSample(0.1, 9000.0, 1.0), rs.ResourceSample(2.0, 600.0, 1.0)]
    aligned = rs.align_to_phases(samples, [{"name": "update", "start": 1.5, "end": 2.5}])
    assert aligned["update"]["gpu_peak_mb"] == 600.0
    assert rs.peaks(samples)["gpu_peak_mb"] == 9000.0


def test_unmeasurable_gpu_stays_null_when_host_is_measured():
    samples = [rs.ResourceSample(1.0, None, 1234.0)]
    result = rs.peaks(samples)
    assert result == {"sample_count": 1, "gpu_peak_mb": None, "host_peak_mb": 1234.0}


def test_repeated_phase_names_are_kept_apart_and_bad_phases_refused():
    aligned = rs.align_to_phases([], [{"name": "sync", "start": 0, "end": 1}, {"name": "sync", "start": 2, "end": 3}])
    assert list(aligned) == ["sync", "sync#2"]
    with pytest.raises(ConfigError):
        rs.align_to_phases([], [{"name": "x", "start": 2, "end": 1}])


def test_cpu_default_probe_reads_host_memory_and_no_gpu():
    probe, description = rs.default_probe("cpu")
    gpu, host = probe()
    assert gpu is None and description["gpu_source"] is None
    assert host is not None and host > 0
    assert "psutil" in description["host_source"]


def test_interval_must_be_positive():
    with pytest.raises(ConfigError):
        rs.ResourceSampler(lambda: (None, None), interval_s=0)


def test_samples_as_dicts_are_relative_to_origin():
    rows = rs.samples_as_dicts([rs.ResourceSample(10.5, None, 2.0)], origin=10.0)
    assert rows == [{"gpu_used_mb": None, "host_used_mb": 2.0, "t_s": 0.5}]


# ---------------------------------------------------------------------------
# Which NVML device is torch's device
# ---------------------------------------------------------------------------

class FakeNVMLError(Exception):
    pass


class FakeNVML:
    """pynvml over a machine whose PCI order is GPU-aaa (index 0), GPU-bbb (index 1, with two MIG slices)."""

    NVMLError = FakeNVMLError

    def __init__(self):
        self.gpus = [{"uuid": "GPU-aaa111", "used": 100, "mig": []},
                     {"uuid": "GPU-bbb222", "used": 200, "mig": [{"uuid": "MIG-ccc333", "used": 30},
                                                                  {"uuid": "MIG-ddd444", "used": 40}]}]
        self.handles = {d["uuid"]: d for gpu in self.gpus for d in [gpu, *gpu["mig"]]}

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.handles:
            raise FakeNVMLError(f"no device {uuid}")
        return self.handles[uuid]

    def nvmlDeviceGetUUID(self, handle):
        return handle["uuid"].encode()

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return len(handle.get("mig", []))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
        return handle["mig"][slot]

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        return handle["uuid"].startswith("MIG-")


@pytest.mark.parametrize("visible, torch_uuid, uuid, mapping", [
    ("GPU-bbb222,GPU-aaa111", None, "GPU-bbb222", "CUDA_VISIBLE_DEVICES uuid"),  # index 0 would be GPU-aaa
    ("MIG-ddd444", None, "MIG-ddd444", "CUDA_VISIBLE_DEVICES uuid"),
    ("GPU-bbb", None, "GPU-bbb222", "CUDA_VISIBLE_DEVICES uuid"),  # CUDA accepts a unique prefix
    (None, "bbb222", "GPU-bbb222", "torch device uuid"),  # torch: fastest-first order, not PCI order
    (None, "ccc333", "MIG-ccc333", "torch device uuid"),
    ("1", None, "GPU-bbb222", "index (PCI bus order assumed)"),
    (None, None, "GPU-aaa111", "index (PCI bus order assumed)"),
])
def test_the_nvml_handle_is_the_torch_device(visible, torch_uuid, uuid, mapping):
    handle, description = rs.nvml_device_handle(FakeNVML(), 0, visible=visible, torch_uuid=torch_uuid)
    assert handle["uuid"] == uuid
    assert description == {"gpu_device_uuid": uuid, "gpu_mapping": mapping, "gpu_mig": uuid.startswith("MIG-")}


def test_an_unknown_or_ambiguous_device_is_an_error_not_another_gpu():
    with pytest.raises(rs.ConfigError, match="not visible"):
        rs.nvml_device_handle(FakeNVML(), 2, visible="GPU-aaa111,GPU-bbb222")
    with pytest.raises(rs.ConfigError, match="2 NVML devices match"):
        rs.nvml_device_handle(FakeNVML(), 0, visible="MIG-")
    with pytest.raises(rs.ConfigError, match="torch's UUID"):
        rs.nvml_device_handle(FakeNVML(), 0, torch_uuid="eee555")


def test_the_nvml_probe_reads_the_mapped_device(monkeypatch):
    fake = FakeNVML()
    fake.nvmlInit = lambda: None
    fake.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=handle["used"] * rs.MIB)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-ccc333")
    read, description = rs.nvml_gpu_probe(0)
    assert read() == 30.0 and description["gpu_mig"] is True
    reader, described = rs.gpu_memory_reader("cuda")
    assert reader() == 30.0 and described["gpu_source"] == "nvml"
    assert rs.gpu_memory_reader("cpu") == (None, {"gpu_source": None})


# ---------------------------------------------------------------------------
# Waiting for memory to come back between groups
# ---------------------------------------------------------------------------

def test_waiting_stops_once_memory_is_near_the_baseline():
    readings, sleeps = iter([9000.0, 6000.0, 1400.0, 1000.0]), []
    clock = StepClock([0.0, 0.0, 0.5, 1.0, 1.5])
    result = rs.wait_for_memory_settle(lambda: next(readings), baseline_mb=1000.0, margin_mb=512.0, timeout_s=60.0,
                                       interval_s=0.5, clock=clock, sleep=sleeps.append)
    assert result == {"baseline_mb": 1000.0, "margin_mb": 512.0, "timeout_s": 60.0, "waited_s": 1.0,
                      "last_mb": 1400.0, "settled": True}
    assert sleeps == [0.5, 0.5]


def test_waiting_gives_up_after_the_timeout_and_says_so():
    clock = StepClock([0.0, 0.0, 1.0, 2.0, 3.0])
    result = rs.wait_for_memory_settle(lambda: 9000.0, baseline_mb=1000.0, margin_mb=512.0, timeout_s=2.0,
                                       clock=clock, sleep=lambda s: None)
    assert result["settled"] is False and result["waited_s"] == 2.0 and result["last_mb"] == 9000.0
    with pytest.raises(ConfigError):
        rs.wait_for_memory_settle(lambda: 0.0, baseline_mb=0.0, margin_mb=-1.0, timeout_s=1.0)
