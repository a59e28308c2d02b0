"""A 4-bit NF4 base for the SFT stage: chapter 26 (QLoRA) and, later, project 65.

Three jobs, kept apart:

- the reference: `NF4_LEVELS` (bitsandbytes' table of the 16 NF4 values) and a block-wise quantiser
  and dequantiser written from the definition, used by the tests to check bitsandbytes and by the
  chapter to draw its pictures;
- the account: the bytes of a base whose linear weights are NF4, with or without double
  quantisation of the block constants, predicted from the shapes alone;
- the stage hooks: `prepare` casts the base to the variant's compute dtype and, for an NF4 variant,
  swaps every decoder linear layer for bitsandbytes' `Linear4bit` (what transformers builds from
  `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`
  for a Qwen2 model: every linear layer but `lm_head`); `measure` records which tensors are 4-bit and
  frozen, which train, in which dtype the 4-bit layers computed, and the bytes the base occupies
  next to the account's prediction.

bitsandbytes and peft (through `adapters`) are imported only by the hooks, so the reference and the
account load with torch alone. bitsandbytes' CPU build quantises, dequantises and runs
`Linear4bit` forward and backward on a CPU, so cpu_smoke runs the real 4-bit layers; the CUDA
kernels and the memory they save are exercised only by a real_gpu run.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

from tools.core.environment import installed_version
from tools.errors import ConfigError
from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec

NF4_LEVELS = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
"""The 16 NF4 values, ascending (bitsandbytes `get_4bit_type("nf4")`; QLoRA paper, appendix E)."""

BLOCKSIZE = 64
"""Elements per absmax block of the 4-bit codes (QLoRA's and bitsandbytes' default)."""
DOUBLE_QUANT_BLOCKSIZE = 256
"""Absmax constants per float32 constant when the constants are quantised again (bitsandbytes)."""
COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CPU_NOTE = ("bitsandbytes CPU backend: real 4-bit storage and Linear4bit forward and backward on the CPU; "
            "the CUDA kernels and the memory they save are exercised only by a real_gpu run")
DEQUANTISED_TOLERANCE = 0.02
"""Largest |chapter's dequantised value - bitsandbytes' dequantised value| over the tensor's largest
|weight|: with double quantisation bitsandbytes stores each block's absmax in 8 bits (a relative
error of about 1 %), the codes themselves are identical; a reconstruction that scales by another
block's absmax is off by the size of the weights."""
PEAK_NOTE = ("peak memory is measured on CUDA only (torch.cuda.max_memory_* and the 0.25 s sampler); on a CPU it "
             "is null, and this record claims no memory saving")


# ---- the reference ---------------------------------------------------------------------------

def nf4_levels_from_normal_quantiles() -> torch.Tensor:
    """The NF4 construction (QLoRA, Dettmers et al. 2023): quantiles of N(0, 1), 8 for the positive
    half and 7 for the negative half plus an exact zero, scaled to [-1, 1]; float64, ascending."""
    offset = 1 - 0.5 * (1 / 32 + 1 / 30)
    positive = torch.special.ndtri(torch.linspace(offset, 0.5, 9, dtype=torch.float64)[:-1])
    negative = -torch.special.ndtri(torch.linspace(offset, 0.5, 8, dtype=torch.float64)[:-1])
    values = torch.cat([positive, negative, torch.zeros(1, dtype=torch.float64)]).sort().values
    return values / values.max()


def _level_tensor() -> torch.Tensor:
    return torch.tensor(NF4_LEVELS, dtype=torch.float32)


def nf4_quantise(weight: torch.Tensor, blocksize: int = BLOCKSIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, absmax): one uint8 code 0..15 per element (weight's shape) and one float32 absmax per
    block of `blocksize` consecutive elements of the flattened weight (the last block may be short).
    A code names the level nearest to value / absmax; a value on a midpoint takes the lower level; a
    block of zeros has absmax 0 and codes of the level 0.0."""
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or weight.numel() == 0:
        raise ConfigError("weight must be a non-empty floating tensor")
    if isinstance(blocksize, bool) or not isinstance(blocksize, int) or blocksize < 1:
        raise ConfigError(f"blocksize must be an integer >= 1, got {blocksize!r}")
    flat = weight.detach().reshape(-1).float()
    if not bool(torch.isfinite(flat).all()):
        raise ConfigError("weight holds nan or inf")
    blocks = -(-flat.numel() // blocksize)
    padded = torch.nn.functional.pad(flat, (0, blocks * blocksize - flat.numel()))
    absmax = padded.view(blocks, blocksize).abs().amax(dim=1)
    scale = absmax.repeat_interleave(blocksize)[:flat.numel()]
    scaled = torch.where(scale > 0, flat / torch.where(scale > 0, scale, 1.0), 0.0)
    levels = _level_tensor()
    codes = torch.bucketize(scaled, (levels[:-1] + levels[1:]) / 2)  # right=False: ties to the lower level
    return codes.to(torch.uint8).view(weight.shape), absmax


def nf4_dequantise(codes: torch.Tensor, absmax: torch.Tensor, blocksize: int = BLOCKSIZE) -> torch.Tensor:
    """float32 values of `codes`' shape: NF4_LEVELS[code] times the absmax of the code's block."""
    flat = codes.reshape(-1).long()
    scale = absmax.float().repeat_interleave(blocksize)[:flat.numel()]
    return (_level_tensor()[flat] * scale).view(codes.shape)


# ---- the package's copies of the chapter's exercises (notebooks/26's contracts) ----------------------------
# What the stage runs when no notebook passes the learner's functions (the command line, the GPU batch).

def chapter_quantise(weight: torch.Tensor, blocksize: int = BLOCKSIZE) -> dict:
    """nf4_quantise's contract: `{"codes", "absmax", "shape", "blocksize"}`."""
    codes, absmax = nf4_quantise(weight, blocksize)
    return {"codes": codes, "absmax": absmax, "shape": tuple(weight.shape), "blocksize": blocksize}


def chapter_reconstruct(quantised: dict, weight: torch.Tensor) -> dict:
    """nf4_reconstruct's contract: the dequantised values and the error they leave (float64)."""
    dequantised = nf4_dequantise(quantised["codes"], quantised["absmax"], quantised["blocksize"])
    original = weight.detach().reshape(-1).double()
    error = (original - dequantised.reshape(-1).double()).abs()
    blocks = quantised["absmax"].numel()
    padded = torch.nn.functional.pad(error, (0, blocks * quantised["blocksize"] - error.numel()))
    norm = float(torch.linalg.vector_norm(original))
    error_norm = float(torch.linalg.vector_norm(error))
    relative = error_norm / norm if norm > 0 else (0.0 if error_norm == 0 else math.inf)
    return {"dequantised": dequantised, "max_abs_error": float(error.max()), "mean_abs_error": float(error.mean()),
            "relative_error": relative, "worst_block": int(padded.view(blocks, -1).amax(dim=1).argmax())}


def chapter_account(quantised_shapes: list, kept_parameters: int, blocksize: int = BLOCKSIZE,
                    double_quant: bool = False, dq_blocksize: int = DOUBLE_QUANT_BLOCKSIZE) -> dict:
    """nf4_memory_account's contract (bfloat16 kept parameters)."""
    account = memory_account(quantised_shapes, kept_parameters, blocksize=blocksize, double_quant=double_quant,
                             double_quant_blocksize=dq_blocksize)
    return {"quantised_parameters": account["quantised_parameters"], "code_bytes": account["code_bytes"],
            "constant_bytes": account["constant_bytes"], "kept_bytes": account["kept_bytes"],
            "total_bytes": account["total_bytes"], "bits_per_parameter": account["bits_per_quantised_parameter"],
            "bf16_bytes": account["bf16_bytes"],
            "saving": 1 - account["total_bytes"] / account["bf16_bytes"] if account["bf16_bytes"] else None}


def chapter_trainable_report(parameters: list[dict], compute_dtype: str) -> dict:
    """trainable_report's contract: the groups, their element counts, the problems and the verdict."""
    summary = summarise_table(parameters)
    groups = {"frozen_4bit": [], "frozen": [], "trainable": []}
    for row in parameters:
        groups["trainable" if row["requires_grad"] else "frozen_4bit" if row["storage"] == "nf4" else "frozen"].append(
            row["name"])
    total = sum(summary["parameters"].values())
    verdict = ("invalid" if summary["problems"] else "nothing_trains" if not groups["trainable"]
               else "qlora" if groups["frozen_4bit"] else "lora")
    return {**{group: sorted(names) for group, names in groups.items()}, "parameters": summary["parameters"],
            "trainable_share": summary["parameters"]["trainable"] / total, "compute_dtype": compute_dtype,
            "trainable_storage": summary["trainable_storage"], "problems": summary["problems"], "verdict": verdict}


# ---- the account -----------------------------------------------------------------------------

def _shape_elements(shape) -> int:
    if not isinstance(shape, (tuple, list)) or not shape or any(
            isinstance(size, bool) or not isinstance(size, int) or size < 1 for size in shape):
        raise ConfigError(f"a shape must be a non-empty tuple of integers >= 1, got {shape!r}")
    return math.prod(shape)


def memory_account(quantised_shapes: Iterable, kept_parameters: int, *, kept_bytes_per_parameter: int = 2,
                   blocksize: int = BLOCKSIZE, double_quant: bool = False,
                   double_quant_blocksize: int = DOUBLE_QUANT_BLOCKSIZE) -> dict:
    """Bytes of a base whose `quantised_shapes` weights are NF4 and whose other `kept_parameters`
    take `kept_bytes_per_parameter` bytes each (2: bfloat16).

    Per NF4 tensor of n elements: ceil(n / 2) bytes of codes (two per byte) and ceil(n / blocksize)
    absmax constants, each a float32 (4 bytes); with `double_quant`, each constant is an 8-bit code
    (1 byte), every `double_quant_blocksize` of them share one float32, and the tensor keeps one
    float32 offset. The lookup tables (16 and 256 float32 values) are shared and left out.
    `bf16_bytes` is the same base with every parameter in bfloat16."""
    shapes = list(quantised_shapes)
    for name, value in (("kept_parameters", kept_parameters), ("kept_bytes_per_parameter", kept_bytes_per_parameter),
                        ("blocksize", blocksize), ("double_quant_blocksize", double_quant_blocksize)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "kept_parameters" else 1):
            raise ConfigError(f"{name} must be an integer >= {0 if name == 'kept_parameters' else 1}, got {value!r}")
    if not isinstance(double_quant, bool):
        raise ConfigError(f"double_quant must be a bool, got {double_quant!r}")
    quantised = code_bytes = constant_bytes = 0
    for shape in shapes:
        elements = _shape_elements(shape)
        blocks = -(-elements // blocksize)  # integer ceilings: exact for any size
        quantised += elements
        code_bytes += -(-elements // 2)
        constant_bytes += blocks + 4 * -(-blocks // double_quant_blocksize) + 4 if double_quant else 4 * blocks
    kept_bytes = kept_parameters * kept_bytes_per_parameter
    total = code_bytes + constant_bytes + kept_bytes
    return {"quantised_parameters": quantised, "kept_parameters": kept_parameters, "code_bytes": code_bytes,
            "constant_bytes": constant_bytes, "kept_bytes": kept_bytes, "total_bytes": total,
            "bits_per_quantised_parameter": 8 * (code_bytes + constant_bytes) / quantised if quantised else None,
            "bf16_bytes": 2 * (quantised + kept_parameters)}


def qwen2_base_shapes(architecture: dict) -> tuple[list[tuple[int, int]], int]:
    """(shapes of the linear weights a 4-bit load quantises, count of the parameters it keeps) of a
    Qwen2 model described by its config fields (hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings; head_dim optional).
    Kept: embeddings (and an untied lm_head), the RMSNorm weights and the q/k/v biases."""
    try:
        hidden, inner, layers = architecture["hidden_size"], architecture["intermediate_size"], architecture["num_hidden_layers"]
        heads, kv_heads, vocab = (architecture["num_attention_heads"], architecture["num_key_value_heads"],
                                  architecture["vocab_size"])
    except KeyError as missing:
        raise ConfigError(f"a Qwen2 architecture needs {missing}") from None
    head_dim = architecture.get("head_dim") or hidden // heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    per_layer = [(q_width, hidden), (kv_width, hidden), (kv_width, hidden), (hidden, q_width),
                 (inner, hidden), (inner, hidden), (hidden, inner)]
    embeddings = vocab * hidden * (1 if architecture.get("tie_word_embeddings", False) else 2)
    kept = embeddings + layers * (2 * hidden + q_width + 2 * kv_width) + hidden
    return per_layer * layers, kept


# ---- the stage hooks ---------------------------------------------------------------------------

def quantise_linear_layers(model, *, compute_dtype: torch.dtype, blocksize: int = BLOCKSIZE,
                           double_quant: bool = True, modules: tuple[str, ...] = QWEN2_LINEAR_MODULES) -> list[str]:
    """Replace every `torch.nn.Linear` called one of `modules` by a frozen bitsandbytes NF4
    `Linear4bit` holding the same weight (quantised when it moves to the weight's device) and bias;
    returns the replaced modules' names. `lm_head` and the embeddings are not touched."""
    import bitsandbytes as bnb

    replaced = []
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if child_name not in modules or type(child) is not torch.nn.Linear:
                continue
            layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=compute_dtype, compress_statistics=double_quant,
                                      quant_type="nf4", device="meta")
            layer.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, blocksize=blocksize,
                                             compress_statistics=double_quant, quant_type="nf4", module=layer)
            if child.bias is not None:
                layer.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            layer = layer.to(child.weight.device)  # a Params4bit quantises itself on its first move to a device
            # bitsandbytes repacks 4-bit weights for CPU inference kernels in eval mode; that would change the
            # stored bytes the record hashes, so the CPU keeps the layout quantize_4bit wrote
            layer.support_avx512bf16_for_cpu = False
            setattr(parent, child_name, layer)
            replaced.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return replaced


def prepare(model, spec: AdapterSpec):
    """The stage's `prepare` hook: the base in the variant's compute dtype, and for an NF4 variant its
    decoder linear layers in 4-bit (double quantisation, blocksize 64), every base tensor frozen."""
    if spec.base_quantisation not in (None, "nf4"):
        raise ConfigError(f"variant {spec.name}: unknown base_quantisation {spec.base_quantisation!r}")
    model = model.to(COMPUTE_DTYPES[spec.compute_dtype])
    if spec.base_quantisation == "nf4":
        if not quantise_linear_layers(model, compute_dtype=COMPUTE_DTYPES[spec.compute_dtype]):
            raise ConfigError(f"variant {spec.name}: the model has no linear layer named {QWEN2_LINEAR_MODULES}")
        model.is_loaded_in_4bit = True  # peft then wraps the 4-bit layers with its bitsandbytes LoRA layer
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def is_adapter_tensor(name: str) -> bool:
    """The stage's own rule (adapters.is_adapter_tensor), imported here only when a hook runs: adapters
    imports peft, and peft imports bitsandbytes."""
    from tools.experiments.sft_training.adapters import is_adapter_tensor as rule

    return rule(name)


def is_4bit(parameter) -> bool:
    return type(parameter).__name__ == "Params4bit" and getattr(parameter, "quant_state", None) is not None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parameter_table(model) -> list[dict]:
    """One row per parameter: name, logical shape, storage ("nf4" or the dtype) and requires_grad."""
    rows = []
    for name, parameter in model.named_parameters():
        four_bit = is_4bit(parameter)
        shape = parameter.quant_state.shape if four_bit else parameter.shape
        rows.append({"name": name, "shape": [int(size) for size in shape],
                     "storage": "nf4" if four_bit else _dtype_name(parameter.dtype),
                     "requires_grad": bool(parameter.requires_grad)})
    return rows


def summarise_table(rows: list[dict]) -> dict:
    """Which tensors are 4-bit and frozen, which other tensors are frozen, which train; and what is wrong:
    a 4-bit tensor that trains, a base tensor that trains, an adapter stored in 4-bit."""
    groups = {"frozen_4bit": [], "frozen": [], "trainable": []}
    problems = []
    for row in rows:
        adapter = is_adapter_tensor(row["name"])
        group = "trainable" if row["requires_grad"] else ("frozen_4bit" if row["storage"] == "nf4" else "frozen")
        groups[group].append(row)
        if row["storage"] == "nf4" and row["requires_grad"]:
            problems.append({"name": row["name"], "problem": "4bit_tensor_trains"})
        if row["requires_grad"] and not adapter:
            problems.append({"name": row["name"], "problem": "base_tensor_trains"})
        if adapter and row["storage"] == "nf4":
            problems.append({"name": row["name"], "problem": "adapter_in_4bit"})
    return {"tensors": {group: len(items) for group, items in groups.items()},
            "parameters": {group: sum(math.prod(row["shape"]) for row in items) for group, items in groups.items()},
            "trainable_storage": sorted({row["storage"] for row in groups["trainable"]}),
            "problems": sorted(problems, key=lambda item: (item["name"], item["problem"]))}


def storage_bytes(model) -> dict:
    """Bytes the base's tensors occupy, measured from the tensors: 4-bit codes and their block
    constants (absmax, and with double quantisation the second-level absmax and the offset; the shared
    lookup tables left out) and every other base parameter at its element size. Adapters excluded."""
    four_bit = kept = 0
    for name, parameter in model.named_parameters():
        if is_adapter_tensor(name):
            continue
        if is_4bit(parameter):
            state = parameter.quant_state
            tensors = [parameter.data, state.absmax]
            if state.nested:
                tensors += [state.state2.absmax, state.offset]
            four_bit += sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        else:
            kept += parameter.numel() * parameter.element_size()
    return {"four_bit_bytes": four_bit, "kept_bytes": kept, "total_bytes": four_bit + kept}


def _four_bit_states(model) -> list:
    return [parameter.quant_state for name, parameter in model.named_parameters()
            if not is_adapter_tensor(name) and is_4bit(parameter)]


def predicted_bytes(model) -> dict:
    """The account's prediction for the same base: its 4-bit shapes and its kept parameters."""
    kept = [parameter for name, parameter in model.named_parameters()
            if not is_adapter_tensor(name) and not is_4bit(parameter)]
    element_sizes = {parameter.element_size() for parameter in kept}
    if len(element_sizes) > 1:
        raise ConfigError(f"the kept base tensors mix element sizes {sorted(element_sizes)}; the account assumes one")
    states = _four_bit_states(model)
    settings = {} if not states else {
        "blocksize": int(states[0].blocksize), "double_quant": bool(states[0].nested),
        "double_quant_blocksize": int(states[0].state2.blocksize) if states[0].nested else DOUBLE_QUANT_BLOCKSIZE}
    return memory_account([tuple(int(size) for size in state.shape) for state in states],
                          sum(parameter.numel() for parameter in kept),
                          kept_bytes_per_parameter=element_sizes.pop() if element_sizes else 2, **settings)


def stored_codes(parameter) -> torch.Tensor:
    """The NF4 codes a bitsandbytes 4-bit weight stores, unpacked (the first of a pair in the high
    nibble), flat in the weight's row-major order."""
    pairs = parameter.data.reshape(-1)
    return torch.stack([pairs >> 4, pairs & 0xF], dim=1).reshape(-1)[:math.prod(parameter.quant_state.shape)]


def original_weights(model, spec: AdapterSpec) -> dict[str, torch.Tensor]:
    """`{module name: a copy of its weight}` of the linear layers an NF4 variant's prepare will quantise,
    taken on the CPU in the variant's compute dtype before they are (what the chapter's functions are checked on)."""
    dtype = COMPUTE_DTYPES[spec.compute_dtype]
    return {name: module.weight.detach().to(device="cpu", dtype=dtype, copy=True) for name, module in model.named_modules()
            if name.rsplit(".", 1)[-1] in QWEN2_LINEAR_MODULES and type(module) is torch.nn.Linear}


def chapter_checks(model, spec: AdapterSpec, rows: list[dict], originals: dict, functions: dict) -> dict:
    """The chapter's four functions run on the stage's real model, each beside what it must equal:
    `trainable_report` on the parameter table (its trainable count beside peft's), `nf4_memory_account`
    on the table's 4-bit shapes and kept parameters (beside the bytes measured from the tensors), and
    for an NF4 base `nf4_quantise` / `nf4_reconstruct` on every original linear weight (the codes beside
    the ones bitsandbytes stored; the values beside bitsandbytes' dequantised weight, within
    DEQUANTISED_TOLERANCE of the tensor's largest |weight|: double quantisation rounds each absmax)."""
    import bitsandbytes.functional as bnb_functional

    report = functions["trainable_report"](rows, spec.compute_dtype)
    peft_trainable = int(model.get_nb_trainable_parameters()[0])
    base = [row for row in rows if not is_adapter_tensor(row["name"])]
    states = _four_bit_states(model)
    account = functions["nf4_memory_account"](
        [tuple(row["shape"]) for row in base if row["storage"] == "nf4"],
        sum(math.prod(row["shape"]) for row in base if row["storage"] != "nf4"),
        blocksize=int(states[0].blocksize) if states else BLOCKSIZE, double_quant=bool(states and states[0].nested))
    measured = storage_bytes(model)["total_bytes"]
    checks = {"trainable_report": {"verdict": report["verdict"], "trainable": report["parameters"]["trainable"],
                                   "peft_trainable": peft_trainable,
                                   "agrees_with_peft": report["parameters"]["trainable"] == peft_trainable,
                                   "problems": report["problems"]},
              "memory_account": {"total_bytes": account["total_bytes"], "measured_total_bytes": measured,
                                 "agrees": account["total_bytes"] == measured},
              "quantise": None}
    if spec.base_quantisation == "nf4":
        compared = mismatched = 0
        worst = 0.0
        for name, parameter in model.named_parameters():
            module = name.removeprefix("base_model.model.").rsplit(".weight", 1)[0].replace(".base_layer", "")
            if not is_4bit(parameter) or module not in originals:
                continue
            original = originals[module]
            ours = functions["nf4_quantise"](original, int(parameter.quant_state.blocksize))
            rebuilt = functions["nf4_reconstruct"](ours, original)
            codes = ours["codes"].reshape(-1).long()
            mismatched += int((codes != stored_codes(parameter).long().cpu()).sum())
            compared += codes.numel()
            theirs = bnb_functional.dequantize_4bit(parameter.data, parameter.quant_state).float().reshape(-1).cpu()
            scale = max(float(original.float().abs().max()), 1e-12)
            worst = max(worst, float((rebuilt["dequantised"].reshape(-1).float() - theirs).abs().max()) / scale)
        checks["quantise"] = {"tensors": len(originals), "codes_compared": compared, "codes_mismatched": mismatched,
                              "dequantised_max_diff_over_absmax": worst, "tolerance": DEQUANTISED_TOLERANCE,
                              "agrees": compared > 0 and mismatched == 0 and worst <= DEQUANTISED_TOLERANCE}
    return checks


def four_bit_compute_dtypes(model) -> list[str]:
    """The dtypes the 4-bit layers computed in (bitsandbytes sets a layer's compute dtype from its
    first input: bfloat16 or float32 inputs win over the configured one)."""
    found = set()
    for module in model.modules():
        if type(module).__name__ == "Linear4bit" and module.__class__.__module__.startswith("bitsandbytes"):
            found.add(_dtype_name(module.compute_dtype) if module.compute_dtype is not None else "unset")
    return sorted(found)


def measure(model, spec: AdapterSpec, split, config, tokenizer) -> dict:
    """The stage's `measure` hook: what the record says about the base's precision and what trains."""
    rows = parameter_table(model)
    states = _four_bit_states(model)
    kept_in = sorted({row["storage"] for row in rows if row["storage"] != "nf4" and not is_adapter_tensor(row["name"])})
    measured, predicted = storage_bytes(model), predicted_bytes(model)
    quantisation = None
    if states:
        quantisation = {
            "library": f"bitsandbytes {installed_version('bitsandbytes')}", "layer": "bitsandbytes.nn.Linear4bit",
            "quant_type": "nf4", "blocksize": int(states[0].blocksize), "double_quant": bool(states[0].nested),
            "four_bit_tensors": len(states), "kept_in": kept_in, "device": config.device,
            "exercised": CPU_NOTE if config.device == "cpu" else "bitsandbytes CUDA backend"}
    return {
        "base_precision": "nf4" if states else "+".join(kept_in),
        "quantisation": quantisation,
        "compute_dtype": spec.compute_dtype,
        "four_bit_layers_computed_in": four_bit_compute_dtypes(model),
        "summary": summarise_table(rows),
        "parameters": rows,
        "base_storage_bytes": {"measured": measured, "predicted": predicted,
                               "agrees": measured["total_bytes"] == predicted["total_bytes"]},
        "peak_memory_note": PEAK_NOTE,
    }
