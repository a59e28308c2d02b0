"""What the four models of PPO keep resident on the GPU: weights, gradients, optimiser state, activations.

PPO holds a policy (trained), a value model (trained), a frozen reference policy and a frozen reward
model. This module counts the parameters of a Qwen2-shaped config (the causal LM, and the same
backbone with a one-output score head for the reward and value models), the LoRA adapter
parameters, and the bytes each role keeps: weights in `weight_bytes` per parameter; for a trained
model also gradients (`weight_bytes` per trainable parameter), the optimizer state (AdamW's two fp32
moments, 8 bytes per trainable parameter, and with 16-bit weights the fp32 master copy that mixed
precision updates, 4 more: the 12 bytes of ZeRO's accounting) and activations held for backward
(17 * weight_bytes per token, layer and hidden unit: Korthikanti et al.'s 34 bytes in 16-bit without
the attention-score term, as with flash attention). With LoRA the reference can be the policy's own base with the adapters switched
off, costing nothing extra. Allocator caches, the CUDA context and temporary buffers are not
included: this is the resident state, not a peak. The chapter's learner writes the same account
with full input checks.
"""

from __future__ import annotations

from typing import Mapping, Sequence

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ADAM_BYTES_PER_PARAMETER = 8
MASTER_WEIGHT_BYTES = 4
"""The fp32 master copy of a trained 16-bit weight (mixed precision); fp32 weights need none."""
ACTIVATION_UNITS = 17
GIB = 2 ** 30

QWEN25_05B_CONFIG = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                     "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}
"""Qwen2.5-0.5B-Instruct's published shape (the config the chapter's account uses)."""


def projection_shapes(config: Mapping) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each projection of one decoder layer."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * hidden // config["num_attention_heads"]
    return {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden),
            "gate_proj": (hidden, inner), "up_proj": (hidden, inner), "down_proj": (inner, hidden)}


def parameter_counts(config: Mapping, lora_rank: int | None = None, lora_targets: Sequence[str] = ()) -> dict:
    """Parameters of the causal LM, of the scalar-head model (reward, value) and of one LoRA adapter set."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    shapes = projection_shapes(config)
    per_layer = sum(i * o for i, o in shapes.values()) + shapes["q_proj"][1] + 2 * shapes["k_proj"][1] + 2 * hidden
    backbone = config["vocab_size"] * hidden + layers * per_layer + hidden
    causal = backbone + (0 if config["tie_word_embeddings"] else config["vocab_size"] * hidden)
    lora = layers * sum(lora_rank * sum(shapes[name]) for name in lora_targets) if lora_rank else 0
    return {"causal_lm": causal, "scalar_model": backbone + hidden, "lora": lora}


def optimizer_bytes(weight_bytes: int) -> int:
    """Optimizer state per trained parameter: AdamW's two fp32 moments, plus the fp32 master weight when
    the weights are 16-bit."""
    return ADAM_BYTES_PER_PARAMETER + (MASTER_WEIGHT_BYTES if weight_bytes < 4 else 0)


def resident_account(config: Mapping, setup: Mapping, gpu_gib: float) -> dict:
    """Bytes per role and state, their total and whether it fits `gpu_gib` (see the module docstring)."""
    lora = setup["finetune"] == "lora"
    counts = parameter_counts(config, setup.get("lora_rank") if lora else None, setup.get("lora_targets") or ())
    width = setup["weight_bytes"]
    activations = setup["batch_tokens"] * config["num_hidden_layers"] * config["hidden_size"] * ACTIVATION_UNITS * width

    def role(parameters: int, trainable: int) -> dict:
        state = {"weights": parameters * width, "gradients": trainable * width,
                 "optimizer": trainable * optimizer_bytes(width), "activations": activations if trainable else 0}
        return {**state, "total": sum(state.values())}

    adapter = counts["lora"] if lora else 0
    roles = {
        "policy": role(counts["causal_lm"] + adapter, adapter if lora else counts["causal_lm"]),
        "reference": role(0 if setup["shared_reference"] else counts["causal_lm"], 0),
        "reward": role(counts["scalar_model"], 0),
        "value": role(counts["scalar_model"] + adapter,
                      adapter + config["hidden_size"] if lora else counts["scalar_model"]),
    }
    total = sum(item["total"] for item in roles.values())
    return {"parameters": counts, "roles": roles, "total_bytes": total, "total_gib": total / GIB,
            "fits": total <= gpu_gib * GIB}
