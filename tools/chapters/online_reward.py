"""Project 85 (online reward optimisation, GRPO / RLVR): what the notebook shows around its three gates.

The learner writes the gates (`rollout_coverage`, `update_throughput`, `adoption_decision`); the stage
(`tools.experiments.online_rl.project_stage`) samples, gates, updates, measures and decides with them
(the notebook passes its functions through the plan's mechanism). This module re-decides a run from its
records, tabulates and draws the evidence, words the findings (`lesson_text`, section `online_reward`),
and checks the update's advantages and loss against verl and TRL on the same tensors. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.core import effects
from tools.experiments.online_rl import project_stage as stage
from tools.experiments.online_rl.project_policy import verdicts_of

CHAPTER_ID = stage.CHAPTER_ID
CONTROL_MARGIN = 0.12
"""The smallest held-out advantage of GRPO over the shuffled-reward control the page claims (the per-seed
differences spread with a standard deviation of about 0.12 to 0.16 across seeds and numerics profiles)."""
SKILL_MARGIN = 0.03
"""The smallest base-skill loss (GRPO minus 62's adapter) the page claims (seed spread about 0.02)."""
FRAMEWORK_TOLERANCE = 1e-6
FRAMEWORK_REPLIES = (
    ("scoreable", ((True, "right"), (True, "wrong"), (True, "wrong"), (True, "right"))),
    ("all_right", ((True, "right"), (True, "right"), (True, "right"), (True, "right"))),
    ("truncated", ((True, "right"), (False, "right"), (True, "wrong"), (True, "wrong"))),
    ("unparsed", ((True, "right"), (True, "text"), (True, "wrong"), (True, "right"))),
    ("one_right", ((True, "wrong"), (True, "wrong"), (True, "right"), (True, "wrong"))),
)
"""Five groups of four replies to chain problems: (finished, kind); `kind` right / wrong / text (no integer)."""


# ---- re-deciding a run from its records -----------------------------------------------------------

def throughput_input(run: Mapping) -> list[dict]:
    """The step entries `update_throughput` reads, from one arm's record."""
    return [{key: step[key] for key in ("rollouts", "rollouts_in_loss", "optimizer_steps", "policy_change", "seconds")}
            for step in run["steps"]]


def decision_inputs(evaluation: Mapping, rollouts: Mapping) -> tuple:
    """`adoption_decision`'s arguments rebuilt from the two records (seeds as ints)."""
    seeds = [int(seed) for seed in rollouts["seeds"]]
    exact = evaluation["exact_match"]

    def paired(set_name):
        return {"candidate": {seed: exact[f"grpo_seed_{seed}"][set_name] for seed in seeds},
                "baseline": {seed: exact["sft_adapter"][set_name] for seed in seeds}}

    runs = rollouts["runs"]
    resource = {"measured": sum(runs[f"grpo_seed_{seed}"]["training_s"] for seed in seeds) / len(seeds),
                "budget": evaluation["resource_budget_s"]}
    updates = {seed: runs[f"grpo_seed_{seed}"]["throughput"]["effective_steps"] for seed in seeds}
    return (paired("task_held_out"), paired("skill_held_out"), resource, updates,
            effects.t_critical(evaluation["confidence"], len(seeds) - 1), 0.0, evaluation["regression_tolerance"])


def recheck(evaluation: Mapping, rollouts: Mapping, rollout_coverage: Callable, update_throughput: Callable,
            adoption_decision: Callable) -> dict:
    """The run decided again with the given functions: every step's coverage from its recorded verdicts,
    every arm's throughput from its steps, the decision from the held-out figures."""
    settings = rollouts["settings"]
    coverage_same = all(
        rollout_coverage(verdicts_of(step["verdicts"]), settings["min_scoreable_share"], settings["max_truncation"],
                         settings["max_parse_failure"]) == step["coverage"]
        for run in rollouts["runs"].values() for step in run["steps"])
    throughput_same = all(update_throughput(throughput_input(run), rollouts["min_policy_change"]) == run["throughput"]
                          for run in rollouts["runs"].values())
    decision = adoption_decision(*decision_inputs(evaluation, rollouts))
    return {"coverage_same": coverage_same, "throughput_same": throughput_same, "decision": decision["decision"],
            "reasons": decision["reasons"]}


# ---- tables and sentences ---------------------------------------------------------------------------

def evaluation_table(evaluation: Mapping, rollouts: Mapping) -> str:
    """Held-out exact match: 62's adapter (the baseline row), then each arm per seed."""
    exact = evaluation["exact_match"]
    lines = [f"{'model':<26}{'task (sum + 1)':>16}{'base skill (sum)':>18}"]
    names = ["sft_adapter"] + [f"{arm}_seed_{seed}" for arm in rollouts["arms"] for seed in rollouts["seeds"]]
    for name in names:
        label = "62 SFT adapter (baseline)" if name == "sft_adapter" else name
        lines.append(f"{label:<26}{exact[name]['task_held_out']:>16.4f}{exact[name]['skill_held_out']:>18.4f}")
    sizes = evaluation["held_out_sizes"]
    lines.append(f"held-out problems: task {sizes['task_held_out']}, base skill {sizes['skill_held_out']} "
                 "(one problem = " + f"{1 / sizes['task_held_out']:.4f}); each model measured once, at the end")
    return "\n".join(lines)


def coverage_summary(run: Mapping) -> dict:
    """One arm's coverage over its steps: allowed steps, mean scoreable share, truncation and parse failures."""
    steps = run["steps"]
    rollouts = sum(step["coverage"]["rollouts"] for step in steps)
    return {"allowed": sum(step["coverage"]["update_allowed"] for step in steps), "steps": len(steps),
            "scoreable_share": sum(step["coverage"]["scoreable_share"] for step in steps) / len(steps),
            "truncation_rate": sum(step["coverage"]["outcomes"]["truncated"] for step in steps) / rollouts,
            "parse_failure_rate": sum(step["coverage"]["outcomes"]["format_error"] for step in steps) / rollouts}


def rollout_table(rollouts: Mapping) -> str:
    """Per arm and seed: coverage and throughput (raw samples per second beside effective updates)."""
    lines = [f"{'run':<24}{'allowed':>9}{'scoreable':>10}{'trunc':>7}{'parse':>7}{'effective':>10}"
             f"{'samples/s':>11}{'eff. upd/s':>11}{'useful/s':>10}{'idle s':>8}"]
    for name, run in rollouts["runs"].items():
        cover, rate = coverage_summary(run), run["throughput"]
        lines.append(f"{name:<24}{cover['allowed']:>5}/{cover['steps']:<3}{cover['scoreable_share']:>10.3f}"
                     f"{cover['truncation_rate']:>7.3f}{cover['parse_failure_rate']:>7.3f}"
                     f"{rate['effective_steps']:>6}/{rate['steps']:<3}{rate['samples_per_second']:>11.1f}"
                     f"{rate['effective_updates_per_second']:>11.2f}{rate['useful_rollouts_per_second']:>10.1f}"
                     f"{rate['idle_seconds']:>8.2f}")
    return "\n".join(lines)


def findings(evaluation: Mapping, rollouts: Mapping) -> list[str]:
    """The page's sentences (Simplified Chinese, from `lesson_text`), each from a measured figure."""
    exact, found = evaluation["exact_match"], evaluation["effects"]
    gain, skill, signal = found["task_gain"], found["skill_change"], found["reward_signal"]
    tolerance = evaluation["regression_tolerance"]
    lines = [lesson_text.text("online_reward.baseline", task=exact["sft_adapter"]["task_held_out"],
                              skill=exact["sft_adapter"]["skill_held_out"])]
    if gain["lower"] > 0:
        key = "online_reward.task_gain"
    elif gain["upper"] < 0:
        key = "online_reward.task_worse"
    else:
        key = "online_reward.no_task_gain"
    lines.append(lesson_text.text(key, interval=effects.describe(gain)))
    lines.append(lesson_text.text("online_reward.skill_kept" if skill["mean"] >= -tolerance
                                  else "online_reward.skill_lost", interval=effects.describe(skill),
                                  tolerance=tolerance))
    lines.append(lesson_text.text("online_reward.signal_held" if effects.holds(signal, CONTROL_MARGIN)
                                  else "online_reward.signal_not_held", interval=effects.describe(signal),
                                  margin=CONTROL_MARGIN))
    grpo = [run for run in rollouts["runs"].values() if run["arm"] == "grpo"]
    lines.append(lesson_text.text(
        "online_reward.throughput",
        samples=sum(run["throughput"]["samples_per_second"] for run in grpo) / len(grpo),
        effective=sum(run["throughput"]["effective_updates_per_second"] for run in grpo) / len(grpo),
        idle=sum(len(run["throughput"]["ineffective"]) for run in grpo), steps=sum(run["throughput"]["steps"]
                                                                                    for run in grpo)))
    return lines


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 85."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    candidate = record.get("candidate") or {}
    if candidate:
        lines.append(f"candidate {candidate['adapter_file']} sha256 {candidate['adapter_file_sha256'][:12]} "
                     f"(seed {candidate['seed']}, {candidate['run_mode']}); from 62's manifest sha256 "
                     f"{candidate['upstream_manifest_sha256'][:12]}")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


# ---- the picture ------------------------------------------------------------------------------------

def draw(evaluation: Mapping, rollouts: Mapping):
    """Left: the sampled reward per step, GRPO against the shuffled control (mean over seeds). Right: the
    held-out figures per seed against 62's adapter (the red line), task and base skill."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    colours = {"grpo": "#2980b9", "shuffled_reward": "#7f8c8d"}
    for arm in rollouts["arms"]:
        runs = [run for run in rollouts["runs"].values() if run["arm"] == arm]
        count = len(runs[0]["steps"])
        mean = [sum(run["steps"][index]["mean_reward"] for run in runs) / len(runs) for index in range(count)]
        left.plot(range(count), mean, color=colours[arm], marker=".", label=f"{arm} (mean of {len(runs)} seeds)")
    left.set_xlabel("sampling step")
    left.set_ylabel("mean sampled reward")
    left.set_title("Sampled reward per step (training batches, not held out)")
    left.legend(fontsize=8)
    exact, names = evaluation["exact_match"], ["task_held_out", "skill_held_out"]
    for offset, arm in ((-0.15, "grpo"), (0.15, "shuffled_reward")):
        for seed in rollouts["seeds"]:
            right.scatter([index + offset for index in range(len(names))],
                          [exact[f"{arm}_seed_{seed}"][name] for name in names], color=colours[arm], zorder=3,
                          label=f"{arm}, per seed" if seed == rollouts["seeds"][0] else None)
    right.scatter(range(len(names)), [exact["sft_adapter"][name] for name in names], marker="_", s=900,
                  color="#c0392b", label="62 SFT adapter (baseline)")
    right.set_xticks(range(len(names)), ["task (sum + 1)\nheld out", "base skill (sum)\nheld out"])
    right.set_ylim(0, 1)
    right.set_ylabel("greedy exact match")
    right.set_title("Held-out sets, opened once")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- the framework check: verl's advantages and TRL's loss on the same tensors ----------------------

def framework_groups() -> list[list[dict]]:
    """The verdicts of FRAMEWORK_REPLIES on five chain problems (the package's verifier)."""
    from tools.data import lab_tasks
    from tools.experiments.online_rl.verifier import verify_integer_answer

    problems = lab_tasks.sample_problems(stage.TASK, "train", len(FRAMEWORK_REPLIES), 8504)
    texts = {"right": lambda p: str(p.label), "wrong": lambda p: str(p.label + 10), "text": lambda p: "about forty"}
    return [[verify_integer_answer(texts[kind](problem), problem.label, finished) for finished, kind in replies]
            for problem, (_, replies) in zip(problems, FRAMEWORK_REPLIES)]


def framework_check(rollout_coverage: Callable) -> dict:
    """The update behind the coverage gate, against the frameworks, on the same numbers:

    - verl 0.9.1's `core_algos.compute_grpo_outcome_advantage` (float64, epsilon 1e-6) on all five groups,
      against the package's `group_advantages` (epsilon 1e-6) on the groups `rollout_coverage` admits: equal
      within FRAMEWORK_TOLERANCE; and what verl gives the groups the gate drops (a truncated or unparsed
      reply makes a reward difference verl would learn from);
    - TRL's GRPOTrainer loss on a batch of verified replies against the package's clipped loss (chapter
      18's check, `grpo_rlvr.compare_with_trl`)."""
    import numpy as np
    import torch

    from tools.chapters.grpo_rlvr import compare_with_trl
    from tools.experiments.online_rl.advantages import group_advantages
    from tools.experiments.online_rl.losses import clipped_grpo_loss
    from tools.experiments.online_rl.verifier import verify_integer_answer
    from tools.experiments.reward import verl_reference

    verdicts = framework_groups()
    plain = [[{"outcome": v["outcome"], "reward": v["reward"]} for v in group] for group in verdicts]
    coverage = rollout_coverage(plain, 0.0, 1.0, 1.0)
    rewards = [[v["reward"] for v in group] for group in verdicts]
    scores = torch.tensor([reward for group in rewards for reward in group], dtype=torch.float64)
    index = np.array([number for number, group in enumerate(rewards) for _ in group])
    mask = torch.ones((len(scores), 1), dtype=torch.float64)
    theirs, _ = verl_reference.core_algos().compute_grpo_outcome_advantage(scores.unsqueeze(1), mask, index,
                                                                           epsilon=1e-6)
    theirs = theirs[:, 0].tolist()
    size = len(rewards[0])
    ours = group_advantages([rewards[i] for i in coverage["scoreable"]], eps=1e-6)["advantages"]
    gaps = [abs(a - b) for number, values in zip(coverage["scoreable"], ours)
            for a, b in zip(values, theirs[number * size:(number + 1) * size])]
    dropped = {FRAMEWORK_REPLIES[number][0]: [round(value, 4) for value in theirs[number * size:(number + 1) * size]]
               for number in range(len(rewards)) if number not in coverage["scoreable"]}
    trl = compare_with_trl(verify_integer_answer, group_advantages, clipped_grpo_loss)
    return {"verl": verl_reference.version(), "trl_version": trl["framework"]["version"], "tolerance": FRAMEWORK_TOLERANCE,
            "groups": [name for name, _ in FRAMEWORK_REPLIES], "scoreable": list(coverage["scoreable"]),
            "advantage_gap": max(gaps) if gaps else None, "advantages_match": bool(gaps) and max(gaps) <= FRAMEWORK_TOLERANCE,
            "verl_on_dropped": dropped, "trl_check": trl, "trl_matches": trl["matches"]}


def framework_lines(check: Mapping) -> str:
    """Printable lines of the framework check."""
    from tools.chapters.grpo_rlvr import framework_lines as trl_lines

    names = [check["groups"][i] for i in check["scoreable"]]
    lines = [f"verl {check['verl']} core_algos.compute_grpo_outcome_advantage vs group_advantages on the groups the "
             f"coverage gate admits ({', '.join(names)}): largest |difference| {check['advantage_gap']:.1e} "
             f"(tolerance {check['tolerance']:g}) -> match: {check['advantages_match']}"]
    lines += [f"  verl on a group the gate drops, {name}: advantages {values}" for name, values in
              check["verl_on_dropped"].items()]
    lines += trl_lines(check["trl_check"])
    return "\n".join(lines)
