"""Analytic bytes of the activations autograd saves in one training step of a Qwen2 decoder.

The chapter shows this formula (Step 3.2) and its learners write it (TODO 1); this module is the
copy every stage uses, and `tests/experiments/memory_strategy/test_memory_strategy_formulas.py` ties the chapter's formula to
it. With T = batch * seq tokens, p bytes per element and the architecture's h, i, L, a, kv, d, V:

    per layer (fused attention)  T * (8h + 2*kv*d + 4i + a + 2) elements
    per layer (eager attention)  T * (10h + 4i + 2) + batch * a * seq^2 elements
    one layer's input            T * h elements
    outside the layers           T * (3h + V + 1) elements
    rotary cos / sin             2 * seq * d elements (independent of the batch)
    token ids and labels         16 * T bytes (two int64 tensors)

    baseline / offload   p * (L * layer + outside + rotary) + 16T
    checkpoint / hybrid  p * (L * layer input + outside) + 16T

offload and hybrid keep that amount on the host instead of the device.
"""

from __future__ import annotations

from typing import Any, Mapping

from tools.experiments.memory_strategy.strategies import STRATEGY_PATHS, validate_strategy
from tools.errors import ConfigError

ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "vocab_size")
ACTIVATION_FORMULA = (
    "T = batch*seq; per decoder layer (elements): T*(8*h + 2*kv*d + 4*i + a + 2) with fused attention "
    "(sdpa/flash), T*(10*h + 4*i + 2) + batch*a*seq^2 with eager attention; one layer's input: T*h; "
    "outside the layers: T*(3*h + V + 1); rotary cos/sin: 2*seq*d; int64 token ids and labels: 16*T bytes. "
    "baseline/offload = p*(L*layer + outside + rotary) + 16*T; checkpoint/hybrid = p*(L*T*h + outside) + 16*T; "
    "offload/hybrid keep it on the host, baseline/checkpoint on the device."
)
GQA_NOTE = (
    "The k/v term 2*kv*d per token assumes grouped-query attention is handled natively (transformers' sdpa "
    "path passes enable_gqa to torch SDPA when no attention mask is given, torch >= 2.5; flash attention too): "
    "no repeat_kv copy of k and v for all a heads is saved. A stack that repeats k/v (a padding mask, eager "
    "attention) saves 2*(a - kv)*d more elements per token in every layer, and measured / estimate rises above 1."
)
ACTIVATION_ASSUMPTIONS = (
    "Counted once per distinct storage autograd keeps alive, at p bytes per element.",
    "Per layer: residual input, normalised input and RMSNorm output around attention and again around the MLP "
    "(6h); query and attention output (2h); key and value after rotary embedding (2*kv*d); gate, silu(gate), "
    "up and their product (4i); a log-sum-exp per head and token (a); two inverse RMS values per token (2).",
    "Eager attention keeps the repeated key/value (2h per token), the softmax output (batch*a*seq^2) and a "
    "contiguous copy of the attention output instead of the log-sum-exp.",
    "Outside the layers: final norm input, normalised value and output (3h), the log-softmax of the logits "
    "in the loss (V) and the final inverse RMS (1), per token.",
    GQA_NOTE,
    "Not counted: parameters saved by linear layers (they live anyway), optimizer state, gradients, "
    "allocator caching and temporary buffers of the backward pass.",
    "Measured host bytes count one copy per distinct saved view, so two views of one storage with different "
    "shapes are copied twice: an offload host ratio above 1 is that duplication.",
)


def _field(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)


def arch_from_config(config: Any) -> dict:
    """The seven architecture numbers of ARCH_KEYS from a transformers Qwen2 config or a mapping.

    head_dim defaults to hidden_size // num_attention_heads and num_key_value_heads to
    num_attention_heads, as transformers does; anything else missing is a ConfigError.
    """
    arch = {name: _field(config, name) for name in ARCH_KEYS}
    if arch["num_key_value_heads"] is None:
        arch["num_key_value_heads"] = arch["num_attention_heads"]
    if arch["head_dim"] is None and arch["hidden_size"] and arch["num_attention_heads"]:
        arch["head_dim"] = arch["hidden_size"] // arch["num_attention_heads"]
    for name, value in arch.items():
        if value is None:
            raise ConfigError(f"model config has no {name!r}; the activation estimate needs it.")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"model config {name!r} must be a positive integer, got {value!r}")
    return arch


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def estimate_activation_bytes(config: Any, *, batch_size: int, seq_len: int, strategy: str = "baseline",
                              dtype_bytes: int = 4, attn_implementation: str | None = None) -> dict:
    """Analytic saved-activation bytes of one training step under `strategy` (see the module docstring).

    `config`: a transformers Qwen2 config or a mapping of ARCH_KEYS. `attn_implementation`
    defaults to the config's (`sdpa` when it has none); `eager` keeps the seq^2 softmax.
    Returns every part in bytes (ints), the total kept, where it is kept (device or host), the
    formula and its assumptions.
    """
    path = STRATEGY_PATHS[validate_strategy(strategy)]
    batch_size, seq_len = _positive_int("batch_size", batch_size), _positive_int("seq_len", seq_len)
    dtype_bytes = _positive_int("dtype_bytes", dtype_bytes)
    arch = arch_from_config(config)
    h, i, layers = arch["hidden_size"], arch["intermediate_size"], arch["num_hidden_layers"]
    a, kv, d, vocab = arch["num_attention_heads"], arch["num_key_value_heads"], arch["head_dim"], arch["vocab_size"]
    implementation = attn_implementation or _field(config, "_attn_implementation") or "sdpa"
    tokens = batch_size * seq_len
    if implementation == "eager":
        layer_elements = tokens * (10 * h + 4 * i + 2) + batch_size * a * seq_len * seq_len
    else:
        layer_elements = tokens * (8 * h + 2 * kv * d + 4 * i + a + 2)
    parts = {
        "per_layer_bytes": layer_elements * dtype_bytes,
        "layer_input_bytes": tokens * h * dtype_bytes,
        "outside_layers_bytes": tokens * (3 * h + vocab + 1) * dtype_bytes,
        "rotary_bytes": 2 * seq_len * d * dtype_bytes,
        "token_id_bytes": 16 * tokens,
    }
    if path["recompute"]:
        saved = layers * parts["layer_input_bytes"] + parts["outside_layers_bytes"] + parts["token_id_bytes"]
    else:
        saved = (layers * parts["per_layer_bytes"] + parts["outside_layers_bytes"] + parts["rotary_bytes"]
                 + parts["token_id_bytes"])
    return {
        "strategy": strategy,
        "attn_implementation": implementation,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "dtype_bytes": dtype_bytes,
        "tokens": tokens,
        **parts,
        "saved_bytes": saved,
        "device_bytes": 0 if path["offload"] else saved,
        "host_bytes": saved if path["offload"] else 0,
        "formula": ACTIVATION_FORMULA,
        "assumptions": list(ACTIVATION_ASSUMPTIONS),
    }


def activation_groups(config: Any, *, batch_size: int, seq_len: int, dtype_bytes: int = 4) -> dict:
    """The baseline's saved bytes split into what checkpointing drops and what it keeps (for a figure).

    layer_internals (dropped and recomputed by checkpointing, rotary included), layer_inputs,
    loss_log_softmax (V per token, kept by every strategy), final_norm_etc and token_ids; they
    sum to the baseline's saved_bytes.
    """
    base = estimate_activation_bytes(config, batch_size=batch_size, seq_len=seq_len, dtype_bytes=dtype_bytes,
                                     attn_implementation="sdpa")
    arch = arch_from_config(config)
    tokens, layers = base["tokens"], arch["num_hidden_layers"]
    log_softmax = tokens * arch["vocab_size"] * dtype_bytes
    return {
        "layer_internals": layers * (base["per_layer_bytes"] - base["layer_input_bytes"]) + base["rotary_bytes"],
        "layer_inputs": layers * base["layer_input_bytes"],
        "loss_log_softmax": log_softmax,
        "final_norm_etc": base["outside_layers_bytes"] - log_softmax,
        "token_ids": base["token_id_bytes"],
    }


def compare_with_estimate(evidence: Mapping[str, Any], estimate: Mapping[str, Any]) -> dict:
    """Measured saved bytes (device and host) beside the estimate; ratio = measured / estimated.

    A ratio is None where nothing is expected (estimate 0) or nothing was measured.
    """
    last = evidence.get("last_step") or {}

    def ratio(measured: Any, estimated: Any) -> float | None:
        return None if measured is None or not estimated else measured / estimated

    measured_device, measured_host = last.get("device_saved_bytes"), last.get("host_offloaded_bytes")
    return {
        "measured_device_bytes": measured_device,
        "estimated_device_bytes": estimate["device_bytes"],
        "device_ratio": ratio(measured_device, estimate["device_bytes"]),
        "measured_host_bytes": measured_host,
        "estimated_host_bytes": estimate["host_bytes"],
        "host_ratio": ratio(measured_host, estimate["host_bytes"]),
        "estimate_formula": estimate["formula"],
        "gqa_assumption": GQA_NOTE,
    }
