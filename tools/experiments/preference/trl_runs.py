"""Driving TRL's preference trainers for one step on the course's tiny model, quietly.

The framework checks of chapters 17 and PT-KTO compare a learner's loss with the one TRL 1.16
computes. TRL reaches its DPO and KTO losses only inside a trainer, so the checks build a trainer on
the tiny offline model, let it take one optimiser step, and then ask it for the loss of one batch.
This module holds what both checks need: the policy and a frozen copy as the reference, a quiet
trainer (no progress bars, no printed log lines: library code never prints), and a digest of a
model's tensors to show what a step changed.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import shutil
import tempfile
import weakref

from tools.core.environment import installed_version
from tools.models.architectures import TINY_MODEL_ID
from tools.models.loading import load_causal_lm, resolve_model


def state_sha256(model) -> str:
    """sha256 over every parameter and buffer of `model` (name, dtype, shape, bytes), in name order."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def tiny_policy_and_reference(seed: int = 0):
    """`(policy, reference, tokenizer)`: the tiny model twice; the reference frozen (eval mode, no
    parameter requires a gradient)."""
    import torch

    torch.manual_seed(seed)
    policy, tokenizer = load_causal_lm(resolve_model(TINY_MODEL_ID))
    reference = copy.deepcopy(policy).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return policy, reference, tokenizer


@contextlib.contextmanager
def quiet_trl():
    """Silence the progress bars and info logs of datasets and transformers while a model is loaded and
    a trainer is built and run, and restore them afterwards."""
    import datasets
    import transformers

    bars_were_on = datasets.utils.logging.is_progress_bar_enabled()
    loading_bars_were_on = transformers.utils.logging.is_progress_bar_enabled()
    verbosity = transformers.utils.logging.get_verbosity()
    datasets.utils.logging.disable_progress_bar()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.utils.logging.set_verbosity(verbosity)
        if loading_bars_were_on:
            transformers.utils.logging.enable_progress_bar()
        if bars_were_on:
            datasets.utils.logging.enable_progress_bar()


def trainer_arguments(config_class, **settings):
    """A TRL config for a one-step CPU run that writes nothing that lasts and logs nothing: its output folder
    is removed when the config is collected or the process exits."""
    folder = tempfile.mkdtemp(prefix="course-trl-")
    config = config_class(output_dir=folder, max_steps=1, use_cpu=True, report_to=[], save_strategy="no",
                          logging_strategy="no", disable_tqdm=True, bf16=False, dataloader_num_workers=0, **settings)
    weakref.finalize(config, shutil.rmtree, folder, ignore_errors=True)
    return config


def silence_printer(trainer) -> None:
    """Drop the callbacks that print log lines or draw progress bars."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)


def versions() -> dict:
    """The installed versions the checks compare with."""
    return {name: installed_version(name) for name in ("trl", "transformers", "torch", "datasets")}
