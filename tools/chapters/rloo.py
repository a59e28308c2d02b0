"""What the PT-RLOO notebook (leave-one-out baseline) runs around its three exercises.

The learner writes the mechanism: the scoreable-group filter, the leave-one-out advantages and the
sequence-level clipped loss. This module holds the figures of Steps 1-3 and the framework check:
TRL's RLOOTrainer samples completions for fixed prompts on the tiny model, takes fixed rewards
(None where an answer could not be scored), and computes its own advantages and loss; the learner's
functions get the same rewards and the same log-probabilities. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tools.core.environment import installed_version
from tools.data.arithmetic import generate_tasks
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.trl_reference import rloo_on_fixed_rewards

CHAPTER_ID = "PT-RLOO"
FRAMEWORK_STAGE = "framework_check"
FRAMEWORK_TOLERANCE = 1e-6
"""Largest absolute difference allowed between TRL's advantages and ours (TRL computes in float32, the
notebook in Python floats) and between the two losses and clip rates (same log-probabilities)."""
FRAMEWORK_CLIP_EPS = 0.2
FRAMEWORK_NOISE_STD = 0.15
"""Per-token standard deviation of the seeded shift of the sampling policy's log-probabilities; summed
over a response it moves some sequence ratios out of [1 - eps, 1 + eps]."""
FRAMEWORK_TASK_SEED = 101
FRAMEWORK_GROUPS = [[1.0, 0.0, None, 1.0], [None, 0.5, None, None], [0.25, 0.75, 0.0, 1.0]]
"""Fixed rewards of four answers to each of three prompts; None is an answer that could not be scored."""
MEASUREMENT_NOTE = ("equality check of leave-one-out advantages and the sequence-clipped loss against TRL's "
                    "RLOOTrainer on the tiny model (random weights: values carry no quality meaning); not a GPU "
                    "measurement")


# ---------------------------------------------------------------------------
# Steps 1-3: figures
# ---------------------------------------------------------------------------

def draw_reward_groups(groups: Mapping[str, Sequence[float | None]], scoreable: Sequence[bool]):
    """Figure: each group's rewards, a cross for an answer without a reward, the verdict in the title."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(groups), figsize=(3.0 * len(groups), 3.0), sharey=True)
    for ax, (name, rewards), ok in zip(axes, groups.items(), scoreable):
        for position, reward in enumerate(rewards):
            if reward is None:
                ax.plot(position, 0.05, marker="x", color="#cb181d", markersize=12)
            else:
                ax.bar(position, reward, color="#6baed6" if ok else "#bdbdbd")
                ax.text(position, reward + 0.03, f"{reward:g}", ha="center", fontsize=8)
        ax.set_xticks(range(len(rewards)), [f"a{position}" for position in range(len(rewards))])
        ax.set_title(f"{name}\n{'scoreable' if ok else 'not scoreable'}", fontsize=9)
        ax.set_ylim(0, 1.1)
    axes[0].set_ylabel("reward (x = could not be scored)")
    fig.tight_layout()
    return fig


def baselines_compared(groups: Sequence[Sequence[float]]) -> dict[str, list[list[float]]]:
    """Advantages of complete groups under three baselines: leave-one-out, the group mean (self included)
    and the mean of the whole batch."""
    rewards = [reward for group in groups for reward in group]
    batch_mean = sum(rewards) / len(rewards)
    result = {"leave_one_out": [], "group_mean": [], "batch_mean": []}
    for group in groups:
        total, size = sum(group), len(group)
        result["leave_one_out"].append([reward - (total - reward) / (size - 1) for reward in group])
        result["group_mean"].append([reward - total / size for reward in group])
        result["batch_mean"].append([reward - batch_mean for reward in group])
    return result


def draw_baselines(groups: Mapping[str, Sequence[float]]):
    """Figure: the advantages of each answer under the three baselines of `baselines_compared`."""
    import matplotlib.pyplot as plt

    compared = baselines_compared(list(groups.values()))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.4 * len(groups), 3.2), sharey=True)
    styles = {"leave_one_out": ("#08519c", -0.27), "group_mean": ("#6baed6", 0.0), "batch_mean": ("#fd8d3c", 0.27)}
    for index, (ax, (name, rewards)) in enumerate(zip(axes, groups.items())):
        for kind, (color, offset) in styles.items():
            ax.bar([p + offset for p in range(len(rewards))], compared[kind][index], width=0.27, color=color,
                   label=kind.replace("_", " "))
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(range(len(rewards)), [f"r={reward:g}" for reward in rewards], fontsize=8)
        ax.set_title(name, fontsize=9)
    axes[0].set_ylabel("advantage")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def sequence_ratio(per_token_log_ratio: float, length: int) -> float:
    """The sequence ratio of a response whose every token drifted by the same log-ratio."""
    import math

    return math.exp(per_token_log_ratio * length)


def draw_sequence_ratio_growth(drifts: Sequence[float] = (0.005, 0.01, 0.02), clip_eps: float = 0.2,
                               longest: int = 60):
    """Figure: how a small per-token drift compounds into the sequence ratio as responses get longer."""
    import matplotlib.pyplot as plt

    lengths = list(range(1, longest + 1))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for drift in drifts:
        ax.plot(lengths, [sequence_ratio(drift, length) for length in lengths], label=f"log-ratio {drift:+} per token")
    ax.axhspan(1 - clip_eps, 1 + clip_eps, color="#c7e9c0", alpha=0.5, label=f"[1 - eps, 1 + eps], eps = {clip_eps}")
    ax.set_xlabel("response length (tokens)")
    ax.set_ylabel("sequence ratio rho = exp(sum of log-ratios)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: TRL's RLOOTrainer on the same rewards and log-probabilities
# ---------------------------------------------------------------------------

def framework_prompts() -> list[str]:
    """The prompts of the first three training-seed tasks, one per reward group."""
    return [task.prompt for task in generate_tasks(FRAMEWORK_TASK_SEED)[:len(FRAMEWORK_GROUPS)]]


def framework() -> dict:
    """What the framework check compares with: library, version, trainer, settings, tolerance."""
    return {"library": "trl", "version": installed_version("trl"),
            "trainer": "RLOOTrainer (advantages from _generate_and_score_completions, loss from compute_loss)",
            "settings": {"beta": 0.0, "normalize_advantages": False, "epsilon": FRAMEWORK_CLIP_EPS},
            "tolerance_abs": FRAMEWORK_TOLERANCE}


def compare_with_trl(filter_groups: Callable, advantages_of: Callable, loss_of: Callable, *, seed: int = 0) -> dict:
    """The learner's filter, advantages and loss against TRL's RLOO on the same rewards and log-probs.

    TRL gives an answer without an advantage 0.0 (it keeps the row in its mean); the learner's None is
    compared as 0.0 and the loss gets the same rows, so both average over the same responses."""
    import torch

    model, tokenizer, identity = load_quietly()
    groups = [list(group) for group in FRAMEWORK_GROUPS]
    theirs = rloo_on_fixed_rewards(model, tokenizer, framework_prompts(), groups, FRAMEWORK_CLIP_EPS,
                                   FRAMEWORK_NOISE_STD, seed)
    kept = filter_groups([list(group) for group in groups])
    ours = advantages_of([list(group) for group in groups])
    flat = [0.0 if value is None else value for group in ours["advantages"] for value in group]
    advantage_diff = max(abs(a - b) for a, b in zip(flat, theirs["advantages"]))
    loss = loss_of(theirs["per_token_logps"], theirs["old_per_token_logps"], torch.tensor(flat, dtype=torch.float32),
                   theirs["completion_mask"], FRAMEWORK_CLIP_EPS)
    loss_diff = abs(float(loss["loss"]) - theirs["loss"])
    clip_diff = abs(loss["clip_rate"] - theirs["clip_rate"])
    trl_silent = [index for index, group in enumerate(groups)
                  if all(value == 0.0 for value in theirs["advantages"][index * len(group):(index + 1) * len(group)])]
    matches = max(advantage_diff, loss_diff, clip_diff) <= FRAMEWORK_TOLERANCE
    return {"framework": framework(), "model": identity, "groups": groups, "scoreable": kept["scoreable"],
            "trl_groups_without_signal": trl_silent, "trl_advantages": theirs["advantages"], "our_advantages": flat,
            "advantage_max_abs_diff": advantage_diff, "trl_loss": theirs["loss"], "our_loss": float(loss["loss"]),
            "loss_abs_diff": loss_diff, "trl_clip_rate": theirs["clip_rate"], "our_clip_rate": loss["clip_rate"],
            "clip_rate_abs_diff": clip_diff, "sequence_ratios": loss["ratios"],
            "response_tokens": int(theirs["completion_mask"].sum()), "matches": matches}


def framework_lines(check: Mapping) -> list[str]:
    """Printable lines of a framework check."""
    info = check["framework"]
    return [f"{info['library']} {info['version']} {info['trainer']}; settings {info['settings']}; tolerance "
            f"{info['tolerance_abs']:g} (absolute)",
            f"  rewards {check['groups']}: your filter keeps groups {check['scoreable']}; TRL gives no signal to "
            f"groups {check['trl_groups_without_signal']}",
            f"  advantages max |diff| {check['advantage_max_abs_diff']:.1e}; loss TRL {check['trl_loss']:.7f} ours "
            f"{check['our_loss']:.7f} |diff| {check['loss_abs_diff']:.1e}; clip rate TRL {check['trl_clip_rate']:.4f} "
            f"ours {check['our_clip_rate']:.4f} -> matches: {check['matches']}",
            "  sequence ratios " + ", ".join(f"{ratio:.3f}" for ratio in check["sequence_ratios"])]


def framework_record_body(check: Mapping) -> dict:
    """The `framework_check` record's body (header and runtime come from `ChapterContext.save_record`)."""
    results = {key: value for key, value in check.items() if key not in ("framework", "model")}
    return {"measurement": MEASUREMENT_NOTE,
            "inputs": {"prompts": framework_prompts(), "group_rewards": [list(group) for group in FRAMEWORK_GROUPS],
                       "noise_std": FRAMEWORK_NOISE_STD, "model": dict(check["model"]), "device": "cpu",
                       "dtype": "float32"},
            "framework": dict(check["framework"]), "results": results}


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    lines = [f"evidence level {record.get('evidence_level')}: an equality check against TRL, not a GPU measurement"]
    return lines + framework_lines({**record["results"], "framework": record["framework"]})[1:]
