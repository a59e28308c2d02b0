"""What defines one run of the shared experiment, its validation, and the limits its checks judge.

The two groups differ only in FREE_CACHE_ENGINE; `group_settings` is what the pairing check compares.
Every limit below is judged in `checks` and stored in the record with the config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tools.core.runs import require_finite, validate_choice, validate_run_label
from tools.data.arithmetic import DEFAULT_TASK_SEED
from tools.errors import ConfigError
from tools.experiments.verl_closure.protocol import FREE_CACHE_ENGINE, GROUPS
from tools.measure.sampler import DEFAULT_INTERVAL_S

BACKENDS = ("verl", "torch")
DEVICES = ("cpu", "cuda")
MODEL_SOURCES = ("local", "random_init")
ATTN_IMPLEMENTATIONS = ("flash_attention_2", "sdpa", "eager")
VERL_VERSION = "0.9.1"
DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
TINY = "tiny"

SAME_VERSION_MEAN_ABS_LIMIT = 0.05
"""Largest mean |log pi_trainer - log pi_engine| (nats) over a comparison's action tokens.

verl's actor scores under bf16 autocast (`logprobs_from_logits` on bf16 logits when remove-padding
is off), so each trainer log-prob is rounded to bf16's 8 significant bits: one step is 2**-4 =
0.0625 nats for |log p| in [8, 16) (every token of a random-weight model over 151,936 ids sits near
-11.9) and 2**-6 below 4. Rounding to the nearest step averages about a quarter of a step (≈ 0.016
nats at |log p| ≈ 12), and vLLM's float32 log-probs from its own bf16 kernels add a similar amount.
A defect is systematic instead: a vocabulary mismatch shifts every token by ln(V_model / V_tokenizer)
(≈ 5.7 nats for 512 tokens against 151,936), a missed weight sync by the update's own drift. 0.05
leaves room for the rounding and flags any systematic shift of that size."""

SAME_VERSION_P99_ABS_LIMIT = 0.25
"""Largest 99th percentile (nearest rank) of the per-token |error| of a comparison.

Four bf16 steps at |log p| in [8, 16). Near-tie tokens, whose logits round differently in the two
kernels, make the maximum a poor statistic over thousands of tokens sampled at temperature 1 (the
maximum is still recorded, never judged); a p99 above four steps means more than one token in a
hundred disagrees by more than rounding explains."""

UPDATED_LORA_RELATIVE_TOLERANCE = 0.2
"""Largest ||u_release - u_retain||_F / max(||u_release||_F, ||u_retain||_F) over all LoRA tensors
(u = updated - initial weights).

The groups run in separate processes, and the memory-efficient attention backward on a GPU
accumulates with atomics, so the two gradients are not bit-identical. AdamW's first step moves each
element by lr * g / (|g| + eps), about ±lr whatever the gradient's size, so run-to-run noise changes
an element's update only where its gradient is close enough to zero to flip sign; a share s of
flipped elements gives a relative difference of about 2 * sqrt(s). 0.2 tolerates s = 1 %. A
different batch, adapter or optimizer flips about half the elements (relative difference near 1.4).
On CPU both groups' updates are bit-identical (recorded as such)."""

MEMORY_SETTLE_MARGIN_MB = 1024.0
"""How far above the pre-group baseline device memory may stay before the next group starts: a CUDA
context the parent process keeps (torch backend, about 0.5 GiB) plus allocator slack. A rollout
engine left behind (0.3 of an H200 is 42 GiB) is far above it."""

MEMORY_SETTLE_TIMEOUT_S = 120.0
"""How long to wait for device memory to settle before the next group starts anyway (and says so)."""


@dataclass(frozen=True)
class ClosureConfig:
    """Everything that defines one run. Groups differ only in FREE_CACHE_ENGINE."""

    run_label: str
    output: Path
    backend: str = "verl"
    model: str = DEFAULT_MODEL
    model_source: str = "local"
    device: str = "cuda"
    verl_root: Path | None = None
    model_cache: Path | None = None
    task_seed: int = DEFAULT_TASK_SEED
    samples_per_task: int = 4
    temperature: float = 1.0
    sampling_seed: int = 42
    response_token_cap: int = 128
    prompt_token_cap: int = 256
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lora_init_seed: int = 0
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    same_version_mean_abs_limit: float = SAME_VERSION_MEAN_ABS_LIMIT
    same_version_p99_abs_limit: float = SAME_VERSION_P99_ABS_LIMIT
    updated_lora_relative_tolerance: float = UPDATED_LORA_RELATIVE_TOLERANCE
    behaviour_drift_threshold: float = 0.2
    sample_interval_s: float = DEFAULT_INTERVAL_S
    memory_settle_margin_mb: float = MEMORY_SETTLE_MARGIN_MB
    memory_settle_timeout_s: float = MEMORY_SETTLE_TIMEOUT_S
    score_micro_batch: int = 8
    gpu_memory_utilization: float = 0.3
    attn_implementation: str = "sdpa"
    """Actor attention in verl: "sdpa" works with the pinned PT-VERL-CUDA profile (no flash-attn);
    "flash_attention_2" is verl's own default and needs flash-attn."""
    rollout_enforce_eager: bool = True
    """vLLM without torch.compile and CUDA-graph capture: each group starts a fresh engine, and verl
    turns vLLM's compile cache off, so compiling would be paid twice per run for a handful of requests."""
    actor_torch_compile: bool = False
    """verl's FSDP actor compiles its entropy/log-prob helpers by default; off for the same reason."""
    progress: bool = False
    """Show model-loading progress bars (off: library code is silent unless asked)."""
    lora_init_seed_overrides: Mapping[str, int] = field(default_factory=dict)
    """Test hook: a different adapter seed for a group makes a deliberately failed pairing."""

    @property
    def run_mode(self) -> str:
        """real_gpu only for a real model on CUDA; everything else is a cpu_smoke code-path proof."""
        return "real_gpu" if self.device == "cuda" and self.model != TINY else "cpu_smoke"

    def lora_seed(self, group: str) -> int:
        return int(self.lora_init_seed_overrides.get(group, self.lora_init_seed))

    def log_path(self, group: str) -> Path:
        return Path(self.output).parent / f"{self.run_label}_{group}.log"

    @classmethod
    def from_public(cls, data: Mapping[str, Any]) -> "ClosureConfig":
        """Rebuild a config from `public()` (e.g. in a verl group process)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {key: value for key, value in data.items() if key in names}
        kwargs["output"] = Path(kwargs["output"])
        for key in ("verl_root", "model_cache"):
            kwargs[key] = None if kwargs.get(key) is None else Path(kwargs[key])
        kwargs["lora_target_modules"] = tuple(kwargs.get("lora_target_modules", ()))
        return cls(**kwargs)

    def public(self) -> dict:
        """The config as plain JSON values (machine paths included: for a group process, not a record)."""
        data = dataclasses.asdict(self)
        data["output"] = str(self.output)
        data["verl_root"] = None if self.verl_root is None else str(self.verl_root)
        data["model_cache"] = None if self.model_cache is None else str(self.model_cache)
        data["lora_target_modules"] = list(self.lora_target_modules)
        data["lora_init_seed_overrides"] = dict(self.lora_init_seed_overrides)
        data["run_mode"] = self.run_mode
        return data

    def record_view(self) -> dict:
        """The config as stored in the record: folders by name only, never machine paths."""
        data = self.public()
        data["output"] = Path(self.output).name
        data["verl_root"] = None if self.verl_root is None else Path(self.verl_root).name
        data["model_cache"] = None if self.model_cache is None else Path(self.model_cache).name
        return data


def validate_config(config: ClosureConfig) -> ClosureConfig:
    """Raise ConfigError on any invalid field; nothing is done before this passes."""
    validate_run_label(config.run_label)
    validate_choice("backend", config.backend, BACKENDS)
    validate_choice("device", config.device, DEVICES)
    validate_choice("model source", config.model_source, MODEL_SOURCES)
    validate_choice("attn_implementation", config.attn_implementation, ATTN_IMPLEMENTATIONS)
    if config.backend == "verl" and config.device != "cuda":
        raise ConfigError("the verl backend needs --device cuda (vLLM and FSDP run on a GPU); use --backend torch on CPU.")
    if Path(config.output).suffix != ".json":
        raise ConfigError(f"--output must name a .json file, got {config.output}")
    for name in ("samples_per_task", "response_token_cap", "prompt_token_cap", "lora_rank", "lora_alpha",
                 "score_micro_batch"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    for name in ("temperature", "learning_rate", "same_version_mean_abs_limit", "same_version_p99_abs_limit",
                 "updated_lora_relative_tolerance", "behaviour_drift_threshold", "sample_interval_s",
                 "memory_settle_margin_mb", "memory_settle_timeout_s", "gpu_memory_utilization", "grad_clip"):
        require_finite(name, getattr(config, name), positive=True)
    require_finite("weight_decay", config.weight_decay, minimum=0.0)
    if config.gpu_memory_utilization >= 1:
        raise ConfigError("gpu_memory_utilization must be below 1")
    for name in ("rollout_enforce_eager", "actor_torch_compile", "progress"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(f"{name} must be True or False, got {getattr(config, name)!r}")
    unknown = set(config.lora_init_seed_overrides) - set(GROUPS)
    if unknown:
        raise ConfigError(f"lora_init_seed_overrides names unknown groups {sorted(unknown)}")
    return config


def group_settings(config: ClosureConfig, group: str) -> dict:
    """The effective settings of one group; the pairing check compares these across groups."""
    if group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose one of {', '.join(GROUPS)}")
    settings = {key: value for key, value in config.public().items()
                if key not in ("output", "run_label", "lora_init_seed_overrides", "progress")}
    settings["lora_init_seed"] = config.lora_seed(group)
    settings["free_cache_engine"] = FREE_CACHE_ENGINE[group]
    return settings
