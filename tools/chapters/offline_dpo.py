"""Project 84 (offline DPO): what the notebook shows around its three functions.

The learner writes `admit_pairs`, `independent_evaluation` and `adoption_decision`; the stage
(`tools.experiments.preference.offline_project`) admits the pairs, trains DPO and its mislabelled
control from 62's adapter, opens the evaluation pairs once and decides with them (the notebook passes
its functions through the plan's mechanism). This module re-decides a run from its records, draws
the held-out pair accuracy, the log-ratios apart and the answers against 62's adapter, words the
findings (`lesson_text`, section `offline_dpo`) and runs the framework check against TRL's DPO loss
with the very functions Step 5 trains with. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.core.effects import describe as describe_effect
from tools.experiments.preference import offline_project as stage

CHAPTER_ID = stage.CHAPTER_ID
TASK_SET, SKILL_SET = stage.TASK_SET, stage.SKILL_SET


# ---- the framework check -------------------------------------------------------------------------

def framework_check(seed: int = 0) -> dict:
    """TRL 1.16's DPO loss and reward statistics after one DPOTrainer step on the tiny model, against the
    package's `sequence_logprobs` and `dpo_loss` (what Step 5 trains with) on the same batch."""
    from tools.chapters import dpo
    from tools.experiments.preference.logprobs import sequence_logprobs
    from tools.experiments.preference.losses import dpo_loss

    result = dpo.trl_dpo_check(sequence_logprobs, dpo_loss, seed=seed)
    result.pop("step", None)
    return result


def framework_lines(result: Mapping) -> str:
    from tools.chapters import dpo

    return "\n".join(dpo.framework_lines(result))


# ---- re-deciding a run from its records ----------------------------------------------------------

def recheck(report: Mapping, admission: Mapping, admit_pairs: Callable, independent_evaluation: Callable,
            adoption_decision: Callable) -> dict:
    """The run's decision reached again with the given functions, from its two records."""
    limits = admission["limits"]
    admitted = admit_pairs(admission["token_counts"]["train"], limits["max_prompt_tokens"], limits["max_length"],
                           limits["max_prompt_truncation"], limits["min_pairs"])
    if report["effects"] is None:
        return {"decision": report["decision"]["decision"], "reasons": report["decision"]["reasons"]}
    evaluated = independent_evaluation(report["candidate_judgements"], report["train_prompts"])
    return adoption_decision(admitted, evaluated, report["effects"]["task_gain"], report["effects"]["base_skill_change"],
                             report["resources"], report["settings"]["regression_tolerance"])


# ---- what the page prints ------------------------------------------------------------------------

def admission_lines(admission: Mapping) -> list[str]:
    lines = [f"limits: {admission['limits']}"]
    for split, result in admission["admission"].items():
        prompt_rate = result["prompt_truncation_rate"]
        lines.append(f"  {split:<11} {len(result['admitted']):>3}/{admission['sizes'][split]:<3} admitted, "
                     f"prompt truncation {'n/a' if prompt_rate is None else f'{prompt_rate:.3f}'} "
                     f"({len(result['prompt_truncated'])} cut), response truncation "
                     f"{result['response_truncation_rate']:.3f}, refused {result['refused']} -> {result['decision']}")
    return lines


def figures_table(report: Mapping) -> str:
    """The baseline row (62's adapter), then every seed of both arms."""
    base = report["baseline"]
    lines = [f"{'row':<22}{'pair acc':>9}{'interval':>18}{'chosen lr':>11}{'rejected lr':>12}{'task EM':>9}"
             f"{'skill EM':>9}{'prefers chosen':>15}",
             f"{'62 adapter (baseline)':<22}{'-':>9}{'-':>18}{'-':>11}{'-':>12}{base[TASK_SET]:>9.3f}"
             f"{base[SKILL_SET]:>9.3f}{base['sequence_preference']:>15.3f}"]
    for arm in stage.ARMS:
        for seed, values in report["arms"][arm].items():
            judged = values["evaluation"]
            low, high = judged["interval"]
            lines.append(f"{arm + ' seed ' + seed:<22}{judged['pair_accuracy']:>9.3f}{f'[{low:.3f}, {high:.3f}]':>18}"
                         f"{judged['chosen_logratio']:>11.3f}{judged['rejected_logratio']:>12.3f}"
                         f"{values[TASK_SET]:>9.3f}{values[SKILL_SET]:>9.3f}{values['sequence_preference']:>15.3f}")
    return "\n".join(lines)


def report_lines(report: Mapping, admission: Mapping) -> str:
    settings = report["settings"]
    lines = admission_lines(admission)
    lines.append(f"training: {settings['train_pairs']} pairs per seed, {settings['updates']} updates, beta "
                 f"{settings['beta']}, learning rate {settings['learning_rate']}, seeds {settings['seeds']}; both arms "
                 "start from 62's adapter (the frozen reference)")
    if report["effects"] is None:
        lines.append("no training: the pairs were not admitted")
        return "\n".join(lines)
    split = report["evaluation_split"]
    lines.append(f"evaluation split: {split['pairs']} pairs, sha256 {split['sha256'][:12]}, opened {split['opened']}; "
                 f"task exact match on {report['task_problems']} held-out problems, base skill on "
                 f"{report['skill_problems']} plain sums")
    lines.append(figures_table(report))
    resources = report["resources"]
    lines.append(f"resources: training memory {resources['peak_memory_bytes']} bytes "
                 f"({report['arms']['dpo'][str(settings['seeds'][0])]['memory_source']}), budget "
                 f"{resources['memory_budget_bytes']}; candidate adapter {resources['adapter_bytes']} bytes, 62's "
                 f"{resources['baseline_adapter_bytes']}")
    for name, effect in report["effects"].items():
        lines.append(f"  {name}: {describe_effect(effect)}")
    return "\n".join(lines)


def findings(report: Mapping) -> list[str]:
    """The page's sentences about the run (Simplified Chinese, from `lesson_text`): only what the run measured."""
    if report["effects"] is None:
        return [lesson_text.text("offline_dpo.not_admitted")]
    effects, base = report["effects"], report["baseline"]
    tolerance = report["settings"]["regression_tolerance"]
    lines = [lesson_text.text("offline_dpo.baseline", task=base[TASK_SET], skill=base[SKILL_SET],
                              prefers=base["sequence_preference"])]
    over_chance = effects["pair_accuracy_over_chance"]
    lines.append(lesson_text.text("offline_dpo.pairs_learned" if over_chance["lower"] > 0 else "offline_dpo.pairs_not_learned",
                                  interval=describe_effect(over_chance)))
    control = effects["pair_accuracy_over_control"]
    lines.append(lesson_text.text("offline_dpo.control" if control["lower"] > 0 else "offline_dpo.control_same",
                                  interval=describe_effect(control)))
    chosen = [values["evaluation"]["chosen_logratio"] for values in report["arms"]["dpo"].values()]
    rejected = [values["evaluation"]["rejected_logratio"] for values in report["arms"]["dpo"].values()]
    if max(chosen) < 0:
        lines.append(lesson_text.text("offline_dpo.displacement", chosen=max(chosen), rejected=max(rejected)))
    gain = effects["task_gain"]
    key = ("offline_dpo.task_gain" if gain["lower"] > 0 else "offline_dpo.task_loss" if gain["upper"] < 0
           else "offline_dpo.no_task_gain")
    lines.append(lesson_text.text(key, interval=describe_effect(gain)))
    skill = effects["base_skill_change"]
    lines.append(lesson_text.text("offline_dpo.skill_kept" if skill["mean"] >= -tolerance else "offline_dpo.skill_lost",
                                  interval=describe_effect(skill), tolerance=tolerance))
    control_skill = [values[SKILL_SET] for values in report["arms"]["swapped"].values()]
    if skill["mean"] < -tolerance and min(control_skill) >= base[SKILL_SET] - tolerance:
        lines.append(lesson_text.text("offline_dpo.skill_cause", low=min(control_skill), base=base[SKILL_SET]))
    lines.append(lesson_text.text("offline_dpo.decision", decision=report["decision"]["decision"],
                                  reasons=", ".join(report["decision"]["reasons"]) or "-"))
    return lines


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 84."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    candidate = record.get("candidate") or {}
    if candidate:
        lines.append(f"candidate adapter {candidate['folder']} (seed {candidate['seed']}, sha256 "
                     f"{candidate['adapter_sha256'][:12]}), trained from {candidate['trained_from']['adapter_folder']}")
    lines.append(f"serving: {record.get('serving')}")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw(report: Mapping):
    """Step 5: held-out pair accuracy per seed and arm against chance, the chosen and rejected log-ratios
    apart, and the answers of each seed against 62's adapter (task and base skill)."""
    import matplotlib.pyplot as plt

    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.6))
    colours = {"dpo": "tab:blue", "swapped": "tab:orange"}
    for index, arm in enumerate(stage.ARMS):
        runs = report["arms"][arm]
        accuracies = [values["evaluation"]["pair_accuracy"] for values in runs.values()]
        left.scatter([index] * len(accuracies), accuracies, color=colours[arm], label=arm)
        chosen = [values["evaluation"]["chosen_logratio"] for values in runs.values()]
        rejected = [values["evaluation"]["rejected_logratio"] for values in runs.values()]
        middle.scatter([index - 0.1] * len(chosen), chosen, color=colours[arm], marker="o")
        middle.scatter([index + 0.1] * len(rejected), rejected, color=colours[arm], marker="x")
    left.axhline(0.5, color="grey", linestyle="--", linewidth=1)
    left.set_xticks([0, 1], ["DPO", "swapped control"])
    left.set_ylim(-0.05, 1.05)
    left.set_title("held-out pair accuracy (both orders)")
    middle.axhline(0.0, color="grey", linewidth=1)
    middle.set_xticks([0, 1], ["DPO", "swapped control"])
    middle.set_title("log-ratio: chosen (o) and rejected (x)")
    base = report["baseline"]
    for index, name in enumerate((TASK_SET, SKILL_SET)):
        right.hlines(base[name], index - 0.3, index + 0.3, color="tab:red", linewidth=2,
                     label="62 adapter" if index == 0 else None)
        for offset, arm in ((-0.1, "dpo"), (0.1, "swapped")):
            values = [run[name] for run in report["arms"][arm].values()]
            right.scatter([index + offset] * len(values), values, color=colours[arm],
                          label=arm if index == 0 else None)
    right.set_xticks([0, 1], ["task (held out)", "base skill"])
    right.set_ylim(0, 1)
    right.set_title("answer exact match")
    right.legend(fontsize=8)
    figure.tight_layout()
    return figure
