"""Chapter 73's page: the setup cell's label check, the framework checks, and what Step 5 prints and draws.

Measuring lives in `tools.measure.timing` / `tools.measure.memory_phases` and the chapter's experiments
(`training_performance`, `training_baseline` in `tools.experiments.memory_strategy`); this module only
checks, reads records and formats them. Sentences built from records come from `lesson_text.toml`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from tools.chapters.lesson_text import text
from tools.core import effects
from tools.errors import RecordExistsError
from tools.experiments.memory_strategy import baseline as tb

MIB = 2**20
CONTROLS = ("no_synchronisation", "one_block_with_warmup", "mean_not_median")


def refuse_used_manifest(run) -> None:
    """Step 5 also writes 76's input manifest of this label: refuse a used one before any work."""
    if not run.writes_records:
        return
    path = tb.manifest_path(run.results_root, run.run_label)
    if path.exists():
        raise RecordExistsError(f"{path} already exists: RUN_LABEL {run.run_label!r} was used before. "
                                "Records are write-once; choose a new RUN_LABEL.")


def sources_line(described: Mapping[str, Mapping[str, Any]]) -> str:
    """Which functions a record's stage ran, and where each came from."""
    return "functions run: " + ", ".join(f"{name} ({entry['source']})" for name, entry in sorted(described.items()))


def mechanism_line(mechanism) -> str:
    """Which of the chapter's functions Step 5 passes (a `Mechanism`): the learner's or the reference."""
    return "Step 5 runs: " + ", ".join(f"{name} ({mechanism.sources[name]})" for name in sorted(mechanism.functions))


def subset(mechanism, names):
    """The part of a `Mechanism` an experiment takes (each experiment declares the names it runs)."""
    from tools.experiments.contract import Mechanism

    kept = [name for name in names if name in mechanism.functions]
    return Mechanism({name: mechanism.functions[name] for name in kept}, {name: mechanism.sources[name] for name in kept})


# ---------------------------------------------------------------------------
# Framework checks (every run mode; CPU only, a few hundred milliseconds)
# ---------------------------------------------------------------------------

def _timer_check(time_steps: Callable) -> dict:
    """The learner's `time_steps` and `torch.utils.benchmark.Timer` on one simulated asynchronous device."""
    from torch.utils.benchmark import Timer

    from tools.measure.timing import SimulatedAsyncDevice

    work, launch, warmup, repeats = [0.5, 0.4, 0.03], 0.001, 2, 5
    ours = time_steps(SimulatedAsyncDevice(work, launch_s=launch), warmup, repeats)
    synced, plain = SimulatedAsyncDevice(work, launch_s=launch), SimulatedAsyncDevice(work, launch_s=launch)

    def synchronised_clock() -> float:  # what Timer's default timer does on an accelerator
        synced.synchronize()
        return synced.clock()

    # Timer.timeit(number) runs max(number // 100, 2) = 2 warm-up calls, then times `number` calls in one block.
    timer = Timer(stmt="device.step()", globals={"device": synced}, timer=synchronised_clock).timeit(number=repeats)
    unsynced = Timer(stmt="device.step()", globals={"device": plain}, timer=plain.clock).timeit(number=repeats)
    ours_median = sorted(ours)[len(ours) // 2] if ours else None
    return {"truth_s": work[-1], "learner_median_s": ours_median, "timer_synchronised_s": timer.median,
            "timer_unsynchronised_s": unsynced.median,
            "agrees": ours_median is not None and abs(ours_median - timer.median) <= 1e-12 * timer.median}


def _measurement_check(step_time_report: Callable) -> dict:
    """The learner's median and IQR against `torch.utils.benchmark`'s `Measurement` of the same raw times."""
    import torch
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    rng = random.Random(73)
    durations = [rng.uniform(0.02, 0.05) for _ in range(7)] + [0.2]
    report = step_time_report(list(durations), torch.ones((2, 4), dtype=torch.long))
    reference = Measurement(number_per_run=1, raw_times=list(durations), task_spec=TaskSpec(stmt="step()", setup="pass"))
    close = all(abs(mine - theirs) <= 1e-12 * abs(theirs) for mine, theirs in
                ((report["median_s"], reference.median), (report["iqr_s"], reference.iqr)))
    return {"median_s": report["median_s"], "measurement_median_s": reference.median, "iqr_s": report["iqr_s"],
            "measurement_iqr_s": reference.iqr, "agrees": close}


def _profiler_check(phase_peaks: Callable) -> dict:
    """The learner's rows against the profiler's own running total, on one small CPU training step."""
    import torch

    from tools.measure.memory_phases import PhaseMarks, profile_step, rows_agree

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(512, 32)  # activations well above the parameters: the forward phase holds the step's peak
    marks = PhaseMarks()

    def step() -> float:
        with marks.phase("forward"):
            loss = model(batch).pow(2).mean()
        with marks.phase("backward"):
            loss.backward()
        with marks.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    _, trace = profile_step(step)
    rows = phase_peaks(list(trace.events), trace.initial_bytes)
    return {"events": len(trace.events), "rows": rows, "profiler_rows": trace.profiler_rows,
            **rows_agree(rows, trace.profiler_rows)}


def framework_checks(functions: Mapping[str, Callable]) -> dict:
    """The three checks against torch (`Timer`, `Measurement`, the profiler's memory events)."""
    import torch

    return {"torch": torch.__version__, "timer": _timer_check(functions["time_steps"]),
            "measurement": _measurement_check(functions["step_time_report"]),
            "profiler": _profiler_check(functions["phase_peaks"])}


def framework_lines(checks: Mapping[str, Any]) -> list[str]:
    timer, measurement, profiler = checks["timer"], checks["measurement"], checks["profiler"]
    return [
        f"torch {checks['torch']}",
        f"time_steps vs torch.utils.benchmark.Timer (simulated device, truth {timer['truth_s']} s/step): yours "
        f"{_ms(timer['learner_median_s'])}, Timer with a synchronising clock {_ms(timer['timer_synchronised_s'])}, "
        f"Timer with a plain clock {_ms(timer['timer_unsynchronised_s'])}; agree: {timer['agrees']}",
        f"step_time_report vs torch.utils.benchmark Measurement: median {_ms(measurement['median_s'])} vs "
        f"{_ms(measurement['measurement_median_s'])}, IQR {_ms(measurement['iqr_s'])} vs "
        f"{_ms(measurement['measurement_iqr_s'])}; agree: {measurement['agrees']}",
        f"phase_peaks vs the profiler's running total ({profiler['events']} events, {profiler['compared']} phases): "
        f"agree: {profiler['agrees']} (largest difference {profiler['max_abs_diff_bytes']} bytes)",
    ]


def _ms(seconds: float | None) -> str:
    return "null" if seconds is None else f"{seconds * 1000:.3f} ms"


# ---------------------------------------------------------------------------
# Step 5: the audit
# ---------------------------------------------------------------------------

def audit_lines(record: Mapping[str, Any]) -> list[str]:
    lines = [sources_line(record["mechanism"]),
             f"{'seed':>4} {'truth median':>13} {'yours':>10} {'your error':>11} {'no sync':>9} "
             f"{'one block':>10} {'mean':>8}"]
    for row in record["seeds"]:
        controls = row["controls"]
        lines.append(f"{row['seed']:>4} {_ms(row['truth_median_s']):>13} {_ms(row['learner']['median_s']):>10} "
                     f"{row['learner']['median_error']:>+11.1%} "
                     f"{controls['no_synchronisation']['median_error']:>+9.1%} "
                     f"{controls['one_block_with_warmup']['median_error']:>+10.1%} "
                     f"{controls['mean_not_median']['median_error']:>+8.1%}")
    failed = sum(not (row["learner"]["reads_every_duration"]) for row in record["seeds"])
    if record["status"] == "reads_the_truth":
        lines.append(text("training_performance.audit_reads_truth", seeds=len(record["seeds"])))
    else:
        lines.append(text("training_performance.audit_misreports", failed=max(failed, 1)))
    for name, effect in (record.get("effects") or {}).items():
        lines.append(text("training_performance.control_effect", control=name, effect=effects.describe(effect)))
    return lines


def plot_audit(record: Mapping[str, Any]):
    """Relative error of the median per seed: yours beside the three one-mistake controls."""
    import matplotlib.pyplot as plt

    seeds = [row["seed"] for row in record["seeds"]]
    series = [("yours", [row["learner"]["median_error"] for row in record["seeds"]])]
    series += [(name, [row["controls"][name]["median_error"] for row in record["seeds"]]) for name in CONTROLS]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / len(series)
    for position, (name, values) in enumerate(series):
        ax.bar([seed + position * width for seed in seeds], [value * 100 for value in values], width, label=name)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xticks([seed + 0.4 - width / 2 for seed in seeds], [f"seed {seed}" for seed in seeds])
    ax.set_ylabel("median error vs truth (%)")
    ax.set_title("Timing audit on simulated asynchronous devices (virtual clock)")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Step 5: the measurement
# ---------------------------------------------------------------------------

def measurement_lines(record: Mapping[str, Any]) -> list[str]:
    lines = [sources_line(record["mechanism"]),
             f"model {record['model_id']} on {record['device']}; warm-up {record['protocol']['warmup']}, "
             f"{record['protocol']['repeats']} timed steps; {record['measurement_note']}",
             f"{'seed':>4} {'median':>10} {'IQR':>9} {'rel IQR':>8} {'real tok/s':>11} {'padded tok/s':>13} "
             f"{'pad share':>9} {'Timer/median':>12} {'profiler check':>15}"]
    for row in record["seeds"]:
        report, phases = row["report"], row["phases"]
        lines.append(f"{row['seed']:>4} {_ms(report['median_s']):>10} {report['iqr_s'] * 1000:>7.2f}ms "
                     f"{report['relative_iqr']:>8.1%} {report['real_tokens_per_s']:>11.0f} "
                     f"{report['padded_tokens_per_s']:>13.0f} {report['pad_share']:>9.1%} "
                     f"{row['framework_timer']['ratio_to_learner_median']:>12.2f} "
                     f"{str(phases['framework_check']['agrees']):>15}")
    first = record["seeds"][0]
    lines.append(f"peak memory per phase of seed {first['seed']}'s first call ({first['phases']['device_type']}; "
                 "MiB since the call began on the CPU):")
    for mine, unreset in zip(first["phases"]["learner_rows"], first["phases"]["without_reset"]):
        lines.append(f"  {mine['phase']:<10} start {mine['start_bytes'] / MIB:8.2f}  peak {mine['peak_bytes'] / MIB:8.2f}"
                     f"  end {mine['end_bytes'] / MIB:8.2f}  never-reset peak {unreset['peak_bytes'] / MIB:8.2f}")
    found = record.get("effects") or {}
    if found.get("padded_tokens_as_real"):
        effect = found["padded_tokens_as_real"]
        lines.append(text("training_performance.pad_effect", mean=effect["mean"], interval=effects.describe(effect)))
    if found.get("peak_never_reset"):
        effect = found["peak_never_reset"]
        lines.append(text("training_performance.peak_effect", ratio=effect["mean"] + 1,
                          interval=effects.describe(effect)))
    agree = all(row["phases"]["framework_check"]["agrees"] for row in record["seeds"])
    largest = max(row["phases"]["framework_check"]["max_abs_diff_bytes"] or 0 for row in record["seeds"])
    lines.append(text("training_performance.profiler_agrees" if agree else "training_performance.profiler_differs",
                      seeds=len(record["seeds"]), diff=largest))
    lines.append(text("training_performance.timing_note", profile=_profile_of(record)))
    return lines


def _profile_of(record: Mapping[str, Any]) -> str:
    numerics = record.get("cpu_numerics") or {}
    return f"{numerics.get('machine', '?')}, torch CPU capability {numerics.get('torch_cpu_capability', '?')}"


def plot_measurement(record: Mapping[str, Any]):
    """Left: every timed step per seed with its median. Right: peak per phase, reset vs never reset."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    for row in record["seeds"]:
        values = [value * 1000 for value in row["durations_s"]]
        left.scatter([row["seed"]] * len(values), values, s=18, alpha=0.7)
        left.hlines(row["report"]["median_s"] * 1000, row["seed"] - 0.25, row["seed"] + 0.25, color="black")
    left.set_xticks([row["seed"] for row in record["seeds"]], [f"seed {row['seed']}" for row in record["seeds"]])
    left.set_ylabel("timed step (ms)")
    left.set_title("Timed steps (dots) and their median (bar)")
    first = record["seeds"][0]["phases"]
    names = [row["phase"] for row in first["learner_rows"]]
    positions = range(len(names))
    right.bar([p - 0.2 for p in positions], [row["peak_bytes"] / MIB for row in first["learner_rows"]], 0.4,
              label="peak, reset at each phase start")
    right.bar([p + 0.2 for p in positions], [row["peak_bytes"] / MIB for row in first["without_reset"]], 0.4,
              label="peak never reset")
    right.set_xticks(list(positions), names)
    right.set_ylabel("MiB")
    right.set_title(f"Peak memory per phase (first call, {first['device_type']})")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_async_timeline():
    """One simulated device, two readings of the same three steps: with and without synchronisation."""
    import matplotlib.pyplot as plt

    launch, work = 0.05, [0.6, 0.3, 0.3]
    fig, ax = plt.subplots(figsize=(11, 2.8))
    host, busy = 0.0, 0.0
    for index, seconds in enumerate(work):
        start = max(host, busy)
        ax.broken_barh([(host, launch)], (1.6, 0.6), color="#4c72b0")
        ax.broken_barh([(start, seconds)], (0.6, 0.6), color="#dd8452" if index else "#c44e52")
        ax.text(start + seconds / 2, 0.9, "warm-up" if index == 0 else f"step {index}", ha="center", va="center",
                fontsize=8, color="white")
        host, busy = host + launch, start + seconds
    ax.axvline(work[0], color="green", linestyle="--")
    ax.axvline(work[0] + work[1], color="green", linestyle="--")
    ax.text(work[0] + work[1] / 2, 2.45, "synchronised reads: one step's work", ha="center", color="green", fontsize=8)
    ax.axvline(launch, color="red", linestyle=":")
    ax.axvline(2 * launch, color="red", linestyle=":")
    ax.text(2 * launch + 0.02, 2.45, "unsynchronised reads: a launch", color="red", fontsize=8)
    ax.set_yticks([0.9, 1.9], ["device", "host"])
    ax.set_xlabel("time (s)")
    ax.set_ylim(0.3, 2.7)
    ax.set_title("An asynchronous device: the host only launches; the work runs later")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Step 5: the baseline handed to 76
# ---------------------------------------------------------------------------

def baseline_lines(record: Mapping[str, Any], manifest_path) -> list[str]:
    measurement = record["measurement"]
    lines = [sources_line(record["mechanism"]),
             f"76's workload: {record['config']['model_id']} ({record['config']['weights']}), batch "
             f"{record['config']['batch_size']} x sequence {record['config']['seq_len']}, {record['config']['optimizer']}, "
             f"warm-up {record['config']['warmup']}, {record['config']['iters']} timed steps; status {record['status']}"]
    if measurement.get("status") == "ok":
        report = measurement["protocol"]["report"]
        lines.append(f"median step {measurement['step_time_ms']:.1f} ms (IQR {report['iqr_s'] * 1000:.1f} ms), "
                     f"{measurement['samples_per_s']:.2f} samples/s, {report['real_tokens_per_s']:.0f} real tokens/s; "
                     f"eval loss {measurement['eval_loss']:.4f}; device peak {measurement['peak_memory_mb']}")
        lines.append(f"parameters {record['model_size']['parameters']:,}; 76 reads this record through "
                     f"{manifest_path.name if manifest_path else 'no manifest (the baseline did not complete)'}")
    return lines
