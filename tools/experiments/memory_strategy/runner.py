"""Run one strategy on the fixed training workload and return one run record.

A run trains a fresh copy of the model (`model_factory()`) under `memory_strategy`, times it with
`tools.measure.training.measure_training_run`, evaluates a held-out batch, verifies the observed
path and sets the measured saved bytes beside the analytic estimate. `compare_strategy_gradients`
is the CPU autograd check: one step per strategy, equal loss and gradients, different paths.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn

from tools.experiments.memory_strategy.estimate import compare_with_estimate, estimate_activation_bytes
from tools.experiments.memory_strategy.evidence import observed_evidence, verify_execution_path
from tools.experiments.memory_strategy.hooks import memory_strategy
from tools.experiments.memory_strategy.strategies import STRATEGIES, validate_strategy
from tools.errors import ConfigError
from tools.measure.training import free_device_memory, measure_training_run

OPTIMIZERS = ("adamw", "sgd")
OPTIMIZER_NAMES = {"adamw": "AdamW", "sgd": "SGD"}
DEFAULT_LEARNING_RATES = {"adamw": 1e-5, "sgd": 1e-4}


@dataclass(frozen=True)
class TrainingWorkload:
    """The fixed training task every candidate runs (batch, length, warm-up, timed steps, seed, optimizer)."""

    batch_size: int
    seq_len: int
    warmup: int
    iters: int
    seed: int = 42
    optimizer: str = "adamw"
    learning_rate: float | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"workload {name} must be a positive integer, got {value!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ConfigError(f"workload warmup must be an integer >= 0, got {self.warmup!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"workload optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.dtype != "float32":
            raise ConfigError(f"only float32 training is supported here, got dtype {self.dtype!r}")

    @property
    def lr(self) -> float:
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LEARNING_RATES[self.optimizer]

    @property
    def workload_id(self) -> str:
        return f"train-b{self.batch_size}-s{self.seq_len}-{self.optimizer}"

    def as_config(self) -> dict:
        """Record form of the workload (the optimizer spelled as the records spell it)."""
        return {
            "batch_size": self.batch_size, "seq_len": self.seq_len, "warmup": self.warmup,
            "iters": self.iters, "seed": self.seed, "optimizer": OPTIMIZER_NAMES[self.optimizer],
            "optimizer_momentum": 0.0 if self.optimizer == "sgd" else None,
            "learning_rate": self.lr, "dtype": self.dtype,
        }


def make_token_batches(vocab_size: int, workload: TrainingWorkload) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic train and eval token ids (a CPU generator seeded by seed + seq_len)."""
    generator = torch.Generator(device="cpu").manual_seed(workload.seed + workload.seq_len)
    shape = (workload.batch_size, workload.seq_len)
    return (torch.randint(0, vocab_size, shape, generator=generator),
            torch.randint(0, vocab_size, shape, generator=generator))


def _make_optimizer(model: nn.Module, workload: TrainingWorkload) -> torch.optim.Optimizer:
    if workload.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=workload.lr)
    return torch.optim.SGD(model.parameters(), lr=workload.lr, momentum=0.0)


class CachedModel:
    """Load a model once (on the CPU) and hand out independent deep copies, one per run."""

    def __init__(self, loader: Callable[[], tuple[nn.Module, dict]]):
        self._loader = loader
        self._model: nn.Module | None = None
        self.identity: dict | None = None

    def __call__(self) -> nn.Module:
        if self._model is None:
            self._model, self.identity = self._loader()
        return copy.deepcopy(self._model)

    def parameter_count(self) -> int:
        """The model's number of parameters (loads it on first use)."""
        if self._model is None:
            self._model, self.identity = self._loader()
        return sum(param.numel() for param in self._model.parameters())


def course_model(model_id: str, source: str) -> CachedModel:
    """The course's model `model_id` (tiny, or Qwen2.5-0.5B from the cache or with random weights), loaded lazily."""
    def load() -> tuple[nn.Module, dict]:
        from tools.models.loading import load_causal_lm, model_identity, resolve_model

        path = resolve_model(model_id, source=source)
        model, _ = load_causal_lm(path, dtype=torch.float32, device="cpu")
        return model, model_identity(path)

    return CachedModel(load)


def run_memory_strategy(model_factory: Callable[[], nn.Module], strategy: str, workload: TrainingWorkload, *,
                        device: str | torch.device = "cpu", pin_memory: bool = False,
                        measure: Callable[..., dict] | None = None) -> dict:
    """Train a fresh model under `strategy` on `workload`; return one run record.

    The record holds the measurement (step time, samples/s, last loss, CUDA peaks allocated and
    reserved or None), the eval loss on a held-out batch, the saved-tensor evidence of the timed
    steps and its verification, and the estimate with the measured/estimated ratio. `measure` times
    the steps (default `measure_training_run`; chapter 73's baseline passes its own protocol, same
    keyword arguments and result keys). An OOM (device or host) is not caught here: wrap the call with
    `run_with_oom_guard` (or `run_repeated`).
    """
    validate_strategy(strategy)
    device = torch.device(device)
    torch.manual_seed(workload.seed)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(workload.seed)
    model = model_factory()
    model.config.use_cache = False
    model.to(device).train()
    optimizer = _make_optimizer(model, workload)
    train_cpu, eval_cpu = make_token_batches(model.config.vocab_size, workload)
    input_ids, eval_ids = train_cpu.to(device), eval_cpu.to(device)
    try:
        with memory_strategy(model, strategy, pin_memory=pin_memory) as observer:
            def train_step() -> float:
                optimizer.zero_grad(set_to_none=True)
                with observer.forward():
                    loss = model(input_ids=input_ids, labels=input_ids).loss
                with observer.backward():
                    loss.backward()
                optimizer.step()
                return float(loss.detach().item())

            measurement = (measure or measure_training_run)(train_step, torch_module=torch, device=device,
                                                            batch_size=workload.batch_size, warmup=workload.warmup,
                                                            iters=workload.iters)
            evidence = observed_evidence(observer)
        model.eval()
        with torch.no_grad():
            eval_loss = float(model(input_ids=eval_ids, labels=eval_ids).loss.item())
        estimate = estimate_activation_bytes(model.config, batch_size=workload.batch_size,
                                             seq_len=workload.seq_len, strategy=strategy)
    finally:
        optimizer = model = input_ids = eval_ids = None  # drop the references before freeing device memory
        free_device_memory(torch)
    verification = verify_execution_path(evidence, strategy)
    steps = evidence.pop("steps")
    evidence["first_step"] = steps[0] if steps else None
    return {
        "name": strategy,
        "strategy": strategy,
        "seq_len": workload.seq_len,
        "batch_size": workload.batch_size,
        "optimizer": OPTIMIZER_NAMES[workload.optimizer],
        **measurement,
        "eval_loss": eval_loss if math.isfinite(eval_loss) else None,
        "execution_path_verified": verification["execution_path_verified"],
        "execution_path": verification,
        "saved_tensors": evidence,
        "activation_estimate": compare_with_estimate(evidence, estimate),
    }


def compare_strategy_gradients(model_factory: Callable[[], nn.Module], input_ids: torch.Tensor, *,
                               strategies: Sequence[str] = STRATEGIES, atol: float = 1e-6,
                               rtol: float = 1e-5) -> dict:
    """One forward/backward per strategy on identical fresh models; loss and gradients against baseline.

    Returns per strategy: loss, loss_equal, grads_equal, max_abs_grad_diff, the observed evidence and
    its verification: equal numbers, different saved-tensor paths.
    """
    if "baseline" not in strategies:
        raise ConfigError("compare_strategy_gradients needs 'baseline' among the strategies to compare against.")
    results: dict[str, dict] = {}
    reference: tuple[torch.Tensor, list[torch.Tensor]] | None = None
    for strategy in ["baseline", *[name for name in strategies if name != "baseline"]]:
        model = model_factory()
        model.config.use_cache = False
        model.train()
        with memory_strategy(model, strategy) as observer:
            with observer.forward():
                loss = model(input_ids=input_ids, labels=input_ids).loss
            with observer.backward():
                loss.backward()
            evidence = observed_evidence(observer)
        grads = [param.grad.detach().clone() for param in model.parameters() if param.grad is not None]
        if reference is None:
            reference = (loss.detach(), grads)
        ref_loss, ref_grads = reference
        diffs = [float((grad - ref).abs().max()) for grad, ref in zip(grads, ref_grads)]
        results[strategy] = {
            "loss": float(loss.detach()),
            "loss_equal": bool(torch.allclose(loss.detach(), ref_loss, atol=atol, rtol=rtol)),
            "grads_equal": len(grads) == len(ref_grads) and all(
                torch.allclose(grad, ref, atol=atol, rtol=rtol) for grad, ref in zip(grads, ref_grads)),
            "max_abs_grad_diff": max(diffs) if diffs else None,
            "evidence": evidence,
            "verification": verify_execution_path(evidence, strategy),
        }
    return results
