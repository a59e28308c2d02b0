"""PT-RL-SYSTEM's Step 5: stage timing and engine state residency in the shared verl record.

    system_table(summary)       the page's table of the record (`read_summary(path, "system")`)
    system_sentences(summary)   the interpretation, one sentence per fact, every number from the record
    draw_timeline(summary)      stage events per group on one clock, engine events, memory samples below

Running or reading the shared record is `tools.chapters.verl_pages` (shared with PT-ROLLOUT-LIFECYCLE);
the sentences come from the course's string table (`lesson_text.toml`, section `pt_rl_system`).
"""

from __future__ import annotations

from typing import Any, Mapping

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tools.chapters.lesson_text import text
from tools.chapters.verl_pages import (
    backticked,
    check_lines,
    checks_sentence,
    evidence_sentence,
    figure_title,
    header_line,
    value_or_null,
)

# ---------------------------------------------------------------------------
# The table and the sentences
# ---------------------------------------------------------------------------

def system_table(summary: Mapping[str, Any]) -> str:
    """The system page's view: sampler, peaks, per-phase timing and peaks, engine state events."""
    sampler, settling = summary["sampler"], summary["memory_settling"]
    lines = [header_line(summary), "", *check_lines(summary), "",
             f"sampler: every {sampler['interval_s']} s, {sampler['sample_count']} samples, GPU source "
             f"{sampler['gpu_source']} ({sampler.get('gpu_mapping') or 'no device'}), host source {sampler['host_source']}",
             "whole-segment sampled peaks (MiB): GPU " + ", ".join(
                 f"{k} {value_or_null(v)}" for k, v in summary["sampled_gpu_peak_mb"].items()) + " | host " + ", ".join(
                 f"{k} {value_or_null(v)}" for k, v in summary["sampled_host_peak_mb"].items()),
             f"device memory between groups: baseline {value_or_null(settling['baseline_mb'])} MiB, "
             + "; ".join(f"before {group}: settled {entry.get('settled')}" for group, entry in
                         settling["before_group"].items())]
    for group, entry in summary["groups"].items():
        lines += ["", f"{group}: free_cache_engine={entry['free_cache_engine']}, release calls {entry['release_calls']}, "
                      f"resume calls {entry['resume_calls']}, initialisation {entry['initialisation_s']:.3f} s, "
                      f"step {entry['step_s']:.3f} s",
                  f"  {'phase':<22}{'seconds':>9}{'samples':>9}{'GPU peak MiB':>14}{'host peak MiB':>15}"]
        lines += [f"  {phase:<22}{value['duration_s']:>9.3f}{value['sample_count']:>9}"
                  f"{value_or_null(value['gpu_peak_mb']):>14}{value_or_null(value['host_peak_mb']):>15}"
                  for phase, value in entry["phases"].items()]
    lines += ["", "engine state events:"]
    lines += [f"  {e['group']:<8}{e['event']:<16}{e['call']:<42}tags={e['tags']}  t={e['start_s']:.3f}-{e['end_s']:.3f} s"
              for e in summary["worker_events"]]
    return "\n".join(lines)



def _peak(value) -> str:
    return text("pt_rl_system.peak_null") if value is None else text("pt_rl_system.peak_mib", value=value)


def _pairing_sentence(summary: Mapping[str, Any]) -> str:
    """Whether the two groups differ only in the engine release switch, so a difference can be put on it."""
    hashes = {entry["initial_lora_sha256"] for entry in summary["groups"].values()}
    if len(hashes) != 1:
        return text("pt_rl_system.pairing_failed")
    if not summary["checks"]["config_differs_only_in_free_cache_engine"]:
        return text("pt_rl_system.same_start_other_differences")
    return text("pt_rl_system.same_start", sha256=next(iter(hashes))[:12])


def _engine_sentences(summary: Mapping[str, Any]) -> list[str]:
    """Per group: how often the engine was released and resumed, and through which calls."""
    lines = []
    for group, entry in summary["groups"].items():
        calls = sorted({e["call"] for e in summary["worker_events"]
                        if e["group"] == group and e["event"] in ("engine_release", "engine_resume")})
        counts = {"group": group, "free_cache_engine": entry["free_cache_engine"],
                  "release_calls": entry["release_calls"], "resume_calls": entry["resume_calls"]}
        lines.append(text("pt_rl_system.engine_calls", **counts, calls=", ".join(calls)) if calls
                     else text("pt_rl_system.engine_no_calls", **counts))
    release = summary["engine_description"].get("release")
    if release:
        lines.append(text("pt_rl_system.release_meaning", release=release))
    return lines


def _settling_sentence(settling: Mapping[str, Any]) -> str:
    """Whether the device memory went back to its baseline before each group (null when unmeasured)."""
    if not settling["measured"]:
        return text("pt_rl_system.settling_unmeasured")
    waits = text("pt_rl_system.clause_separator").join(
        text("pt_rl_system.settled" if e["settled"] else "pt_rl_system.not_settled", group=g, waited=e["waited_s"],
             last=e["last_mb"], margin=settling["margin_mb"])
        for g, e in settling["before_group"].items())
    return text("pt_rl_system.settling", baseline=settling["baseline_mb"], groups=waits)


def _peak_sentences(summary: Mapping[str, Any], peak_key: str, memory: str, whole_run: Mapping[str, Any]) -> list[str]:
    """The update phase's sampled peak, then the whole segment's and the phases it fell in, per group."""
    lines = []
    for group, entry in summary["groups"].items():
        update = entry["phases"]["update"]
        lines.append(text("pt_rl_system.update_phase", group=group, seconds=update["duration_s"],
                          samples=update["sample_count"], memory=memory, peak=_peak(update[peak_key])))
    for group, entry in summary["groups"].items():
        peak = whole_run[group]
        at_peak = [phase for phase, value in entry["phases"].items() if peak is not None and value[peak_key] == peak]
        fields = {"group": group, "memory": memory, "peak": _peak(peak)}
        if peak is None:
            lines.append(text("pt_rl_system.whole_peak_unsampled", **fields))
        elif at_peak:
            lines.append(text("pt_rl_system.whole_peak_in_phases", **fields, phases=backticked(at_peak)))
        else:
            lines.append(text("pt_rl_system.whole_peak_between_phases", **fields))
    return lines


def _unsampled_sentence(summary: Mapping[str, Any]) -> str:
    groups = text("pt_rl_system.clause_separator").join(
        text("pt_rl_system.unsampled_group", group=group, phases=", ".join(phases) if phases
             else text("pt_rl_system.unsampled_none"))
        for group, phases in ((group, [phase for phase, value in entry["phases"].items() if value["sample_count"] == 0])
                              for group, entry in summary["groups"].items()))
    return text("pt_rl_system.unsampled", groups=groups)


def system_sentences(summary: Mapping[str, Any]) -> list[str]:
    """The system page's interpretation, one sentence per fact, every number from the record."""
    gpu_sampled = summary["sampler"]["gpu_source"] is not None
    peak_key, memory = (("gpu_peak_mb", text("pt_rl_system.memory_gpu")) if gpu_sampled
                        else ("host_peak_mb", text("pt_rl_system.memory_host")))
    whole_run = summary["sampled_gpu_peak_mb"] if gpu_sampled else summary["sampled_host_peak_mb"]
    lines = [evidence_sentence(summary)]
    if not gpu_sampled:
        lines.append(text("pt_rl_system.no_gpu"))
    lines += [checks_sentence(summary), _pairing_sentence(summary), *_engine_sentences(summary),
              _settling_sentence(summary["memory_settling"])]
    if summary.get("compilation"):
        lines.append(text("pt_rl_system.compilation", compilation=summary["compilation"]))
    lines += [*_peak_sentences(summary, peak_key, memory, whole_run), _unsampled_sentence(summary),
              text("pt_rl_system.interpretation_limits", limits="; ".join(summary["interpretation_limits"]))]
    return lines


# ---------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------

EVENT_STYLES = {"engine_release": ("v", "tab:red", 0.40), "engine_resume": ("^", "tab:green", 0.53),
                "weight_sync": ("D", "black", 0.66)}
"""marker, colour and height above the bar: a resume and the sync right after it stay distinguishable."""


def draw_timeline(summary: Mapping[str, Any]):
    """Stage events per group on one clock (blocks), engine state events (markers), memory samples below."""
    timeline, group_names = summary["timeline"], list(summary["groups"])
    phase_names = list(dict.fromkeys(event["phase"] for event in timeline["stage_events"]))
    palette = plt.get_cmap("tab20")
    colors = {phase: palette(index % 20) for index, phase in enumerate(phase_names)}
    fig, (ax_stage, ax_memory) = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True,
                                              gridspec_kw={"height_ratios": [1.1, 1]})
    for row, group in enumerate(group_names):
        span = [e for e in timeline["stage_events"] if e["group"] == group]
        for event in span:
            ax_stage.broken_barh([(event["start_s"], event["end_s"] - event["start_s"])], (row - 0.3, 0.6),
                                 facecolors=colors[event["phase"]], edgecolor="white", linewidth=0.5)
        for event in (e for e in summary["worker_events"] if e["group"] == group):
            marker, color, height = EVENT_STYLES.get(event["event"], ("o", "grey", 0.40))
            ax_stage.plot(event["start_s"], row + height, marker=marker, color=color, linestyle="none", markersize=6)
        ax_memory.axvspan(min(e["start_s"] for e in span), max(e["end_s"] for e in span), color=f"C{row}", alpha=0.08)
    ax_stage.set_yticks(range(len(group_names)),
                        [f"{g}\n(free_cache_engine={summary['groups'][g]['free_cache_engine']})" for g in group_names])
    ax_stage.set_ylim(-0.6, len(group_names) - 0.15)
    handles = [Patch(color=colors[p], label=p) for p in phase_names]
    handles += [Line2D([], [], marker=m, color=c, linestyle="none", label=e) for e, (m, c, _) in EVENT_STYLES.items()]
    ax_stage.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax_stage.set_title(figure_title(summary))
    for key, label in (("host_used_mb", "host memory used (whole machine)"),
                       ("gpu_used_mb", "GPU memory used (whole device)")):
        points = [(s["t_s"], s[key]) for s in timeline["samples"] if s[key] is not None]
        if points:
            ax_memory.plot(*zip(*points), marker=".", label=label)
        else:
            ax_memory.plot([], [], linestyle="none", label=label.split(" (")[0] + ": not sampled")
    ax_memory.set_xlabel("time since the experiment started (s)")
    ax_memory.set_ylabel("MiB")
    ax_memory.set_title("Resource samples on the same clock (shaded: each group's span)")
    ax_memory.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    return fig
