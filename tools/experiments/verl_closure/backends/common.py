"""What the torch and verl backends share: the model and its tokenizer, the initial LoRA adapter, the
end-of-sequence ids, LoRA tensors as numpy arrays, and quiet model loading.

Both backends train LoRA with peft-compatible adapters on a transformers model, so this module
imports torch, transformers and peft; it never imports verl.
"""

from __future__ import annotations

import contextlib
import gc
import json
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from tools.core.records import sha256_file
from tools.errors import ConfigError
from tools.experiments.verl_closure.backends import PreparedModel
from tools.experiments.verl_closure.protocol import GROUPS
from tools.models.loading import load_causal_lm, model_identity, resolve_model


class PromptTokenizer:
    """Chat-formats prompts and tokenises answers the same way for sampling and training."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        if tokenizer.eos_token_id is None:
            raise ConfigError("the tokenizer has no eos token; the answer's end of turn cannot be marked")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_id = int(tokenizer.eos_token_id)

    def prompt_ids(self, prompt: str) -> list[int]:
        if self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                      add_generation_prompt=True, tokenize=False)
        else:
            text = prompt
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def answer_ids(self, answer: str) -> list[int]:
        return list(self.tokenizer(answer, add_special_tokens=False)["input_ids"]) + [self.eos_id]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def load_tokenizer(path: Path) -> PromptTokenizer:
    return PromptTokenizer(AutoTokenizer.from_pretrained(path))


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in (value if isinstance(value, (list, tuple)) else [value]) if v is not None}


def eos_token_ids(model_path: Path, tokenizer: PromptTokenizer) -> list[int]:
    """Every end-of-sequence id the engines stop at: the tokenizer's, and each one in the model's
    `generation_config.json` (or, without it, `config.json`)."""
    folder = Path(model_path)
    ids = {tokenizer.eos_id}
    for name in ("generation_config.json", "config.json"):
        path = folder / name
        if path.is_file():
            ids |= _ids(json.loads(path.read_text(encoding="utf-8")).get("eos_token_id"))
            break
    return sorted(ids)


def initial_adapter(model_path: Path, config, seed: int, workspace: Path) -> Path:
    """Write (once per seed) the initial LoRA adapter that a group loads; same seed, same adapter."""
    folder = Path(workspace) / f"initial_lora_seed{seed}"
    if (folder / "adapter_config.json").is_file():
        return folder
    base, _ = load_causal_lm(model_path, dtype=torch.float32, device="cpu")
    torch.manual_seed(seed)
    lora = LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=list(config.lora_target_modules),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    get_peft_model(base, lora).save_pretrained(folder)
    del base
    gc.collect()
    return folder


def adapter_sha256(folder: Path) -> str | None:
    weights = Path(folder) / "adapter_model.safetensors"
    return sha256_file(weights) if weights.is_file() else None


def prepare_model(config, workspace: Path, *, check_model: Callable[[Path], Any] | None = None) -> PreparedModel:
    """Resolve (or build) the model, run `check_model(path)` on it (which raises when the backend
    cannot use it), load its tokenizer, and write each group's initial adapter."""
    path = Path(resolve_model(config.model, source=config.model_source, cache_dir=config.model_cache))
    if check_model is not None:
        check_model(path)
    adapters = {group: initial_adapter(path, config, config.lora_seed(group), workspace) for group in GROUPS}
    return PreparedModel(path=path, identity=model_identity(path), tokenizer=load_tokenizer(path), adapters=adapters)


def adapter_hashes(model: PreparedModel) -> dict:
    return {"initial_adapter_sha256": {group: adapter_sha256(path) for group, path in model.adapters.items()}}


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Show transformers' and huggingface_hub's progress bars only when `enabled`; restore afterwards."""
    transformers_was_on = transformers_logging.is_progress_bar_enabled()
    hub_was_off = are_progress_bars_disabled()
    if enabled:
        transformers_logging.enable_progress_bar()
        enable_progress_bars()
    else:
        transformers_logging.disable_progress_bar()
        disable_progress_bars()
    try:
        yield
    finally:
        (transformers_logging.enable_progress_bar if transformers_was_on else transformers_logging.disable_progress_bar)()
        (disable_progress_bars if hub_was_off else enable_progress_bars)()


# ---------------------------------------------------------------------------
# LoRA tensors
# ---------------------------------------------------------------------------

def normalise_lora_name(name: str) -> str:
    """peft state-dict name without the wrapper prefix and adapter name (comparable across backends)."""
    return name.removeprefix("base_model.model.").replace(".default", "")


def lora_arrays(named_tensors: Iterable[tuple[str, Any]]) -> dict[str, np.ndarray]:
    """{normalised name: float32 numpy array} from (name, tensor) pairs (gathered to CPU)."""
    return {normalise_lora_name(name): tensor.detach().to("cpu", torch.float32).contiguous().numpy().copy()
            for name, tensor in named_tensors}


def save_lora_tensors(path: Path, tensors: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Write `{"initial": state, "updated": state}` as one .npz (no pickles)."""
    flat = {f"{part}/{name}": array for part, state in tensors.items() for name, array in state.items()}
    with open(path, "wb") as handle:
        np.savez(handle, **flat)


def load_lora_tensors(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of `save_lora_tensors`."""
    tensors: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            part, name = key.split("/", 1)
            tensors.setdefault(part, {})[name] = data[key]
    return tensors
