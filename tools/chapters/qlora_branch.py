"""Project 65 (QLoRA low-resource branch): what the notebook shows around its three gates.

The learner writes the gates (`paired_deltas`, `capacity_gain`, `branch_decision`); the branch stage
(`tools.experiments.sft_chain.qlora`) trains the pairs and decides with them (the notebook passes its
functions through the plan's mechanism). This module reads the pairs back, re-decides them, draws
them, words the findings (`lesson_text`, section `qlora_branch`), and checks the 4-bit base against
bitsandbytes: the bytes its `Linear4bit` layers hold against chapter 26's account, and its
dequantised weights against the bf16 weights within NF4's rounding bound. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.core.effects import describe as describe_effect
from tools.core.effects import paired_effect
from tools.experiments.sft_chain import qlora as stage

CHAPTER_ID = stage.CHAPTER_ID


def _runs(pairs: Mapping) -> dict:
    return {base: {int(seed): run for seed, run in by_seed.items()} for base, by_seed in pairs["runs"].items()}


def _shown(value, form=".3f") -> str:
    return "-" if value is None else format(value, form)


def pairs_table(pairs: Mapping) -> str:
    """The two bases without an adapter, then every (seed, base) run: status, the task's exact match (the
    gates' quality), the base skill's, step time, CUDA peak, bytes the base holds."""
    lines = [f"{'seed':>4} {'base':<5}{'status':>7}{'task EM':>9}{'skill EM':>9}{'ms/step':>9}{'peak alloc':>12}"
             f"{'base bytes':>12}"]
    for base in stage.BASES:
        row = pairs["bases"][base]
        lines.append(f"{'-':>4} {base:<5}{row['status']:>7}{_shown(row.get('quality')):>9}"
                     f"{_shown(row.get('regression')):>9}{'(no adapter)':>21}{row.get('base_tensor_bytes', '-'):>12}")
    runs = _runs(pairs)
    for seed in pairs["seeds"]:
        for base in stage.BASES:
            run = runs[base][seed]
            step = run.get("step_time_s")
            peak = run.get("peak_allocated_bytes")
            lines.append(f"{seed:>4} {base:<5}{run['status']:>7}{_shown(run.get('quality')):>9}"
                         f"{_shown(run.get('regression')):>9}{_shown(None if step is None else step * 1000, '.1f'):>9}"
                         f"{'-' if peak is None else peak:>12}{run.get('base_tensor_bytes', '-'):>12}")
    return "\n".join(lines)


def effects(pairs: Mapping) -> dict:
    """Paired effects over the seeds where both bases ran: the NF4 base minus the bf16 base on the task
    and on the base skill (`tools.core.effects`); empty when fewer than two seeds paired."""
    runs = _runs(pairs)
    seeds = [seed for seed in pairs["seeds"] if runs["nf4"][seed]["status"] == runs["bf16"][seed]["status"] == "ok"]
    if len(seeds) < 2:
        return {}
    return {key: paired_effect({s: runs["nf4"][s][key] for s in seeds}, {s: runs["bf16"][s][key] for s in seeds},
                               metric=f"{key}: nf4 minus bf16")
            for key in ("quality", "regression")}


def findings(pairs: Mapping) -> list[str]:
    """The page's sentences about the pairs (Simplified Chinese, from `lesson_text`)."""
    bases = pairs["bases"]
    lines = []
    if all(bases[base]["status"] == "ok" for base in stage.BASES):
        lines.append(lesson_text.text("qlora_branch.baseline", bf16=bases["bf16"]["quality"],
                                      nf4=bases["nf4"]["quality"], bf16_skill=bases["bf16"]["regression"],
                                      nf4_skill=bases["nf4"]["regression"]))
    found = effects(pairs)
    if found:
        lines.append(lesson_text.text("qlora_branch.paired", quality=describe_effect(found["quality"]),
                                      skill=describe_effect(found["regression"])))
    else:
        lines.append(lesson_text.text("qlora_branch.unpaired"))
    chain_steps = stage.selection.shared_config(pairs.get("run_mode", "cpu_smoke"))["steps"]
    lines.append(lesson_text.text("qlora_branch.difference", rank=pairs["adapter"]["rank"],
                                  steps=pairs["adapter"]["steps"], chain_steps=chain_steps))
    return lines


def recheck(pairs: Mapping, paired_deltas: Callable, capacity_gain: Callable, branch_decision: Callable) -> dict:
    """The record's pairs decided again with the given functions (the notebook's)."""
    from types import SimpleNamespace

    gates = SimpleNamespace(paired_deltas=paired_deltas, capacity_gain=capacity_gain, branch_decision=branch_decision)
    run_mode = "real_gpu" if pairs["ladders"]["bf16"] else "cpu_smoke"
    return stage.gate(_runs(pairs), pairs["ladders"], run_mode, gates=gates)


def storage_ratio(pairs: Mapping) -> float | None:
    """Bytes the NF4 base holds over the bf16 base's (first seed), counted from the tensors."""
    runs = _runs(pairs)
    seed = pairs["seeds"][0]
    nf4, bf16 = runs["nf4"][seed].get("base_tensor_bytes"), runs["bf16"][seed].get("base_tensor_bytes")
    return nf4 / bf16 if nf4 and bf16 else None


def framework_check(model_id: str = "tiny") -> dict:
    """The NF4 base as bitsandbytes built it (through transformers' BitsAndBytesConfig) against chapter
    26's account and its own bf16 weights:

    - bytes: the codes and constants its Linear4bit layers hold plus the kept tensors
      (chapter 26's `storage_bytes`, measured from the tensors) equal the account's prediction for
      the same shapes (`predicted_bytes`), exactly;
    - values: every layer dequantised by `bitsandbytes.functional.dequantize_4bit` differs from the
      bf16 weight by at most half the widest gap between NF4 levels times its block's absmax (the
      bound of rounding to the nearest level), plus bf16's own rounding.
    """
    import bitsandbytes
    import bitsandbytes.functional as bnbf

    from tools.experiments.sft_chain.training import load_base, one_thread_on_cpu
    from tools.experiments.sft_training.quantisation import NF4_LEVELS, predicted_bytes, storage_bytes

    half_gap = max(b - a for a, b in zip(NF4_LEVELS, NF4_LEVELS[1:])) / 2
    with one_thread_on_cpu("cpu"):
        nf4, _, _ = load_base(model_id, "local", "nf4", "cpu")
        bf16, _, _ = load_base(model_id, "local", "bfloat16", "cpu")
    measured, predicted = storage_bytes(nf4), predicted_bytes(nf4)
    reference = dict(bf16.named_modules())
    worst = 0.0
    layers = 0
    for name, module in nf4.named_modules():
        if type(module).__name__ != "Linear4bit":
            continue
        layers += 1
        weight = reference[name].weight.detach().float()
        restored = bnbf.dequantize_4bit(module.weight.data, module.weight.quant_state).float()
        absmax = weight.abs().reshape(-1, 64).amax(dim=1) if weight.numel() % 64 == 0 else weight.abs().max()
        bound = (half_gap * absmax).repeat_interleave(64).reshape(weight.shape) if weight.numel() % 64 == 0 \
            else half_gap * absmax
        excess = ((restored - weight).abs() - bound - 1e-2 * weight.abs()).max().item()
        worst = max(worst, excess)
    return {"bitsandbytes": bitsandbytes.__version__, "layers": layers,
            "measured_bytes": measured["total_bytes"], "predicted_bytes": predicted["total_bytes"],
            "bytes_equal": measured["total_bytes"] == predicted["total_bytes"],
            "bf16_bytes": predicted["bf16_bytes"], "worst_excess_over_bound": worst, "values_within_bound": worst <= 0}


def framework_lines(check: Mapping) -> str:
    return "\n".join([
        f"bitsandbytes {check['bitsandbytes']}: {check['layers']} Linear4bit layers built by transformers' "
        "BitsAndBytesConfig (nf4, double quantisation)",
        f"  bytes held {check['measured_bytes']} vs chapter 26's account {check['predicted_bytes']} -> equal "
        f"{check['bytes_equal']} (the same base in bf16: {check['bf16_bytes']})",
        f"  dequantize_4bit vs the bf16 weights: worst excess over the NF4 rounding bound "
        f"{check['worst_excess_over_bound']:.2e} -> within bound {check['values_within_bound']}",
    ])


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 65."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    lines.append(f"scope {record['decision'].get('scope')}; bitsandbytes path {record.get('bitsandbytes_path')}")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw_pairs(pairs: Mapping):
    """Step 5: per seed, NF4 against bf16: the quality and step time side by side, and the bytes each
    base holds (counted from the tensors; a CUDA peak, when measured, is drawn beside it)."""
    import matplotlib.pyplot as plt

    runs = _runs(pairs)
    seeds = pairs["seeds"]
    key = "quality"
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    colours = {"bf16": "#8fc1e3", "nf4": "#ffcc80"}
    for offset, base in ((-0.2, "bf16"), (0.2, "nf4")):
        positions = [index + offset for index in range(len(seeds))]
        axes[0].bar(positions, [runs[base][s].get(key) or 0 for s in seeds], width=0.4,
                    color=colours[base], label=base)
        axes[1].bar(positions, [1000 * (runs[base][s].get("step_time_s") or 0) for s in seeds], width=0.4,
                    color=colours[base], label=base)
    bytes_held = [runs[base][seeds[0]].get("base_tensor_bytes") or 0 for base in stage.BASES]
    axes[2].bar(stage.BASES, bytes_held, color=[colours[base] for base in stage.BASES])
    peaks = [runs[base][seeds[0]].get("peak_allocated_bytes") for base in stage.BASES]
    if all(peak is not None for peak in peaks):
        axes[2].plot(stage.BASES, peaks, "k^", label="CUDA peak allocated")
        axes[2].legend(fontsize=8)
    for base, colour in (("bf16", "#2980b9"), ("nf4", "#e67e22")):
        if pairs["bases"][base].get("quality") is not None:
            axes[0].axhline(pairs["bases"][base]["quality"], color=colour, linestyle="--", linewidth=1,
                            label=f"{base} base, no adapter")
    for axis, title, unit in ((axes[0], "task exact match per seed (validation)", "answer exact match"),
                              (axes[1], "step time per seed", "ms"),
                              (axes[2], "bytes the base holds (tensors)", "bytes")):
        axis.set_title(title)
        axis.set_ylabel(unit)
    for axis in axes[:2]:
        axis.set_xticks(range(len(seeds)), [f"seed {s}" for s in seeds])
        axis.legend(fontsize=8)
    decision = pairs["gating"]["decision"]
    fig.suptitle(f"65 QLoRA branch: {decision['decision']} {decision['reasons']}")
    fig.tight_layout()
    return fig


SCENARIOS = {
    "0.5B (reported)": {"deltas": {"paired": [1, 2, 3], "mean": {"memory_change": -0.061, "step_time_change": 0.428,
                                                                  "quality_delta": 0.0}},
                        "capacity": {"largest": {"bf16": 8, "nf4": 8}, "measured": True}, "required_batch": 8},
    "1.5B (reported)": {"deltas": {"paired": [1, 2, 3], "mean": {"memory_change": -0.234, "step_time_change": 0.3,
                                                                  "quality_delta": 0.0}},
                        "capacity": {"largest": {"bf16": 4, "nf4": 8}, "measured": True}, "required_batch": 8},
}
"""Step 3: the two situations the original course reported, as gate inputs (its step-time change of
the 1.5B run and both quality deltas are not given there; the values above only place the case)."""
