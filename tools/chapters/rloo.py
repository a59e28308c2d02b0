"""What the PT-RLOO notebook (leave-one-out baseline) runs around its three exercises.

The learner writes the mechanism: the scoreable-group filter, the leave-one-out advantages and the
sequence-level clipped loss. This module holds the figures of Steps 1-3 and the framework check:
TRL's RLOOTrainer samples completions for fixed prompts on the tiny model, takes fixed rewards
(None where an answer could not be scored), and computes its own advantages and loss; the learner's
functions get the same rewards and the same log-probabilities. Nothing here prints.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core import effects
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


# ---------------------------------------------------------------------------
# Step 5.2: gradient variance of the baselines on the lab model (experiment rloo_baseline_variance)
# ---------------------------------------------------------------------------

VARIANCE_EXPERIMENT = "rloo_baseline_variance"
VARIANCE_STAGE = "baseline_variance"
VARIANCE_NAMES = {"no_baseline": "none", "leave_one_out": "leave-one-out", "group_mean": "group mean",
                  "batch_mean": "batch mean", "wrong_only": "wrong answers only"}
VARIANCE_RATIOS = {"loo_over_none": "LOO / none", "loo_over_batch_mean": "LOO / batch mean",
                   "matched_scale_ratio": "((n-1)/n)^2 LOO / group mean", "wrong_over_right": "wrong only / none"}


VARIANCE_FUNCTIONS = ("leave_one_out_advantages",)
"""The chapter functions Step 5.2 runs: it measures gradients and updates nothing, so the filter and the loss run
in the framework check (5.1) only."""


def variance_mechanism(mechanism):
    """The part of the notebook's mechanism the variance experiment takes (`VARIANCE_FUNCTIONS`)."""
    from tools.experiments.contract import Mechanism

    return Mechanism({name: mechanism.functions[name] for name in VARIANCE_FUNCTIONS},
                     {name: mechanism.sources[name] for name in VARIANCE_FUNCTIONS})


def _ratio(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def variance_lines(record: Mapping) -> list[str]:
    """Lines that show a baseline_variance record: settings, which function ran, and per seed the total
    variances, the ratios, p, the per-outcome gradient norms and the splits of the ratios."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {record.get('error')}"]
    settings = record["settings"]
    lines = [f"{settings['model']} model, {settings['prompts']} prompts x {settings['group_size']} answers per draw, "
             f"{settings['draws']} draws per seed, temperature {settings['temperature']:g}, "
             f"at most {settings['max_new_tokens']} new tokens, verifier {settings['verifier']}"]
    if record.get("mechanism"):
        lines.append("functions: " + ", ".join(f"{name} ({item['source']})" for name, item in record["mechanism"].items()))
    for entry in record["per_seed"]:
        variances = ", ".join(f"{VARIANCE_NAMES[name]} {entry['baselines'][name]['total_variance']:.4g}"
                              for name in VARIANCE_NAMES)
        ratios = ", ".join(f"{label} {_ratio(entry[key])}" for key, label in VARIANCE_RATIOS.items())
        compared = entry["group_mean_vs_loo"]
        lines += [f"seed {entry['seed']}: mean reward {entry['mean_reward']:.3f}, mixed groups "
                  f"{entry['mixed_group_share']:.3f}; total variance: {variances}",
                  f"  ratios: {ratios}; |mean grad group mean| / |mean grad LOO| {_ratio(compared['norm_ratio'])} "
                  f"(expected {entry['expected_norm_ratio']:.3f}), cosine {_ratio(compared['cosine'])}"]
        if "splits" in entry:
            norms, loo, wrong = entry["gradient_norms"], entry["splits"]["loo_over_none"], entry["splits"]["wrong_over_right"]
            lines += [f"  p = {entry['rewarded_share']:.3f}; mean |grad log pi| rewarded {norms['rewarded']['mean_norm']:.4g} "
                      f"({norms['rewarded']['answers']} answers), unrewarded {norms['unrewarded']['mean_norm']:.4g} "
                      f"({norms['unrewarded']['answers']} answers)",
                      f"  LOO / none {_ratio(loo['measured'])} = rewards alone {_ratio(loo['advantage_part'])} (independent "
                      f"0/1 rewards: n/(n-1)(1-p) = {loo['independent_rewards_advantage_part']:.3f}) x gradient norms "
                      f"{_ratio(loo['norm_part'])} x residual {_ratio(loo['residual'])}",
                      f"  wrong only / none {_ratio(wrong['measured'])} = count (1-p)/p {_ratio(wrong['count_part'])} x "
                      f"|grad|^2 unrewarded / rewarded {_ratio(wrong['norm_part'])} x residual {_ratio(wrong['residual'])}"]
    for key, found in (record.get("effects") or {}).items():
        lines.append(f"{key}: {effects.describe(found)}")
    return lines


def finding_sentences(record: Mapping) -> list[str]:
    """The page's sentences about why LOO's variance differs from no baseline's, each printed as a finding only
    where the record measured it (lesson_text): the split into count, baseline noise and gradient norms per
    seed, and the paired effects over the seeds."""
    if record.get("status") != "ok":
        return []
    sentences = []
    for entry in record["per_seed"]:
        loo, wrong = entry["splits"]["loo_over_none"], entry["splits"]["wrong_over_right"]
        sentences.append(lesson_text.text(
            "pt_rloo.split", seed=entry["seed"], p=entry["rewarded_share"], measured=loo["measured"],
            rewards=loo["advantage_part"], independent=loo["independent_rewards_advantage_part"],
            norms=loo["norm_part"], residual=loo["residual"], count=wrong["count_part"],
            norm_ratio=wrong["norm_part"]))
    found = record.get("effects")
    if not found:
        return sentences + [lesson_text.text("pt_rloo.no_interval", seeds=len(record["per_seed"]))]
    norms, variance = found["log_squared_norm_unrewarded_over_rewarded"], found["log_variance_loo_over_none"]
    sentences.append(lesson_text.text(
        "pt_rloo.norms_measured" if effects.holds(norms, 0.0) else "pt_rloo.norms_not_shown",
        effect=effects.describe(norms), low=math.exp(norms["lower"]), high=math.exp(norms["upper"])))
    key = ("pt_rloo.loo_above_none" if effects.holds(variance, 0.0) else
           "pt_rloo.loo_below_none" if effects.holds(variance, 0.0, "less") else "pt_rloo.loo_not_shown")
    sentences.append(lesson_text.text(key, effect=effects.describe(variance), low=math.exp(variance["lower"]),
                                      high=math.exp(variance["upper"])))
    return sentences


SPLIT_PARTS = {"measured": "measured LOO / none", "advantage_part": "rewards alone", "norm_part": "gradient norms",
               "residual": "residual"}


def draw_baseline_variance(record: Mapping):
    """Figure: per seed the total variance of the gradient estimate under each weighting (log scale), the
    variance ratios per seed against the line 1, and the split of LOO / none into the part the rewards
    alone explain, the part the per-answer gradient norms add, and the residual (their product is the
    measured ratio)."""
    import matplotlib.pyplot as plt

    entries = record["per_seed"]
    split = all("splits" in entry for entry in entries)
    fig, axes = plt.subplots(1, 3 if split else 2, figsize=(17 if split else 12, 4))
    variance_ax, ratio_ax = axes[0], axes[1]
    width = 0.8 / len(entries)

    def offsets(count, index):
        return [position + (index - (len(entries) - 1) / 2) * width for position in range(count)]

    for index, entry in enumerate(entries):
        variance_ax.bar(offsets(len(VARIANCE_NAMES), index),
                        [entry["baselines"][name]["total_variance"] for name in VARIANCE_NAMES],
                        width=width, label=f"seed {entry['seed']}")
        ratio_ax.bar(offsets(len(VARIANCE_RATIOS), index), [entry[key] or float("nan") for key in VARIANCE_RATIOS],
                     width=width, label=f"seed {entry['seed']}")
        if split:
            parts = entry["splits"]["loo_over_none"]
            axes[2].bar(offsets(len(SPLIT_PARTS), index), [parts[key] or float("nan") for key in SPLIT_PARTS],
                        width=width, label=f"seed {entry['seed']} (p = {entry['rewarded_share']:.2f})")
    variance_ax.set_xticks(range(len(VARIANCE_NAMES)), list(VARIANCE_NAMES.values()), rotation=15)
    variance_ax.set(yscale="log", ylabel="total variance of the estimate", title="Same answers, five weightings")
    ratio_ax.set_xticks(range(len(VARIANCE_RATIOS)), list(VARIANCE_RATIOS.values()), rotation=15)
    ratio_ax.set(yscale="log", ylabel="variance ratio", title="Ratios per seed (1: equal)")
    used = [variance_ax, ratio_ax]
    if split:
        axes[2].set_xticks(range(len(SPLIT_PARTS)), list(SPLIT_PARTS.values()), rotation=15)
        axes[2].set(yscale="log", ylabel="factor", title="LOO / none = rewards x norms x residual")
        axes[2].legend(fontsize=8)
        used.append(axes[2])
    for ax in used[1:]:
        ax.axhline(1.0, color="black", linewidth=1)
    for ax in used:
        ax.grid(alpha=0.3, axis="y")
    variance_ax.legend()
    fig.tight_layout()
    return fig
