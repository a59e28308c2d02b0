"""What the PT-REWARD-SIGNAL notebook runs around its three exercises.

The learner writes the mechanism: token-level rewards with a KL penalty, GAE over masked response
tokens, and whitening with a diagnostic gate (their input checks come from `tensor_checks`). This
module holds the rest: the fixed example batch of Steps 1-4, the figures (drawn with the stage's own
implementations in `tools.experiments.reward.signals`, since the learner's functions are still stubs
while Steps 1-3 run), and the framework check against verl 0.9.1, which takes the functions to check
as arguments. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from tools.chapters import lesson_text
from tools.core import effects
from tools.experiments.reward import signals, verl_reference

CHAPTER_ID = "PT-REWARD-SIGNAL"
FRAMEWORK_TOLERANCE = 1e-6
"""Largest absolute difference allowed against verl, in float64. verl divides masked sums by
`count + 1e-8`, which moves whitened advantages by about 1e-8; everything else agrees to rounding."""


# ---------------------------------------------------------------------------
# The fixed example of Steps 1-4
# ---------------------------------------------------------------------------

EXAMPLE_ROWS = ("complete answer", "short answer + padding", "two turns, tool tokens masked")


def example_batch() -> dict:
    """Three responses of up to six tokens (float64): a complete one, a short one right-padded, and a
    two-turn one whose positions 2-3 a tool inserted (masked out). Padding holds log-probability 0."""
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 1, 1]])
    log_probs = torch.tensor([[-0.9, -0.2, -1.3, -0.4, -0.1, -0.05],
                              [-1.6, -0.7, -0.3, -0.2, 0.0, 0.0],
                              [-0.5, -0.8, -2.5, -1.9, -0.3, -0.1]], dtype=torch.float64)
    ref_log_probs = torch.tensor([[-1.0, -0.5, -1.2, -0.9, -0.3, -0.05],
                                  [-1.1, -0.9, -0.8, -0.6, 0.0, 0.0],
                                  [-0.7, -0.9, -0.4, -0.3, -0.6, -0.2]], dtype=torch.float64)
    values = torch.tensor([[0.30, 0.35, 0.42, 0.50, 0.61, 0.70],
                           [0.20, 0.18, 0.15, 0.10, 0.90, 0.90],
                           [0.40, 0.45, 0.80, 0.80, 0.55, 0.65]], dtype=torch.float64)
    return {"scores": torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64), "log_probs": log_probs,
            "ref_log_probs": ref_log_probs, "values": values, "response_mask": mask}


# ---------------------------------------------------------------------------
# Figures of Steps 1-3 (the stage's implementations; the learner's are still stubs there)
# ---------------------------------------------------------------------------

def draw_token_rewards(batch: Mapping, kl_coef: float, estimator: str = "k1"):
    """Figure: each response's tokens, the KL penalty on each valid token and the score on the last one."""
    import matplotlib.pyplot as plt

    out = signals.token_rewards(batch["scores"], batch["log_probs"], batch["ref_log_probs"], batch["response_mask"],
                                kl_coef, estimator)
    mask = batch["response_mask"].bool()
    rows, time = mask.shape
    fig, axes = plt.subplots(1, rows, figsize=(4.2 * rows, 3.2), sharey=True)
    for row, ax in enumerate(axes):
        penalty = [-kl_coef * float(out["kl"][row, t]) for t in range(time)]
        score = [float(batch["scores"][row]) if t == out["score_positions"][row] else 0.0 for t in range(time)]
        ax.bar(range(time), penalty, color="tab:red", label="-beta * KL")
        ax.bar(range(time), score, bottom=[min(p, 0.0) if s == 0 else p for p, s in zip(penalty, score)],
               color="tab:green", label="score (last valid token)")
        for t in range(time):
            if not mask[row, t]:
                ax.axvspan(t - 0.45, t + 0.45, color="lightgray", alpha=0.6, lw=0)
                ax.text(t, 0.02, "masked", rotation=90, ha="center", va="bottom", fontsize=8, color="gray")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(range(time))
        ax.set_xlabel("response token")
        ax.set_title(EXAMPLE_ROWS[row] if row < len(EXAMPLE_ROWS) else f"response {row}", fontsize=10)
    axes[0].set_ylabel("token-level reward")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Token-level rewards, beta = {kl_coef}, estimator {estimator}")
    fig.tight_layout()
    return fig


def draw_gae_lambdas(batch: Mapping, rewards: torch.Tensor, row: int, lambdas=(0.0, 0.5, 0.95, 1.0),
                     gamma: float = 1.0):
    """Figure: one response's advantages for several lambda, with masked positions shaded."""
    import matplotlib.pyplot as plt

    mask = batch["response_mask"].bool()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for lam in lambdas:
        advantages = signals.gae(rewards, batch["values"], batch["response_mask"], gamma, lam)["advantages"]
        shown = [float(value) if mask[row, t] else float("nan") for t, value in enumerate(advantages[row])]
        ax.plot(range(mask.shape[1]), shown, "o-", label=f"lambda = {lam}")
    for t in range(mask.shape[1]):
        if not mask[row, t]:
            ax.axvspan(t - 0.45, t + 0.45, color="lightgray", alpha=0.6, lw=0)
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("response token (shaded: masked, skipped by GAE)")
    ax.set_ylabel("advantage")
    ax.set_title(f"GAE on '{EXAMPLE_ROWS[row]}', gamma = {gamma}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_whitening(advantages: torch.Tensor, response_mask: torch.Tensor):
    """Figure: whitening over valid tokens only vs over every position (padding included)."""
    import matplotlib.pyplot as plt

    valid = response_mask.bool()
    right = signals.masked_whiten(advantages, response_mask)
    everywhere = signals.masked_whiten(advantages, torch.ones_like(response_mask))
    positions = [(row, t) for row in range(valid.shape[0]) for t in range(valid.shape[1]) if valid[row, t]]
    labels = [f"{row}:{t}" for row, t in positions]
    fig, ax = plt.subplots(figsize=(10, 3.4))
    xs = range(len(positions))
    ax.bar([x - 0.2 for x in xs], [float(right[p]) for p in positions], width=0.4, label="valid tokens only")
    ax.bar([x + 0.2 for x in xs], [float(everywhere[p]) for p in positions], width=0.4,
           label="padding and tool tokens included")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_xlabel("valid token (response:position)")
    ax.set_ylabel("whitened advantage")
    ax.set_title("Whitening statistics must come from the policy's own tokens")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def kl_share_curve(batch: Mapping, coefficients, estimator: str = "k1") -> list[float]:
    """The KL penalty's share of the reward mass of `batch` for each KL coefficient."""
    shares = []
    for coefficient in coefficients:
        out = signals.token_rewards(batch["scores"], batch["log_probs"], batch["ref_log_probs"],
                                    batch["response_mask"], coefficient, estimator)
        shares.append(signals.kl_share(out["kl"], batch["response_mask"], coefficient, batch["scores"]))
    return shares


def draw_kl_share(batch: Mapping, coefficients, max_kl_share: float):
    """Figure: the KL share against the KL coefficient, both estimators, with the gate's limit."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    for estimator in ("k1", "k3"):
        ax.plot(coefficients, kl_share_curve(batch, coefficients, estimator), "o-", label=f"estimator {estimator}")
    ax.axhline(max_kl_share, color="tab:red", ls="--", label=f"gate limit {max_kl_share}")
    ax.set_xscale("log")
    ax.set_xlabel("KL coefficient beta (log scale)")
    ax.set_ylabel("KL share of the reward mass")
    ax.set_title("A strong KL constraint drowns the task score")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: the given functions against verl 0.9.1
# ---------------------------------------------------------------------------

def framework() -> dict:
    """What the check compares with: the library, its version, the calls and the tolerance."""
    return {"library": "verl", "version": verl_reference.version(),
            "reference_calls": ["verl.trainer.ppo.core_algos.kl_penalty (kl, low_var_kl with its clamp and cap)",
                                "verl.trainer.ppo.core_algos.compute_gae_advantage_return (gamma 1 and 0.9, lam 0.95 and 1)"],
            "tolerance_abs": FRAMEWORK_TOLERANCE}


VERL_SETTINGS = ((1.0, 0.95), (0.9, 0.95), (0.9, 1.0))
"""(gamma, lam) of the GAE comparisons: undiscounted, discounted, and discounted Monte Carlo (lam = 1)."""


def far_batch() -> dict:
    """The example batch with the policy moved far from the reference on some tokens: per-token differences
    d = ref_log_probs - log_probs of -25 to 25, so k3's log-ratio clamp (+-20) and its cap (10) both bind
    (verl's `low_var_kl` clamps and caps at the same places)."""
    batch = example_batch()
    d = torch.tensor([[-25.0, 25.0, 3.0, -11.5, -10.0, 0.3],
                      [12.0, -3.5, 0.5, -0.2, 40.0, -40.0],
                      [-21.0, 2.0, 30.0, -30.0, 20.5, -0.6]], dtype=torch.float64)
    log_probs = -d.clamp(min=0) - 0.25
    return {**batch, "log_probs": log_probs, "ref_log_probs": log_probs + d}


def k3_clamps(batch: Mapping) -> dict:
    """How many valid tokens of `batch` reach k3's log-ratio clamp (|d| > 20) and its cap (k3 >= 10)."""
    valid = batch["response_mask"].bool()
    d = (batch["ref_log_probs"] - batch["log_probs"])[valid]
    capped = signals.kl_estimate(batch["log_probs"], batch["ref_log_probs"], "k3")[valid] >= signals.KL_CLAMP_K3
    return {"log_ratio_clamped": int((d.abs() > signals.KL_CLAMP_LOG_RATIO).sum()), "capped": int(capped.sum()),
            "valid_tokens": int(valid.sum())}


def _max_diff(ours: torch.Tensor, theirs: torch.Tensor, valid: torch.Tensor) -> float:
    return float((ours.double() - theirs.double())[valid].abs().max()) if bool(valid.any()) else 0.0


def compare_with_verl(batch: Mapping, functions: Mapping[str, Callable], *, kl_coef: float = 0.1,
                      settings=VERL_SETTINGS) -> dict:
    """The given `token_level_rewards`, `gae_advantages` and `whiten_and_gate` on `batch` against verl:
    token rewards and KL (both estimators, every position), and for each (gamma, lam) of `settings` the
    returns and whitened advantages (valid positions; verl leaves values at masked positions that the
    course sets to 0)."""
    valid = batch["response_mask"].bool()
    result = {"tolerance": FRAMEWORK_TOLERANCE, "kl_coef": kl_coef, "estimators": {}, "gae": [],
              "k3_clamps": k3_clamps(batch)}
    for estimator in ("k1", "k3"):
        ours = functions["token_level_rewards"](batch["scores"], batch["log_probs"], batch["ref_log_probs"],
                                                batch["response_mask"], kl_coef, estimator)
        rewards, kld = verl_reference.kl_token_rewards(batch["scores"], batch["log_probs"], batch["ref_log_probs"],
                                                       batch["response_mask"], kl_coef, estimator)
        everywhere = torch.ones_like(valid)
        result["estimators"][estimator] = {"rewards_max_abs_diff": _max_diff(ours["rewards"], rewards, everywhere),
                                           "kl_max_abs_diff": _max_diff(ours["kl"], kld, everywhere)}
        if estimator == "k1":
            signal_rewards = ours["rewards"]
    for gamma, lam in settings:
        ours = functions["gae_advantages"](signal_rewards, batch["values"], batch["response_mask"], gamma, lam)
        gated = functions["whiten_and_gate"](ours["advantages"], batch["response_mask"],
                                             torch.zeros_like(batch["log_probs"]), 0.0, batch["scores"])
        verl_advantages, verl_returns = verl_reference.gae(signal_rewards, batch["values"], batch["response_mask"],
                                                           gamma, lam)
        result["gae"].append({"gamma": gamma, "lam": lam,
                              "returns_max_abs_diff": _max_diff(ours["returns"], verl_returns, valid),
                              "whitened_max_abs_diff": _max_diff(gated["whitened"], verl_advantages, valid)})
    diffs = [value for per in result["estimators"].values() for value in per.values()]
    diffs += [value for item in result["gae"] for key, value in item.items() if key.endswith("diff")]
    result["returns_max_abs_diff"] = max(item["returns_max_abs_diff"] for item in result["gae"])
    result["whitened_max_abs_diff"] = max(item["whitened_max_abs_diff"] for item in result["gae"])
    result["max_abs_diff"] = max(diffs)
    result["matches"] = result["max_abs_diff"] <= FRAMEWORK_TOLERANCE
    return result


def framework_batches() -> dict:
    """The batches the framework check runs: the example of Steps 1-4 and its far-moved variant."""
    return {"example": example_batch(), "far": far_batch()}


# ---------------------------------------------------------------------------
# Step 5: the signal matrix on real rollouts (tools.experiments.reward.signal_stage)
# ---------------------------------------------------------------------------

STAGE = "signal_matrix"
KL_SHARE_MARGIN = 0.3
"""The smallest difference in KL share between the KL-dominated control and the baseline the page claims."""
STEP5_CPU_MODEL = "lab"
"""The model cpu_smoke samples from."""


def matrix_lines(record: Mapping) -> list[str]:
    """Lines that show a signal_matrix record: per seed the rollouts, each candidate's gate and verl; the
    paired effects and the decision."""
    if record.get("status") != "ok":
        return [f"status {record.get('status')}: {record.get('error')}"]
    lines = ["functions: " + ", ".join(f"{name} ({item['source']})" for name, item in record["mechanism"].items())]
    for entry in record["per_seed"]:
        rollouts = entry["rollouts"]
        lines += [f"seed {entry['seed']}: {rollouts['responses']} rollouts of {entry['model']['model_id']} "
                  f"({entry['model'].get('weights')}), verifier pass rate {rollouts['pass_rate']:.3f}, "
                  f"{rollouts['response_tokens']} response tokens",
                  f"  {'candidate':<24}{'beta':>6}{'est':>5}{'reward':>10}{'gamma':>7}{'lam':>6}{'mean KL':>10}"
                  f"{'KL share':>10}{'A spread':>10}{'|A| max':>9}  gate"]
        for item in entry["candidates"]:
            setting = item["setting"]
            lines.append(f"  {item['name']:<24}{setting['kl_coef']:>6g}{setting['estimator']:>5}{setting['reward']:>10}"
                         f"{setting['gamma']:>7g}{setting['lam']:>6g}{item['mean_kl']:>10.4f}{item['kl_share']:>10.3f}"
                         f"{item['advantage_spread']:>10.3g}{item['advantage_abs_max']:>9.3f}  {item['decision']} "
                         f"{item['reasons'] or ''}")
        framework = entry.get("framework") or {}
        if framework.get("not_measured"):
            lines.append(f"  verl check: not measured ({framework['not_measured']})")
        elif framework:
            lines.append(f"  verl {framework['verl']} on these rollouts (k1 and k3, gamma 1 and 0.9): rewards "
                         f"{framework['rewards_max_abs_diff']:.1e}, KL {framework['kl_max_abs_diff']:.1e}, whitened "
                         f"advantages {framework['whitened_max_abs_diff']:.1e}, returns "
                         f"{framework['returns_max_abs_diff']:.1e} (max |difference|); {framework['k3_capped_tokens']} of "
                         f"{framework['valid_tokens']} tokens at k3's cap, {framework['k3_log_ratio_clamped_tokens']} past "
                         f"its log-ratio clamp")
    for key, found in (record.get("effects") or {}).items():
        lines.append(f"{key}: {effects.describe(found)}")
    lines.append(f"stage decision: {record['decision']['decision']} ({record['decision']['reason']})")
    return lines


def draw_matrix(record: Mapping):
    """Figure: each candidate's KL share against the gate's limit and the spread (max - min) of its valid
    advantages (log scale; 0 drawn at the bottom), one marker per seed, coloured by the gate's verdict."""
    import matplotlib.pyplot as plt

    names = [item["name"] for item in record["per_seed"][0]["candidates"]]
    fig, (share_ax, spread_ax) = plt.subplots(1, 2, figsize=(13, 4))
    floor = 1e-18
    for entry in record["per_seed"]:
        for row, item in enumerate(entry["candidates"]):
            color = "tab:green" if item["decision"] == "accept" else "tab:red"
            share_ax.plot(item["kl_share"], row, "o", color=color)
            spread_ax.plot(max(item["advantage_spread"], floor), row, "o", color=color)
    share_ax.axvline(record["max_kl_share"], color="black", ls="--", lw=1, label="gate limit")
    share_ax.set_yticks(range(len(names)), names)
    share_ax.set_xlabel("KL share of the reward mass")
    share_ax.set_xlim(0, 1)
    share_ax.legend(fontsize=8)
    spread_ax.set_xscale("log")
    spread_ax.set_yticks(range(len(names)), [])
    spread_ax.set_xlabel(f"max - min of the valid advantages (0 drawn at {floor:g})")
    fig.suptitle("Seven signal settings on the same rollouts, one marker per seed (green: accepted, red: rejected)")
    fig.tight_layout()
    return fig


def effect_sentences(record: Mapping) -> list[str]:
    """The page's sentences about the run's paired effects (lesson_text), chosen by what the record shows."""
    found = record.get("effects")
    if record.get("status") != "ok" or not found:
        return [lesson_text.text("pt_reward_signal.no_interval", seeds=len(record.get("per_seed") or []))]
    share = found["kl_share_control_over_baseline"]
    key = ("pt_reward_signal.kl_share_beyond_margin" if effects.holds(share, KL_SHARE_MARGIN) else
           "pt_reward_signal.kl_share_not_shown")
    same = [next(item for item in entry["candidates"] if item["name"] == "same_score_no_baseline")
            for entry in record["per_seed"]]
    return [lesson_text.text(key, effect=effects.describe(share), margin=KL_SHARE_MARGIN),
            lesson_text.text("pt_reward_signal.same_score", spread=max(item["advantage_spread"] for item in same),
                             whitened=max(item["whitened_abs_max"] for item in same),
                             reasons=", ".join(sorted({reason for item in same for reason in item["reasons"]})) or "-")]
