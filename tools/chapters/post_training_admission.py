"""Chapter 33 (post-training admission): the assumed inputs of the fixed check, its run, its record,
and the chapter's figures.

The learner writes the three ledgers (`classify_failures`, `baseline_gap_report`,
`choose_entry_stage`); nothing here implements them. `run_fixed_check` takes them as arguments, so
the notebook passes its own reference and a test passes the same functions. Every figure here is
computed from assumed outcomes: no model, GPU or service is measured.

Outcomes are written as strings, one character per observation: "P" passed, "F" failed, and in an
evaluation pattern "-" for a run that did not evaluate the case.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.errors import ConfigError

CHAPTER_ID = "33"
RECORD_STAGE = "stage_selection"
MEASUREMENT_NOTE = "none: pure computation on assumed evaluation outcomes; no model, GPU or service was measured"

CHECK_SETTINGS = {"min_repeats": 3, "min_fail_rate": 0.6, "fix_rate": 0.8, "required_fraction": 1.0,
                  "min_items": 100, "min_mixed_group_share": 0.25}
"""The thresholds of the fixed check, passed by name to the three ledgers."""

STEP1_PATTERNS = {
    "q1": "FFFFFF", "q2": "FFPFFF", "q3": "PPFPPP", "q4": "PPPPPP",
    "q5": "FPFFP-", "q6": "F--F--", "q7": "PFPFPF", "q8": "FFF---",
}
"""Step 1's example: eight cases over six evaluation runs."""
STEP1_SETTINGS = {"min_repeats": 3, "min_fail_rate": 0.6}

REPORTED_ARITHMETIC_SHAPE = {"groups": 8, "answers_per_group": 4, "all_right": 7, "all_wrong": 1}
"""The group shape of the original course's arithmetic rollouts (label rtx5070ti_rollout_arithmetic_v1 in
benchmarks/reported/original_course.toml, where the figure itself lives): 8 prompts, 4 answers each,
7 prompts answered right four times and 1 wrong four times. Used only to draw Step 3's illustration;
a reported figure never feeds a decision."""
SAME_RATE_MIXED_GROUPS = ["PPPF", "PPPP", "PPFP", "PPPP", "FPPP", "PPPP", "PPPP", "PPPF"]
"""An assumed counterpart with the same 28 of 32 right answers, spread so that half the groups differ inside."""

PROJECTS = {
    "json-extraction": {
        "evaluation": {"j1": "FFFFF", "j2": "FFPFF", "j3": "PPPPP", "j4": "PFPPP"},
        "baselines": {"few_shot_prompt": {"j1": "PPP", "j2": "PPP"},
                      "retrieval": {"j1": "FFP", "j2": "PPF"}},
        "sft_baseline": None,
        "feedback": {"demonstrations": 300},
    },
    "unit-conversion": {
        "evaluation": {"u1": "FFFFF", "u2": "FFFPF", "u3": "FPFFF", "u4": "PPPPP", "u5": "F----"},
        "baselines": {"few_shot_prompt": {"u1": "FFF", "u2": "PFF", "u3": "FFP"},
                      "retrieval": {"u1": "PFF", "u2": "FFF", "u3": "PPF"}},
        "sft_baseline": None,
        "feedback": {"demonstrations": 640, "binary_feedback": 40},
    },
    "support-tone": {
        "evaluation": {"t1": "PFPPP", "t2": "PPPFP", "t3": "PPPPP", "t4": "FF---"},
        "baselines": {},
        "sft_baseline": {"format_ok": True, "groups": ["PPPP", "PFPP"]},
        "feedback": {"pairwise_preferences": 1500},
    },
    "sql-repair": {
        "evaluation": {"s1": "FFFFF", "s2": "FFPFF", "s3": "FFFPF", "s4": "PPPPP"},
        "baselines": {"few_shot_prompt": {"s1": "FFF", "s2": "PFF", "s3": "FFF"},
                      "schema_retrieval": {"s1": "FPF", "s2": "PPF", "s3": "FFF"}},
        "sft_baseline": {"format_ok": True, "groups": ["FFPF", "PFFF", "FFFF"]},
        "feedback": {"demonstrations": 200, "verifiable_rewards": 1200},
    },
    "olympiad-proofs": {
        "evaluation": {"p1": "FFFFF", "p2": "FFFFF", "p3": "FFFFP"},
        "baselines": {"few_shot_prompt": {"p1": "FFF", "p2": "FFF", "p3": "FFF"}},
        "sft_baseline": {"format_ok": True, "groups": ["FFFF", "FFFF", "FFFF"]},
        "feedback": {"verifiable_rewards": 400},
    },
    "arithmetic-drills": {
        "evaluation": {"a1": "FFFFF", "a2": "FFFPF", "a3": "PPPPP", "a4": "FFFFF", "a5": "FPFFF", "a6": "FFFFF"},
        "baselines": {"few_shot_prompt": {"a1": "FFF", "a2": "PFF", "a4": "FFF", "a5": "FFP", "a6": "FFF"}},
        "sft_baseline": {"format_ok": True, "groups": ["PPPP", "PPPP", "PPPP", "FFFF", "PPPP"]},
        "feedback": {"verifiable_rewards": 800},
    },
    "product-summaries": {
        "evaluation": {"m1": "FFFFP", "m2": "FFFFF", "m3": "PFFFF", "m4": "PPPFP"},
        "baselines": {"few_shot_prompt": {"m1": "PPP", "m2": "FFF", "m3": "PFF"},
                      "retrieval": {"m1": "PP-", "m2": "PPP", "m3": "PPP"}},
        "sft_baseline": {"format_ok": True, "groups": ["PFPP", "FFPF", "PPFF"]},
        "feedback": {"pairwise_preferences": 2400, "verifiable_rewards": 600, "demonstrations": 90},
    },
}
"""Seven assumed post-training requests (teaching inputs, not measurements): 5 evaluation runs per
case, 3 runs per baseline, the SFT baseline's answers in groups of 4 per prompt, feedback counts."""

_MARKS = {"P": True, "F": False}


def runs_from_patterns(patterns: Mapping[str, str]) -> list[dict]:
    """`{case: "PF-.."}` -> a list of runs `{case: passed}`; "-" leaves the case out of that run."""
    lengths = {len(pattern) for pattern in patterns.values()}
    if len(lengths) > 1:
        raise ConfigError(f"every pattern needs the same number of runs, got lengths {sorted(lengths)}")
    runs = [{} for _ in range(lengths.pop() if lengths else 0)]
    for case, pattern in patterns.items():
        for run, mark in zip(runs, pattern):
            if mark not in "PF-":
                raise ConfigError(f"case {case!r}: unknown outcome mark {mark!r} (use P, F or -)")
            if mark != "-":
                run[case] = _MARKS[mark]
    return runs


def groups_from_patterns(patterns: list[str]) -> list[list[bool]]:
    """`["PPFP", ..]` -> one list of outcomes per prompt group ("-" is not allowed inside a group)."""
    groups = []
    for number, pattern in enumerate(patterns):
        if not pattern or set(pattern) - set(_MARKS):
            raise ConfigError(f"group {number}: {pattern!r} must be a non-empty string of P and F")
        groups.append([_MARKS[mark] for mark in pattern])
    return groups


def sft_baseline_of(project: Mapping) -> dict | None:
    """The `sft_baseline` argument of choose_entry_stage for one project."""
    baseline = project["sft_baseline"]
    if baseline is None:
        return None
    return {"format_ok": baseline["format_ok"], "groups": groups_from_patterns(baseline["groups"])}


def run_fixed_check(classify_failures: Callable, baseline_gap_report: Callable, choose_entry_stage: Callable,
                    projects: Mapping = PROJECTS, settings: Mapping = CHECK_SETTINGS) -> dict:
    """All three ledgers for every project, with the functions given, in project order."""
    results = {}
    for name, project in projects.items():
        failures = classify_failures(runs_from_patterns(project["evaluation"]), min_repeats=settings["min_repeats"],
                                     min_fail_rate=settings["min_fail_rate"])
        baseline = baseline_gap_report(
            failures["stable"], {method: runs_from_patterns(cases) for method, cases in project["baselines"].items()},
            min_repeats=settings["min_repeats"], fix_rate=settings["fix_rate"],
            required_fraction=settings["required_fraction"])
        entry = choose_entry_stage(failures, baseline, sft_baseline_of(project), dict(project["feedback"]),
                                   min_items=settings["min_items"],
                                   min_mixed_group_share=settings["min_mixed_group_share"])
        results[name] = {"failures": failures, "baseline": baseline, "entry": entry}
    return results


def describe_projects(projects: Mapping = PROJECTS, settings: Mapping = CHECK_SETTINGS) -> str:
    """The fixed check's inputs as a learner reads them: one block per project, then the thresholds."""
    def cases(patterns):
        return ", ".join(f"{case} {pattern}" for case, pattern in patterns.items()) or "-"

    lines = []
    for name, project in projects.items():
        baseline = project["sft_baseline"]
        lines.append(name)
        lines.append(f"  evaluation: {cases(project['evaluation'])}")
        lines.append("  baselines:  " + (" | ".join(f"{method}: {cases(patterns)}"
                                                 for method, patterns in project["baselines"].items()) or "none tried"))
        lines.append("  sft:        " + ("none" if baseline is None else
                                         f"format_ok {baseline['format_ok']}, groups {' '.join(baseline['groups'])}"))
        lines.append("  feedback:   " + (", ".join(f"{shape} {count}" for shape, count in project["feedback"].items())
                                         or "none"))
    lines.append("settings: " + ", ".join(f"{key}={value}" for key, value in settings.items()))
    return "\n".join(lines)


def _share(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_table(results: Mapping) -> str:
    """One line per project: stable and flaky cases, best baseline, SFT signal, decision, stage, reasons."""
    header = (f"{'project':<19}{'stable':<16}{'best baseline':<25}{'sft':<10}{'pass':>5}{'mixed':>7}  "
              f"{'decision':<9}{'stage':<11}reasons")
    lines = [header, "-" * len(header)]
    for name, result in results.items():
        failures, baseline, entry = result["failures"], result["baseline"], result["entry"]
        best = baseline["ranking"][0] if baseline["ranking"] else None
        fraction = baseline["per_method"][best]["closed_fraction"] if best else None
        best_text = "-" if best is None else f"{best} ({_share(fraction)})"
        reasons = ", ".join(f"{reason['level']}:{reason['code']}" for reason in entry["reasons"]) or "-"
        lines.append(f"{name:<19}{','.join(failures['stable']) or '-':<16}{best_text:<25}{entry['sft_status']:<10}"
                     f"{_share(entry['pass_rate']):>5}{_share(entry['mixed_group_share']):>7}  "
                     f"{entry['decision']:<9}{entry['stage'] or '-':<11}{reasons}")
    return "\n".join(lines)


def ledger_details(results: Mapping) -> str:
    """Per project: the classes of Step 1 and every baseline's fixed / missing cases and fraction."""
    lines = []
    for name, result in results.items():
        failures, baseline = result["failures"], result["baseline"]
        methods = "; ".join(
            f"{method} {_share(detail['closed_fraction'])} (fixed {detail['fixed'] or '-'}, "
            f"missing {detail['missing'] or '-'})" for method, detail in baseline["per_method"].items()) or "none tried"
        lines.append(f"{name}: stable {failures['stable']}, flaky {failures['flaky']}, "
                     f"insufficient {failures['insufficient']}; baselines: {methods}")
    return "\n".join(lines)


def record_body(results: Mapping, projects: Mapping = PROJECTS, settings: Mapping = CHECK_SETTINGS) -> dict:
    """What the stage_selection record holds after its header: inputs, every ledger, the decisions."""
    decisions = {name: {"decision": result["entry"]["decision"], "stage": result["entry"]["stage"]}
                 for name, result in results.items()}
    proceeding = sorted(f"{name} -> {item['stage']}" for name, item in decisions.items() if item["decision"] == "proceed")
    counts = {level: sum(1 for item in decisions.values() if item["decision"] == level)
              for level in ("proceed", "hold", "reject")}
    return {
        "measurement": MEASUREMENT_NOTE,
        "inputs": {"settings": dict(settings), "projects": dict(projects)},
        "results": dict(results),
        "decisions": decisions,
        "registry_headline": (f"{len(decisions)} assumed requests: {counts['proceed']} proceed "
                              f"({', '.join(proceeding) or 'none'}), {counts['hold']} hold, {counts['reject']} reject"),
    }


def record_summary(record: Mapping) -> list[str]:
    """Lines that show what a stage_selection record concluded (for Step 5's own-run block)."""
    lines = [f"evidence level {record.get('evidence_level')}; {record.get('measurement')}"]
    for name, item in record.get("decisions", {}).items():
        entry = record.get("results", {}).get(name, {}).get("entry", {})
        lines.append(f"{name}: {item['decision']}" + (f" -> {item['stage']}" if item["stage"] else "")
                     + f" (mixed group share {_share(entry.get('mixed_group_share'))})")
    return lines


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

def reported_arithmetic_groups() -> list[str]:
    """Step 3's illustration of the reported shape: 7 groups of "PPPP", then 1 of "FFFF"."""
    shape = REPORTED_ARITHMETIC_SHAPE
    size = shape["answers_per_group"]
    return ["P" * size] * shape["all_right"] + ["F" * size] * shape["all_wrong"]


def group_advantages(groups: list[list[bool]]) -> list[list[float]]:
    """Group-relative advantages before any scaling: each reward (1.0 right, 0.0 wrong) minus its group's mean.

    GRPO divides this by the group's standard deviation (plus a small epsilon, as TRL's GRPOTrainer
    does); a group whose answers all got the same reward has a zero numerator either way."""
    advantages = []
    for group in groups:
        rewards = [1.0 if outcome else 0.0 for outcome in group]
        mean = sum(rewards) / len(rewards)
        advantages.append([reward - mean for reward in rewards])
    return advantages


def draw_outcome_grid(patterns: Mapping[str, str] = STEP1_PATTERNS, min_repeats: int = STEP1_SETTINGS["min_repeats"],
                      min_fail_rate: float = STEP1_SETTINGS["min_fail_rate"]):
    """Step 1: outcomes per run (left), and per case its observations and fail rate over them (right)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    cases = list(patterns)
    codes = {"P": 0, "F": 1, "-": 2}
    width = max(len(pattern) for pattern in patterns.values())
    observed = {case: sum(1 for mark in patterns[case] if mark != "-") for case in cases}
    rates = {case: patterns[case].count("F") / observed[case] for case in cases}
    fig, (ax_grid, ax_rate) = plt.subplots(1, 2, figsize=(12, 4.2))
    ax_grid.imshow([[codes[mark] for mark in patterns[case]] for case in cases],
                   cmap=ListedColormap(["#9ad19a", "#e07b7b", "#d9d9d9"]), vmin=0, vmax=2, aspect="auto")
    ax_grid.set_xticks(range(width), [f"run {index + 1}" for index in range(width)])
    ax_grid.set_yticks(range(len(cases)), cases)
    for row, case in enumerate(cases):
        for column, mark in enumerate(patterns[case]):
            ax_grid.text(column, row, mark, ha="center", va="center", fontsize=9)
    ax_grid.set_title("Outcomes per run (green pass, red fail, grey not evaluated)")
    colors = ["#bdbdbd" if observed[case] < min_repeats else "#5b8db8" for case in cases]
    ax_rate.barh(cases, [rates[case] for case in cases], color=colors)
    for row, case in enumerate(cases):
        ax_rate.text(rates[case] + 0.02, row, f"{patterns[case].count('F')}/{observed[case]} = {rates[case]:.2f}",
                     va="center", fontsize=8)
    ax_rate.axvline(min_fail_rate, color="black", linestyle="--", label=f"min fail rate {min_fail_rate}")
    ax_rate.invert_yaxis()
    ax_rate.set_xlim(0, 1.35)
    ax_rate.set_xlabel("failures / observations (runs that evaluated the case)")
    ax_rate.set_title(f"Grey: fewer than {min_repeats} observations")
    ax_rate.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def draw_prompt_groups(examples: Mapping[str, list[str]]):
    """Step 3: one panel per example, a row per prompt group, each answer's reward and advantage r - mean."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    fig, axes = plt.subplots(1, len(examples), figsize=(6 * len(examples), 4.4), squeeze=False)
    for ax, (title, patterns) in zip(axes[0], examples.items()):
        groups = groups_from_patterns(patterns)
        advantages = group_advantages(groups)
        answers = [outcome for group in groups for outcome in group]
        with_signal = sum(1 for row in advantages if any(value != 0 for value in row))
        ax.imshow([[0 if outcome else 1 for outcome in group] for group in groups],
                  cmap=ListedColormap(["#9ad19a", "#e07b7b"]), vmin=0, vmax=1, aspect="auto")
        for row, values in enumerate(advantages):
            for column, value in enumerate(values):
                ax.text(column, row, f"{value:+.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(groups[0])), [f"answer {index + 1}" for index in range(len(groups[0]))])
        ax.set_yticks(range(len(groups)), [f"prompt {index + 1}" for index in range(len(groups))])
        ax.set_title(f"{title}\n{sum(answers)}/{len(answers)} right; groups with nonzero advantage: "
                     f"{with_signal}/{len(groups)}", fontsize=10)
    fig.suptitle("Reward (green 1, red 0) and group-relative advantage r - group mean in each cell")
    fig.tight_layout()
    return fig


REASON_CODES = ("no_stable_failure", "baseline_closes_gap", "baseline_not_tried", "needs_demonstrations",
                "no_reward_variance", "no_usable_feedback")


def draw_fixed_check(results: Mapping):
    """Step 5: which blocking reasons each project has (left) and its decision (right)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    names = list(results)
    level_code = {"reject": 1, "hold": 2}
    present = [[next((level_code[reason["level"]] for reason in results[name]["entry"]["reasons"]
                      if reason["code"] == code), 0) for code in REASON_CODES] for name in names]
    fig, (ax_reasons, ax_decision) = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [3, 1]})
    ax_reasons.imshow(present, cmap=ListedColormap(["#f5f5f5", "#c0504d", "#f0a040"]), vmin=0, vmax=2, aspect="auto")
    ax_reasons.set_xticks(range(len(REASON_CODES)), REASON_CODES, rotation=20, ha="right")
    ax_reasons.set_yticks(range(len(names)), names)
    ax_reasons.set_title("Blocking reasons found (red: reject level, orange: hold level)")
    colors = {"reject": "#e07b7b", "hold": "#ffcc80", "proceed": "#9ad19a"}
    for row, name in enumerate(names):
        entry = results[name]["entry"]
        text = entry["decision"] + (f" -> {entry['stage']}" if entry["stage"] else "")
        if entry["candidate_stage"] and not entry["stage"]:
            text += f"\n(candidate {entry['candidate_stage']})"
        ax_decision.barh(row, 1, color=colors[entry["decision"]])
        ax_decision.text(0.5, row, text, ha="center", va="center", fontsize=8)
    ax_decision.set_ylim(len(names) - 0.5, -0.5)
    ax_decision.set_xticks([])
    ax_decision.set_yticks([])
    ax_decision.set_title("Decision")
    fig.tight_layout()
    return fig
