"""tools.measure.timing: the simulated asynchronous device, the real-device clock, and the package's copies
of chapter 73's timing exercises (checked against torch.utils.benchmark)."""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch.utils.benchmark import Timer
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from tools.measure.timing import DeviceClock, SimulatedAsyncDevice, quantile, step_time_report, time_steps


def test_the_simulated_device_runs_work_after_the_launch():
    """A launch costs the host `launch_s`; the work queues behind earlier work; synchronize waits for it."""
    device = SimulatedAsyncDevice([1.0, 0.5], launch_s=0.1)
    device.step()
    assert device.clock() == pytest.approx(0.1) and float(device.busy_until_s) == pytest.approx(1.0)
    device.step()  # queued behind the first step: starts at 1.0, ends at 1.5
    assert device.clock() == pytest.approx(0.2) and float(device.busy_until_s) == pytest.approx(1.5)
    device.synchronize()
    assert device.clock() == pytest.approx(1.5)
    assert (int(device.launched), int(device.syncs), int(device.clock_reads)) == (2, 1, 3)
    assert device.work_of(7) == 0.5 and device.truth(1, 3) == [0.5, 0.5, 0.5]


@pytest.mark.parametrize("work, launch", [([], 0.1), ([0.1, 0.0], 0.1), ([0.1], float("nan")), ([True], 0.1), ("0.1", 0.1)])
def test_the_simulated_device_refuses_bad_times(work, launch):
    with pytest.raises(ValueError):
        SimulatedAsyncDevice(work, launch_s=launch)


def test_time_steps_reads_each_step_and_a_loop_without_sync_reads_the_launch():
    work = [3.0, 2.0, 0.05, 0.07, 0.06]
    assert time_steps(SimulatedAsyncDevice(work, launch_s=0.002), 2, 3) == pytest.approx([0.05, 0.07, 0.06], rel=1e-12)
    unsynchronised = SimulatedAsyncDevice(work, launch_s=0.002)
    for _ in range(2):
        unsynchronised.step()
    readings = []
    for _ in range(3):
        started = unsynchronised.clock()
        unsynchronised.step()
        readings.append(unsynchronised.clock() - started)
    assert readings == pytest.approx([0.002] * 3)


def test_time_steps_refuses_bad_counts_before_touching_the_device():
    for warmup, repeats in ((True, 1), (-1, 1), (0, 0), (0, False), (0, 1.0)):
        device = SimulatedAsyncDevice([0.1])
        with pytest.raises(ValueError):
            time_steps(device, warmup, repeats)
        assert int(device.launched) == int(device.syncs) == int(device.clock_reads) == 0


def test_the_report_matches_torch_benchmark_measurement():
    """Framework check: median and IQR equal torch.utils.benchmark's Measurement (torch.quantile, linear)."""
    rng = random.Random(0)
    for size in range(1, 12):
        durations = [rng.uniform(1e-4, 1.0) for _ in range(size)]
        report = step_time_report(durations, torch.ones((1, 2), dtype=torch.long))
        measured = Measurement(number_per_run=1, raw_times=durations, task_spec=TaskSpec(stmt="pass", setup="pass"))
        assert report["median_s"] == pytest.approx(measured.median, rel=1e-12)
        assert report["iqr_s"] == pytest.approx(measured.iqr, rel=1e-9, abs=1e-15)


def test_the_report_counts_real_tokens_from_the_mask():
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 1, 1]])
    report = step_time_report([0.5, 0.25, 1.0], mask)
    assert report["median_s"] == 0.5 and (report["real_tokens"], report["padded_tokens"]) == (5, 8)
    assert report["padded_tokens_per_s"] / report["real_tokens_per_s"] == pytest.approx(8 / 5)
    assert quantile([1.0, 2.0, 4.0], 0.25) == 1.5


def test_timer_with_a_synchronising_clock_reads_what_time_steps_reads():
    """Timer's default timer synchronises an accelerator before reading the clock; given the simulated device's
    synchronised clock it reads the steady step, and given the plain clock it reads the launch."""
    synced, plain = SimulatedAsyncDevice([0.4, 0.3, 0.02], 0.001), SimulatedAsyncDevice([0.4, 0.3, 0.02], 0.001)

    def synchronised() -> float:
        synced.synchronize()
        return synced.clock()

    assert Timer("device.step()", globals={"device": synced}, timer=synchronised).timeit(5).median == pytest.approx(0.02)
    assert Timer("device.step()", globals={"device": plain}, timer=plain.clock).timeit(5).median == pytest.approx(0.001)
    assert time_steps(SimulatedAsyncDevice([0.4, 0.3, 0.02], 0.001), 2, 5) == pytest.approx([0.02] * 5)


def test_the_device_clock_runs_a_real_step_and_wraps_calls():
    seen = []

    def around(index, run):
        seen.append(index)
        return run() * 10

    clock = DeviceClock(lambda: 1.5, "cpu", around_call=around)
    durations = time_steps(clock, 1, 3)
    assert clock.calls == 4 and seen == [0, 1, 2, 3] and clock.results == [15.0] * 4
    assert len(durations) == 3 and all(math.isfinite(d) and d >= 0 for d in durations)
    assert len(clock.host_seconds) == 4
