"""issue 13 on the memory-strategy paths that only a GPU runs, tested here with fakes (no GPU on this machine).

Each test names the defect it guards and failed before the fix: the memory cap and the G1 admission judged
the allocated peak (the caching allocator's reserved memory and the CUDA context were left out), and a host
buffer that could not be allocated for an offloaded activation crashed the stage instead of becoming a status.
The weights in the baseline's workload identity are tested in test_training_baseline.py, the CUDA
measurement (allocated, reserved and the memory outside the allocator) in test_measure_training.py.
"""

import copy

import pytest
import torch

from tools.experiments.memory_strategy import hooks, judge
from tools.experiments.memory_strategy.runner import TrainingWorkload, run_memory_strategy
from tools.measure.training import run_with_oom_guard
from tools.models.loading import load_causal_lm, resolve_model

BUDGET = {"memory_cap_mb": 11200.0, "min_samples_per_s": 1.0, "min_memory_saving_mb": 512.0,
          "min_throughput_ratio": 0.70}
FLOOR = {"max_val_loss": 2.0}


pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # conftest: torch on one thread


def _record(name, allocated, reserved, **fields):
    return {"name": name, "status": "ok", "execution_path_verified": True, "successful_runs": 3, "oom_runs": 0,
            "peak_memory_mb": allocated, "peak_reserved_mb": reserved, "samples_per_s": 8.0, "step_time_ms": 125.0,
            "eval_loss": 1.5, **fields}


def _row(summary, name):
    return next(row for row in summary["candidates"] if row["name"] == name)


def test_memory_cap_is_judged_at_the_reserved_peak_plus_the_cuda_context_margin():
    """A candidate whose tensors fit the cap (10000 MiB allocated) but whose allocator holds 10500 MiB does not
    fit a 11200 MiB card once the CUDA context (1024 MiB stated margin) is added: tune, never accept."""
    summary = judge.summarize_memory_strategy_candidates(
        [_record("baseline", 12000.0, 12600.0), _record("checkpoint", 10000.0, 10500.0),
         _record("hybrid", 9000.0, 9600.0)], BUDGET, FLOOR)
    tight = _row(summary, "checkpoint")
    assert tight["device_footprint_mb"] == 10500.0 + judge.DEFAULT_CUDA_CONTEXT_MARGIN_MB
    assert tight["gates"]["within_memory_cap"] is False
    assert tight["verdict"] == "tune" and tight["reasons"] == ["gate_failed:within_memory_cap"]
    assert tight["memory_saving_mb"] == 2000.0 and tight["reserved_saving_mb"] == 2100.0  # savings stay allocated
    assert _row(summary, "hybrid")["verdict"] == "accept"  # 9600 + 1024 <= 11200
    assert summary["memory_cap_rule"] == "peak_reserved_mb + cuda_context_margin_mb <= memory_cap_mb"
    assert summary["cuda_context_margin_mb"] == 1024.0


def test_the_context_margin_is_stated_in_the_budget():
    records = [_record("baseline", 12000.0, 12600.0), _record("checkpoint", 10000.0, 10500.0)]
    roomy = judge.summarize_memory_strategy_candidates(records, {**BUDGET, "cuda_context_margin_mb": 600.0}, FLOOR)
    assert _row(roomy, "checkpoint")["verdict"] == "accept" and roomy["cuda_context_margin_mb"] == 600.0
    with pytest.raises(ValueError, match="cuda_context_margin_mb"):
        judge.summarize_memory_strategy_candidates(records, {**BUDGET, "cuda_context_margin_mb": -1.0}, FLOOR)


def test_an_allocated_peak_without_a_reserved_peak_is_not_a_memory_measurement():
    summary = judge.summarize_memory_strategy_candidates(
        [_record("baseline", 12000.0, 12600.0), _record("checkpoint", 8000.0, None)], BUDGET, FLOOR)
    row = _row(summary, "checkpoint")
    assert row["gates"]["within_memory_cap"] is False and row["device_footprint_mb"] is None
    assert row["verdict"] == "tune" and "device_memory_not_measured" in row["reasons"]


def test_g1_admission_projects_the_highest_reserved_peak():
    """Before the fix the ladder projected the allocated peak: 6000 MiB x 1024/768 = 8000 fits a 12000 MiB
    limit, while the allocator really held 9600 MiB, projected 12800: blocked."""
    previous = [_record("baseline", 6000.0, 9600.0), _record("checkpoint", 4000.0, 7000.0),
                _record("offload", None, None, status="oom")]
    peak = judge.highest_reserved_peak(previous)
    assert peak == 9600.0
    check = judge.admit_next_length(previous_seq_len=768, previous_peak_reserved_mb=peak, next_seq_len=1024,
                                    free_memory_mb=15000.0, safety_margin=3000.0)
    assert check["status"] == "blocked" and check["projected_peak_reserved_mb"] == pytest.approx(12800.0)
    assert check["projection"] == "linear_in_seq_len_from_previous_peak_reserved"
    assert judge.highest_reserved_peak([_record("baseline", None, None)]) is None


# ---------------------------------------------------------------------------
# The offload hook's host buffers
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def factory():
    model, _ = load_causal_lm(resolve_model("tiny"))

    def make():
        return copy.deepcopy(model)

    return make


WORKLOAD = TrainingWorkload(batch_size=1, seq_len=16, warmup=0, iters=1, optimizer="sgd")


def _pinning_that_fails(monkeypatch, pinned_only=True):
    attempts = []

    def allocate(size, *, dtype, layout, pin_memory):
        attempts.append(pin_memory)
        if pin_memory or not pinned_only:
            raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")
        return torch.empty(size, dtype=dtype, layout=layout)

    monkeypatch.setattr(hooks, "_pinning_available", lambda: True)
    monkeypatch.setattr(hooks, "_allocate_host", allocate)
    return attempts


def test_a_failed_pinned_allocation_is_an_oom_status_not_a_crash(monkeypatch, factory):
    """Before the fix the RuntimeError of cudaHostAlloc left the offload hook and ended the stage."""
    attempts = _pinning_that_fails(monkeypatch)
    result = run_with_oom_guard(lambda: run_memory_strategy(factory, "offload", WORKLOAD, pin_memory=True),
                                torch_module=torch, context={"name": "offload"})
    assert attempts and all(attempts)
    assert result["status"] == "oom" and result["oom_kind"] == "host_memory"
    assert "pinned host memory" in result["error"] and "CUDA error: out of memory" in result["error"]


def test_a_failed_pageable_allocation_is_an_oom_status_too(monkeypatch, factory):
    _pinning_that_fails(monkeypatch, pinned_only=False)
    result = run_with_oom_guard(lambda: run_memory_strategy(factory, "hybrid", WORKLOAD),
                                torch_module=torch, context={"name": "hybrid"})
    assert result["status"] == "oom" and result["oom_kind"] == "host_memory" and "pageable" in result["error"]


def test_the_pinned_path_is_recorded_as_such(monkeypatch, factory):
    monkeypatch.setattr(hooks, "_pinning_available", lambda: True)
    monkeypatch.setattr(hooks, "_allocate_host",
                        lambda size, *, dtype, layout, pin_memory: torch.empty(size, dtype=dtype, layout=layout))
    record = run_memory_strategy(factory, "offload", WORKLOAD, pin_memory=True)
    assert record["execution_path_verified"] is True
    assert record["saved_tensors"]["pin_memory"] is True
    assert record["saved_tensors"]["offload_copy"]["host_memory"] == "pinned"


def test_offload_records_say_the_copy_is_synchronous_into_pageable_memory(factory):
    """The default offload copy, stated in every offloading run's evidence: its throughput cost is this method's."""
    offload = run_memory_strategy(factory, "offload", WORKLOAD)
    assert offload["saved_tensors"]["pin_memory"] is False
    copy_method = offload["saved_tensors"]["offload_copy"]
    assert copy_method["host_memory"] == "pageable" and copy_method["copy"] == "synchronous"
    assert "implementation" in copy_method["cost_note"]
    assert run_memory_strategy(factory, "baseline", WORKLOAD)["saved_tensors"]["offload_copy"] is None
    assert hooks.HostCopier(pin_memory=True).pin_memory is torch.cuda.is_available()  # no pinning without CUDA
