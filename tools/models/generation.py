"""Generation settings shared by every sampler in the course (lab sampling, rollouts, the verl torch backend)."""

from __future__ import annotations

import math

from tools.errors import ConfigError


def sampling_generation_kwargs(temperature: float, max_new_tokens: int) -> dict:
    """`generate` kwargs that sample from the plain softmax of logits / temperature.

    transformers applies top_k=50 when neither the call nor the model's generation config sets
    top_k, and Qwen2.5's generation config sets top_k, top_p and a repetition penalty; any of
    these makes the sampled distribution differ from a forward pass. Here they are all turned
    off, so `log_softmax(scores)` from `output_scores` equals the forward pass's log-probs.
    """
    is_number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not is_number or not math.isfinite(temperature) or temperature <= 0:
        raise ConfigError("temperature must be a finite number > 0 (sampling); use greedy decoding for 0.")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
    return {
        "do_sample": True,
        "temperature": float(temperature),
        "top_k": 0,
        "top_p": 1.0,
        "typical_p": 1.0,
        "repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "num_beams": 1,
        "max_new_tokens": max_new_tokens,
    }
