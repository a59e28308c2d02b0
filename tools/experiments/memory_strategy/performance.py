"""Chapter 73's Step 5: measuring a training step correctly, with the learner's functions.

Two stages, each one write-once record in 73's folder (`<slug>_<stage>_<label>.json`):

    audit        the timing procedure on `SimulatedAsyncDevice`s whose truth is known (one per seed: a
                 launch cost, a steady step, expensive warm-up calls, one slow outlier among the timed
                 calls). The learner's `time_steps` and `step_time_report` must read the truth exactly;
                 three look-alike procedures, each with one mistake (no synchronisation, one timed block
                 that includes the warm-up, the mean instead of the median), are run on the same devices as
                 the negative controls, and their error beside the learner's is a paired effect over seeds
    measurement  a real training step (cpu_smoke: the lab student on the CPU; real_gpu: Qwen2.5-0.5B on
                 CUDA) on a right-padded batch of lab chats of four tasks (different lengths, so padding),
                 one fresh copy of the model per seed: the first call profiled for memory (phases forward,
                 backward, optimizer), then the learner's `time_steps`, `step_time_report` and
                 `phase_peaks`; beside them torch's answers (the profiler's running total per phase,
                 `torch.cuda.max_memory_allocated` per phase on CUDA, `torch.utils.benchmark.Timer`) and two
                 controls on the same observations (padded tokens counted as real, the peak never reset)

The effects asserted by the chapter's tests are ratios of counts (tokens, bytes) or of virtual time, never
a wall time. The functions come through `plan.mechanism` (the notebook passes the learner's), and every
record says which ran. The baseline 76 reads is written by the sibling experiment `training_baseline`.
"""

from __future__ import annotations

import copy
import random
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from tools.core import effects
from tools.core.numerics import cpu_numerics
from tools.errors import ConfigError
from tools.experiments.memory_strategy import baseline as tb

CHAPTER_ID, SLUG = tb.BASELINE_CHAPTER, tb.BASELINE_SLUG
STAGES = ("audit", "measurement")
STAGE_CHOICES = ("all", *STAGES)
SCHEMAS = {"audit": "training-performance-audit/v1", "measurement": "training-performance-measurement/v1"}
DEFAULT_SEEDS = (0, 1, 2)
WARMUP, REPEATS = 2, 5
AUDIT_WARMUP_FACTOR = (5.0, 20.0)
"""How much longer than a steady step each simulated warm-up call is (drawn per call)."""
AUDIT_OUTLIER_FACTOR = 3.0
TASKS = ("add", "add_equation", "sub", "add_plus_one")
ROWS_PER_TASK = {"cpu_smoke": 4, "real_gpu": 8}
MEASUREMENT_MODELS = {"cpu_smoke": "lab", "real_gpu": tb.QWEN}
LEARNING_RATE = 1e-4
PHASES = ("forward", "backward", "optimizer")
EXACT = 1e-12
"""Relative tolerance of "reads the truth exactly" on the virtual clock (float64 sums)."""
MECHANISM = ("time_steps", "step_time_report", "phase_peaks")


def defaults() -> dict[str, Callable]:
    """The package's copies of the chapter's exercises (what runs without a notebook)."""
    from tools.measure.memory_phases import phase_peaks
    from tools.measure.timing import step_time_report, time_steps

    return {"time_steps": time_steps, "step_time_report": step_time_report, "phase_peaks": phase_peaks}


def _functions(plan) -> dict[str, Callable]:
    return {name: plan.mechanism.function(name, default) for name, default in defaults().items()}


# ---------------------------------------------------------------------------
# The audit: a simulated asynchronous device with a known truth
# ---------------------------------------------------------------------------

def audit_profile(seed: int) -> dict:
    """The simulated device of one seed: launch cost, per-call work (warm-up calls, timed calls with a
    small jitter and one outlier). Seconds on a virtual clock."""
    rng = random.Random(1000 + seed)
    steady = rng.uniform(0.02, 0.08)
    warmup = [steady * rng.uniform(*AUDIT_WARMUP_FACTOR) for _ in range(WARMUP)]
    timed = [steady * (1 + rng.uniform(-0.05, 0.05)) for _ in range(REPEATS)]
    timed[rng.randrange(REPEATS)] *= AUDIT_OUTLIER_FACTOR
    return {"seed": seed, "launch_s": steady * rng.uniform(0.01, 0.05), "steady_s": steady, "work_s": warmup + timed}


def audit_device(profile: Mapping[str, Any]):
    from tools.measure.timing import SimulatedAsyncDevice

    return SimulatedAsyncDevice(profile["work_s"], launch_s=profile["launch_s"])


def unsynchronised_steps(device, warmup: int, repeats: int) -> list[float]:
    """Control: the disciplined loop without any synchronisation (the clock reads the launch only)."""
    for _ in range(warmup):
        device.step()
    durations = []
    for _ in range(repeats):
        started = device.clock()
        device.step()
        durations.append(device.clock() - started)
    return durations


def one_block_with_warmup(device, warmup: int, repeats: int) -> float:
    """Control: synchronised, but every call, warm-up included, in one timed block; returns the mean."""
    device.synchronize()
    started = device.clock()
    for _ in range(warmup + repeats):
        device.step()
    device.synchronize()
    return (device.clock() - started) / (warmup + repeats)


def _relative(value: float, truth: float) -> float:
    return value / truth - 1.0


def audit_seed(seed: int, functions: Mapping[str, Callable]) -> dict:
    """One simulated device: the learner's reading beside the truth and the three controls."""
    import torch

    profile = audit_profile(seed)
    device = audit_device(profile)
    truth = device.truth(WARMUP, REPEATS)
    truth_median = statistics.median(truth)
    durations = functions["time_steps"](device, WARMUP, REPEATS)
    mask = torch.ones((1, 8), dtype=torch.long)  # the audit's step has no padding; only its time matters here
    report = functions["step_time_report"](list(durations), mask)
    recovered = len(durations) == len(truth) and all(abs(d - t) <= EXACT * t for d, t in zip(durations, truth))
    no_sync = statistics.median(unsynchronised_steps(audit_device(profile), WARMUP, REPEATS))
    block = one_block_with_warmup(audit_device(profile), WARMUP, REPEATS)
    mean = statistics.fmean(truth)
    return {
        "seed": seed, "profile": profile, "truth_durations_s": truth, "truth_median_s": truth_median,
        "learner": {"durations_s": list(durations), "median_s": report["median_s"], "iqr_s": report["iqr_s"],
                    "reads_every_duration": recovered,
                    "median_error": _relative(report["median_s"], truth_median),
                    "device_calls": {"launched": int(device.launched), "syncs": int(device.syncs),
                                     "clock_reads": int(device.clock_reads)}},
        "controls": {
            "no_synchronisation": {"median_s": no_sync, "median_error": _relative(no_sync, truth_median)},
            "one_block_with_warmup": {"mean_s": block, "median_error": _relative(block, truth_median)},
            "mean_not_median": {"mean_s": mean, "median_error": _relative(mean, truth_median)},
        },
    }


def audit_effects(seeds: list[dict]) -> dict:
    """Per control, |control error| - |learner error| over the seeds (a paired effect)."""
    learner = {row["seed"]: abs(row["learner"]["median_error"]) for row in seeds}
    return {name: effects.paired_effect({row["seed"]: abs(row["controls"][name]["median_error"]) for row in seeds},
                                        learner, metric=f"abs_median_error:{name}-learner")
            for name in ("no_synchronisation", "one_block_with_warmup", "mean_not_median")}


def run_audit(plan, functions: Mapping[str, Callable], seeds: tuple[int, ...]) -> dict:
    rows = [audit_seed(seed, functions) for seed in seeds]
    disciplined = all(row["learner"]["reads_every_duration"] and abs(row["learner"]["median_error"]) <= EXACT
                      for row in rows)
    return {
        "status": "reads_the_truth" if disciplined else "misreports",
        "protocol": {"warmup": WARMUP, "repeats": REPEATS, "clock": "virtual (SimulatedAsyncDevice)"},
        "seeds": rows,
        "effects": audit_effects(rows) if len(rows) >= 2 else None,
    }


# ---------------------------------------------------------------------------
# The measurement: a real training step
# ---------------------------------------------------------------------------

def lab_batch(tokenizer, seed: int, rows_per_task: int) -> dict:
    """A right-padded batch of lab chats: `rows_per_task` training problems of each of TASKS (seeded)."""
    from tools.data import lab_tasks
    from tools.models.lab import training_batch
    from tools.models.lab_chat import chat_ids

    problems = [problem for task in TASKS for problem in lab_tasks.sample_problems(task, "train", rows_per_task, seed)]
    return training_batch([chat_ids(tokenizer, problem.messages(), problem.target) for problem in problems],
                          tokenizer.pad_token_id)


def load_measurement_model(run_mode: str, model_source: str):
    """`(model on CPU in float32, lab tokenizer, identity)`: the lab student (cpu_smoke) or Qwen2.5-0.5B
    (real_gpu). The batch is always made of lab chats with the lab tokenizer; its ids are valid ids of
    both vocabularies, and a step's cost depends on the batch's shape and padding, not on the words."""
    from tools.models.lab import lab_identity, recipe_for, lab_model_folder
    from tools.models.loading import load_lab_model, model_identity, resolve_model

    lab_model, tokenizer = load_lab_model("lab")
    if run_mode == "cpu_smoke":
        return lab_model, tokenizer, lab_identity(lab_model_folder(recipe_for("lab")))
    import torch

    from tools.models.loading import load_causal_lm

    path = resolve_model(tb.QWEN, source=model_source)
    model, _ = load_causal_lm(path, dtype=torch.float32, device="cpu")
    return model, tokenizer, model_identity(path)


def _timer_seconds_per_step(step: Callable[[], Any], number: int) -> float:
    """torch.utils.benchmark.Timer's reading of the same step (its own warm-up; it synchronises an accelerator)."""
    from torch.utils.benchmark import Timer

    return Timer(stmt="step()", globals={"step": step}).timeit(number=number).median


def measure_seed(seed: int, base_model, tokenizer, plan, functions: Mapping[str, Callable]) -> dict:
    """One fresh copy of the model, one padded batch: profile call 0, then the learner's functions."""
    import torch

    from tools.models.lab import reply_loss
    from tools.measure.memory_phases import PhaseMarks, peaks_without_reset, profile_step, rows_agree
    from tools.measure.timing import DeviceClock

    device = torch.device(plan.device)
    torch.manual_seed(seed)
    batch = {key: value.to(device) for key, value in lab_batch(tokenizer, seed, ROWS_PER_TASK[plan.run_mode]).items()}
    model = copy.deepcopy(base_model).to(device).train()
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    marks = PhaseMarks(device=device)

    def train_step() -> float:
        with marks.phase("forward"):
            loss = reply_loss(model, batch)
        with marks.phase("backward"):
            loss.backward()
        with marks.phase("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    traces = {}

    def around(index: int, run: Callable[[], Any]) -> Any:
        if index == 0:  # a warm-up call: profiling it costs the timed calls nothing
            marks.recording = True
            result, traces["first_call"] = profile_step(run, device)
            marks.recording = False
            return result
        if index == WARMUP and device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        return run()

    runner = DeviceClock(train_step, device, around_call=around)
    durations = functions["time_steps"](runner, WARMUP, REPEATS)
    timed_peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    report = functions["step_time_report"](list(durations), batch["attention_mask"].detach().cpu())
    trace = traces.get("first_call")
    if trace is None:
        raise ConfigError("the first call of the step was never made: time_steps must call device.step()")
    rows = functions["phase_peaks"](list(trace.events), trace.initial_bytes)
    unreset = peaks_without_reset(list(trace.events), trace.initial_bytes)
    timer_s = _timer_seconds_per_step(train_step, REPEATS)
    result = {
        "seed": seed, "status": "ok",
        "batch": {"rows": int(batch["attention_mask"].shape[0]), "width": int(batch["attention_mask"].shape[1]),
                  "tasks": list(TASKS)},
        "calls": runner.calls, "host_seconds_per_call": runner.host_seconds,
        "durations_s": list(durations), "report": report,
        "phases": {"device_type": trace.device_type, "learner_rows": rows, "without_reset": unreset,
                   **trace.public(),
                   "framework_check": rows_agree(rows, trace.profiler_rows),
                   "cuda_allocator_rows": marks.cuda_rows or None,
                   "cuda_check": rows_agree(rows, marks.cuda_rows) if marks.cuda_rows else None},
        "timed_peak_allocated_mb": timed_peak,
        "framework_timer": {"api": "torch.utils.benchmark.Timer.timeit", "number": REPEATS,
                            "seconds_per_step": timer_s,
                            "ratio_to_learner_median": timer_s / report["median_s"] if report["median_s"] else None},
        "losses": runner.results,
    }
    optimizer = model = batch = None
    from tools.measure.training import free_device_memory

    free_device_memory(torch)
    return result


def _optimizer_row(rows: list[dict]) -> dict | None:
    return next((row for row in rows if row["phase"] == "optimizer"), None)


def measurement_effects(seeds: list[dict]) -> dict:
    """Paired over seeds: padded-token throughput / real-token throughput, and the optimizer phase's peak
    without reset / with reset (both 1.0 when nothing is overstated)."""
    ones = {row["seed"]: 1.0 for row in seeds}
    padded = {row["seed"]: row["report"]["padded_tokens_per_s"] / row["report"]["real_tokens_per_s"] for row in seeds}
    peaks = {}
    for row in seeds:
        mine, unreset = _optimizer_row(row["phases"]["learner_rows"]), _optimizer_row(row["phases"]["without_reset"])
        if mine is None or unreset is None or not mine["peak_bytes"]:
            return {"padded_tokens_as_real": effects.paired_effect(padded, ones, metric="padded/real tokens_per_s"),
                    "peak_never_reset": None}
        peaks[row["seed"]] = unreset["peak_bytes"] / mine["peak_bytes"]
    return {"padded_tokens_as_real": effects.paired_effect(padded, ones, metric="padded/real tokens_per_s"),
            "peak_never_reset": effects.paired_effect(peaks, ones, metric="optimizer peak without/with reset")}


def run_measurement(plan, functions: Mapping[str, Callable], seeds: tuple[int, ...], log=None) -> dict:
    import torch

    model, tokenizer, identity = load_measurement_model(plan.run_mode, plan.model_source)
    threads = torch.get_num_threads()
    if plan.run_mode == "cpu_smoke":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        rows = []
        for seed in seeds:
            rows.append(measure_seed(seed, model, tokenizer, plan, functions))
            if log is not None:
                report = rows[-1]["report"]
                log(f"  seed {seed}: median {report['median_s'] * 1000:.1f} ms, IQR {report['iqr_s'] * 1000:.1f} ms, "
                    f"{report['real_tokens_per_s']:.0f} real tokens/s ({report['real_tokens']}/{report['padded_tokens']})")
    finally:
        torch.set_num_threads(threads)
    return {
        "status": "ok",
        "model": identity, "model_id": MEASUREMENT_MODELS[plan.run_mode], "device": plan.device,
        "protocol": {"warmup": WARMUP, "repeats": REPEATS, "profiled_call": 0, "phases": list(PHASES),
                     "learning_rate": LEARNING_RATE, "optimizer": "AdamW",
                     "torch_threads": (plan.limits.cpu_threads or 1) if plan.run_mode == "cpu_smoke" else None},
        "seeds": rows,
        "effects": measurement_effects(rows) if len(rows) >= 2 else None,
        "measurement_note": ("cpu_smoke: CPU wall times of the lab student and the CPU allocator's bytes; "
                             "not a GPU measurement" if plan.run_mode == "cpu_smoke" else "real_gpu measurement"),
    }


# ---------------------------------------------------------------------------
# The experiment contract's runner
# ---------------------------------------------------------------------------

def stages_of(stage: str | None) -> tuple[str, ...]:
    stage = stage or "all"
    if stage not in STAGE_CHOICES:
        raise ConfigError(f"unknown stage {stage!r} of chapter 73; choose one of {', '.join(STAGE_CHOICES)}.")
    return STAGES if stage == "all" else (stage,)


def check_plan(plan) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Refuse what chapter 73 cannot run, before any work; returns (stages, seeds)."""
    stages = stages_of(plan.stage)
    seeds = plan.seeds or DEFAULT_SEEDS
    if len(seeds) < 2:
        raise ConfigError(f"chapter 73 reports paired effects over seeds: give at least two seeds, got {list(seeds)}")
    if plan.writes:
        expected = MEASUREMENT_MODELS[plan.run_mode]
        default = "tiny" if plan.run_mode == "cpu_smoke" else tb.QWEN
        if plan.model not in (expected, default):
            raise ConfigError(f"chapter 73 measures {expected} in {plan.run_mode}, not {plan.model}.")
    if plan.run_mode == "real_gpu" and "measurement" in stages:
        require_gpu_and_model(plan.model_source)
    return stages, tuple(seeds)


def require_gpu_and_model(model_source: str) -> None:
    """real_gpu's preflight, before any record: a CUDA device, and Qwen2.5-0.5B in the cache (or random_init)."""
    import torch

    from tools.errors import ModelCacheMissingError
    from tools.models.cache import model_cache_check

    if not torch.cuda.is_available():
        raise ConfigError(f"real_gpu needs a CUDA device; torch {torch.__version__} sees none. "
                          "Use RUN_MODE = 'cpu_smoke' on this machine.")
    check = model_cache_check(tb.QWEN, source=model_source)
    if not check["ok"]:
        raise ModelCacheMissingError(f"{check['detail']}; fix: {check['fix']}")


def run(plan, sink, *, log=None) -> dict:
    """Write the audit and measurement records (dry_run: describe them)."""
    stages, seeds = check_plan(plan)
    if not plan.writes:
        if log is not None:
            log(f"73 stages {list(stages)} (dry_run): audit {len(seeds)} simulated devices (warm-up {WARMUP}, "
                f"{REPEATS} timed steps), then measure {MEASUREMENT_MODELS['real_gpu']} on {plan.device} with a "
                "padded lab batch per seed; nothing is loaded or written")
        return {}
    sink.require_new(stages)
    functions = _functions(plan)
    described = plan.mechanism.describe(defaults())
    written = {}
    for stage in stages:
        body = run_audit(plan, functions, seeds) if stage == "audit" else run_measurement(plan, functions, seeds, log)
        body = {"config": {"seeds": list(seeds), "warmup": WARMUP, "repeats": REPEATS, "run_mode": plan.run_mode},
                "mechanism": described, "cpu_numerics": cpu_numerics(), **body}
        path, digest = sink.save_record(stage, body, schema_version=SCHEMAS[stage])
        written[stage] = path
        if log is not None:
            log(f"wrote {path.name} (sha256 {digest[:12]}..., status {body['status']})")
    return written
