"""What the chapter-16 (PPO) notebook runs around its three exercises.

The learner writes the mechanism: the clipped surrogate policy loss over masked response tokens
(with the clip fraction and an approximate KL), the clipped value loss, and the resident-state
account of PPO's four models. This module holds the rest: the fixed example batch of Steps 1-4, the
figures (drawn with the stage's own code in `tools.experiments.reward`, since the learner's
functions are still stubs while Steps 1-3 run), and the framework checks, which take the learner's
functions as arguments: verl 0.9.1's `compute_policy_loss_vanilla`, `compute_value_loss` and
`compute_gae_advantage_return` on the same tensors, and the parameter counts of transformers' Qwen2
models and peft's LoRA built on the meta device (no weights). Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from tools.chapters import lesson_text
from tools.core import effects
from tools.core.environment import installed_version
from tools.experiments.reward import resident, signals, verl_reference

CHAPTER_ID = "16"
FRAMEWORK_TOLERANCE = 1e-6
"""Largest absolute difference allowed against verl (float64 tensors; verl divides masked sums by
`count + 1e-8`, a relative change of about 1e-9 here)."""


# ---------------------------------------------------------------------------
# The fixed example of Steps 1-4
# ---------------------------------------------------------------------------

def example_batch() -> dict:
    """Three responses of up to five tokens (float64) after one PPO update step: the new and the
    rollout-time log-probabilities (some ratios leave [0.8, 1.2]), whitened advantages of both signs,
    the value model's new and rollout-time values, GAE returns, and the response mask (the second
    response is right-padded, padding holds extreme numbers)."""
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    old = torch.tensor([[-1.2, -0.4, -2.0, -0.7, -0.3],
                        [-0.9, -1.5, -0.2, 0.0, 0.0],
                        [-0.6, -2.2, -1.1, -0.5, 0.0]], dtype=torch.float64)
    shift = torch.tensor([[0.05, 0.30, -0.40, 0.10, -0.02],
                          [-0.35, 0.15, 0.02, 9.0, 9.0],
                          [0.25, -0.05, -0.30, 0.50, -9.0]], dtype=torch.float64)
    advantages = torch.tensor([[1.1, 0.8, -0.6, 0.4, 0.9],
                               [-1.3, -0.2, 0.5, 7.0, 7.0],
                               [0.7, -0.9, -1.4, 0.3, -7.0]], dtype=torch.float64)
    old_values = torch.tensor([[0.20, 0.30, 0.35, 0.50, 0.60],
                               [0.10, 0.05, 0.00, 0.00, 0.00],
                               [0.40, 0.45, 0.30, 0.70, 0.00]], dtype=torch.float64)
    values = old_values + torch.tensor([[0.05, 0.40, -0.30, 0.10, -0.05],
                                        [0.25, -0.10, 0.02, 5.0, 5.0],
                                        [-0.35, 0.15, 0.05, 0.30, 5.0]], dtype=torch.float64)
    returns = torch.tensor([[0.90, 0.95, 0.70, 1.00, 1.00],
                            [-0.20, -0.10, 0.00, 0.00, 0.00],
                            [0.60, 0.30, 0.10, 1.00, 0.00]], dtype=torch.float64)
    return {"log_probs": old + shift, "old_log_probs": old, "advantages": advantages, "values": values,
            "old_values": old_values, "returns": returns, "response_mask": mask}


PPO_SETUPS = {
    "full, separate reference": {"finetune": "full", "shared_reference": False, "weight_bytes": 2, "batch_tokens": 4096},
    "LoRA r=16, separate reference": {"finetune": "lora", "lora_rank": 16, "lora_targets": list(resident.PROJECTIONS),
                                      "shared_reference": False, "weight_bytes": 2, "batch_tokens": 4096},
    "LoRA r=16, shared reference": {"finetune": "lora", "lora_rank": 16, "lora_targets": list(resident.PROJECTIONS),
                                    "shared_reference": True, "weight_bytes": 2, "batch_tokens": 4096},
}
"""Three ways to hold PPO's four models for Qwen2.5-0.5B (bf16 weights, 4096 tokens per micro-batch)."""


# ---------------------------------------------------------------------------
# Figures of Steps 1-3
# ---------------------------------------------------------------------------

ROLES = (("policy", "generates the rollouts;\ntrained (weights, grads,\nAdamW state, activations)", "tab:blue"),
         ("reference", "log-probs of the same tokens\nfor the KL penalty; frozen", "tab:gray"),
         ("reward model", "one score per response;\nfrozen", "tab:orange"),
         ("value model", "V(s_t) per token for GAE;\ntrained like the policy", "tab:green"))


def draw_roles():
    """Figure: one PPO iteration, which model does what and which are trained."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 3.6))
    for index, (name, text, color) in enumerate(ROLES):
        x = 0.3 + index * 2.6
        ax.add_patch(plt.Rectangle((x, 1.2), 2.2, 1.5, color=color, alpha=0.25))
        ax.text(x + 1.1, 2.45, name, ha="center", va="center", fontsize=11, weight="bold")
        ax.text(x + 1.1, 1.75, text, ha="center", va="center", fontsize=8)
    steps = ["1 sample responses (policy)", "2 score (reward model)", "3 ref log-probs, KL penalty",
             "4 values, GAE advantages", "5 several epochs: clipped policy + value losses"]
    for index, step in enumerate(steps):
        ax.text(0.3 + index * 2.1, 0.55, step, fontsize=8, ha="left", va="center",
                bbox={"boxstyle": "round", "fc": "white", "ec": "gray"})
    ax.annotate("", xy=(10.6, 0.2), xytext=(0.3, 0.2), arrowprops={"arrowstyle": "->", "color": "gray"})
    ax.set_xlim(0, 10.9)
    ax.set_ylim(0, 3)
    ax.axis("off")
    ax.set_title("PPO's four models and one iteration")
    fig.tight_layout()
    return fig


def draw_clipped_objective(clip_ratio: float = 0.2):
    """Figure: the per-token surrogate min(r A, clip(r) A) against the ratio r, for A > 0 and A < 0."""
    import matplotlib.pyplot as plt

    ratios = torch.linspace(0.2, 2.0, 361, dtype=torch.float64)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.4), sharey=False)
    for ax, advantage in zip(axes, (1.0, -1.0)):
        unclipped = ratios * advantage
        clipped = ratios.clamp(1 - clip_ratio, 1 + clip_ratio) * advantage
        ax.plot(ratios.tolist(), unclipped.tolist(), "--", color="gray", label="r * A")
        ax.plot(ratios.tolist(), torch.minimum(unclipped, clipped).tolist(), color="tab:blue", lw=2,
                label="min(r A, clip(r) A)")
        for bound in (1 - clip_ratio, 1 + clip_ratio):
            ax.axvline(bound, color="tab:red", lw=0.8, ls=":")
        ax.set_xlabel("ratio r = pi / pi_old")
        ax.set_title(f"A = {advantage:+g}: flat (no gradient) where the clip binds")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("surrogate objective (maximised)")
    fig.tight_layout()
    return fig


def draw_resident(accounts: Mapping[str, Mapping], gpu_gib: float):
    """Figure: per setup, stacked bars of each role's resident GiB by state; last panel, each setup's
    total by state against the GPU's memory."""
    import matplotlib.pyplot as plt

    states = ("weights", "gradients", "optimizer", "activations")
    colors = {"weights": "tab:blue", "gradients": "tab:orange", "optimizer": "tab:red", "activations": "tab:green"}
    fig, axes = plt.subplots(1, len(accounts) + 1, figsize=(4 * (len(accounts) + 1), 3.8), sharey=True)
    for ax, (setup, account) in zip(axes, accounts.items()):
        roles = list(account["roles"])
        bottoms = [0.0] * len(roles)
        for state in states:
            heights = [account["roles"][role][state] / resident.GIB for role in roles]
            ax.bar(roles, heights, bottom=bottoms, color=colors[state], label=state)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ax.set_title(f"{setup}\ntotal {account['total_gib']:.1f} GiB", fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    totals_ax = axes[-1]
    names = list(accounts)
    bottoms = [0.0] * len(names)
    for state in states:
        heights = [sum(role[state] for role in accounts[name]["roles"].values()) / resident.GIB for name in names]
        totals_ax.bar(range(len(names)), heights, bottom=bottoms, color=colors[state])
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    totals_ax.axhline(gpu_gib, color="black", ls="--", lw=1, label=f"GPU {gpu_gib:g} GiB")
    totals_ax.set_xticks(range(len(names)), [f"setup {index + 1}" for index in range(len(names))], fontsize=8)
    totals_ax.set_title("all four models together", fontsize=9)
    totals_ax.legend(fontsize=8)
    axes[0].set_ylabel("GiB")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("PPO's resident state for Qwen2.5-0.5B (setups numbered from the left)")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Framework checks
# ---------------------------------------------------------------------------

def framework() -> dict:
    """What Step 5 compares with: the libraries, their versions, the calls and the tolerance."""
    return {"libraries": {"verl": verl_reference.version(), "transformers": installed_version("transformers"),
                          "peft": installed_version("peft")},
            "reference_calls": ["verl.trainer.ppo.core_algos.compute_policy_loss_vanilla (token-mean, dual clip off)",
                                "verl.trainer.ppo.core_algos.compute_value_loss (token-mean)",
                                "verl.trainer.ppo.core_algos.compute_gae_advantage_return",
                                "transformers Qwen2ForCausalLM / Qwen2ForSequenceClassification and peft LoRA "
                                "parameter counts on the meta device"],
            "tolerance_abs": FRAMEWORK_TOLERANCE}


def compare_with_verl(batch: Mapping, functions: Mapping[str, Callable], *, clip_ratio: float = 0.2,
                      clip_range: float = 0.2) -> dict:
    """The given `ppo_policy_loss` and `ppo_value_loss` against verl on `batch` (loss and metrics), and
    the stage's GAE (`signals.gae` then `signals.masked_whiten`) against verl's on the batch's rewards."""
    ours = functions["ppo_policy_loss"](batch["log_probs"], batch["old_log_probs"], batch["advantages"],
                                        batch["response_mask"], clip_ratio)
    theirs = verl_reference.policy_loss(batch["log_probs"], batch["old_log_probs"], batch["advantages"],
                                        batch["response_mask"], clip_ratio)
    policy = {key: abs(float(ours[key]) - float(theirs[key])) for key in ("loss", "clip_fraction", "approx_kl")}
    ours_value = functions["ppo_value_loss"](batch["values"], batch["old_values"], batch["returns"],
                                             batch["response_mask"], clip_range)
    theirs_value = verl_reference.value_loss(batch["values"], batch["old_values"], batch["returns"],
                                             batch["response_mask"], clip_range)
    value = {key: abs(float(ours_value[key]) - float(theirs_value[key])) for key in ("loss", "clip_fraction")}
    rewards = torch.zeros_like(batch["returns"])
    positions = signals.last_valid_positions(batch["response_mask"])
    rewards[torch.arange(len(positions)), positions] = 1.0
    stage = signals.gae(rewards, batch["old_values"], batch["response_mask"], 1.0, 0.95)
    whitened = signals.masked_whiten(stage["advantages"], batch["response_mask"])
    verl_advantages, verl_returns = verl_reference.gae(rewards, batch["old_values"], batch["response_mask"], 1.0, 0.95)
    valid = batch["response_mask"].bool()
    gae = {"advantages": float((whitened - verl_advantages)[valid].abs().max()),
           "returns": float((stage["returns"] - verl_returns)[valid].abs().max())}
    worst = max([*policy.values(), *value.values(), *gae.values()])
    return {"policy_abs_diff": policy, "value_abs_diff": value, "gae_abs_diff": gae, "max_abs_diff": worst,
            "verl": {"policy_loss": float(theirs["loss"]), "clip_fraction": theirs["clip_fraction"],
                     "approx_kl": theirs["approx_kl"], "value_loss": float(theirs_value["loss"]),
                     "value_clip_fraction": theirs_value["clip_fraction"]},
            "tolerance": FRAMEWORK_TOLERANCE, "matches": worst <= FRAMEWORK_TOLERANCE}


def library_parameter_counts(config: Mapping, lora_rank: int, lora_targets) -> dict:
    """Parameters of transformers' Qwen2 causal LM and one-output sequence classifier built from `config`
    on the meta device, and the trainable parameters peft's LoRA adds to the causal LM."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

    qwen = Qwen2Config(**dict(config), num_labels=1)
    with torch.device("meta"):
        causal = Qwen2ForCausalLM(qwen)
        scalar = Qwen2ForSequenceClassification(qwen)
        adapted = get_peft_model(Qwen2ForCausalLM(qwen), LoraConfig(r=lora_rank, target_modules=list(lora_targets)))
    return {"causal_lm": sum(p.numel() for p in causal.parameters()),
            "scalar_model": sum(p.numel() for p in scalar.parameters()),
            "lora": sum(p.numel() for p in adapted.parameters() if p.requires_grad)}


def compare_parameter_counts(ppo_resident_memory: Callable, config: Mapping = resident.QWEN25_05B_CONFIG,
                             lora_rank: int = 8, lora_targets=("q_proj", "v_proj")) -> dict:
    """The given account's parameter counts against transformers and peft (they must be equal)."""
    setup = {"finetune": "lora", "lora_rank": lora_rank, "lora_targets": list(lora_targets), "shared_reference": True,
             "weight_bytes": 2, "batch_tokens": 1}
    ours = ppo_resident_memory(dict(config), setup, 80)["parameters"]
    theirs = library_parameter_counts(config, lora_rank, lora_targets)
    return {"ours": dict(ours), "libraries": theirs, "matches": dict(ours) == theirs}


# ---------------------------------------------------------------------------
# Step 5: PPO on the lab model (tools.experiments.reward.ppo_stage)
# ---------------------------------------------------------------------------

STAGE = "ppo"
STEP5_CPU_MODEL = "lab"
"""The model cpu_smoke trains with PPO."""


def ppo_lines(record: Mapping) -> list[str]:
    """Lines that show a ppo record: the setting, per seed the held-out exact match of both arms and the
    critic's probe loss, the paired effects, memory and the decision."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {record.get('error')}"]
    config, tasks = record["config"], record["tasks"]
    lines = [f"{record['model']['model_id']} ({record['model'].get('weights')}): {config['iterations']} iterations x "
             f"{config['tasks_per_iteration']} tasks x {config['samples_per_task']} samples, {config['epochs']} epochs, "
             f"per seed twice: verifier reward and the same scores shuffled (control); {tasks['held_out']} held-out "
             f"problems, critic probe on {tasks['probe']} validation problems",
             "functions: " + ", ".join(f"{name} ({item['source']})" for name, item in record["mechanism"].items())]
    for treated, control in zip(record["results"], record["controls"]):
        lines.append(f"seed {treated['seed']}: held-out exact match {treated['exact_match_before']:.3f} at the start -> "
                     f"{treated['exact_match_after']:.3f} (verifier), {control['exact_match_after']:.3f} (shuffled); "
                     f"critic probe loss {treated['value_loss_first']:.4f} -> {treated['value_loss_last']:.4f} "
                     f"(verifier), {control['value_loss_last']:.4f} (shuffled), best constant "
                     f"{treated['probe']['constant_value_loss']:.4f}")
    for key, found in (record.get("effects") or {}).items():
        lines.append(f"{key}: {effects.describe(found)}")
    memory = record["memory"]
    if memory.get("peak_allocated_mb") is not None:
        lines.append(f"peak allocated {memory['peak_allocated_mb']:.0f} MiB (NVML sampler peak "
                     f"{memory['sampler']['gpu_peak_mb']}) vs resident account "
                     f"{memory['predicted_resident']['total_mb']:.0f} MiB")
    else:
        lines.append("peak memory: not measured on the CPU (null)")
    lines.append(f"decision: {record['decision']['decision']} ({record['decision']['reason']})")
    return lines


def effect_sentences(record: Mapping) -> list[str]:
    """The page's sentences about the run's paired effects (lesson_text), chosen by what the record shows."""
    found = record.get("effects")
    if record.get("status") != "ok" or not found:
        return [lesson_text.text("ppo.no_interval", seeds=len(record.get("results") or []))]
    margin = record["min_gain_over_control"]
    over_control, over_start = found["exact_match_over_control"], found["exact_match_over_start"]
    critic = found["critic_over_constant"]
    control_key = ("ppo.control_beyond_margin" if effects.holds(over_control, margin) else
                   "ppo.control_above_zero" if effects.holds(over_control, 0.0) else "ppo.control_not_shown")
    start_key = ("ppo.start_rose" if effects.holds(over_start, 0.0) else
                 "ppo.start_fell" if effects.holds(over_start, 0.0, "less") else "ppo.start_not_shown")
    critic_key = "ppo.critic_beyond_mean" if effects.holds(critic, 0.0, "less") else "ppo.critic_mean_only"
    return [lesson_text.text(control_key, effect=effects.describe(over_control), margin=margin),
            lesson_text.text(start_key, effect=effects.describe(over_start)),
            lesson_text.text(critic_key, effect=effects.describe(critic, digits=4),
                             control=effects.describe(found["critic_over_control"], digits=4))]


def draw_ppo(record: Mapping):
    """Figure: per iteration the mean verifier score of the rollouts and the critic's probe loss (solid:
    verifier reward, dashed: shuffled control, dotted: the best constant critic), and per seed the
    held-out exact match at the start and after each arm."""
    import matplotlib.pyplot as plt

    fig, (score_ax, value_ax, match_ax) = plt.subplots(1, 3, figsize=(14, 3.8))
    for treated, control in zip(record["results"], record["controls"]):
        seed = treated["seed"]
        steps = [item["iteration"] for item in treated["history"]]
        line, = score_ax.plot(steps, [item["mean_score"] for item in treated["history"]], "o-", label=f"seed {seed}")
        color = line.get_color()
        score_ax.plot([item["iteration"] for item in control["history"]],
                      [item["mean_score"] for item in control["history"]], "x--", color=color, alpha=0.6)
        value_ax.plot([-1, *steps], [treated["value_loss_first"], *(item["probe_value_loss"] for item in treated["history"])],
                      "o-", color=color, label=f"seed {seed}")
        value_ax.plot([-1, *(item["iteration"] for item in control["history"])],
                      [control["value_loss_first"], *(item["probe_value_loss"] for item in control["history"])],
                      "x--", color=color, alpha=0.6)
        value_ax.axhline(treated["probe"]["constant_value_loss"], color=color, ls=":", lw=1)
        match_ax.plot(["start", "verifier", "shuffled"], [treated["exact_match_before"], treated["exact_match_after"],
                                                         control["exact_match_after"]], "o-", color=color,
                      label=f"seed {seed}")
    score_ax.set_title("mean verifier score of the rollouts\n(solid: verifier reward, dashed: shuffled)", fontsize=9)
    value_ax.set_title("critic loss on the probe batch\n(dotted: best constant critic)", fontsize=9)
    match_ax.set_title("held-out exact match (greedy)", fontsize=9)
    for ax in (score_ax, value_ax):
        ax.set_xlabel("PPO iteration")
    match_ax.set_ylim(0, 1)
    for ax in (score_ax, value_ax, match_ax):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
