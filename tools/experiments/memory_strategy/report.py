"""What chapter 76 shows: figures and printed lines, read from the estimate and from the records only.

Every function here reads; none measures or decides. A measurement that was not taken prints as
`null` and plots as a gap (NaN), never as 0.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from tools.experiments.memory_strategy.estimate import activation_groups, estimate_activation_bytes
from tools.experiments.memory_strategy.strategies import STRATEGIES, STRATEGY_PATHS
from tools.measure.training import MIB

PLACES = {
    # strategy: (decoder-layer internals, decoder-layer inputs, outside the layers: final norm + loss)
    "baseline": ("device", "device", "device"),
    "checkpoint": ("recompute", "device", "device"),
    "offload": ("host", "host", "host"),
    "hybrid": ("recompute", "host", "host"),
}
PLACE_STYLE = {
    "device": {"color": "#4c72b0", "text": "kept on device", "hatch": None},
    "host": {"color": "#dd8452", "text": "copied to host", "hatch": None},
    "recompute": {"color": "#d9d9d9", "text": "dropped,\nrecomputed in backward", "hatch": "//"},
}
COSTS = {"baseline": "cost: device memory", "checkpoint": "cost: one more forward per layer",
         "offload": "cost: device<->host copies + waits", "hybrid": "cost: recompute + copies"}


def mib(value: Any) -> float:
    """Bytes (or None) as MiB for a plot; a measurement not taken stays missing (NaN), never 0."""
    return float("nan") if value is None else value / MIB


def show(value: Any, spec: str = "") -> str:
    """A recorded number formatted for print, or 'null' when it was not measured."""
    return "null" if value is None else format(value, spec)


def plot_strategy_places():
    """The four strategies x three groups of saved tensors: where each waits between forward and backward."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    columns = ("decoder-layer internals", "decoder-layer inputs", "final norm + loss")
    fig, ax = plt.subplots(figsize=(12, 3.8))
    for row, (strategy, places) in enumerate(PLACES.items()):
        for column, place in enumerate(places):
            style = PLACE_STYLE[place]
            ax.add_patch(Rectangle((column, -row - 0.45), 0.95, 0.9, facecolor=style["color"], hatch=style["hatch"],
                                   edgecolor="white"))
            ax.text(column + 0.475, -row, style["text"], ha="center", va="center", fontsize=9,
                    color="black" if place == "recompute" else "white")
        ax.text(3.1, -row, COSTS[strategy], va="center", fontsize=9)
    ax.set_xlim(0, 4.6)
    ax.set_ylim(-len(PLACES) + 0.4, 0.6)
    ax.set_yticks([-row for row in range(len(PLACES))], list(PLACES))
    ax.set_xticks([column + 0.475 for column in range(len(columns))], columns)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.legend(handles=[Patch(facecolor=style["color"], hatch=style["hatch"], label=place)
                       for place, style in PLACE_STYLE.items()], loc="lower right", fontsize=8, ncol=3)
    ax.set_title("Where saved activations wait between forward and backward", pad=28)
    fig.tight_layout()
    return fig


def estimate_lines(arch: Mapping[str, int], *, batch_size: int, seq_len: int) -> list[str]:
    """The estimate's groups and each strategy's device / host bytes, as printed lines (MiB)."""
    groups = activation_groups(arch, batch_size=batch_size, seq_len=seq_len)
    lines = [f"batch {batch_size}, seq {seq_len}, fp32 -- saved activation groups (MiB):"]
    lines += [f"  {name:<18} {value / MIB:9.1f}" for name, value in groups.items()]
    for strategy in STRATEGIES:
        estimate = estimate_activation_bytes(arch, batch_size=batch_size, seq_len=seq_len, strategy=strategy)
        lines.append(f"{strategy:<11} device {estimate['device_bytes'] / MIB:8.1f} MiB   "
                     f"host {estimate['host_bytes'] / MIB:8.1f} MiB")
    kept = estimate_activation_bytes(arch, batch_size=batch_size, seq_len=seq_len, strategy="checkpoint")["saved_bytes"]
    lines.append(f"log-softmax share of what checkpoint keeps: {groups['loss_log_softmax'] / kept:.0%}")
    return lines


def plot_estimate(arch: Mapping[str, int], *, batch_size: int = 1, seq_len: int = 768,
                  lengths: Sequence[int] = (512, 768, 1024, 1280, 1536, 1792, 2048), title: str = ""):
    """Left: device / host bytes per strategy at `seq_len`; right: device bytes against length (analytic)."""
    import matplotlib.pyplot as plt

    fig, (ax_split, ax_len) = plt.subplots(1, 2, figsize=(12, 4))
    estimates = {name: estimate_activation_bytes(arch, batch_size=batch_size, seq_len=seq_len, strategy=name)
                 for name in STRATEGIES}
    positions = list(range(len(STRATEGIES)))
    ax_split.bar([p - 0.2 for p in positions], [estimates[n]["device_bytes"] / MIB for n in STRATEGIES], width=0.4,
                 color="#4c72b0", label="on device")
    ax_split.bar([p + 0.2 for p in positions], [estimates[n]["host_bytes"] / MIB for n in STRATEGIES], width=0.4,
                 color="#dd8452", label="on host")
    ax_split.set_xticks(positions, list(STRATEGIES))
    ax_split.set_ylabel("saved activations (MiB)")
    ax_split.set_title(f"{title} batch {batch_size}, seq {seq_len} (analytic)".strip())
    ax_split.legend()
    for name, style in (("baseline", "-o"), ("checkpoint", "-s")):
        ax_len.plot(list(lengths), [estimate_activation_bytes(arch, batch_size=batch_size, seq_len=n, strategy=name)
                                    ["device_bytes"] / MIB for n in lengths], style, label=name)
    ax_len.plot(list(lengths), [0 for _ in lengths], "-^", label="offload / hybrid (device)")
    ax_len.set_xlabel("sequence length (tokens)")
    ax_len.set_ylabel("saved activations on device (MiB)")
    ax_len.set_title("Device-resident saved activations vs length (analytic)")
    ax_len.legend()
    fig.tight_layout()
    return fig


def _hook_kind(name: str) -> tuple[str, str]:
    return ("host", "host_offloaded_bytes") if STRATEGY_PATHS[name]["offload"] else ("device", "device_saved_bytes")


def plot_records(g0: Mapping[str, Any] | None, g1: Mapping[str, Any] | None, label: str):
    """Three panels from the records: memory by length (G1), hook bytes vs estimate by length, G0 ratios."""
    import matplotlib.pyplot as plt

    fig, (ax_mem, ax_est, ax_g0) = plt.subplots(1, 3, figsize=(16, 4.5))
    if g1 is not None:
        by_length = g1["saved_bytes_by_length"]
        lengths = [int(n) for n in by_length]
        peaks = g1["summary"]["memory_by_length"]
        measured = any(row["peak_memory_mb"] is not None for n in peaks for row in peaks[n].values())
        for name in STRATEGIES:
            if measured:
                ys = [peaks[str(n)][name]["peak_memory_mb"] for n in lengths]
                ys = [float("nan") if y is None else y for y in ys]
            else:
                ys = [mib(by_length[str(n)][name]["device_saved_bytes"]) for n in lengths]
            ax_mem.plot(lengths, ys, marker="o", label=name)
            kind, key = _hook_kind(name)
            hook = [mib(by_length[str(n)][name][key]) for n in lengths]
            estimate = [mib(by_length[str(n)][name][f"estimated_{kind}_bytes"]) for n in lengths]
            line = ax_est.plot(lengths, hook, marker="o", label=f"{name} ({kind}, hook)")[0]
            ax_est.plot(lengths, estimate, linestyle="--", color=line.get_color())
        ax_mem.set_title("Peak allocated per strategy (G1)" if measured else
                         "CPU: device memory not measured (null);\nplotted: saved-activation bytes on device (hook)")
        ax_mem.set_ylabel("peak allocated (MiB)" if measured else "saved activations on device (MiB)")
        ax_est.set_title("Saved activations: hook (solid) vs analytic estimate (dashed)")
        ax_est.set_ylabel("MiB")
        for ax in (ax_mem, ax_est):
            ax.set_xlabel("sequence length (tokens)")
            ax.set_xticks(lengths)
            ax.legend(fontsize=8)
    else:
        for ax in (ax_mem, ax_est):
            ax.text(0.5, 0.5, "no G1 record yet", ha="center", va="center", transform=ax.transAxes)
    if g0 is not None:
        saved = g0["saved_bytes"]
        names = [name for name in STRATEGIES if name in saved]
        positions = list(range(len(names)))
        for offset, kind, color in ((-0.2, "device", "#4c72b0"), (0.2, "host", "#dd8452")):
            key = "device_saved_bytes" if kind == "device" else "host_offloaded_bytes"
            values = [mib(saved[name][key]) for name in names]
            ax_g0.bar([p + offset for p in positions], values, width=0.4, color=color, label=f"{kind} (hook)")
            marks = [(p + offset, mib(saved[name][f"estimated_{kind}_bytes"]))
                     for p, name in zip(positions, names) if saved[name][f"estimated_{kind}_bytes"]]
            ax_g0.scatter([x for x, _ in marks], [y for _, y in marks], marker="_", s=400, color="black", zorder=3,
                          label="analytic estimate" if kind == "device" else None)
            for p, name, value in zip(positions, names, values):
                ratio = saved[name][f"{kind}_ratio"]
                if ratio is not None and not math.isnan(value):
                    ax_g0.text(p + offset, value, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=8)
        ax_g0.set_xticks(positions, names)
        ax_g0.set_ylabel("saved activations (MiB)")
        ax_g0.set_title(f"G0 (seq {g0['config']['seq_len']}): measured / estimate")
        ax_g0.legend(fontsize=8)
    else:
        ax_g0.text(0.5, 0.5, "no G0 record yet", ha="center", va="center", transform=ax_g0.transAxes)
    level = (g0 or g1 or {}).get("evidence_level")
    fig.suptitle(f"76 · label {label} · evidence level {level}")
    fig.tight_layout()
    return fig


def g0_lines(g0: Mapping[str, Any]) -> list[str]:
    """The G0 record, line by line: bytes per path, ratios to the estimate, losses, timings."""
    level = g0["evidence_level"]
    saved = g0["saved_bytes"]
    lines = [f"evidence level: {level} -- {g0['measurement_note']}",
             f"G0 {g0['config']['workload_id']} on {g0['config']['hardware_id']} (weights "
             f"{g0['config'].get('weights')}): status {g0['status']}"]
    for name, row in saved.items():
        ratio = row["host_ratio"] if STRATEGY_PATHS[name]["offload"] else row["device_ratio"]
        lines.append(f"  {name:<11} device {show(row['device_saved_bytes'], '>12,')} B   "
                     f"host {show(row['host_offloaded_bytes'], '>12,')} B   recomputed "
                     f"{show(row['recomputed_layer_calls'])}/{show(row['forward_layer_calls'])} layers   "
                     f"measured/estimate {show(ratio, '.3f')}   verified {row['execution_path_verified']}")
    lines.append("  (measured/estimate: the k/v term assumes grouped-query attention handled natively, no repeat_kv "
                 "copy; a ratio well above 1 for baseline or checkpoint points at a repeated k/v)")
    base_bytes = saved.get("baseline", {}).get("device_saved_bytes")

    def share(value: Any, spec: str) -> str:
        return "null" if value is None or not base_bytes else format(value / base_bytes, spec)

    if {"checkpoint", "offload", "hybrid"} <= set(saved):
        lines.append(f"  checkpoint keeps {share(saved['checkpoint']['device_saved_bytes'], '.1%')} of the baseline's "
                     f"device-saved bytes; offload moves {share(saved['offload']['host_offloaded_bytes'], '.2f')}x of "
                     f"them to the host; hybrid moves {share(saved['hybrid']['host_offloaded_bytes'], '.1%')}")
    losses = {c["name"]: (c["loss"], c["eval_loss"]) for c in g0["candidates"] if c["status"] == "ok"}
    if "baseline" in losses:
        spread = max(abs(values[k] - losses["baseline"][k]) for values in losses.values() for k in (0, 1))
        lines.append(f"  training / eval loss of the {len(losses)} completed strategies: max |difference to "
                     f"baseline| = {spread:.2e}")
    for c in g0["candidates"]:
        lines.append(f"  {c['name']:<11} {c['status']:<12} step {show(c['step_time_ms'], '.1f')} ms  "
                     f"{show(c['samples_per_s'], '.2f')} samples/s  peak allocated {show(c['peak_memory_mb'], '.1f')} "
                     f"MiB  reserved {show(c['peak_reserved_mb'], '.1f')} MiB"
                     + ("  (CPU timing, not a GPU result)" if level == "cpu_smoke" else ""))
    copy = g0["config"].get("offload_copy") or {}
    if copy:
        lines.append(f"  offload copies: {copy['copy']} into {copy['host_memory']} host memory; its throughput "
                     "cost is this implementation's")
    return lines


def g1_lines(g1: Mapping[str, Any]) -> list[str]:
    lines = [f"G1: status {g1['status']}, tested lengths {g1['summary']['tested_seq_lens']}, admission "
             f"{[check['status'] for check in g1['admission']['checks']]}"]
    for length, table in g1["saved_bytes_by_length"].items():
        base_bytes, ckpt_bytes = table["baseline"]["device_saved_bytes"], table["checkpoint"]["device_saved_bytes"]
        part = None if base_bytes is None or ckpt_bytes is None else ckpt_bytes / base_bytes
        peak = g1["summary"]["memory_by_length"][length]["baseline"]
        lines.append(f"  seq {length}: baseline keeps {show(base_bytes, ',')} B of activations on the device "
                     f"(peak allocated {show(peak['peak_memory_mb'], '.1f')} MiB, reserved "
                     f"{show(peak['peak_reserved_mb'], '.1f')} MiB); checkpoint keeps {show(part, '.1%')} of them")
    return lines


def close_lines(close: Mapping[str, Any]) -> list[str]:
    scopes = close["decision_scopes"]
    full, mechanism = scopes["full_training_adoption"], scopes["activation_memory_mechanism"]
    gate = close["handoff"]["gate"]
    return [
        f"decision (full training adoption): {full['decision']} -- {full['reason']}",
        f"activation-memory mechanism: {mechanism['decision']} -- {mechanism['reason']} (promotable to full "
        f"training: {mechanism['promotable_to_full_training']})",
        f"handoff to {close['handoff']['consumer']}: {gate['status']} ({gate['reason']}); eligible "
        f"{gate['eligible_candidates']}, rerun {gate['rerun_candidates']}, failed {gate['failed_candidates']}",
        f"  {close['handoff']['throughput_note']}",
        f"sources: G0 sha256 {close['source_g0']['sha256'][:16]}..., G1 sha256 {close['source_g1']['sha256'][:16]}...",
    ]
