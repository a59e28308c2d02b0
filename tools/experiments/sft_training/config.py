"""What one SFT stage run is: the shared settings (`StageConfig`) and each compared variant (`AdapterSpec`).

Everything is checked before any model is loaded; an invalid value is a ConfigError naming it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.core.runs import validate_choice, validate_run_label, validate_run_mode
from tools.errors import ConfigError

METHODS = ("lora", "rslora", "dora")
DTYPES = ("float32", "bfloat16")
BASE_QUANTISATIONS = (None, "nf4")
MODEL_SOURCES = ("local", "random_init")
DEVICES = ("cpu", "cuda")
LR_SCHEDULES = ("constant", "linear_decay")
BATCHINGS = ("padded", "packed", "packed_unisolated")
"""`packed_unisolated`: packed rows without the block mask (chapter 30's negative control)."""
QWEN2_LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _finite(name: str, value, *, low: float | None = None, high: float | None = None, open_low: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (value < low or (open_low and value == low)):
        raise ConfigError(f"{name} must be {'>' if open_low else '>='} {low}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"{name} must be <= {high}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class AdapterSpec:
    """One compared variant: which adapter, where, how large, on which base precision, and (when a
    chapter compares them) its sequence length and how its batches are built."""

    name: str
    method: str = "lora"
    rank: int = 8
    alpha: float = 16.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    dropout: float = 0.0
    compute_dtype: str = "float32"
    base_quantisation: str | None = None
    max_length: int | None = None
    batching: str = "padded"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.replace("_", "").isalnum():
            raise ConfigError(f"variant name must be letters, digits and '_', got {self.name!r}")
        validate_choice("method", self.method, METHODS)
        _positive_int("rank", self.rank)
        _finite("alpha", self.alpha, low=0, open_low=True)
        _finite("dropout", self.dropout, low=0, high=0.9)
        validate_choice("compute_dtype", self.compute_dtype, DTYPES)
        validate_choice("base_quantisation", self.base_quantisation, BASE_QUANTISATIONS)
        validate_choice("batching", self.batching, BATCHINGS)
        if self.max_length is not None:
            _positive_int("max_length", self.max_length, 16)
        if not self.target_modules or any(module not in QWEN2_LINEAR_MODULES for module in self.target_modules):
            raise ConfigError(f"target_modules must be a non-empty subset of {QWEN2_LINEAR_MODULES}, "
                              f"got {self.target_modules!r}")

    @property
    def scaling(self) -> float:
        """The adapter update's multiplier: alpha / r (LoRA, DoRA) or alpha / sqrt(r) (rsLoRA)."""
        return self.alpha / math.sqrt(self.rank) if self.method == "rslora" else self.alpha / self.rank

    def public(self) -> dict:
        data = asdict(self)
        data["target_modules"] = list(self.target_modules)
        data["scaling"] = self.scaling
        return data


@dataclass(frozen=True)
class StageConfig:
    """Settings shared by every variant of one chapter's stage."""

    chapter: str
    run_mode: str
    run_label: str
    results_root: Path
    model_id: str = "tiny"
    model_source: str = "local"
    device: str = "cpu"
    steps: int = 6
    learning_rate: float = 2e-3
    lr_schedule: str = "constant"
    batch_size: int = 4
    grad_accumulation: int = 1
    max_length: int = 96
    seed: int = 1234
    train_task_seeds: tuple[int, ...] = (101, 102, 103, 104)
    eval_task_seed: int = 909
    tasks_per_operation: int = 2
    lab_task: str | None = None
    lab_train_problems: int = 64
    lab_eval_problems: int = 64
    sample_interval_s: float = 0.25
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_run_mode(self.run_mode)
        if self.run_mode == "dry_run":
            raise ConfigError("the SFT stage trains a model: use cpu_smoke or real_gpu (dry_run only runs the preflight)")
        validate_run_label(self.run_label)
        validate_choice("model_source", self.model_source, MODEL_SOURCES)
        validate_choice("device", self.device, DEVICES)
        validate_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        if self.lab_task is not None:
            from tools.data.lab_tasks import task

            task(self.lab_task)  # ConfigError naming the known tasks
        for name in ("steps", "batch_size", "grad_accumulation", "tasks_per_operation", "lab_train_problems",
                     "lab_eval_problems"):
            _positive_int(name, getattr(self, name))
        _positive_int("max_length", self.max_length, 16)
        _finite("learning_rate", self.learning_rate, low=0, open_low=True)
        _finite("sample_interval_s", self.sample_interval_s, low=0, open_low=True)
        if not self.train_task_seeds or self.eval_task_seed in self.train_task_seeds:
            raise ConfigError("the evaluation seed must differ from every training seed (held-apart split)")

    def public(self) -> dict:
        data = asdict(self)
        data["results_root"] = None  # a machine path; records are found relative to it
        data["train_task_seeds"] = list(self.train_task_seeds)
        return data
