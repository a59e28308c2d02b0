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


def tensor_digest(tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (CPU copy): a cast or a reshape is a change."""
    data = tensor.detach().to("cpu").contiguous()
    header = f"{data.dtype}|{tuple(data.shape)}|".encode()
    return hashlib.sha256(header + data.reshape(-1).view(dtype=torch.uint8).numpy().tobytes()).hexdigest()


def quant_state_tensors(parameter) -> dict:
    """The tensors and settings a 4-bit weight (bitsandbytes `Params4bit`) needs to be read back:
    absmax, the code table, and with double quantisation the second-level absmax, code and offset.
    Empty for an ordinary parameter."""
    state = getattr(parameter, "quant_state", None)
    if type(parameter).__name__ != "Params4bit" or state is None:
        return {}
    found = {"absmax": state.absmax, "code": state.code,
             "settings": f"{state.quant_type}|{state.blocksize}|{state.dtype}|{tuple(state.shape)}|{bool(state.nested)}"}
    if state.nested:
        found.update(offset=state.offset, state2_absmax=state.state2.absmax, state2_code=state.state2.code,
                     state2_settings=f"{state.state2.blocksize}|{state.state2.dtype}")
    return found


def tensor_hashes(model) -> dict[str, str]:
    """sha256 by parameter name over its dtype, shape and bytes; for a 4-bit weight also over its
    quantisation state (absmax and its constants), without which the packed codes alone say nothing."""
    hashes = {}
    for name, parameter in model.named_parameters():
        parts = [tensor_digest(parameter)]
        for key, value in sorted(quant_state_tensors(parameter).items()):
            parts.append(f"{key}={tensor_digest(value) if isinstance(value, torch.Tensor) else value}")
        hashes[name] = parts[0] if len(parts) == 1 else hashlib.sha256(";".join(parts).encode()).hexdigest()
    return hashes


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


def frozen_base_report(before: dict, after: dict, adapter_markers: tuple[str, ...] = ADAPTER_MARKERS) -> dict:
    """Chapter 14's contract, the package's copy: two snapshots `{name: tensor}` judged per tensor
    (dtype, shape and bytes), base and adapter apart. `decision` is `base_changed` when any base
    tensor changed, else `frozen` when an adapter tensor changed, else `no_update`."""
    if set(before) != set(after):
        raise ConfigError("the snapshots name different tensors")
    adapter = {name for name in before if any(marker in name for marker in adapter_markers)}
    changed = sorted(name for name in before if tensor_digest(before[name]) != tensor_digest(after[name]))
    changed_base = [name for name in changed if name not in adapter]
    changed_adapter = [name for name in changed if name in adapter]
    decision = "base_changed" if changed_base else "frozen" if changed_adapter else "no_update"
    return {"base_tensors": len(before) - len(adapter), "adapter_tensors": len(adapter), "changed_base": changed_base,
            "changed_adapter": changed_adapter, "decision": decision}


def tensor_snapshot(model) -> dict:
    """`{name: a detached CPU copy}` of every parameter: what frozen_base_report compares."""
    return {name: parameter.detach().to("cpu", copy=True) for name, parameter in model.named_parameters()}


def trainable_parameters(model) -> dict:
    """peft's own count (trainable, total) and ours from `requires_grad`: they must agree."""
    trainable, total = model.get_nb_trainable_parameters()
    ours = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    return {"trainable": int(trainable), "total": int(total), "requires_grad_count": int(ours)}
