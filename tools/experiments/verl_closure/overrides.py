"""verl 0.9.1's Hydra overrides for one group, and composing them with verl's shipped YAML.

The two groups' lists are identical except `actor_rollout_ref.rollout.free_cache_engine`; the
override check (tests/experiments/verl_closure/test_verl_config_overrides.py) composes them with the installed verl's
`ppo_trainer` config, so a key verl does not have fails there, not on a GPU.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any, Sequence

from tools.errors import ConfigError
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.protocol import FREE_CACHE_ENGINE, GROUPS

_HYDRA_SAFE = re.compile(r"^[A-Za-z0-9_./:\-+~]+$")

FREE_CACHE_KEY = "actor_rollout_ref.rollout.free_cache_engine"


def hydra_value(value: Any) -> str:
    """One value as Hydra's override grammar reads it (quoted when it has other characters)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value)
    if _HYDRA_SAFE.match(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def verl_group_overrides(group: str, model_path: str | os.PathLike, *, lora_adapter_path: str | os.PathLike | None = None,
                         run_label: str = "verl_mechanism_closure", response_token_cap: int = 128,
                         prompt_token_cap: int = 256, lora_rank: int = 16, lora_alpha: int = 32,
                         lora_target_modules: Sequence[str] = ("q_proj", "v_proj"), learning_rate: float = 1e-3,
                         weight_decay: float = 0.0, grad_clip: float = 1.0, micro_batch: int = 8,
                         sampling_seed: int = 42, temperature: float = 1.0, gpu_memory_utilization: float = 0.3,
                         attn_implementation: str | None = None, enforce_eager: bool = True,
                         actor_torch_compile: bool = False) -> list[str]:
    """Hydra overrides of verl 0.9.1's `ppo_trainer` config for one group ("release" or "retain").

    One GPU: trainer.n_gpus_per_node=1, trainer.nnodes=1, rollout TP 1; rollout mode async (the
    only mode 0.9.1 accepts); `enable_sleep_mode` is a RolloutConfig field that the yaml does not
    list, hence the `+`. LoRA rank 16 on q/v, loaded from one shared initial adapter so both groups
    start from the same weights. Engine log-probs are requested (calculate_log_probs) for the
    behaviour and same-version checks. `enforce_eager` runs vLLM without torch.compile and CUDA
    graphs, and `actor_torch_compile=False` turns off the FSDP actor's compiled helpers (both the
    actor config's and its engine config's switch).
    """
    if group not in GROUPS:
        raise ConfigError(f"unknown group {group!r}; choose one of {', '.join(GROUPS)}")
    overrides = {
        "trainer.n_gpus_per_node": 1,
        "trainer.nnodes": 1,
        "trainer.device": "cuda",
        "trainer.project_name": "verl_mechanism_closure",
        "trainer.experiment_name": run_label,
        "trainer.logger": ["console"],
        "trainer.total_training_steps": 1,
        "data.max_prompt_length": prompt_token_cap,
        "data.max_response_length": response_token_cap,
        "actor_rollout_ref.model.path": str(model_path),
        "actor_rollout_ref.model.lora_rank": lora_rank,
        "actor_rollout_ref.model.lora_alpha": lora_alpha,
        "actor_rollout_ref.model.target_modules": list(lora_target_modules),
        "actor_rollout_ref.model.lora_adapter_path": None if lora_adapter_path is None else str(lora_adapter_path),
        "actor_rollout_ref.actor.optim.lr": learning_rate,
        "actor_rollout_ref.actor.optim.weight_decay": weight_decay,
        "actor_rollout_ref.actor.optim.total_training_steps": 1,
        "actor_rollout_ref.actor.grad_clip": grad_clip,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.ppo_mini_batch_size": micro_batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": micro_batch,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.actor.use_torch_compile": actor_torch_compile,
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile": actor_torch_compile,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.gpu_memory_utilization": gpu_memory_utilization,
        "actor_rollout_ref.rollout.max_model_len": prompt_token_cap + response_token_cap,
        "actor_rollout_ref.rollout.temperature": temperature,
        "actor_rollout_ref.rollout.top_p": 1.0,
        "actor_rollout_ref.rollout.top_k": -1,
        "actor_rollout_ref.rollout.seed": sampling_seed,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": micro_batch,
        "actor_rollout_ref.rollout.enforce_eager": enforce_eager,
        FREE_CACHE_KEY: FREE_CACHE_ENGINE[group],
        "+actor_rollout_ref.rollout.enable_sleep_mode": True,
        "algorithm.use_kl_in_reward": False,
    }
    if attn_implementation is not None:
        overrides["+actor_rollout_ref.model.override_config.attn_implementation"] = attn_implementation
        if attn_implementation != "flash_attention_2":
            # packed (remove-padding) batches need flash-attention's varlen kernels
            overrides["actor_rollout_ref.model.use_remove_padding"] = False
    return [f"{key}={hydra_value(value)}" for key, value in overrides.items()]


def overrides_for_config(config: ClosureConfig, group: str, model_path: str | os.PathLike,
                         lora_adapter_path: str | os.PathLike | None) -> list[str]:
    """`verl_group_overrides` with the run's settings."""
    return verl_group_overrides(
        group, model_path, lora_adapter_path=lora_adapter_path, run_label=config.run_label,
        response_token_cap=config.response_token_cap, prompt_token_cap=config.prompt_token_cap,
        lora_rank=config.lora_rank, lora_alpha=config.lora_alpha, lora_target_modules=config.lora_target_modules,
        learning_rate=config.learning_rate, weight_decay=config.weight_decay, grad_clip=config.grad_clip,
        micro_batch=config.score_micro_batch, sampling_seed=config.sampling_seed, temperature=config.temperature,
        gpu_memory_utilization=config.gpu_memory_utilization, attn_implementation=config.attn_implementation,
        enforce_eager=config.rollout_enforce_eager, actor_torch_compile=config.actor_torch_compile)


def override_differences(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """The keys whose values differ between two override lists."""
    a = dict(item.split("=", 1) for item in first)
    b = dict(item.split("=", 1) for item in second)
    return sorted(key for key in set(a) | set(b) if a.get(key) != b.get(key))


def verl_config_dir(verl_root: str | os.PathLike | None = None) -> Path:
    """verl's `trainer/config` folder: from a verl checkout at `verl_root`, else the installed package.

    Finds the package without importing it (importing verl pulls in ray and torch).
    """
    if verl_root is not None:
        candidate = Path(verl_root).expanduser() / "verl" / "trainer" / "config"
        if candidate.is_dir():
            return candidate
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise ConfigError("verl is not installed and no verl checkout was given (--verl-root); "
                          "install environment/verl-config-check.txt or the PT-VERL-CUDA profile.")
    return Path(spec.origin).parent / "trainer" / "config"


def compose_verl_config(overrides: Sequence[str], verl_root: str | os.PathLike | None = None,
                        config_name: str = "ppo_trainer"):
    """Compose verl's shipped Hydra config with `overrides` (hydra compose API); returns a DictConfig."""
    # hydra-core is optional: only the verl backend and the override check need it.
    from hydra import compose, initialize_config_dir

    config_dir = verl_config_dir(verl_root)
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))
