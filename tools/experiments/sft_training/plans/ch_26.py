"""Chapter 26 (QLoRA): the same LoRA adapter on a frozen NF4 base and on a bf16 base.

Both variants train the same adapter (rank 8, alpha 16, every linear layer of every decoder block)
with bfloat16 compute; they differ only in how the base's linear weights are stored. `prepare`
casts the base to bfloat16 and, for `nf4_base`, swaps its decoder linear layers for bitsandbytes'
NF4 `Linear4bit` (double quantisation, blocksize 64); `measure` records which tensors are 4-bit and
frozen, which train, and the base's bytes (see quantisation.py), and runs the chapter's four
functions on the real model (MECHANISM: the learner's from the notebook, else the package's
copies): `trainable_report` on the parameter table beside peft's count, `nf4_memory_account` beside
the measured bytes, `nf4_quantise` and `nf4_reconstruct` on every original linear weight beside the
codes and values bitsandbytes stored (quantisation.chapter_checks).
"""

from __future__ import annotations

from tools.errors import ConfigError
from tools.experiments.sft_training import quantisation
from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec
from tools.experiments.sft_training.lab_curves import (
    CurvePlan,
    curve_data,
    measurement_context,
    one_thread,
    train_curve,
)

MECHANISM = ("nf4_quantise", "nf4_reconstruct", "nf4_memory_account", "trainable_report")
_originals: dict[str, dict] = {}
"""Variant name -> its linear weights before they were quantised (kept by `prepare`, read by `measure`)."""


def defaults() -> dict:
    """The package's copies of the chapter's functions (what a run without a notebook uses)."""
    return {"nf4_quantise": quantisation.chapter_quantise, "nf4_reconstruct": quantisation.chapter_reconstruct,
            "nf4_memory_account": quantisation.chapter_account,
            "trainable_report": quantisation.chapter_trainable_report}


def prepare(model, spec: AdapterSpec):
    """quantisation.prepare, after keeping a copy of the weights an NF4 variant quantises."""
    _originals[spec.name] = quantisation.original_weights(model, spec) if spec.base_quantisation == "nf4" else {}
    return quantisation.prepare(model, spec)


def measure(model, spec: AdapterSpec, split, config, tokenizer, *, functions=None) -> dict:
    """quantisation.measure, and the chapter's functions on the same model (`chapter_functions`)."""
    measured = quantisation.measure(model, spec, split, config, tokenizer)
    measured["chapter_functions"] = quantisation.chapter_checks(model, spec, measured["parameters"],
                                                                _originals.pop(spec.name, {}), functions or defaults())
    return measured

ADAPTER = {"method": "lora", "rank": 8, "alpha": 16.0, "target_modules": QWEN2_LINEAR_MODULES,
           "compute_dtype": "bfloat16"}
"""The adapter both variants train: QLoRA puts adapters on every linear layer."""

STAGE = {"cpu_smoke": {"model_id": "lab", "steps": 4}, "real_gpu": {"steps": 12}}


def variants(run_mode: str) -> list[AdapterSpec]:
    """The bf16 base first (the reference), then the NF4 base; the same in every run mode."""
    return [AdapterSpec("bf16_base", **ADAPTER), AdapterSpec("nf4_base", base_quantisation="nf4", **ADAPTER)]


# ---- the effect on the lab model (Step 5's curves; tests/chapters/test_lab_effects.py) --------------------

EFFECT = CurvePlan(steps=40, batch_size=16, learning_rate=3e-3, eval_every=10, eval_problems=128, heldout_problems=256,
                   lr_schedule="linear_decay")
"""A decaying rate: at a constant 3e-3 the last steps still swing (one generic-profile seed ended 0.12 below
its twin in held-out exact match), which an equivalence claim cannot afford."""
EFFECT_SEEDS = (0, 1, 2)


def reconstruction_error(bf16_model, nf4_model) -> dict:
    """How far the NF4 base's linear weights, dequantised by bitsandbytes, lie from the bf16 weights they
    replaced: relative Frobenius error over all of them, and the largest element error relative to
    its tensor's largest |weight|."""
    import bitsandbytes.functional as bnb_functional
    import torch

    reference = dict(bf16_model.named_parameters())
    squared_error = squared_norm = 0.0
    worst = 0.0
    tensors = 0
    for name, parameter in nf4_model.named_parameters():
        if not quantisation.is_4bit(parameter):
            continue
        original = reference[name].detach().float()
        restored = bnb_functional.dequantize_4bit(parameter.data, parameter.quant_state).float().view_as(original)
        squared_error += float((restored - original).pow(2).sum())
        squared_norm += float(original.pow(2).sum())
        worst = max(worst, float((restored - original).abs().max() / original.abs().max()))
        tensors += 1
    if not tensors:
        raise ConfigError("the NF4 model has no 4-bit tensor to compare")
    return {"tensors": tensors, "relative_frobenius": (squared_error / squared_norm) ** 0.5,
            "max_error_over_absmax": worst, "dtype_compared": str(torch.bfloat16)}


def bitsandbytes_path() -> dict:
    """Which bitsandbytes path a CPU run takes (recorded beside the curves)."""
    from tools.core.environment import installed_version

    return {"library": f"bitsandbytes {installed_version('bitsandbytes')}", "device": "cpu",
            "path": "bitsandbytes CPU backend: quantize_4bit / dequantize_4bit native CPU ops; Linear4bit's training "
                    "forward dequantises to the compute dtype and calls torch linear (the fused CPU gemv is off)",
            "note": quantisation.CPU_NOTE}


def effect(seeds=EFFECT_SEEDS, plan: CurvePlan = EFFECT, model_id: str = "lab") -> dict:
    """The same adapter (same seed, so the same initial A) trained on an NF4 base and on a bf16 base of the
    lab model, bf16 compute, one curve per seed (all in this process); with the bytes of both bases (measured
    and the account's prediction) and the NF4 reconstruction error. If bitsandbytes cannot quantise on this
    machine, the NF4 variant's entry says so and holds no curve."""
    import copy

    import torch

    from tools.experiments.sft_training.adapters import attach
    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    folder = resolve_model(model_id)
    with one_thread():
        base, tokenizer = load_causal_lm(folder, dtype="float32")
        data = curve_data(tokenizer, plan)
        bases, results = {}, {}
        for spec in variants_of():
            try:
                bases[spec.name] = quantisation.prepare(copy.deepcopy(base), spec)
            except Exception as error:  # recorded: which path could not run, and why
                results[spec.name] = {"status": "unavailable", "error": f"{type(error).__name__}: {error}", "curves": []}
        for name, prepared in bases.items():
            spec = next(s for s in variants_of() if s.name == name)
            curves = [train_curve(attach(copy.deepcopy(prepared), spec, seed), data, plan, seed,
                                  compute_dtype=torch.bfloat16) for seed in seeds]
            results[name] = {"status": "ok", "base_bytes": {"measured": quantisation.storage_bytes(prepared),
                                                              "predicted": quantisation.predicted_bytes(prepared)},
                              "curves": curves}
        error = reconstruction_error(bases["bf16_base"], bases["nf4_base"]) if len(bases) == 2 else None
    return {"plan": plan.public(), "model": model_identity(folder), **measurement_context(), "data": data.manifest,
            "seeds": list(seeds),
            "adapter": dict(ADAPTER, target_modules=list(QWEN2_LINEAR_MODULES)), "variants": results,
            "reconstruction_error": error, "bitsandbytes": bitsandbytes_path()}


def variants_of() -> list[AdapterSpec]:
    return variants("cpu_smoke")
