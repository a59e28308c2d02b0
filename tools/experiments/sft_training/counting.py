"""How many parameters a LoRA-family adapter trains on a Qwen2-shaped model, counted from its config.

A LoRA adapter on a linear layer with `in_features` inputs and `out_features` outputs trains
A (rank x in) and B (out x rank): `rank * (in + out)` numbers; DoRA adds one magnitude per output
(`out` numbers); rsLoRA only changes the scaling. Qwen2 uses grouped-query attention, so k_proj
and v_proj are narrower than q_proj: their outputs are `num_key_value_heads * head_dim`.

Chapters 14 (target modules) and 31 (variants and parameter budgets) teach these counts; the SFT
stage records them beside peft's own count of the same model.
"""

from __future__ import annotations

from typing import Mapping

from tools.errors import ConfigError
from tools.experiments.sft_training.config import METHODS, QWEN2_LINEAR_MODULES

CONFIG_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers")


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def config_values(config) -> dict[str, int]:
    """The Qwen2 shape numbers of a config (a mapping, or an object such as transformers' Qwen2Config)."""
    if not isinstance(config, Mapping):
        config = config.to_dict() if hasattr(config, "to_dict") else vars(config)
    missing = [key for key in CONFIG_KEYS if key not in config]
    if missing:
        raise ConfigError(f"config lacks {missing}")
    values = {key: _count(key, config[key]) for key in CONFIG_KEYS}
    head_dim = config.get("head_dim")
    if head_dim is None:
        if values["hidden_size"] % values["num_attention_heads"]:
            raise ConfigError("hidden_size must be a multiple of num_attention_heads when head_dim is not given")
        head_dim = values["hidden_size"] // values["num_attention_heads"]
    values["head_dim"] = _count("head_dim", head_dim)
    if values["num_attention_heads"] % values["num_key_value_heads"]:
        raise ConfigError("num_attention_heads must be a multiple of num_key_value_heads (grouped-query attention)")
    return values


def linear_shapes(config) -> dict[str, tuple[int, int]]:
    """`{module: (in_features, out_features)}` of the seven linear layers of one decoder layer."""
    v = config_values(config)
    hidden, q_width, kv_width = v["hidden_size"], v["num_attention_heads"] * v["head_dim"], \
        v["num_key_value_heads"] * v["head_dim"]
    return {"q_proj": (hidden, q_width), "k_proj": (hidden, kv_width), "v_proj": (hidden, kv_width),
            "o_proj": (q_width, hidden), "gate_proj": (hidden, v["intermediate_size"]),
            "up_proj": (hidden, v["intermediate_size"]), "down_proj": (v["intermediate_size"], hidden)}


def _targets(target_modules) -> tuple[str, ...]:
    targets = tuple(target_modules) if isinstance(target_modules, (list, tuple)) else ()
    if not targets or len(set(targets)) != len(targets) or any(t not in QWEN2_LINEAR_MODULES for t in targets):
        raise ConfigError(f"target_modules must be distinct names from {QWEN2_LINEAR_MODULES}, got {target_modules!r}")
    return tuple(module for module in QWEN2_LINEAR_MODULES if module in targets)


def module_parameters(shape: tuple[int, int], rank: int, method: str) -> int:
    """Trainable numbers of one adapted linear layer: rank * (in + out), plus out for DoRA's magnitude."""
    fan_in, fan_out = shape
    return rank * (fan_in + fan_out) + (fan_out if method == "dora" else 0)


def lora_parameter_count(config, target_modules, rank: int, method: str = "lora") -> dict:
    """Trainable adapter parameters of `method` at `rank` on `target_modules` of every decoder layer.

    Returns `{"per_layer": {module: count} in Qwen2 module order, "per_layer_total": int,
    "layers": int, "total": int}`; ConfigError on an invalid config, target list, rank or method."""
    shapes = linear_shapes(config)
    layers = config_values(config)["num_hidden_layers"]
    _count("rank", rank)
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    per_layer = {module: module_parameters(shapes[module], rank, method) for module in _targets(target_modules)}
    per_layer_total = sum(per_layer.values())
    return {"per_layer": per_layer, "per_layer_total": per_layer_total, "layers": layers,
            "total": per_layer_total * layers}


def lora_trainable_count(config, target_modules, rank: int) -> dict:
    """Chapter 14's contract, the package's copy: a LoRA adapter's trainable count,
    `{"per_layer", "per_layer_total", "total"}` (what the stage runs without a notebook)."""
    counted = lora_parameter_count(config, target_modules, rank, "lora")
    return {key: counted[key] for key in ("per_layer", "per_layer_total", "total")}


def largest_rank_within_budget(budget: int, shapes, method: str = "lora") -> dict:
    """The largest rank whose adapter on `shapes` (a list of (in, out), one per adapted layer) trains
    at most `budget` numbers. Returns `{"rank", "parameters", "unused"}`; ConfigError when even rank 1
    does not fit or an input is invalid."""
    _count("budget", budget)
    if method not in METHODS:
        raise ConfigError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(shapes, (list, tuple)) or not shapes:
        raise ConfigError("shapes must be a non-empty list of (in_features, out_features)")
    pairs = []
    for shape in shapes:
        if not isinstance(shape, (list, tuple)) or len(shape) != 2:
            raise ConfigError(f"each shape must be (in_features, out_features), got {shape!r}")
        pairs.append((_count("in_features", shape[0]), _count("out_features", shape[1])))
    per_rank = sum(fan_in + fan_out for fan_in, fan_out in pairs)
    fixed = sum(fan_out for _, fan_out in pairs) if method == "dora" else 0
    rank = (budget - fixed) // per_rank
    if rank < 1:
        raise ConfigError(f"a budget of {budget} does not fit a rank-1 {method} adapter ({per_rank + fixed} parameters)")
    used = rank * per_rank + fixed
    return {"rank": rank, "parameters": used, "unused": budget - used}


def model_shapes(config, target_modules) -> list[tuple[int, int]]:
    """`(in, out)` of every adapted layer of the model: the target modules of each decoder layer."""
    shapes = linear_shapes(config)
    return [shapes[module] for module in _targets(target_modules)] * config_values(config)["num_hidden_layers"]
