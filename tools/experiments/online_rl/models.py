"""Loading the models the online RL stages and checks use, quietly, from the course's model cache."""

from __future__ import annotations

from tools.models.architectures import TINY_MODEL_ID
from tools.models.cache import default_cache_dir
from tools.models.loading import load_causal_lm, model_identity, resolve_model


def load_quietly(model_id: str = TINY_MODEL_ID, source: str = "local", device: str = "cpu", dtype=None):
    """`(model, tokenizer, identity)` in float32 (unless `dtype`) on `device`, without a loading bar.

    A fresh copy on every call: TRL's trainers patch the forward of the model they get."""
    import torch
    from transformers.utils import logging as transformers_logging

    folder = resolve_model(model_id, source=source, cache_dir=default_cache_dir())
    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # library code stays quiet: no loading bar in a notebook
    try:
        model, tokenizer = load_causal_lm(folder, dtype=dtype or torch.float32, device=device)
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    return model, tokenizer, model_identity(folder)
