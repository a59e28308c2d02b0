"""Adapters through peft, and what the record proves with them: hashes of the frozen base and of the
adapter tensors before and after training, and peft's own count of trainable parameters."""

from __future__ import annotations

import hashlib

import torch
from peft import LoraConfig, get_peft_model

from tools.errors import ConfigError
from tools.experiments.sft_training.config import AdapterSpec

ADAPTER_MARKERS = ("lora_A", "lora_B", "lora_magnitude_vector", "lora_embedding")


def lora_config(spec: AdapterSpec):
    """peft's LoraConfig for a variant (rsLoRA and DoRA are flags of LoRA in peft)."""
    return LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                      target_modules=list(spec.target_modules), use_rslora=spec.method == "rslora",
                      use_dora=spec.method == "dora", bias="none", task_type="CAUSAL_LM")


def attach(model, spec: AdapterSpec, seed: int):
    """The model wrapped with the variant's adapter (seeded init); the base is frozen by peft. A
    quantised base is made by the chapter's `prepare` hook before this is called."""
    torch.manual_seed(seed)
    return get_peft_model(model, lora_config(spec))


def is_adapter_tensor(name: str) -> bool:
    return any(marker in name for marker in ADAPTER_MARKERS)


def tensor_hashes(model) -> dict[str, str]:
    """sha256 of every parameter's bytes, by name (computed on CPU copies, in a fixed dtype-free way)."""
    hashes = {}
    for name, parameter in model.named_parameters():
        data = parameter.detach().to("cpu").contiguous()
        hashes[name] = hashlib.sha256(data.view(-1).view(dtype=torch.uint8).numpy().tobytes()).hexdigest()
    return hashes


def _byte_dtype():

    return torch.uint8


def digest(hashes: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{name}={value};" for name, value in sorted(hashes.items())).encode()).hexdigest()


def hash_report(before: dict[str, str], after: dict[str, str]) -> dict:
    """Which tensors changed, split into base and adapter tensors; the base must not change."""
    if set(before) != set(after):
        raise ConfigError("the model's parameters changed names during training")
    changed = sorted(name for name in before if before[name] != after[name])
    base = sorted(name for name in before if not is_adapter_tensor(name))
    adapter = sorted(name for name in before if is_adapter_tensor(name))
    return {
        "base_sha256_before": digest({n: before[n] for n in base}),
        "base_sha256_after": digest({n: after[n] for n in base}),
        "adapter_sha256_before": digest({n: before[n] for n in adapter}),
        "adapter_sha256_after": digest({n: after[n] for n in adapter}),
        "base_tensors": len(base), "adapter_tensors": len(adapter),
        "changed_base_tensors": [name for name in changed if not is_adapter_tensor(name)],
        "changed_adapter_tensor_count": sum(1 for name in changed if is_adapter_tensor(name)),
        "base_unchanged": not any(not is_adapter_tensor(name) for name in changed),
        "adapter_changed": any(is_adapter_tensor(name) for name in changed),
    }


def trainable_parameters(model) -> dict:
    """peft's own count (trainable, total) and ours from `requires_grad`: they must agree."""
    trainable, total = model.get_nb_trainable_parameters()
    ours = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    return {"trainable": int(trainable), "total": int(total), "requires_grad_count": int(ours)}
