"""Tests of tools.measure.training (product name tools.training_memory_runtime): measurement, OOM as a status,
repeated-run aggregation. CUDA paths run against a fake torch.cuda module (no GPU here)."""

import gc
import types
import weakref

import pytest
import torch

from tools.measure import training as tmr
from tools.errors import ConfigError


def _counting_step(losses):
    calls = []

    def step():
        calls.append(len(calls))
        return losses[min(len(calls) - 1, len(losses) - 1)]

    return step, calls


def test_cpu_measurement_times_only_the_timed_iterations_and_has_no_device_memory():
    step, calls = _counting_step([3.0, 2.5, 2.0, 1.5, 1.0])
    result = tmr.measure_training_run(step, torch_module=torch, device="cpu", batch_size=4, warmup=2, iters=3)
    assert len(calls) == 5
    assert result["status"] == "ok" and result["loss"] == 1.0
    assert result["peak_memory_mb"] is None and result["peak_reserved_mb"] is None
    assert result["step_time_ms"] > 0
    assert result["samples_per_s"] == pytest.approx(4 * 1000.0 / result["step_time_ms"])


class _FakeCuda:
    """Stands in for torch.cuda: records calls, reports fixed peaks in bytes."""

    def __init__(self, events):
        self.events = events

    def synchronize(self, device=None):
        self.events.append("sync")

    def reset_peak_memory_stats(self, device=None):
        self.events.append("reset")

    def max_memory_allocated(self, device=None):
        return 3 * tmr.MIB

    def max_memory_reserved(self, device=None):
        return 5 * tmr.MIB

    def memory_reserved(self, device=None):
        return 2 * tmr.MIB

    def is_available(self):
        return True

    def mem_get_info(self, device=None):
        return 7 * tmr.MIB, 10 * tmr.MIB


def test_cuda_peaks_are_read_after_a_reset_taken_once_warmup_is_done():
    events = []
    fake_torch = types.SimpleNamespace(device=torch.device, cuda=_FakeCuda(events))

    def step():
        events.append("step")
        return 1.0

    result = tmr.measure_training_run(step, torch_module=fake_torch, device="cuda:0", batch_size=1, warmup=2, iters=2)
    assert events == ["step", "step", "sync", "reset", "step", "step", "sync"]
    assert result["peak_memory_mb"] == 3.0 and result["peak_reserved_mb"] == 5.0


def test_cuda_records_the_memory_outside_the_allocator():
    """issue 13: besides both allocator peaks, is the device memory the allocator does not see (CUDA context,
    other processes) recorded? Fake device: 10 MiB, 7 free, allocator holding 2 -> 1 MiB outside it."""
    fake_torch = types.SimpleNamespace(device=torch.device, cuda=_FakeCuda([]))
    result = tmr.measure_training_run(lambda: 1.0, torch_module=fake_torch, device="cuda", batch_size=1, warmup=0,
                                      iters=1)
    assert result["device_overhead_mb"] == 1.0 and result["device_total_mb"] == 10.0
    cpu = tmr.measure_training_run(lambda: 1.0, torch_module=torch, device="cpu", batch_size=1, warmup=0, iters=1)
    assert cpu["device_overhead_mb"] is None and cpu["device_total_mb"] is None


def test_device_memory_is_read_on_cuda_and_absent_on_cpu():
    fake_torch = types.SimpleNamespace(device=torch.device, cuda=_FakeCuda([]))
    assert tmr.device_memory_mb(fake_torch, "cuda") == {"free_mb": 7.0, "total_mb": 10.0}
    assert tmr.device_memory_mb(torch, "cpu") is None


def test_non_finite_loss_is_a_failed_run_with_no_loss():
    step, _ = _counting_step([float("nan")])
    result = tmr.measure_training_run(step, torch_module=torch, device="cpu", batch_size=1, warmup=0, iters=1)
    assert result["status"] == "failed" and result["loss"] is None and "non-finite" in result["error"]


@pytest.mark.parametrize("kwargs", [{"warmup": -1}, {"iters": 0}, {"batch_size": 0}, {"iters": 1.5}])
def test_bad_measurement_arguments_are_refused_before_any_step(kwargs):
    step, calls = _counting_step([1.0])
    arguments = {"batch_size": 1, "warmup": 0, "iters": 1, **kwargs}
    with pytest.raises(ConfigError):
        tmr.measure_training_run(step, torch_module=torch, device="cpu", **arguments)
    assert calls == []


def test_oom_becomes_a_status_and_memory_is_freed_after_the_error_left_scope(monkeypatch):
    """Is the OOM recorded with its first line, and is the failed run's memory unreachable when freed?"""
    held = {}
    freed_while_alive = []

    def fake_free(torch_module):
        gc.collect()
        freed_while_alive.append(held["ref"]() is not None)

    class Big:
        pass

    def failing_run():
        buffer = Big()
        held["ref"] = weakref.ref(buffer)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nGPU 0 has 1 GiB free")

    monkeypatch.setattr(tmr, "free_device_memory", fake_free)
    result = tmr.run_with_oom_guard(failing_run, torch_module=torch, context={"name": "hybrid", "seq_len": 1792})
    assert result == {"name": "hybrid", "seq_len": 1792, "status": "oom", "oom_kind": "device_memory",
                      "error": "CUDA out of memory. Tried to allocate 2.00 GiB"}
    assert freed_while_alive == [False]


def test_a_host_memory_error_is_an_oom_of_kind_host_memory(monkeypatch):
    """issue 13: a pinned (or pageable) host buffer that cannot be allocated ends the run as an OOM-like status."""
    monkeypatch.setattr(tmr, "free_device_memory", lambda torch_module: None)

    def failing_run():
        raise MemoryError("allocating 4096 bytes of pinned host memory for an offloaded activation failed: ...")

    result = tmr.run_with_oom_guard(failing_run, torch_module=torch, context={"name": "offload"})
    assert result == {"name": "offload", "status": "oom", "oom_kind": "host_memory",
                      "error": "allocating 4096 bytes of pinned host memory for an offloaded activation failed: ..."}
    record = tmr.aggregate_runs("offload", [_run(), {**result, "seq_len": 768}])
    assert record["status"] == "partial_oom" and record["oom_kinds"] == ["host_memory"]


def test_free_device_memory_touches_cuda_only_on_a_cuda_host(monkeypatch):
    calls = []
    monkeypatch.setattr(tmr.gc, "collect", lambda: calls.append("collect"))
    for available in (False, True):
        fake_cuda = types.SimpleNamespace(is_available=lambda available=available: available,
                                          empty_cache=lambda: calls.append("empty_cache"))
        tmr.free_device_memory(types.SimpleNamespace(cuda=fake_cuda))
    assert calls == ["collect", "empty_cache"]


def test_other_errors_are_not_turned_into_oom():
    def broken():
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        tmr.run_with_oom_guard(broken, torch_module=torch)


def _run(status="ok", **fields):
    run = {"status": status, "seq_len": 768, "step_time_ms": 100.0, "samples_per_s": 10.0, "loss": 2.0,
           "eval_loss": 2.1, "peak_memory_mb": 5000.0, "peak_reserved_mb": 6000.0, "execution_path_verified": True}
    if status != "ok":
        run = {"status": status, "seq_len": 768, "error": "CUDA out of memory."}
    run.update(fields)
    return run


def test_aggregate_means_ranges_and_counts():
    record = tmr.aggregate_runs("checkpoint", [_run(step_time_ms=90.0, peak_memory_mb=5000.0),
                                               _run(step_time_ms=110.0, peak_memory_mb=5010.0)])
    assert record["status"] == "ok" and record["successful_runs"] == 2 and record["oom_runs"] == 0
    assert record["step_time_ms"] == pytest.approx(100.0)
    assert record["stability"]["step_time_range_ms"] == pytest.approx(20.0)
    assert record["stability"]["peak_memory_range_mb"] == pytest.approx(10.0)
    assert record["seq_len"] == 768 and record["execution_path_verified"] is True and record["repeat_count"] == 2


def test_aggregate_keeps_ooms_as_ooms():
    partial = tmr.aggregate_runs("offload", [_run(), _run("oom"), _run()])
    assert partial["status"] == "partial_oom" and partial["successful_runs"] == 2 and partial["oom_runs"] == 1
    assert partial["errors"] == ["CUDA out of memory."]
    none = tmr.aggregate_runs("offload", [_run("oom"), _run("oom")])
    assert none["status"] == "oom" and none["peak_memory_mb"] is None and none["stability"] is None
    assert none["execution_path_verified"] is False
    mixed = tmr.aggregate_runs("offload", [_run("oom"), _run("failed")])
    assert mixed["status"] == "failed"


def test_aggregate_keeps_missing_device_memory_missing():
    record = tmr.aggregate_runs("baseline", [_run(peak_memory_mb=None, peak_reserved_mb=None)] * 2)
    assert record["peak_memory_mb"] is None and record["stability"]["peak_memory_range_mb"] is None


def test_one_unverified_run_makes_the_candidate_unverified():
    record = tmr.aggregate_runs("hybrid", [_run(), _run(execution_path_verified=False)])
    assert record["execution_path_verified"] is False


def test_aggregate_refuses_unknown_status_and_empty_runs():
    with pytest.raises(ConfigError):
        tmr.aggregate_runs("baseline", [])
    with pytest.raises(ConfigError, match="unknown status"):
        tmr.aggregate_runs("baseline", [_run(status="skipped")])


def test_run_repeated_reuses_a_first_run_and_guards_each_repeat(monkeypatch):
    monkeypatch.setattr(tmr, "free_device_memory", lambda torch_module: None)
    outcomes = iter([_run(), "oom"])

    def run():
        outcome = next(outcomes)
        if outcome == "oom":
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return outcome

    record = tmr.run_repeated("checkpoint", run, repeats=3, torch_module=torch, first_run=_run(),
                              context={"seq_len": 768})
    assert record["repeat_count"] == 3 and record["successful_runs"] == 2 and record["status"] == "partial_oom"
    assert record["runs"][2] == {"name": "checkpoint", "seq_len": 768, "status": "oom", "oom_kind": "device_memory",
                                 "error": "CUDA out of memory."}
