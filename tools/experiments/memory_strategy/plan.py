"""Chapter 76's plan: the stage parameters checked before any work, and where the records go.

    StagePlan      everything the stages need (model, device, workloads, ladder, strategies, budget,
                   the time the run may take), derived from RUN_MODE, RUN_STAGE and MODEL_SOURCE
    plan_stages    checks the parameters (a used label refused for a fresh run) and derives the plan
    StageRecords   the command line's record sink (the notebook passes its ChapterContext instead)

The stages themselves run in `stages`; this module loads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.core.paths import results_root_for
from tools.core.runs import validate_run_label, validate_run_mode
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.contract import RecordSink
from tools.experiments.memory_strategy import baseline as tb
from tools.experiments.memory_strategy import judge
from tools.experiments.memory_strategy.runner import TrainingWorkload
from tools.experiments.memory_strategy.strategies import STRATEGIES

SEMANTIC_ID = "PERF-MEMORY-STRATEGY"
RUN_SCHEMA = "training-performance-project/v1"
DECISION_SCHEMA = "memory-strategy-decision/v1"
STAGE_ORDER = ("prepare", "g0", "g1", "close")
STAGE_CHOICES = ("auto", "all", *STAGE_ORDER)
RECORD_STAGES = ("g0", "g1", "close")
MODEL_SOURCES = ("local", "random_init")
REPEATS = 3
QUALITY_TOLERANCE = 1.02
BUDGET = {"memory_cap_mb": 11200.0, "min_samples_per_s": 1.0, "min_memory_saving_mb": 512.0,
          "min_throughput_ratio": 0.70, "cuda_context_margin_mb": judge.DEFAULT_CUDA_CONTEXT_MARGIN_MB,
          "min_boundary_lengths": 2}
MODE_SETTINGS = {
    "real_gpu": {"model_id": tb.QWEN, "device": "cuda", "ladder": (1024, 1280, 1536, 1792), "torch_threads": None},
    "cpu_smoke": {"model_id": tb.TINY, "device": "cpu", "ladder": (96,), "torch_threads": 1},
}
G1_SCHEDULE = {"optimizer": "sgd", "warmup": 1, "iters": 3}
TIME_MARGIN_S = 30.0
"""Of a run's time limit, what G1 keeps back for the interpreter's start-up, loading and writing the record."""

# ---------------------------------------------------------------------------
# Where records go
# ---------------------------------------------------------------------------

class StageRecords(RecordSink):
    """Chapter 76's record sink for the command line (`tools.experiments.contract.RecordSink`); the
    notebook passes its ChapterContext, which names and writes records the same way."""

    def __init__(self, run_mode: str, run_label: str, results_root: Path | None, slug: str = tb.CHAPTER_SLUG,
                 chapter_id: str = tb.CHAPTER_ID):
        super().__init__(run_mode=run_mode, run_label=run_label, results_root=results_root, chapter_id=chapter_id,
                         slug=slug)


def stage_records(run_mode: str, label: str, results_dir: str | Path | None = None) -> StageRecords:
    """The record sink of a command-line run (label checked outside dry_run)."""
    run_mode = validate_run_mode(run_mode)
    if run_mode == "dry_run":
        return StageRecords(run_mode, label, None)
    return StageRecords(run_mode, validate_run_label(label), results_root_for(run_mode, results_dir))


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class StagePlan:
    """Everything the stages need, derived from the run parameters before any work."""

    records: Any
    requested_stage: str
    stages: tuple[str, ...]
    model_source: str
    model_id: str
    device: str
    ladder: tuple[int, ...]
    torch_threads: int | None
    g0_workload: TrainingWorkload
    strategies: tuple[str, ...] = STRATEGIES
    repeats: int = REPEATS
    budget: Mapping[str, Any] = field(default_factory=lambda: dict(BUDGET))
    pin_memory: bool = False
    deadline: float | None = None
    """`time.monotonic()` by which the run must be done (None: no limit): G1 starts no longer length
    projected to end after it (see judge.admit_by_time)."""

    @property
    def run_mode(self) -> str:
        return self.records.run_mode

    @property
    def label(self) -> str:
        return self.records.run_label

    @property
    def results_root(self) -> Path | None:
        return self.records.results_root

    @property
    def writes(self) -> bool:
        return self.run_mode != "dry_run"

    def path(self, name: str) -> Path | None:
        """Record path of `baseline_73`, `manifest`, `g0`, `g1` or `close` (None in dry_run)."""
        if not self.writes:
            return None
        if name == "baseline_73":
            return tb.baseline_path(self.results_root, self.label)
        if name == "manifest":
            return tb.manifest_path(self.results_root, self.label)
        return self.records.record_path(name)

    def files(self) -> dict[str, Path | None]:
        return {name: self.path(name) for name in ("baseline_73", "manifest", *RECORD_STAGES)}

    def g1_workload(self, seq_len: int) -> TrainingWorkload:
        """The ladder workload at one length: momentum-free SGD, G0's batch, seed and dtype."""
        return TrainingWorkload(batch_size=self.g0_workload.batch_size, seq_len=seq_len,
                                warmup=G1_SCHEDULE["warmup"], iters=G1_SCHEDULE["iters"], seed=self.g0_workload.seed,
                                optimizer=G1_SCHEDULE["optimizer"])

    def g0_identity(self) -> dict:
        """What a G0 record of this label must carry to be reused (compared key by key)."""
        return {"model_id": self.model_id, "model_source": self.model_source, "device": self.device,
                "strategies": list(self.strategies), "repeats": self.repeats, **self.g0_workload.as_config()}

    def g1_identity(self) -> dict:
        return {"model_id": self.model_id, "model_source": self.model_source, "device": self.device,
                "strategies": list(self.strategies), "repeats": self.repeats,
                "seq_lens": [self.g0_workload.seq_len, *self.ladder],
                **self.g1_workload(self.g0_workload.seq_len).as_config(), "seq_len": None}

    def expected_workload(self) -> dict:
        return tb.expected_workload(self.run_mode, self.model_id, self.model_source)

    def baseline_command(self) -> str:
        command = f"python -m tools.experiments.memory_strategy.baseline --run-mode {self.run_mode} --label {self.label}"
        if self.results_root is not None:
            command += f" --results-dir {self.results_root}"
        if self.model_source == "random_init":
            command += " --model-source random_init"
        return command

    def describe(self) -> str:
        mode = "real_gpu (the plan dry_run shows)" if not self.writes else self.run_mode
        lines = [f"76 stages {list(self.stages)} (RUN_STAGE = {self.requested_stage!r}) for {mode}, "
                 f"label {self.label!r}",
                 f"  model {self.model_id} ({self.model_source}) on {self.device}; strategies {list(self.strategies)}",
                 f"  G0: {self.g0_workload.as_config()} x {self.repeats} repeats",
                 f"  G1: SGD momentum 0, warm-up {G1_SCHEDULE['warmup']}, {G1_SCHEDULE['iters']} timed steps, lengths "
                 f"{[self.g0_workload.seq_len, *self.ladder]}, reserved-peak admission before each longer length",
                 f"  budget {dict(self.budget)}; memory cap rule: {judge.MEMORY_CAP_RULE}; quality floor = "
                 f"baseline eval loss x {QUALITY_TOLERANCE}"]
        if self.writes:
            lines += [f"  {name:<12} {path}" for name, path in self.files().items()]
        else:
            lines.append("  dry_run: nothing is read or written and no model is loaded")
        return "\n".join(lines)


def resolve_stages(run_mode: str, stage: str) -> tuple[str, ...]:
    """The stages a RUN_STAGE value runs: auto is prepare in dry_run, all in cpu_smoke, refused in real_gpu."""
    if stage not in STAGE_CHOICES:
        raise ConfigError(f"unknown RUN_STAGE {stage!r}; choose one of {', '.join(STAGE_CHOICES)}.")
    if stage == "auto":
        if run_mode == "real_gpu":
            raise ConfigError("real_gpu runs the stages one at a time: set RUN_STAGE to prepare, g0, g1 or close "
                              "(or all), keeping the same RUN_LABEL for every stage.")
        stage = "prepare" if run_mode == "dry_run" else "all"
    return STAGE_ORDER if stage == "all" else (stage,)


def plan_stages(records: Any, *, stage: str = "auto", model_source: str = "local") -> StagePlan:
    """Check the stage parameters before any work and derive the plan.

    `records`: the notebook's ChapterContext or a `StageRecords`. In dry_run the plan is the
    real_gpu experiment's, for reading. `stage = "auto"` is a fresh run: a label that already named
    one of 76's own records (G0, G1, the decision) is refused (RecordExistsError). Chapter 73's
    baseline and the input manifest of the same label are 76's input: in a chain run 73 writes them
    first, under the label 76 then runs with.
    """
    run_mode = validate_run_mode(records.run_mode)
    stages = resolve_stages(run_mode, stage)
    if model_source not in MODEL_SOURCES:
        raise ConfigError(f"unknown MODEL_SOURCE {model_source!r}; choose one of {', '.join(MODEL_SOURCES)}.")
    settings = MODE_SETTINGS["real_gpu" if run_mode == "dry_run" else run_mode]
    plan = StagePlan(
        records=records, requested_stage=stage, stages=stages,
        model_source=model_source if settings["model_id"] != tb.TINY else "local",  # tiny is always built offline
        model_id=settings["model_id"], device=settings["device"], ladder=tuple(settings["ladder"]),
        torch_threads=settings["torch_threads"],
        g0_workload=tb.WORKLOADS["real_gpu" if run_mode == "dry_run" else run_mode])
    if stage == "auto" and plan.writes:
        used = [plan.path(name) for name in RECORD_STAGES if plan.path(name).exists()]
        if used:
            raise RecordExistsError(
                f"RUN_LABEL {plan.label!r} was used before ({', '.join(path.name for path in used)} exist). "
                "RUN_STAGE = 'auto' starts a fresh run: choose a new RUN_LABEL, or name a stage explicitly to "
                "continue the staged run of this label.")
    return plan
