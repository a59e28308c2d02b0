"""The architectures, tokenizer pipeline and chat template of the models the course builds.

`"tiny"`: a small Qwen2 model with a byte-level BPE tokenizer and a Qwen-style chat template, for
`cpu_smoke` runs. Qwen2.5-0.5B-Instruct's published architecture, for `random_init` runs on GPU
machines without internet.
"""

from __future__ import annotations

from typing import Any


TINY_MODEL_ID = "tiny"

LAB_MODEL_IDS = ("lab", "lab-teacher")
"""The lab models (`tools.models.lab`): tiny Qwen2 models pretrained in code on the lab task."""

QWEN25_05B_INSTRUCT = "Qwen/Qwen2.5-0.5B-Instruct"

TINY_FOLDER = "tiny-qwen2"

TINY_SEED = 20240601

RANDOM_INIT_SEED = 42

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""The split pattern of Qwen2's pre-tokeniser (single digits, words with their leading mark).

The tiny tokenizer is trained with exactly this pipeline (NFC, Split, ByteLevel without prefix
space) because `AutoTokenizer` reloads a qwen2 folder through `Qwen2Tokenizer`, which rebuilds
that pipeline; a tokenizer trained another way would come back with different ids.
"""

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)

TINY_TOKENIZER_VOCAB_TARGET = 512

TINY_ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
}

RANDOM_INIT_ARCHITECTURES: dict[str, dict[str, Any]] = {
    QWEN25_05B_INSTRUCT: {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": 32768,
        "max_window_layers": 21,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
}

RANDOM_INIT_SPECIAL_TOKEN_IDS: dict[str, dict[str, int]] = {
    QWEN25_05B_INSTRUCT: {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645},
}
"""Where a random_init build's tokenizer puts the special tokens: the real model's ids, so the config's
bos/eos/pad ids name the same tokens as in the published model."""

FILLER_TOKEN = "<|course_unused_{id}|>"
"""The vocabulary entry of every id the tiny BPE does not use in a random_init tokenizer. Filler entries
have no merges, so no text encodes to them; they exist so that `len(tokenizer)` equals the model's
`vocab_size` (verl's vLLM rollout masks logits at or above `len(tokenizer)`)."""

_RANDOM_INIT_GENERATION = {QWEN25_05B_INSTRUCT: {"bos_token_id": 151643, "eos_token_id": [151645, 151643],
                                                 "pad_token_id": 151643}}

IDENTITY_FILE = "course_model.json"

IDENTITY_SCHEMA = "course-model-identity/v1"

BUILDER_VERSION = 1
"""Bump when a recipe below changes; folders built by another version are refused, not reused."""
