"""Chapter 26 (QLoRA): its pictures, the bitsandbytes comparison, and Step 5's run and summary.

The learner writes `nf4_quantise`, `nf4_reconstruct`, `nf4_memory_account` and `trainable_report`;
nothing here implements them: what needs them takes them as arguments, so the notebook passes the
learner's functions (or the reference) and a test passes the same. The pictures use the stage's own
NF4 reference (tools/experiments/sft_training/quantisation.py); Step 5 runs the chapter's plan of
the shared SFT stage (plans/ch_26.py), the same code a GPU machine runs from the command line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch

from tools.chapters import sft_stage
from tools.chapters.context import ChapterContext
from tools.chapters.own_runs import HOW_TO_RUN, LEVEL_NOTE, latest_record
from tools.core.environment import installed_version
from tools.core.paths import resolve_project_root
from tools.experiments.sft_training import quantisation
from tools.experiments.sft_training.plans import plan_for
from tools.experiments.sft_training.quantisation import NF4_LEVELS, qwen2_base_shapes
from tools.models.architectures import QWEN25_05B_INSTRUCT, RANDOM_INIT_ARCHITECTURES

CHAPTER_ID = "26"
CHECK_STAGE = "bnb_check"
PLAN = plan_for(CHAPTER_ID)
VARIANT_STAGES = [f"sft_{spec.name}" for spec in PLAN.variants("cpu_smoke")]
STAGES = [CHECK_STAGE, *VARIANT_STAGES]

VALUE_TOLERANCE = 1e-6
"""Largest |difference| allowed between our dequantised values (or absmax) and bitsandbytes'; the
codes themselves must be identical."""

ARCHITECTURES = {
    "Qwen2.5-0.5B": RANDOM_INIT_ARCHITECTURES[QWEN25_05B_INSTRUCT],
    "Qwen2.5-1.5B": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
}
"""The published config fields of the two models the Q-QLORA profile serves (Hugging Face config.json)."""

GIB = 2 ** 30


# ---- the fixed tensor of the bitsandbytes check -----------------------------------------------

def check_weight() -> torch.Tensor:
    """A fixed float32 weight (37 x 50: 28 full blocks of 64 and a short one of 58) drawn from
    N(0, 0.02), with its first block zero and two outliers, seeded."""
    generator = torch.Generator().manual_seed(26)
    weight = torch.randn(37, 50, generator=generator) * 0.02
    flat = weight.view(-1)
    flat[:64] = 0.0
    flat[300], flat[1201] = 0.31, -0.27
    return weight


def bitsandbytes_nf4(weight: torch.Tensor, blocksize: int = 64) -> dict:
    """bitsandbytes' own NF4 of `weight` (CPU build): its levels, the codes unpacked from its bytes (the
    first element of a pair in the high nibble), its absmax and its dequantised values, all flat.

    The tensor is handed over flattened: its blocks run over the flattened tensor anyway, and for some
    2-D shapes whose rows are not whole blocks (e.g. 64 x 96) the CPU `dequantize_4bit` of bitsandbytes
    0.50.2 does not invert its own `quantize_4bit` (tests/experiments/sft_training/test_qlora_stage.py keeps that case)."""
    import bitsandbytes.functional as bnb_functional

    packed, state = bnb_functional.quantize_4bit(weight.reshape(-1), blocksize=blocksize, quant_type="nf4")
    state.dtype = torch.float32  # dequantise to float32 (by default bitsandbytes returns the input's dtype)
    pairs = packed.reshape(-1)
    codes = torch.stack([pairs >> 4, pairs & 0xF], dim=1).reshape(-1)[:weight.numel()]
    dequantised = bnb_functional.dequantize_4bit(packed, state).reshape(-1).float()
    return {"version": installed_version("bitsandbytes"),
            "levels": [float(value) for value in bnb_functional.get_4bit_type("nf4", device="cpu")],
            "codes": codes, "absmax": state.absmax.float(), "dequantised": dequantised}


def compare_with_bitsandbytes(quantise: Callable, reconstruct: Callable, weight: torch.Tensor | None = None,
                              blocksize: int = 64) -> dict | None:
    """Run `quantise(weight, blocksize)` and `reconstruct(quantised, weight)` (the chapter's TODO 1 and
    2) and bitsandbytes on the same tensor; None when a TODO is not written yet (bitsandbytes is then
    not even imported). Codes must be identical; absmax and values within VALUE_TOLERANCE."""
    weight = check_weight() if weight is None else weight
    try:
        ours = quantise(weight, blocksize)
        rebuilt = reconstruct(ours, weight)
    except NotImplementedError:
        return None
    theirs = bitsandbytes_nf4(weight, blocksize)
    codes = ours["codes"].reshape(-1).long()
    mismatched = int((codes != theirs["codes"].long()).sum())
    absmax_diff = float((ours["absmax"].float() - theirs["absmax"]).abs().max())
    value_diff = float((rebuilt["dequantised"].reshape(-1).float() - theirs["dequantised"]).abs().max())
    levels_diff = max(abs(a - b) for a, b in zip(NF4_LEVELS, theirs["levels"]))
    return {"bitsandbytes": theirs["version"], "shape": list(weight.shape), "blocksize": blocksize,
            "elements": weight.numel(), "levels_max_abs_diff": levels_diff, "codes_mismatched": mismatched,
            "absmax_max_abs_diff": absmax_diff, "dequantised_max_abs_diff": value_diff,
            "value_tolerance": VALUE_TOLERANCE,
            "agrees": mismatched == 0 and max(levels_diff, absmax_diff, value_diff) <= VALUE_TOLERANCE,
            "our_max_abs_error": rebuilt["max_abs_error"], "our_relative_error": rebuilt["relative_error"]}


def format_comparison(report: dict | None) -> str:
    if report is None:
        return "TODO 1 or TODO 2 is not written yet: nothing to compare with bitsandbytes."
    verdict = "agrees" if report["agrees"] else "DISAGREES"
    return (f"bitsandbytes {report['bitsandbytes']} NF4 on the same {report['shape']} tensor, blocksize "
            f"{report['blocksize']}: {verdict}\n"
            f"  levels max |diff| {report['levels_max_abs_diff']:.1e}, codes differing {report['codes_mismatched']} of "
            f"{report['elements']}, absmax max |diff| {report['absmax_max_abs_diff']:.1e}, dequantised max |diff| "
            f"{report['dequantised_max_abs_diff']:.1e} (tolerance: codes identical, values {report['value_tolerance']:g})\n"
            f"  reconstruction: max |error| {report['our_max_abs_error']:.4g}, relative error "
            f"{report['our_relative_error']:.4f}")


# ---- the pictures of Steps 1-3 ------------------------------------------------------------------

def uniform_levels() -> torch.Tensor:
    """16 evenly spaced values on [-1, 1]: the naive 4-bit grid NF4 is compared with."""
    return torch.linspace(-1, 1, 16)


def nearest_level_error(weight: torch.Tensor, levels: torch.Tensor, blocksize: int) -> float:
    """Mean |error| of rounding each block's weight / absmax to the nearest of `levels`."""
    flat = weight.reshape(-1).float()
    blocks = flat.view(-1, blocksize)
    absmax = blocks.abs().amax(dim=1, keepdim=True)
    scaled = blocks / absmax
    nearest = levels[(scaled.unsqueeze(-1) - levels).abs().argmin(dim=-1)]
    return float((nearest * absmax - blocks).abs().mean())


def draw_levels(plt, seed: int = 0):
    """Left: where the NF4 and uniform levels sit against a block of normal weights scaled by its absmax.
    Right: the mean |error| each grid leaves on the same normal weights."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(4096 * 16, generator=generator)
    nf4, uniform = torch.tensor(NF4_LEVELS), uniform_levels()
    scaled = (weight.view(-1, 64) / weight.view(-1, 64).abs().amax(dim=1, keepdim=True)).reshape(-1)
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 3.8), gridspec_kw={"width_ratios": [2.2, 1]})
    left.hist(scaled.numpy(), bins=120, color="#c6dbef", density=True, label="weight / block absmax")
    left.vlines(nf4.numpy(), 0, 1.4, color="#08519c", lw=1.6, label="NF4 levels (16)")
    left.vlines(uniform.numpy(), 1.45, 1.9, color="#e6550d", lw=1.2, label="uniform 4-bit levels (16)")
    left.set_xlabel("value / absmax of its block of 64")
    left.set_ylim(0, 2.0)
    left.legend(loc="upper left", fontsize=8)
    left.set_title("NF4 puts more levels where normal weights are dense")
    errors = {"uniform": nearest_level_error(weight, uniform, 64), "NF4": nearest_level_error(weight, nf4, 64)}
    right.bar(list(errors), list(errors.values()), color=["#e6550d", "#08519c"])
    right.set_ylabel("mean |error| (weights ~ N(0, 1))")
    right.set_title("Same 4 bits, blocksize 64")
    figure.tight_layout()
    return figure, errors


def blocksize_sweep(blocksizes=(32, 64, 128, 256, 1024, 4096), outliers: int = 8, seed: int = 1) -> list[dict]:
    """Mean |error| of NF4 on N(0, 0.02) weights with a few outliers, and bits per parameter with
    float32 constants, for each blocksize (the stage's reference quantiser)."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(256, 256, generator=generator) * 0.02
    positions = torch.randperm(weight.numel(), generator=generator)[:outliers]
    weight.view(-1)[positions] = 0.5
    rows = []
    for blocksize in blocksizes:
        codes, absmax = quantisation.nf4_quantise(weight, blocksize)
        error = (quantisation.nf4_dequantise(codes, absmax, blocksize) - weight).abs()
        rows.append({"blocksize": blocksize, "mean_abs_error": float(error.mean()),
                     "bits_per_parameter": 4 + 32 / blocksize})
    return rows


def draw_blocksize_sweep(plt, rows: list[dict]):
    figure, axis = plt.subplots(figsize=(8, 3.6))
    sizes = [row["blocksize"] for row in rows]
    axis.plot(sizes, [row["mean_abs_error"] for row in rows], "o-", color="#08519c")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("blocksize (elements per absmax constant)")
    axis.set_ylabel("mean |error|", color="#08519c")
    twin = axis.twinx()
    twin.plot(sizes, [row["bits_per_parameter"] for row in rows], "s--", color="#e6550d")
    twin.set_ylabel("bits per parameter (float32 constants)", color="#e6550d")
    axis.set_title("Smaller blocks: an outlier spoils fewer neighbours, but constants cost more bits")
    figure.tight_layout()
    return figure


def base_accounts(account: Callable) -> dict:
    """`account(shapes, kept, blocksize=64, double_quant=...)` (the chapter's TODO 3) for the two models
    of the profile: {model: {"bf16": bytes, "nf4": result, "nf4_double_quant": result}}."""
    accounts = {}
    for name, architecture in ARCHITECTURES.items():
        shapes, kept = qwen2_base_shapes(architecture)
        accounts[name] = {"nf4": account(shapes, kept, blocksize=64, double_quant=False),
                          "nf4_double_quant": account(shapes, kept, blocksize=64, double_quant=True)}
    return accounts


def draw_base_accounts(plt, accounts: dict):
    """Stacked bars per model: bf16 base, NF4, NF4 with double quantisation; kept (embeddings, norms,
    biases, bf16), 4-bit codes and block constants apart."""
    figure, axis = plt.subplots(figsize=(10, 3.8))
    labels, kept, codes, constants = [], [], [], []
    for model, entry in accounts.items():
        nf4 = entry["nf4"]
        labels.append(f"{model}\nbf16")
        kept.append(nf4["kept_bytes"] / GIB)
        codes.append(2 * nf4["quantised_parameters"] / GIB)
        constants.append(0.0)
        for key, short in (("nf4", "NF4"), ("nf4_double_quant", "NF4+DQ")):
            labels.append(f"{model}\n{short}")
            kept.append(entry[key]["kept_bytes"] / GIB)
            codes.append(entry[key]["code_bytes"] / GIB)
            constants.append(entry[key]["constant_bytes"] / GIB)
    positions = range(len(labels))
    axis.bar(positions, kept, color="#bdbdbd", label="kept in bf16: embeddings, norms, biases")
    axis.bar(positions, codes, bottom=kept, color="#08519c", label="linear weights (bf16, or 4-bit codes)")
    axis.bar(positions, constants, bottom=[a + b for a, b in zip(kept, codes)], color="#e6550d",
             label="block constants")
    totals = [a + b + c for a, b, c in zip(kept, codes, constants)]
    for position, total in zip(positions, totals):
        axis.text(position, total, f"{total:.2f}", ha="center", va="bottom", fontsize=8)
    axis.set_ylim(0, 1.12 * max(totals))
    axis.set_xticks(list(positions), labels, fontsize=8)
    axis.set_ylabel("GiB of base weights")
    axis.set_title("Base weights only: activations, adapter gradients and optimiser states come on top")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


# ---- Step 5 -------------------------------------------------------------------------------------

def gpu_command(label: str = "<new_label>", model_source: str = "random_init") -> str:
    return sft_stage.gpu_command(CHAPTER_ID, label, model_source)


def describe_plan(run_mode: str) -> str:
    """What Step 5 runs, in words (dry_run prints it instead of running)."""
    lines = [f"plan {PLAN.chapter}: {len(PLAN.variants(run_mode))} variants, stage overrides "
             f"{PLAN.stage.get(run_mode, {}) or 'none'} for {run_mode}"]
    for spec in PLAN.variants(run_mode):
        lines.append(f"  {spec.name}: base {spec.base_quantisation or 'bfloat16'}, {spec.method} rank {spec.rank} "
                     f"alpha {spec.alpha:g} on {', '.join(spec.target_modules)}, compute {spec.compute_dtype}")
    lines.append(f"GPU command line: {gpu_command()}")
    return "\n".join(lines)


def run_variants(run: ChapterContext, model_source: str = "local", mechanism=None) -> list[dict]:
    """Run the chapter's plan (both variants, one record each) with the chapter's functions (`mechanism`:
    the learner's from the notebook; None: the package's copies); returns `{variant, path, sha256, status}`."""
    return sft_stage.run_plan(run, model_source, mechanism)[0]


def load_variant_records(run: ChapterContext, written: list[dict] | None, root: Path | None = None) -> list[tuple[str, dict]]:
    """(shown path, record) per variant: this run's records, or in dry_run the newest cpu_smoke ones."""
    import json

    found = []
    if written:
        for item in written:
            found.append((_relative(item["path"], run.project_root), json.loads(Path(item["path"]).read_text("utf-8"))))
        return found
    root = root or resolve_project_root()
    for stage in VARIANT_STAGES:
        latest = latest_record(CHAPTER_ID, stage, root=root)
        if latest is not None:
            found.append((_relative(latest[0], root), latest[1]))
    return found


def _relative(path, root) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix() if root else str(path)
    except ValueError:
        return str(path)


def _mib(value) -> str:
    return "null (not measured)" if value is None else f"{value:.1f} MiB"


def variant_summary(record: dict) -> list[str]:
    """A few lines of one variant's record, read from its fields."""
    name = record.get("variant", {}).get("name", "?")
    if record.get("status") != "ok":
        return [f"{name}: status {record.get('status')} ({record.get('error')})"]
    chapter = record["chapter_measurements"]
    measured, hashes = record["measurements"], record["hashes"]
    summary, storage = chapter["summary"], chapter["base_storage_bytes"]
    return [
        f"{name}: base {chapter['base_precision']}, {summary['tensors']['frozen_4bit']} tensors frozen in 4-bit, "
        f"{summary['tensors']['frozen']} other frozen, {summary['tensors']['trainable']} trainable "
        f"({summary['parameters']['trainable']} parameters, stored {'/'.join(summary['trainable_storage'])}, "
        f"compute {chapter['compute_dtype']})",
        f"  base bytes measured {storage['measured']['total_bytes']} vs account {storage['predicted']['total_bytes']} "
        f"({'agree' if storage['agrees'] else 'DISAGREE'}); base unchanged {hashes['base_unchanged']}, "
        f"adapter changed {hashes['adapter_changed']}",
        f"  eval loss {measured['eval_loss_before']:.4f} -> {measured['eval_loss_after']:.4f}; step "
        f"{measured['step_time_ms_mean']:.0f} ms; peak allocated {_mib(measured['peak_allocated_mib'])}",
    ]


def evidence_block(run: ChapterContext, records: list[tuple[str, dict]]) -> str:
    """The learner's own records of both variants, labelled by evidence level, and how to make one."""
    lines = []
    if not records:
        lines.append("your run: none yet (dry_run writes nothing, and no cpu_smoke record of this chapter exists)")
    for shown, record in records:
        level = record.get("evidence_level") or record.get("run_mode")
        lines.append(f"your run ({LEVEL_NOTE.get(level, level)}): {shown}, label {record.get('run_label')!r}")
        lines += [f"  {line}" for line in variant_summary(record)]
    lines.append(HOW_TO_RUN.format(chapter=CHAPTER_ID))
    lines.append(f"on a GPU machine: {gpu_command()}")
    return "\n".join(lines)


def check_record_body(report: dict) -> dict:
    return {"measurement": "equality check of NF4 codes and values against bitsandbytes on a fixed tensor; no model",
            "tensor": {"shape": report["shape"], "dtype": "float32", "seed": 26, "blocksize": report["blocksize"]},
            "comparison": report}


def trainable_parameter_check(report_fn: Callable, record: dict) -> dict:
    """Run `report_fn(rows, compute_dtype)` (TODO 4) on a record's parameter table and compare its
    trainable count with peft's own count in the same record."""
    chapter = record["chapter_measurements"]
    report = report_fn(chapter["parameters"], chapter["compute_dtype"])
    peft_count = record["parameters"]["trainable"]
    return {"variant": record["variant"]["name"], "verdict": report["verdict"],
            "frozen_4bit": len(report["frozen_4bit"]), "trainable_parameters": report["parameters"]["trainable"],
            "peft_trainable": peft_count, "agrees_with_peft": report["parameters"]["trainable"] == peft_count}


def account_check(account_fn: Callable, record: dict) -> dict:
    """TODO 3 on the record's own 4-bit shapes and kept parameters, next to the bytes measured from the tensors."""
    chapter = record["chapter_measurements"]
    rows = chapter["parameters"]
    base = [row for row in rows if "lora_" not in row["name"]]
    shapes = [tuple(row["shape"]) for row in base if row["storage"] == "nf4"]
    kept = sum(math.prod(row["shape"]) for row in base if row["storage"] != "nf4")
    quantisation_info = chapter.get("quantisation") or {}
    ours = account_fn(shapes, kept, blocksize=quantisation_info.get("blocksize") or 64,
                      double_quant=bool(quantisation_info.get("double_quant")))
    measured = chapter["base_storage_bytes"]["measured"]["total_bytes"]
    return {"variant": record["variant"]["name"], "account_total_bytes": ours["total_bytes"],
            "measured_total_bytes": measured, "agrees": ours["total_bytes"] == measured}


# ---- the decision, from the records (the chapter's functions ran inside the stage) ------------------------

EXPECTED_VERDICT = {"nf4_base": "qlora", "bf16_base": "lora"}


def decide(records: list[dict]) -> dict:
    """accept_mechanism / reject for the stage, from its two records: every variant ended ok with its base
    unchanged and its adapter trained; the chapter's `trainable_report` names the setup
    (EXPECTED_VERDICT) and counts what peft counts; its `nf4_memory_account` predicts the measured bytes;
    on the NF4 base its `nf4_quantise` gives the codes bitsandbytes stored and its `nf4_reconstruct` the
    values bitsandbytes dequantises. Returns `{"decision", "reasons"}` (each reason names the variant)."""
    reasons = []
    for record in records:
        name = (record.get("variant") or {}).get("name", "?")
        if record.get("status") != "ok":
            reasons.append(f"{name}: status {record.get('status')} ({record.get('error')})")
            continue
        hashes = record.get("hashes") or {}
        if not (hashes.get("base_unchanged") and hashes.get("adapter_changed")):
            reasons.append(f"{name}: base unchanged {hashes.get('base_unchanged')}, adapter changed "
                           f"{hashes.get('adapter_changed')}")
        checks = (record.get("chapter_measurements") or {}).get("chapter_functions")
        if checks is None:
            reasons.append(f"{name}: the record has no result of the chapter's functions")
            continue
        report, account, quantise = checks["trainable_report"], checks["memory_account"], checks["quantise"]
        if name in EXPECTED_VERDICT and report["verdict"] != EXPECTED_VERDICT[name]:
            reasons.append(f"{name}: trainable_report says {report['verdict']}, expected {EXPECTED_VERDICT[name]}")
        if not report["agrees_with_peft"]:
            reasons.append(f"{name}: trainable_report counts {report['trainable']}, peft {report['peft_trainable']}")
        if not account["agrees"]:
            reasons.append(f"{name}: nf4_memory_account predicts {account['total_bytes']} bytes, measured "
                           f"{account['measured_total_bytes']}")
        if quantise is not None and not quantise["agrees"]:
            reasons.append(f"{name}: nf4_quantise / nf4_reconstruct differ from bitsandbytes "
                           f"({quantise['codes_mismatched']} of {quantise['codes_compared']} codes, values off by "
                           f"{quantise['dequantised_max_diff_over_absmax']:.3g} of the absmax)")
    if not records:
        reasons.append("no record to decide from")
    return {"decision": "reject" if reasons else "accept_mechanism", "reasons": reasons}
