"""What the chapter-18 notebook (GRPO with verifiable rewards) runs around its three exercises.

The learner writes the mechanism: the verifier integer-answer-v1, the group-normalised advantages
with their scoreable groups, and the clipped GRPO loss with its token aggregation and clip rate.
This module holds the rest: the figures of Steps 1-3, the fixed batch of the framework check, and
the check itself, which runs the functions it is given on the same batch as TRL's GRPOTrainer and
compares the losses and clip rates. Nothing here prints; the notebook shows what these return.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core.environment import installed_version
from tools.data.arithmetic import generate_tasks
from tools.experiments.online_rl.batch import pack, prompt_token_ids, reply_token_ids
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.trl_reference import (
    TRL_GRPO_LOSS_TYPES,
    grpo_loss_on_batch,
)

CHAPTER_ID = "18"
FRAMEWORK_STAGE = "framework_check"
FRAMEWORK_TOLERANCE = 1e-6
"""Largest absolute difference allowed between TRL's loss and ours, and between the clip rates (float32
on CPU, computed from the same per-token log-probabilities: only the order of additions differs)."""
FRAMEWORK_TASK_SEED = 101
FRAMEWORK_CLIP_EPS = 0.2
FRAMEWORK_LOGPROB_NOISE = 0.3
"""Standard deviation of the seeded shift between the sampling policy's and the current log-probs, so
that some ratios leave [1 - eps, 1 + eps] and the clip is exercised."""
MEASUREMENT_NOTE = ("equality check of the clipped GRPO loss against TRL on a fixed batch of the tiny model "
                    "(random weights: the values carry no quality meaning); not a GPU measurement")


# ---------------------------------------------------------------------------
# Steps 1-3: figures
# ---------------------------------------------------------------------------

def scoreable_probability(pass_rate: float, group_size: int) -> float:
    """Chance that a group of `group_size` independent answers, each right with `pass_rate`, is mixed."""
    return 1.0 - pass_rate ** group_size - (1.0 - pass_rate) ** group_size


def draw_scoreable_share(group_sizes: Sequence[int] = (2, 4, 8)):
    """Figure: the share of scoreable (mixed) groups against the pass rate, one curve per group size."""
    import matplotlib.pyplot as plt

    rates = [step / 100 for step in range(101)]
    fig, ax = plt.subplots(figsize=(7, 4))
    for size in group_sizes:
        ax.plot(rates, [scoreable_probability(rate, size) for rate in rates], label=f"G = {size}")
    ax.set_xlabel("pass rate of the policy on a prompt")
    ax.set_ylabel("P(group is scoreable)")
    ax.set_title("Groups whose rewards all agree carry no signal")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def draw_group_advantages(groups: Mapping[str, Sequence[float]], advantages: Mapping[str, object]):
    """Figure: each example group's rewards and its advantages (a note where the group is not scoreable)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.2), sharey=True)
    for ax, (name, rewards) in zip(axes, groups.items()):
        values = advantages[name]
        positions = range(len(rewards))
        ax.bar([p - 0.2 for p in positions], rewards, width=0.4, color="#9ecae1", label="reward")
        if values is None:
            ax.text(0.5, 0.45, "not scoreable:\nno advantage (None)", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9, color="#7f2704", bbox={"facecolor": "white", "edgecolor": "#7f2704"})
        else:
            ax.bar([p + 0.2 for p in positions], values, width=0.4, color="#fd8d3c", label="advantage")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(list(positions), [f"answer {p}" for p in positions], fontsize=7)
        ax.set_title(name, fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def clipped_objective(ratio: float, advantage: float, clip_eps: float) -> float:
    """min(rho * A, clip(rho, 1 - eps, 1 + eps) * A) for one token."""
    clipped = min(max(ratio, 1 - clip_eps), 1 + clip_eps)
    return min(ratio * advantage, clipped * advantage)


def draw_clipped_objective(clip_eps: float = 0.2):
    """Figure: the clipped surrogate against the ratio for A = +1 and A = -1, clip regions shaded."""
    import matplotlib.pyplot as plt

    ratios = [0.4 + step / 100 for step in range(121)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
    for ax, advantage in zip(axes, (1.0, -1.0)):
        ax.plot(ratios, [ratio * advantage for ratio in ratios], ls="--", color="grey", label="rho * A (unclipped)")
        ax.plot(ratios, [clipped_objective(ratio, advantage, clip_eps) for ratio in ratios], color="#d94801",
                label="min(rho A, clip(rho) A)")
        if advantage > 0:
            ax.axvspan(1 + clip_eps, ratios[-1], color="#fdd0a2", alpha=0.5, label="clip active: no gradient")
        else:
            ax.axvspan(ratios[0], 1 - clip_eps, color="#fdd0a2", alpha=0.5, label="clip active: no gradient")
        ax.axvline(1.0, color="black", lw=0.6)
        ax.set_xlabel("ratio rho = pi / pi_old")
        ax.set_title(f"A = {advantage:+.0f}, eps = {clip_eps}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("objective (the loss is its negative)")
    fig.tight_layout()
    return fig


def aggregation_weights(lengths: Mapping[str, int]) -> dict[str, dict[str, float]]:
    """Weight of one token of each response under the two aggregations: 1/(B n_i) and 1/N."""
    total, count = sum(lengths.values()), len(lengths)
    return {name: {"sequence": 1 / (count * n), "token": 1 / total} for name, n in lengths.items()}


def draw_aggregation_weights(lengths: Mapping[str, int]):
    """Figure: the weight of one token of each response, per-sequence mean vs mean over all tokens."""
    import matplotlib.pyplot as plt

    weights = aggregation_weights(lengths)
    names = list(lengths)
    positions = range(len(names))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar([p - 0.2 for p in positions], [weights[name]["sequence"] for name in names], width=0.4,
           label='"sequence": mean per response, then over responses')
    ax.bar([p + 0.2 for p in positions], [weights[name]["token"] for name in names], width=0.4,
           label='"token": one mean over all response tokens')
    ax.set_xticks(list(positions), [f"{name}\n({lengths[name]} tokens)" for name in names])
    ax.set_yscale("log")
    ax.set_ylabel("weight of one token in the loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: TRL's GRPOTrainer on the same batch
# ---------------------------------------------------------------------------

def framework_replies() -> list[dict]:
    """Two training-seed tasks with four replies each, covering the four verifier outcomes."""
    first, second = generate_tasks(FRAMEWORK_TASK_SEED)[:2]
    symbol = "+" if second.operation == "add" else "?"
    return [
        {"task": first, "replies": [(str(first.label), True), (str(first.label + 1), True),
                                    (f"The answer is {first.label}.", True), (str(first.label), False)]},
        {"task": second, "replies": [(f"{second.a} {symbol} {second.b} = {second.label}\n{second.label}", True),
                                     (str(second.label), True), (str(second.label - 1), True),
                                     (f"{second.label}.", True)]},
    ]


def framework_batch(tokenizer, verify: Callable, advantages_of: Callable) -> dict:
    """The fixed batch: tokens of the replies, their verdicts and the group advantages (scoreable groups only)."""
    import torch

    groups = framework_replies()
    verdicts = [[verify(text, group["task"].label, finished) for text, finished in group["replies"]]
                for group in groups]
    rewards = [[verdict["reward"] for verdict in group] for group in verdicts]
    normalised = advantages_of(rewards)
    prompts, responses, advantages = [], [], []
    for group, values in zip(groups, normalised["advantages"]):
        if values is None:
            continue
        for (text, finished), advantage in zip(group["replies"], values):
            prompts.append(prompt_token_ids(tokenizer, group["task"].prompt))
            responses.append(reply_token_ids(tokenizer, text, finished))
            advantages.append(advantage)
    batch = pack(prompts, responses, tokenizer.pad_token_id)
    batch["advantages"] = torch.tensor(advantages, dtype=torch.float32)
    return {"batch": batch, "outcomes": [[verdict["outcome"] for verdict in group] for group in verdicts],
            "rewards": rewards, "scoreable": normalised["scoreable"]}


def framework() -> dict:
    """What the framework check compares with: library, version, trainer, loss types, tolerance."""
    return {"library": "trl", "version": installed_version("trl"), "trainer": "GRPOTrainer.compute_loss",
            "loss_types": dict(TRL_GRPO_LOSS_TYPES), "clip_eps": FRAMEWORK_CLIP_EPS,
            "tolerance_abs": FRAMEWORK_TOLERANCE}


def compare_with_trl(verify: Callable, advantages_of: Callable, loss_of: Callable, *, seed: int = 0) -> dict:
    """Our chain (verifier -> advantages -> clipped loss) against TRL's GRPO loss on the same batch.

    TRL computes the per-token log-probs with its own fused LM head; our loss gets exactly those, and
    the sampling policy's log-probs are the same for both: TRL's shifted by seeded noise."""
    import torch

    model, tokenizer, identity = load_quietly()
    fixed = framework_batch(tokenizer, verify, advantages_of)
    batch = dict(fixed["batch"])
    generator = torch.Generator().manual_seed(seed)
    mask = batch["completion_mask"].bool()
    results = {}
    for aggregation in TRL_GRPO_LOSS_TYPES:
        first = grpo_loss_on_batch(model, tokenizer, {**batch, "old_per_token_logps": None}, aggregation,
                                   FRAMEWORK_CLIP_EPS)
        if "old_per_token_logps" not in batch:
            noise = torch.randn(first["per_token_logps"].shape, generator=generator) * FRAMEWORK_LOGPROB_NOISE
            batch["old_per_token_logps"] = first["per_token_logps"] + noise
        theirs = grpo_loss_on_batch(model, tokenizer, batch, aggregation, FRAMEWORK_CLIP_EPS)
        ours = loss_of(theirs["per_token_logps"], batch["old_per_token_logps"], batch["advantages"], mask,
                       FRAMEWORK_CLIP_EPS, aggregation)
        loss_diff = abs(float(ours["loss"]) - theirs["loss"])
        clip_diff = abs(ours["clip_rate"] - theirs["clip_rate"])
        results[aggregation] = {"trl_loss_type": theirs["loss_type"], "trl_loss": theirs["loss"],
                                "our_loss": float(ours["loss"]), "loss_abs_diff": loss_diff,
                                "trl_clip_rate": theirs["clip_rate"], "our_clip_rate": ours["clip_rate"],
                                "clip_rate_abs_diff": clip_diff,
                                "matches": loss_diff <= FRAMEWORK_TOLERANCE and clip_diff <= FRAMEWORK_TOLERANCE}
    return {"framework": framework(), "model": identity, "outcomes": fixed["outcomes"], "rewards": fixed["rewards"],
            "scoreable": fixed["scoreable"], "responses": int(mask.shape[0]), "response_tokens": int(mask.sum()),
            "aggregations": results, "matches": all(item["matches"] for item in results.values())}


def framework_lines(check: Mapping) -> list[str]:
    """Printable lines of a framework check."""
    info = check["framework"]
    header = (f"{info['library']} {info['version']} {info['trainer']} on the same batch: {check['responses']} "
              f"responses, {check['response_tokens']} response tokens, clip eps {info['clip_eps']}, tolerance "
              f"{info['tolerance_abs']:g} (absolute)")
    lines = [header, f"  verifier outcomes {check['outcomes']} -> rewards {check['rewards']}, "
                     f"scoreable {check['scoreable']}"]
    for aggregation, item in check["aggregations"].items():
        lines.append(f"  {aggregation:<8} (TRL loss_type {item['trl_loss_type']!r}): loss TRL {item['trl_loss']:.7f} "
                     f"ours {item['our_loss']:.7f} |diff| {item['loss_abs_diff']:.1e}; clip rate TRL "
                     f"{item['trl_clip_rate']:.4f} ours {item['our_clip_rate']:.4f} -> matches: {item['matches']}")
    return lines


def framework_record_body(check: Mapping) -> dict:
    """The `framework_check` record's body (header and runtime come from `ChapterContext.save_record`)."""
    return {"measurement": MEASUREMENT_NOTE,
            "inputs": {"task_seed": FRAMEWORK_TASK_SEED, "replies": [
                {"task_id": group["task"].task_id, "label": group["task"].label,
                 "replies": [{"text": text, "finished": finished} for text, finished in group["replies"]]}
                for group in framework_replies()], "logprob_noise_std": FRAMEWORK_LOGPROB_NOISE,
                "model": dict(check["model"]), "device": "cpu", "dtype": "float32"},
            "framework": dict(check["framework"]),
            "results": {key: check[key] for key in ("outcomes", "rewards", "scoreable", "responses",
                                                    "response_tokens", "aggregations", "matches")}}


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    results = record["results"]
    lines = [f"evidence level {record.get('evidence_level')}: an equality check against TRL, not a GPU measurement"]
    lines += framework_lines({**results, "framework": record["framework"]})[1:]
    lines.append(f"all within tolerance: {results['matches']}")
    return lines


# ---------------------------------------------------------------------------
# Step 5.2: GRPO on the lab model (experiment grpo_rlvr)
# ---------------------------------------------------------------------------

GRPO_EXPERIMENT = "grpo_rlvr"
STEP5_CPU_MODEL = "lab"
"""The model cpu_smoke trains with GRPO: the lab student, half-way through learning two-digit sums."""
GRPO_STAGES = ("grpo_minimal", "grpo_extended", "decision")


def grpo_series(record: Mapping) -> dict:
    """Per step of a variant record: the scoreable share, the mean clip rate of its updates (None when
    the step had no scoreable group), and the mean sampled reward."""
    steps = record["steps"]
    clip = [sum(u["clip_rate"] for u in step["updates"]) / len(step["updates"]) if step["updates"] else None
            for step in steps]
    return {"step": [step["step"] for step in steps], "scoreable_share": [step["scoreable_share"] for step in steps],
            "clip_rate": clip, "mean_reward": [step["mean_reward"] for step in steps]}


def grpo_lines(record: Mapping) -> list[str]:
    """Lines that show a grpo_<variant> record: held-out exact match before and after, and per step the
    scoreable share and the clip rate."""
    if record.get("status") != "ok":
        return [f"variant {record.get('variant')}: status {record.get('status')}: {record.get('error')}"]
    series = grpo_series(record)
    tasks = record["tasks"]
    lines = [f"variant {record['variant']} (group size {record['group_size']}, seed {record['settings']['seed']}, "
             f"{record['settings']['steps']} steps x {record['settings']['prompts_per_step']} prompts, "
             f"lr {record['settings']['learning_rate']:g}) on {record['model'].get('model_id')}: held-out exact match "
             f"{record['before']['exact_match']:.3f} -> {record['after']['exact_match']:.3f} "
             f"({tasks['held_out']} held-out problems, {tasks['train']} training problems)",
             "  scoreable share per step " + " ".join(f"{value:.2f}" for value in series["scoreable_share"]),
             "  clip rate per step       " + " ".join("-" if value is None else f"{value:.3f}"
                                                      for value in series["clip_rate"]),
             f"  rollouts per step {record['rollouts_per_step']} ({record['settings']['prompts_per_step']} prompts x "
             f"{record['group_size']}); in the loss per step " + " ".join(str(step.get("rollouts_in_loss", 0))
                                                                          for step in record["steps"])]
    retained = record.get("retained")
    if retained:
        lines.append(f"  regression check: {retained['still_correct_after']} of the {retained['correct_before']} held-out "
                     f"problems answered correctly before still are after")
    return lines


def grpo_effect_sentences(records: Sequence[Mapping]) -> list[str]:
    """The page's sentences about this run (one seed): each group's held-out gain at the same rollout budget,
    and the rollouts that entered the loss (measured, the candidate explanation of a difference)."""
    by_variant = {record.get("variant"): record for record in records if record.get("status") == "ok"}
    if set(by_variant) != {"minimal", "extended"}:
        return [lesson_text.text("grpo_rlvr.effect_missing")]
    extended, minimal = by_variant["extended"], by_variant["minimal"]

    def in_loss(record):
        return sum(step.get("rollouts_in_loss", 0) for step in record["steps"]) / len(record["steps"])

    def gain(record):
        return record["after"]["exact_match"] - record["before"]["exact_match"]

    return [lesson_text.text("grpo_rlvr.effect_one_seed", seed=extended["settings"]["seed"],
                             budget=extended["rollouts_per_step"], before=extended["before"]["exact_match"],
                             extended=extended["after"]["exact_match"], minimal=minimal["after"]["exact_match"],
                             extended_gain=gain(extended), minimal_gain=gain(minimal),
                             difference=gain(extended) - gain(minimal), extended_in_loss=in_loss(extended),
                             minimal_in_loss=in_loss(minimal))]


def decision_lines(record: Mapping) -> list[str]:
    """Lines that show the decision record: per variant its verdict, and the group-size choice."""
    decision = record["decision"]
    lines = [f"decision {decision['decision']} (clip rate used: {decision['clip_rate_used']})"]
    lines += [f"  {variant}: {verdict['decision']} ({verdict['reason']})" for variant, verdict in decision["variants"].items()]
    choice = decision["group_size_choice"]
    lines.append(f"  group size chosen: {choice['group_size']} ({choice['reason']})")
    return lines


def draw_grpo(records: Sequence[Mapping]):
    """Figure: per step the scoreable share and the clip rate of each variant, and the held-out exact
    match before and after GRPO."""
    import matplotlib.pyplot as plt

    fig, (share_ax, clip_ax, match_ax) = plt.subplots(1, 3, figsize=(13, 3.8))
    shown = [record for record in records if record.get("status") == "ok"]
    for record in shown:
        series = grpo_series(record)
        name = f"{record['variant']} (G = {record['group_size']})"
        share_ax.plot(series["step"], series["scoreable_share"], marker="o", label=name)
        clip_ax.plot(series["step"], [float("nan") if v is None else v for v in series["clip_rate"]], marker="o",
                     label=name)
    share_ax.set_ylim(0, 1.05)
    share_ax.set(xlabel="GRPO step", ylabel="share of scoreable groups", title="Groups with a signal")
    clip_ax.set(xlabel="GRPO step", ylabel="clip rate (mean over the step's updates)", title="How far each step moved")
    for ax in (share_ax, clip_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    names = [record["variant"] for record in shown]
    positions = range(len(shown))
    match_ax.bar([p - 0.2 for p in positions], [r["before"]["exact_match"] for r in shown], width=0.4, label="before")
    match_ax.bar([p + 0.2 for p in positions], [r["after"]["exact_match"] for r in shown], width=0.4, label="after")
    match_ax.set_xticks(list(positions), names)
    match_ax.set_ylim(0, 1)
    match_ax.set(ylabel="held-out exact match (greedy)", title="Held-out exact match")
    match_ax.legend()
    fig.tight_layout()
    return fig
