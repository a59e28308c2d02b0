"""Chapter 73's page helpers: the framework checks against torch (Timer, Measurement, the profiler's memory
events) pass with the package's functions and catch a function with one of the chapter's mistakes."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from tools.chapters import training_performance as page
from tools.experiments.contract import Mechanism
from tools.experiments.memory_strategy.performance import defaults
from tools.measure.memory_phases import peaks_without_reset
from tools.measure.timing import step_time_report


@pytest.fixture(scope="module")
def checks():
    return page.framework_checks(defaults())


def test_the_package_functions_agree_with_torch(checks):
    assert checks["timer"]["agrees"] and checks["measurement"]["agrees"] and checks["profiler"]["agrees"], checks
    assert checks["timer"]["timer_synchronised_s"] == pytest.approx(0.03)
    assert checks["timer"]["timer_unsynchronised_s"] == pytest.approx(0.001), "Timer with a plain clock reads the launch"
    lines = page.framework_lines(checks)
    assert len(lines) == 4 and all("agree: True" in line for line in lines[1:])


def test_each_framework_check_catches_its_mistake():
    def unsynchronised(device, warmup, repeats):
        for _ in range(warmup):
            device.step()
        durations = []
        for _ in range(repeats):
            started = device.clock()
            device.step()
            durations.append(device.clock() - started)
        return durations

    def mean_report(durations_s, attention_mask):
        return {**step_time_report(durations_s, attention_mask), "median_s": sum(durations_s) / len(durations_s)}

    functions = {**defaults(), "time_steps": unsynchronised, "step_time_report": mean_report,
                 "phase_peaks": peaks_without_reset}
    checks = page.framework_checks(functions)
    assert not checks["timer"]["agrees"] and not checks["measurement"]["agrees"] and not checks["profiler"]["agrees"]


def test_subset_keeps_the_sources_of_the_names_an_experiment_takes():
    mechanism = Mechanism({"time_steps": len, "phase_peaks": min}, {"time_steps": "learner", "phase_peaks": "reference"})
    kept = page.subset(mechanism, ("time_steps", "step_time_report"))
    assert kept.functions == {"time_steps": len} and kept.sources == {"time_steps": "learner"}
    assert page.mechanism_line(mechanism) == "Step 5 runs: phase_peaks (reference), time_steps (learner)"


def test_the_timeline_figure_draws():
    figure = page.plot_async_timeline()
    assert figure.axes and figure.axes[0].get_title().startswith("An asynchronous device")
