"""Chapter 75's page: 76's decision checked in the setup cell, then what Step 5 prints and draws.

The reading, the candidate table and the choice run in `tools.experiments.memory_strategy.budget`
(experiment `memory_budget`); this module checks before any work, reads the record and formats it.
Sentences built from the record come from `lesson_text.toml` (section `memory_budget`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.chapters.lesson_text import text
from tools.experiments.memory_strategy import budget

ILLUSTRATION = [
    {"name": "baseline", "memory_mb": 10400.0, "memory_spread_mb": 60.0, "samples_per_s": 8.0},
    {"name": "checkpoint", "memory_mb": 7600.0, "memory_spread_mb": 40.0, "samples_per_s": 6.4},
    {"name": "offload", "memory_mb": 7900.0, "memory_spread_mb": 90.0, "samples_per_s": 5.0},
    {"name": "hybrid", "memory_mb": 6100.0, "memory_spread_mb": 50.0, "samples_per_s": 4.2},
]
"""A made-up table for Steps 1-3 (not a measurement): a 12 GB card's footprints, in MiB."""


def require_upstream(run, upstream_label: str | None = None, upstream_sha256: str | None = None) -> dict | None:
    """The setup cell's check of 76's decision, its G0 and 73's baseline (None in dry_run, which reads nothing)."""
    if not run.writes_records:
        return None
    return budget.read_upstream(run.results_root, run_mode=run.run_mode, label=run.run_label,
                                upstream_label=upstream_label, expected_sha256=upstream_sha256)


def upstream_lines(upstream: Mapping[str, Any] | None) -> list[str]:
    if upstream is None:
        return ["dry_run: 76's decision is not read (nothing is read or written)"]
    close = upstream["close"]
    return [text("memory_budget.upstream", label=close["run_label"], sha=upstream["close_sha256"][:12],
                 decision=close["decision"]["decision"], gate=close["handoff"]["gate"]["status"])]


def table_lines(candidates: list[Mapping[str, Any]]) -> list[str]:
    base = next((row["samples_per_s"] for row in candidates if row["name"] == "baseline"), None)
    lines = [f"{'strategy':<11}{'memory MiB':>12}{'spread MiB':>12}{'samples/s':>11}{'vs baseline':>12}"]
    for row in candidates:
        ratio = f"{row['samples_per_s'] / base:.2f}" if base else "null"
        lines.append(f"{row['name']:<11}{row['memory_mb']:>12.2f}{row['memory_spread_mb']:>12.2f}"
                     f"{row['samples_per_s']:>11.2f}{ratio:>12}")
    return lines


def segment_lines(segments: list[Mapping[str, Any]]) -> list[str]:
    return [f"  [{segment['from_mb']:.2f}, {'inf' if segment['to_mb'] is None else format(segment['to_mb'], '.2f')}) "
            f"MiB -> {segment['choice'] or 'nothing fits'}" for segment in segments]


def final_sentence(final: Mapping[str, Any], target: float, smallest: float | None) -> str:
    """The sentence of a final decision (the learner's record or the illustration)."""
    decision = final["decision"]
    if decision == "no_fit":
        return text("memory_budget.final_no_fit", target=target, smallest=smallest if smallest is not None else 0.0)
    if decision == "tune":
        return text("memory_budget.final_tune", target=target, choice=final["choice"], headroom=final["headroom_mb"],
                    spread=final["spread_mb"])
    if decision == "keep_baseline":
        return text("memory_budget.final_keep", target=target, headroom=final["headroom_mb"])
    above = (text("memory_budget.above_flip", above=final["flip_above_mb"]) if final["flip_above_mb"] is not None
             else text("memory_budget.above_none"))
    return text("memory_budget.final_adopt", target=target, choice=final["choice"], headroom=final["headroom_mb"],
                spread=final["spread_mb"], cost=final.get("throughput_cost") or 0.0, below=final["flip_below_mb"],
                above=above)


def budget_lines(record: Mapping[str, Any]) -> list[str]:
    """What the budget record says, in reading order."""
    lines = ["functions run: " + ", ".join(f"{name} ({entry['source']})"
                                            for name, entry in sorted(record["mechanism"].items()))]
    axis = record["memory_axis"]
    lines.append(text("memory_budget.axis_modelled", static=axis["static_floor_mb"]) if axis["static_floor_mb"]
                 is not None else text("memory_budget.axis_device"))
    lines += table_lines(record["candidates"])
    if record["status"] != "ok":
        lines.append(text("memory_budget.blocked", reason=record["decision"]["reason"]))
        return lines
    sweep, final, target = record["sweep"], record["final"], record["target"]["budget_mb"]
    lines.append(f"target budget {target:.2f} MiB ({record['target']['rule']}); throughput floor "
                 f"{record['min_throughput_ratio']:.0%} of the baseline")
    lines += segment_lines(sweep["segments"])
    smallest = min((row["memory_mb"] for row in record["candidates"]), default=None)
    points = ", ".join(f"{point:.2f}" for point in sweep["flip_points_mb"]) or "-"
    lines.append(text("memory_budget.flips", points=points))
    lines.append(text("memory_budget.never_chosen", names=", ".join(sweep["never_chosen"]))
                 if sweep["never_chosen"] else text("memory_budget.never_chosen_none"))
    final_view = {**final, "throughput_cost": record["at_target"]["throughput_cost"]}
    lines.append(final_sentence(final_view, target, smallest))
    consistency = record["consistency"]
    if consistency["disagreements"]:
        lines.append(text("memory_budget.consistency_broken", count=len(consistency["disagreements"]),
                          example=f"{consistency['disagreements'][0]['budget_mb']:.2f}"))
    else:
        lines.append(text("memory_budget.consistency_ok", budgets=consistency["budgets_checked"]))
    decision = record["decision"]
    if decision["decision"] == "measure_on_gpu":
        lines.append(text("memory_budget.cpu_not_adopted", proxy=decision["proxy_choice"] or "-",
                          proxy_decision=decision["proxy_decision"]))
        lines.append(text("memory_budget.throughput_note"))
    else:
        lines.append(text("memory_budget.gpu_adopted", decision=decision["decision"]))
    return lines


def plot_sweep(candidates: list[Mapping[str, Any]], sweep: Mapping[str, Any], target: float | None, title: str):
    """The chosen strategy's throughput (vs the baseline) as a step function of the budget; candidates as dots."""
    import matplotlib.pyplot as plt

    base = next(row["samples_per_s"] for row in candidates if row["name"] == "baseline")
    by_name = {row["name"]: row for row in candidates}
    top = max([row["memory_mb"] for row in candidates] + [target or 0.0]) * 1.25 or 1.0
    fig, ax = plt.subplots(figsize=(10, 3.8))
    for segment in sweep["segments"]:
        end = segment["to_mb"] if segment["to_mb"] is not None else top
        if segment["choice"] is None:
            ax.axvspan(segment["from_mb"], end, color="#eeeeee", hatch="//")
            ax.text((segment["from_mb"] + end) / 2, 0.08, "nothing fits", ha="center", fontsize=8)
            continue
        ratio = by_name[segment["choice"]]["samples_per_s"] / base
        ax.hlines(ratio, segment["from_mb"], end, linewidth=3)
        ax.text((segment["from_mb"] + end) / 2, ratio + 0.03, segment["choice"], ha="center", fontsize=8)
    for row in candidates:
        ax.scatter(row["memory_mb"], row["samples_per_s"] / base, color="gray", zorder=3)
        ax.annotate(row["name"], (row["memory_mb"], row["samples_per_s"] / base), textcoords="offset points",
                    xytext=(4, -10), fontsize=8, color="gray")
    for point in sweep["flip_points_mb"]:
        ax.axvline(point, color="gray", linestyle=":", linewidth=0.8)
    if target is not None:
        ax.axvline(target, color="red", linestyle="--", label=f"target {target:.2f} MiB")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xlim(0, top)
    ax.set_ylim(0, 1.2)
    ax.set_xlabel("memory budget (MiB)")
    ax.set_ylabel("throughput of the choice / baseline")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def illustration(target: float = 8000.0) -> dict:
    """The made-up table of Steps 1-3 through the package's functions (an illustration, not a measurement)."""
    sweep = budget.budget_sweep([dict(row) for row in ILLUSTRATION], 0.5)
    final = budget.final_strategy_choice(sweep["segments"], target,
                                         {row["name"]: row["memory_spread_mb"] for row in ILLUSTRATION})
    at_target = budget.choose_under_budget([dict(row) for row in ILLUSTRATION], target, 0.5)
    return {"candidates": ILLUSTRATION, "sweep": sweep, "final": {**final, "throughput_cost": at_target["throughput_cost"]},
            "target": target}
