"""Chapter 73's Step 5 through the experiment contract: the audit on simulated devices, the real training step,
the baseline handed to 76, each measured with the functions the plan passes (the learner's in the notebook).

The effects asserted here are ratios of counts or of virtual time (never a wall time), so they hold under
any arithmetic and any load; `make test-effects-generic` runs the `effect` tests again under the generic
numerics profile with lab models pretrained under it."""

from __future__ import annotations

import json
import statistics

import pytest

from tools.core import effects
from tools.errors import ConfigError
from tools.experiments.contract import Mechanism, Plan, RecordSink, run
from tools.measure.memory_phases import peaks_without_reset
from tools.measure.timing import step_time_report, time_steps

LABEL = "pytest_performance_73"
SLUG = "73-training-performance"


def _plan(folder, **changes) -> Plan:
    return Plan(**{"experiment": "training_performance", "chapter": "73", "run_mode": "cpu_smoke", "label": LABEL,
                   "results_dir": folder, **changes})


def _learner(**functions) -> Mechanism:
    return Mechanism(functions, {name: "learner" for name in functions})


@pytest.fixture(scope="module")
def performance(tmp_path_factory):
    folder = tmp_path_factory.mktemp("perf73") / "results"
    refs = run(_plan(folder))
    return folder, {ref.stage: ref.load() for ref in refs}


# --- planted learner mistakes (plausible ones: the chapter's mutants) ---

def time_steps_without_sync(device, warmup, repeats):
    for _ in range(warmup):
        device.step()
    durations = []
    for _ in range(repeats):
        started = device.clock()
        device.step()
        durations.append(device.clock() - started)
    return durations


def report_counting_padding(durations_s, attention_mask):
    report = step_time_report(durations_s, attention_mask)
    padded = report["padded_tokens"]
    return {**report, "real_tokens": padded, "pad_share": 0.0, "real_tokens_per_s": padded / report["median_s"]}


def peaks_never_reset(events, initial_bytes=0):
    return peaks_without_reset(events, initial_bytes)


def test_the_two_records_say_which_functions_ran(performance):
    folder, records = performance
    assert sorted(path.name for path in (folder / SLUG).iterdir()) == [f"{SLUG}_audit_{LABEL}.json",
                                                                      f"{SLUG}_measurement_{LABEL}.json"]
    for stage, record in records.items():
        assert record["schema_version"] == f"training-performance-{stage}/v1" and record["evidence_level"] == "cpu_smoke"
        assert {name: entry["source"] for name, entry in record["mechanism"].items()} == {
            "time_steps": "package", "step_time_report": "package", "phase_peaks": "package"}
        assert record["cpu_numerics"]["machine"]


def test_the_audit_reads_the_truth_and_every_control_misreports(performance):
    audit = performance[1]["audit"]
    assert audit["status"] == "reads_the_truth" and [row["seed"] for row in audit["seeds"]] == [0, 1, 2]
    for row in audit["seeds"]:
        assert row["learner"]["durations_s"] == pytest.approx(row["truth_durations_s"], rel=1e-12)
        assert row["learner"]["device_calls"] == {"launched": 7, "syncs": 10, "clock_reads": 10}
        controls = row["controls"]
        assert controls["no_synchronisation"]["median_error"] < -0.9  # the launch, not the step
        assert controls["one_block_with_warmup"]["median_error"] > 1.0  # the warm-up's cost spread over the block
        assert controls["mean_not_median"]["median_error"] > 0.3  # the 3x outlier


def test_the_measurement_checks_itself_against_torch(performance):
    measurement = performance[1]["measurement"]
    assert measurement["model_id"] == "lab" and measurement["model"]["weights_sha256"]
    for row in measurement["seeds"]:
        report, phases = row["report"], row["phases"]
        assert report["repeats"] == 5 and row["calls"] == 7 and len(row["durations_s"]) == 5
        assert report["median_s"] == pytest.approx(statistics.median(row["durations_s"]), rel=1e-12)
        assert 0 < report["real_tokens"] < report["padded_tokens"] == row["batch"]["rows"] * row["batch"]["width"]
        assert phases["framework_check"] == {"agrees": True, "max_abs_diff_bytes": 0, "compared": 3}
        assert [r["phase"] for r in phases["learner_rows"]] == ["forward", "backward", "optimizer"]
        assert phases["cuda_allocator_rows"] is None and row["timed_peak_allocated_mb"] is None  # CPU: not measured
        assert row["framework_timer"]["api"] == "torch.utils.benchmark.Timer.timeit"
        assert row["framework_timer"]["seconds_per_step"] > 0


@pytest.mark.effect
def test_every_timing_mistake_misreports_on_the_simulated_devices(performance):
    """Paired over 3 seeds (virtual clock): |control error| - |learner error|. Margins: the smallest effect the
    page states (by construction: launch <= 5% of a step, warm-up 5-20 steps, one 3x outlier in 5)."""
    found = performance[1]["audit"]["effects"]
    assert effects.holds(found["no_synchronisation"], 0.9), effects.describe(found["no_synchronisation"])
    assert effects.holds(found["one_block_with_warmup"], 1.0), effects.describe(found["one_block_with_warmup"])
    assert effects.holds(found["mean_not_median"], 0.3), effects.describe(found["mean_not_median"])


@pytest.mark.effect
def test_padding_and_an_unreset_peak_overstate_on_the_real_step(performance):
    """Paired over 3 seeds on the lab student: padded/real tokens per second (a ratio of counts), and the
    optimizer phase's peak without / with the reset (bytes the CPU allocator reported)."""
    found = performance[1]["measurement"]["effects"]
    assert effects.holds(found["padded_tokens_as_real"], 0.15), effects.describe(found["padded_tokens_as_real"])
    assert effects.holds(found["peak_never_reset"], 3.0), effects.describe(found["peak_never_reset"])


def test_a_learners_time_steps_without_sync_changes_the_audit(tmp_path):
    records = run(_plan(tmp_path, stage="audit", mechanism=_learner(time_steps=time_steps_without_sync)))
    audit = records[0].load()
    assert audit["status"] == "misreports" and audit["mechanism"]["time_steps"]["source"] == "learner"
    assert all(row["learner"]["median_error"] < -0.9 for row in audit["seeds"])
    assert all(row["learner"]["device_calls"]["syncs"] == 0 for row in audit["seeds"])


@pytest.mark.slow  # loads a model and trains it a few steps
def test_a_learners_report_that_counts_padding_removes_the_throughput_gap(tmp_path):
    records = run(_plan(tmp_path, stage="measurement", seeds=(0, 1),
                        mechanism=_learner(step_time_report=report_counting_padding)))
    measurement = records[0].load()
    gap = measurement["effects"]["padded_tokens_as_real"]
    assert gap["mean"] == 0.0 and not effects.holds(gap, 0.0)
    assert measurement["mechanism"]["step_time_report"]["source"] == "learner"


@pytest.mark.slow  # loads a model and trains it a few steps
def test_a_learners_phase_peaks_without_reset_removes_the_peak_gap(tmp_path):
    records = run(_plan(tmp_path, stage="measurement", seeds=(0, 1), mechanism=_learner(phase_peaks=peaks_never_reset)))
    measurement = records[0].load()
    assert measurement["effects"]["peak_never_reset"]["mean"] == 0.0
    assert not any(row["phases"]["framework_check"]["agrees"] for row in measurement["seeds"])


@pytest.mark.parametrize("changes, error", [
    ({"seeds": (3,)}, "at least two seeds"),
    ({"stage": "memory"}, "unknown stage"),
    ({"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "measures lab in cpu_smoke"),
    ({"mechanism": _learner(estimate=len)}, "takes the mechanism functions"),
])
def test_plans_73_cannot_run_are_refused_before_any_work(tmp_path, changes, error):
    with pytest.raises(ConfigError, match=error):
        run(_plan(tmp_path, **changes))
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_real_gpu_without_a_device_is_refused_before_any_record(tmp_path):
    """The real_gpu path on a machine without CUDA: a clear error, nothing written."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        run(_plan(tmp_path, run_mode="real_gpu", model_source="random_init"))
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_dry_run_describes_the_real_gpu_plan_and_writes_nothing(tmp_path):
    lines = []
    assert run(_plan(tmp_path, run_mode="dry_run", label="anything"), log=lines.append) == []
    assert "Qwen/Qwen2.5-0.5B-Instruct on cuda" in lines[0] and "nothing is loaded or written" in lines[0]
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


@pytest.mark.slow  # loads a model and trains it a few steps
def test_the_baseline_for_76_is_timed_with_the_plans_functions(tmp_path):
    """The baseline's step time is the median of the durations the passed time_steps measured; a planted
    report that doubles the median shows up in the record (and the record says it was the learner's)."""
    def doubled(durations_s, attention_mask):
        report = step_time_report(durations_s, attention_mask)
        return {**report, "median_s": 2 * report["median_s"], "samples_per_s": report["samples_per_s"] / 2}

    plan = Plan(experiment="training_baseline", chapter="73", run_mode="cpu_smoke", label="pytest_baseline_mech",
                results_dir=tmp_path, mechanism=Mechanism({"time_steps": time_steps, "step_time_report": doubled},
                                                          {"time_steps": "learner", "step_time_report": "learner"}))
    sink = RecordSink(run_mode="cpu_smoke", run_label="pytest_baseline_mech", results_root=tmp_path, chapter_id="73",
                      slug=SLUG)
    baseline = run(plan, sink)[0].load()
    measurement = baseline["measurement"]
    durations = measurement["protocol"]["durations_s"]
    assert len(durations) == 5 and measurement["protocol"]["calls"] == 7
    assert measurement["step_time_ms"] == pytest.approx(2000 * statistics.median(durations))
    assert baseline["mechanism"]["step_time_report"]["source"] == "learner"
    assert baseline["model_size"] == {"parameters": baseline["model_size"]["parameters"], "static_bytes_per_parameter": 16,
                                      "static_bytes_rule": baseline["model_size"]["static_bytes_rule"]}
    assert baseline["config"]["torch_threads"] == 1 and json.dumps(baseline)
