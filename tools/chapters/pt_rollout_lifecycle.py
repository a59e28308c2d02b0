"""PT-ROLLOUT-LIFECYCLE's Step 5: identity, versions and admissions in the shared verl record.

    lifecycle_table(summary)       the page's table of the record (`read_summary(path, "lifecycle")`)
    lifecycle_sentences(summary)   the interpretation, one sentence per fact, every number from the record
    recheck_admissions(...)        every admission recomputed with the chapter's own functions
    recheck_record_body(...)       the page's own record: lineage to the shared record and the recomputation
    draw_drift(summary)            each frozen rollout's behaviour drift against the threshold

Running or reading the shared record is `tools.chapters.verl_pages` (shared with PT-RL-SYSTEM);
the sentences come from the course's string table (`lesson_text.toml`, section `pt_rollout_lifecycle`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

import matplotlib.pyplot as plt

from tools.chapters.lesson_text import text
from tools.chapters.verl_pages import (
    SharedRecord,
    agreement_triple,
    check_lines,
    checks_sentence,
    evidence_sentence,
    figure_title,
    header_line,
    value_or_null,
)
from tools.core.records import lineage_entry

# ---------------------------------------------------------------------------
# The table and the sentences
# ---------------------------------------------------------------------------

def lifecycle_table(summary: Mapping[str, Any]) -> str:
    """The lifecycle page's view of the record: identity, versions, agreement, admission."""
    frozen, limits = summary["frozen_rollouts"], summary["same_version_limits"]
    lines = [header_line(summary), f"tasks {summary['task_version']}, pool sha256 {summary['pool_sha256'][:16]}...",
             f"frozen rollouts: {frozen['count']} at policy version {frozen['policy_version']}, sha256 "
             f"{frozen['sha256'][:16]}..., temperature {frozen['temperature']}, seed {frozen['seed']}, response cap "
             f"{frozen['response_token_cap']} tokens; parsed {frozen['parsed']}, correct {frozen['correct']}, "
             f"finish reasons {frozen['finish_reasons']}",
             f"limits: same-version mean |error| <= {limits['mean_abs']}, p99 |error| <= {limits['p99_abs']}; "
             f"behaviour drift <= {summary['behaviour_drift_threshold']}", "", *check_lines(summary)]
    rows = [("initial LoRA sha256", lambda g: g["initial_lora_sha256"][:16]),
            ("updated LoRA sha256", lambda g: g["updated_lora_sha256"][:16]),
            ("changed tensors", lambda g: f"{g['changed_tensor_count']}/{g['lora_tensor_count']}"),
            ("versions frozen/trainer/engine", lambda g: "{frozen}/{trainer_after_update}/{engine_after_sync}"
             .format(**g["policy_version"])),
            ("engine reported (gen / sync)", lambda g: "{generation}/{post_sync_generation}"
             .format(**g["engine_reported_versions"])),
            ("before update mean/p99/max", lambda g: agreement_triple(g["same_version_before_update"])),
            ("after sync mean/p99/max", lambda g: agreement_triple(g["same_version_after_sync"])),
            ("admitted / rejected", lambda g: f"{g['admitted']} / {g['rejected']}"),
            ("update loss", lambda g: "null" if g["update_loss"] is None else f"{g['update_loss']:.4f}")]
    groups = summary["groups"]
    lines += ["", f"{'':<32}" + "".join(f"{name:>30}" for name in groups)]
    lines += [f"{label:<32}" + "".join(f"{getter(entry)!s:>30}" for entry in groups.values()) for label, getter in rows]
    comparison = summary["updated_lora_comparison"]
    lines.append(f"updated LoRA, release vs retain: relative difference {value_or_null(comparison['relative_difference'], 4)} "
                 f"(tolerance {comparison['tolerance']}), bit-identical {comparison['bit_identical']}")
    return "\n".join(lines)



def _agreement_sentence(entry: Mapping[str, float], limits: Mapping[str, float]) -> str:
    """One same-version agreement against the limits: mean and p99 are judged, the maximum only recorded."""
    within = entry["mean_abs_error"] <= limits["mean_abs"] and entry["p99_abs_error"] <= limits["p99_abs"]
    return text("pt_rollout_lifecycle.agreement_within" if within else "pt_rollout_lifecycle.agreement_beyond",
                mean=entry["mean_abs_error"], p99=entry["p99_abs_error"], max=entry["max_abs_error"],
                limit_mean=limits["mean_abs"], limit_p99=limits["p99_abs"])


def _lora_closeness(comparison: Mapping[str, Any]) -> str:
    if comparison["bit_identical"]:
        return text("pt_rollout_lifecycle.lora_identical")
    relative, tolerance = comparison["relative_difference"], comparison["tolerance"]
    within = relative is not None and relative <= tolerance
    return text("pt_rollout_lifecycle.lora_within_tolerance" if within else "pt_rollout_lifecycle.lora_beyond_tolerance",
                relative=value_or_null(relative, 4), tolerance=tolerance)


def _tensor_kinds_sentence(groups: Mapping[str, Any]) -> str | None:
    """Which kinds of LoRA tensor changed; only `lora_B` is the expected first update from a zero B."""
    kinds = Counter("lora_A" if "lora_A" in name else "lora_B" if "lora_B" in name else "other"
                    for entry in groups.values() for name in entry["changed_tensors"])
    if not kinds:
        return None
    if set(kinds) == {"lora_B"}:
        return text("pt_rollout_lifecycle.only_lora_b")
    return text("pt_rollout_lifecycle.tensor_kinds",
                kinds=", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())))


def lifecycle_sentences(summary: Mapping[str, Any]) -> list[str]:
    """The lifecycle page's interpretation, one sentence per fact, every number from the record."""
    checks, groups, frozen = summary["checks"], summary["groups"], summary["frozen_rollouts"]
    limits = summary["same_version_limits"]
    identity = ("pt_rollout_lifecycle.identity_shared" if checks["frozen_rollouts_shared"]
                else "pt_rollout_lifecycle.identity_not_shared")
    lines = [evidence_sentence(summary), checks_sentence(summary),
             text(identity, count=frozen["count"], policy_version=frozen["policy_version"], sha256=frozen["sha256"][:12])]
    for group, entry in groups.items():
        lines.append(text("pt_rollout_lifecycle.same_version", group=group,
                          tokens=entry["same_version_before_update"]["token_count"],
                          before=_agreement_sentence(entry["same_version_before_update"], limits),
                          after=_agreement_sentence(entry["same_version_after_sync"], limits)))
    initial = {entry["initial_lora_sha256"] for entry in groups.values()}
    updated = {entry["updated_lora_sha256"] for entry in groups.values()}
    lines.append(text(
        "pt_rollout_lifecycle.parameters",
        tensors=", ".join(f"`{g}` {e['changed_tensor_count']}/{e['lora_tensor_count']}" for g, e in groups.items()),
        initial=text("pt_rollout_lifecycle.initial_same" if len(initial) == 1 else "pt_rollout_lifecycle.initial_differ"),
        changed=text("pt_rollout_lifecycle.update_changed" if initial.isdisjoint(updated)
                     else "pt_rollout_lifecycle.update_unchanged"),
        closeness=_lora_closeness(summary["updated_lora_comparison"])))
    kinds = _tensor_kinds_sentence(groups)
    if kinds:
        lines.append(kinds)
    for group, entry in groups.items():
        versions, reported = entry["policy_version"], entry["engine_reported_versions"]
        lags = sorted({d["version_lag"] for d in entry["admission_decisions"]})
        lines.append(text("pt_rollout_lifecycle.versions", group=group, frozen=versions["frozen"],
                          trainer=versions["trainer_after_update"], engine=versions["engine_after_sync"],
                          generation=reported["generation"], post_sync=reported["post_sync_generation"],
                          lags=", ".join(map(str, lags))))
    lines.append(text("pt_rollout_lifecycle.admission", threshold=summary["behaviour_drift_threshold"],
                      groups=", ".join(text("pt_rollout_lifecycle.group_admission", group=g, admitted=e["admitted"],
                                            rejected=e["rejected"]) for g, e in groups.items())))
    if frozen["parsed"] == 0:
        lines.append(text("pt_rollout_lifecycle.frozen_unparsed"))
    else:
        lines.append(text("pt_rollout_lifecycle.frozen_parsed", parsed=frozen["parsed"], correct=frozen["correct"],
                          truncated=frozen["truncated"]))
    lines.append(text("pt_rollout_lifecycle.cannot_infer"))
    return lines


# ---------------------------------------------------------------------------
# The recomputation with the chapter's own functions
# ---------------------------------------------------------------------------

def recheck_admissions(summary: Mapping[str, Any], check_freshness: Callable, advance_state: Callable, *,
                       max_version_lag: int = 1) -> dict:
    """Recompute every admission of the record with the chapter's `check_rollout_freshness` and
    `advance_rollout_state` (sampled -> scored -> admitted | rejected), and compare with the tool's.

    `max_version_lag` is 1: the experiment takes exactly one update between sampling and re-scoring.
    Returns `{inputs, groups: {group: {admitted, rejected, agreeing, total, record_admitted,
    record_rejected, verdicts}}, consistent}`.
    """
    drift_limit = summary["behaviour_drift_threshold"]
    groups = {}
    for group, entry in summary["groups"].items():
        version = entry["policy_version"]["trainer_after_update"]
        states, agree, verdicts = Counter(), 0, []
        for rollout, current, decision in zip(summary["rollouts"], entry["rescored_after_update"],
                                              entry["admission_decisions"], strict=True):
            fresh = check_freshness(rollout, version, current, max_version_lag=max_version_lag, max_drift=drift_limit)
            item = {"rollout_id": rollout["rollout_id"], "state": "sampled",
                    "policy_version": rollout["policy_version"], "history": ["sampled"]}
            item = advance_state(item, {"type": "score", "scored_version": version})
            item = advance_state(item, {"type": "admit"} if fresh["admitted"]
                                 else {"type": "reject", "reason": ", ".join(fresh["reasons"])})
            states[item["state"]] += 1
            agree += item["state"] == decision["state"] and item["rollout_id"] == decision["rollout_id"]
            verdicts.append({"rollout_id": item["rollout_id"], "state": item["state"],
                             "version_lag": fresh["version_lag"], "behaviour_drift": fresh["behaviour_drift"],
                             "reasons": fresh["reasons"], "record_state": decision["state"]})
        groups[group] = {"admitted": states["admitted"], "rejected": states["rejected"], "agreeing": agree,
                         "total": len(verdicts), "record_admitted": entry["admitted"],
                         "record_rejected": entry["rejected"], "verdicts": verdicts}
    return {"inputs": {"behaviour_drift_threshold": drift_limit, "max_version_lag": max_version_lag},
            "groups": groups, "consistent": all(g["agreeing"] == g["total"] for g in groups.values())}


def recheck_sentence(recheck: Mapping[str, Any]) -> str:
    groups = text("pt_rollout_lifecycle.clause_separator").join(
        text("pt_rollout_lifecycle.recheck_group", group=group, admitted=g["admitted"], rejected=g["rejected"],
             agreeing=g["agreeing"], total=g["total"])
        for group, g in recheck["groups"].items())
    return text("pt_rollout_lifecycle.recheck", groups=groups)


def recheck_record_body(shared: SharedRecord, recheck: Mapping[str, Any]) -> dict:
    """The body of the lifecycle page's record: lineage to the shared record and the recomputation."""
    return {
        "measurement": ("none: a recomputation of the shared verl record's admissions with this chapter's reference "
                        "functions; the measurements and their evidence level are the shared record's"),
        "inputs": {"shared_record": lineage_entry(shared.path, shared.path.parent.parent),
                   "shared_record_origin": shared.origin, "shared_schema_version": shared.record["schema_version"],
                   "shared_evidence_level": shared.record["evidence_level"], **recheck["inputs"]},
        "results": {group: dict(values) for group, values in recheck["groups"].items()},
        "consistent_with_shared_record": recheck["consistent"],
    }


# ---------------------------------------------------------------------------
# The figure
# ---------------------------------------------------------------------------

def draw_drift(summary: Mapping[str, Any]):
    """Each frozen rollout's behaviour drift after the update, per group, against the threshold."""
    threshold, groups = summary["behaviour_drift_threshold"], summary["groups"]
    fig, axes = plt.subplots(1, len(groups), figsize=(12, 4), sharey=True, squeeze=False)
    for ax, (group, entry) in zip(axes[0], groups.items()):
        decisions = sorted(entry["admission_decisions"], key=lambda d: d["behaviour_drift"])
        ax.bar(range(len(decisions)), [d["behaviour_drift"] for d in decisions],
               color=["tab:green" if d["state"] == "admitted" else "tab:red" for d in decisions])
        ax.axhline(threshold, color="black", linestyle="--", label=f"threshold = {threshold:g}")
        ax.set_title(f"{group}: {entry['admitted']} admitted (green), {entry['rejected']} rejected (red)")
        ax.set_xlabel("frozen rollouts, sorted by drift")
        ax.legend(loc="upper left")
    axes[0][0].set_ylabel("behaviour drift after the update\n(mean |delta log-prob| over action tokens)")
    fig.suptitle(figure_title(summary))
    fig.tight_layout()
    return fig
