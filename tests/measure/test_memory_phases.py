"""tools.measure.memory_phases: peaks per phase with the reset semantics of torch.cuda, the control that never
resets, traces read from the profiler's chrome trace, and the CUDA per-phase readings (with a fake torch.cuda)."""

from __future__ import annotations

import pytest
import torch

from tools.measure import memory_phases as mp


def test_the_peak_resets_to_the_current_total_not_to_zero():
    events = [("alloc", 10), ("phase", "forward"), ("alloc", 100), ("free", 90), ("phase", "optimizer"), ("free", 5)]
    rows = mp.phase_peaks(events, initial_bytes=50)
    assert [(r["start_bytes"], r["peak_bytes"], r["end_bytes"]) for r in rows] == [(60, 160, 70), (70, 70, 65)]
    unreset = mp.peaks_without_reset(events, initial_bytes=50)
    assert [r["peak_bytes"] for r in unreset] == [160, 160]


@pytest.mark.parametrize("events, initial", [([("free", 1)], 0), ([("phase", "")], 0), ([("alloc", True)], 0),
                                             ([("alloc", 1, 2)], 0), ([("grow", 1)], 0), ([], -1), ((), 0)])
def test_bad_traces_are_refused(events, initial):
    with pytest.raises(ValueError):
        mp.phase_peaks(events, initial)


def _memory(ts, nbytes, total, device_type=0, index=0):
    return {"name": "[memory]", "ph": "i", "ts": ts, "args": {"Bytes": nbytes, "Total Allocated": total,
                                                             "Device Type": device_type, "Ev Idx": index}}


def _phase(name, ts, category="user_annotation"):
    return {"name": f"phase:{name}", "ph": "X", "ts": ts, "dur": 5, "cat": category}


def test_a_chrome_trace_becomes_a_trace_and_the_profiler_rows():
    """CPU: the profiler's totals start where its reporter started counting, so the trace starts from 0;
    GPU annotations of the same phase and another device's events are ignored."""
    events = [_phase("forward", 1.0), _phase("forward", 1.0, "gpu_user_annotation"), _memory(2.0, 64, 1064),
              _memory(3.0, 32, 1096), _memory(3.5, 8, 9, device_type=1), _phase("backward", 4.0), _memory(5.0, -64, 1032)]
    trace = mp.trace_from_chrome(events, "cpu")
    assert trace.events == [("phase", "forward"), ("alloc", 64), ("alloc", 32), ("phase", "backward"), ("free", 64)]
    assert trace.initial_bytes == 0 and trace.memory_events == 3
    assert trace.profiler_rows == mp.phase_peaks(trace.events, trace.initial_bytes)
    cuda = mp.trace_from_chrome([_phase("forward", 1.0), _memory(2.0, 512, 4608, device_type=1)], "cuda")
    assert cuda.initial_bytes == 4096 and cuda.profiler_rows[0]["peak_bytes"] == 4608


def test_profiling_a_real_cpu_step_agrees_with_the_profilers_total():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    marks = mp.PhaseMarks()

    def step():
        with marks.phase("forward"):
            loss = model(torch.randn(32, 16)).square().mean()
        with marks.phase("backward"):
            loss.backward()
        with marks.phase("optimizer"):
            optimizer.step()
        return float(loss.detach())

    result, trace = mp.profile_step(step)
    rows = mp.phase_peaks(trace.events, trace.initial_bytes)
    assert isinstance(result, float) and [r["phase"] for r in rows] == ["forward", "backward", "optimizer"]
    assert mp.rows_agree(rows, trace.profiler_rows) == {"agrees": True, "max_abs_diff_bytes": 0, "compared": 3}
    assert rows[2]["end_bytes"] > rows[2]["start_bytes"], "AdamW's first step keeps two moments per parameter"
    wrong = [{**row, "peak_bytes": row["peak_bytes"] + 1} for row in rows]
    assert mp.rows_agree(wrong, trace.profiler_rows)["agrees"] is False


def test_phase_marks_read_the_cuda_allocator_per_phase(monkeypatch):
    """The real_gpu path without a GPU: each recorded phase synchronises, resets the peak, then reads it."""
    calls, state = [], {"allocated": 100, "peak": 100}

    def reset(device):
        calls.append("reset")
        state["peak"] = state["allocated"]

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    marks = mp.PhaseMarks(device=torch.device("cuda"), recording=True)
    with marks.phase("forward"):
        state.update(allocated=180, peak=250)
    with marks.phase("optimizer"):
        state.update(allocated=150)
    assert marks.cuda_rows == [{"phase": "forward", "start_bytes": 100, "peak_bytes": 250, "end_bytes": 180},
                               {"phase": "optimizer", "start_bytes": 180, "peak_bytes": 180, "end_bytes": 150}]
    assert calls == ["sync", "reset", "sync", "sync", "reset", "sync"]
    quiet = mp.PhaseMarks(device=torch.device("cuda"), recording=False)
    with quiet.phase("forward"):
        pass
    assert quiet.cuda_rows == [] and len(calls) == 6
