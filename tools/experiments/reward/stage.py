"""What the reward experiments' stages share: loading the policy a plan names, and measuring memory.

`load_policy(plan)` resolves the plan's model (the tiny or lab model in cpu_smoke, Qwen2.5-0.5B-
Instruct from the local cache or as random_init on a GPU) and returns it with its tokenizer and its
identity for the record. `cpu_threads(plan)` runs a CPU stage at one torch thread unless the plan names
a count (the tiny and lab models' matrices are too small for several: on a busy machine extra threads
only spin). `memory_watch(plan)` measures a stage's peak memory on CUDA twice, with
`torch.cuda.max_memory_allocated` and with the 0.25 s NVML sampler; on the CPU both are None (not
measured, never 0).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from tools.measure.sampler import ResourceSampler, peaks
from tools.models.loading import load_causal_lm, model_identity, resolve_model

MIB = 2 ** 20


def load_policy(plan, *, dtype=None):
    """`(model, tokenizer, identity)` of the plan's model on the plan's device (float32 by default)."""
    import torch
    from transformers.utils import logging as transformers_logging

    folder = resolve_model(plan.model, source=plan.model_source, cache_dir=plan.model_cache)
    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # library code stays quiet: no loading bar in the notebook
    try:
        model, tokenizer = load_causal_lm(folder, dtype=dtype or torch.float32, device=plan.device)
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, model_identity(folder)


@contextlib.contextmanager
def cpu_threads(plan) -> Iterator[None]:
    """One torch thread on the CPU when the plan's limits name no thread count; nothing on CUDA."""
    if plan.device != "cpu" or plan.limits.cpu_threads is not None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def memory_watch(plan) -> Iterator[dict]:
    """Yields a dict filled on exit: `peak_allocated_mb` (torch) and `sampler` (NVML peaks and the
    sampler's summary) on CUDA; both None on the CPU."""
    import torch

    result: dict = {"peak_allocated_mb": None, "sampler": None}
    if plan.device != "cuda":
        yield result
        return
    torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device="cuda").start()
    try:
        yield result
    finally:
        samples = sampler.stop()
        torch.cuda.synchronize()
        result["peak_allocated_mb"] = torch.cuda.max_memory_allocated() / MIB
        result["sampler"] = {**peaks(samples), **sampler.summary()}
