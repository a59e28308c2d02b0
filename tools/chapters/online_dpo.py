"""Chapter 51 (online DPO): the Wilson interval the gate reads, the figures of Steps 1-3, and the framework
check against TRL's experimental OnlineDPOTrainer.

The learner writes the mechanism (`build_online_pairs`, `adoption_gate`, `guard_rollback`); nothing here
implements it. The framework check takes `build_online_pairs`: TRL 1.16's OnlineDPOTrainer samples two
completions per prompt from the tiny model and scores them with a reward function; the learner's pairs
(groups of two) must pick the same chosen and rejected completions as TRL for every prompt without a
tie, and the DPO loss of those pairs must equal TRL's. Ties are where the two differ on purpose: TRL
trains on a tie with the first completion as chosen; the chapter's contract skips it. Nothing here prints.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from tools.chapters import framework_checks
from tools.data.arithmetic import generate_tasks
from tools.errors import ConfigError
from tools.experiments.preference.logprobs import pack, response_logprobs
from tools.experiments.preference.losses import dpo_loss
from tools.experiments.preference.trl_runs import (
    quiet_trl,
    silence_printer,
    state_sha256,
    tiny_policy_and_reference,
    trainer_arguments,
    versions,
)

CHAPTER_ID = "51"
FRAMEWORK_TOLERANCE = 1e-5
FRAMEWORK_BETA = 0.1
FRAMEWORK_PROMPTS = 4
FRAMEWORK_NEW_TOKENS = 6
COMPARED = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies")


def wilson_interval(wins: int, n: int, confidence: float = 0.95) -> list[float]:
    """The Wilson score interval [low, high] of wins / n at `confidence` (chapter 50), clamped to [0, 1]."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or isinstance(wins, bool) or not isinstance(wins, int) \
            or not 0 <= wins <= n:
        raise ValueError(f"need 0 <= wins <= n with n >= 1, got wins={wins!r}, n={n!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p = wins / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return [max(0.0, centre - half), min(1.0, centre + half)]


def short_hash(version: str) -> str:
    return version[:8]


# ---------------------------------------------------------------------------
# Steps 1-3: figures
# ---------------------------------------------------------------------------

def draw_online_rounds(rounds: int = 3):
    """Figure: the online loop, one row per round: sample with the serving version, score, pair, update,
    gate; pairs keep the version that sampled them, and those of an earlier version are stale."""
    import matplotlib.pyplot as plt

    steps = ["sample with\nv{k}", "judge\nscores", "pairs tagged\nv{k}", "DPO update\n-> candidate",
             "gate on the fixed\nevaluation set"]
    fig, ax = plt.subplots(figsize=(11, 1.2 + 1.1 * rounds))
    for k in range(rounds):
        y = rounds - 1 - k
        ax.text(-0.2, y + 0.35, f"round {k}", ha="right", va="center", fontsize=9)
        for index, step in enumerate(steps):
            x = index * 2.2
            ax.add_patch(plt.Rectangle((x, y), 1.9, 0.7, color="#fdae6b" if index == 4 else "#9ecae1"))
            ax.text(x + 0.95, y + 0.35, step.format(k=k), ha="center", va="center", fontsize=8)
            if index < len(steps) - 1:
                ax.annotate("", xy=(x + 2.2, y + 0.35), xytext=(x + 1.9, y + 0.35), arrowprops={"arrowstyle": "->"})
        if k:
            ax.text(len(steps) * 2.2 + 0.1, y + 0.35, f"pairs of v{k - 1}: stale, left out", va="center", fontsize=8,
                    color="#de2d26")
    ax.set_xlim(-1.3, len(steps) * 2.2 + 3.2)
    ax.set_ylim(-0.2, rounds)
    ax.axis("off")
    ax.set_title("online DPO: every round samples from the version serving now (vk = the version serving in round k)")
    fig.tight_layout()
    return fig


def draw_version_log(log: Sequence[Mapping], serving: str | None = None):
    """Figure: a version log as a chain: each entry with its guard metric, good ones in green, regressed
    ones in red, the serving version framed."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(log)), 2.8))
    position = {entry["version"]: index for index, entry in enumerate(log)}
    for index, entry in enumerate(log):
        colour = "#74c476" if entry["state"] == "good" else "#fb6a4a"
        ax.add_patch(plt.Rectangle((index * 2, 0), 1.5, 1, color=colour,
                                   ec="black", lw=3 if entry["version"] == serving else 0))
        ax.text(index * 2 + 0.75, 1.1, f"entry {index}", ha="center", fontsize=8)
        ax.text(index * 2 + 0.75, 0.62, short_hash(entry["version"]), ha="center", fontsize=9, family="monospace")
        ax.text(index * 2 + 0.75, 0.3, f"guard {entry['guard']:.2f}", ha="center", fontsize=8)
        if entry["parent"] is not None:
            start = position[entry["parent"]] * 2 + 1.5
            ax.annotate("", xy=(index * 2, 0.5), xytext=(start, 0.5),
                        arrowprops={"arrowstyle": "->", "connectionstyle": "arc3,rad=-0.3"})
    ax.set_xlim(-0.3, 2 * len(log))
    ax.set_ylim(-0.6, 1.6)
    ax.axis("off")
    ax.set_title("version log: arrows go from parent to child; framed = serving; red = regressed (rolled back)")
    fig.tight_layout()
    return fig


def example_hash(name: str) -> str:
    """A sha256 hex digest standing in for a version's weights in the examples."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


STEP3_LOG = [
    {"version": example_hash("v0"), "parent": None, "guard": 0.62, "state": "good"},
    {"version": example_hash("v1"), "parent": example_hash("v0"), "guard": 0.64, "state": "good"},
    {"version": example_hash("v2"), "parent": example_hash("v1"), "guard": 0.41, "state": "regressed"},
    {"version": example_hash("v3"), "parent": example_hash("v1"), "guard": 0.66, "state": "good"},
]
"""Step 3's version log: v2 regressed and was rolled back, so v3 was trained from v1 again."""


# ---------------------------------------------------------------------------
# The framework check: TRL's OnlineDPOTrainer on the tiny model
# ---------------------------------------------------------------------------

def hash_score(prompts, completions, completion_ids=None, **_) -> list[float]:
    """A reward that only tells completions apart (a fraction from the sha256 of the text): the check needs
    scores that differ, not scores that mean anything."""
    return [int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) / 2 ** 32 for text in completions]


class _RecordingReward:
    """A reward function that remembers what TRL showed it (the last call's prompts, completions, ids, scores)."""

    __name__ = "hash_score"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        scores = hash_score(prompts, completions)
        self.calls.append({"prompts": list(prompts), "completions": list(completions),
                           "completion_ids": [list(ids) for ids in completion_ids], "scores": scores})
        return scores


def framework_prompts(tokenizer, count: int = FRAMEWORK_PROMPTS) -> list[str]:
    """Arithmetic prompts (training seed 101) of one token length, so that TRL's left padding adds nothing."""
    tasks = generate_tasks(seed=101, per_operation=4)
    by_length: dict[int, list[str]] = {}
    for task in tasks:
        by_length.setdefault(len(tokenizer(task.prompt, add_special_tokens=False)["input_ids"]), []).append(task.prompt)
    prompts = max(by_length.values(), key=len)
    if len(prompts) < count:
        raise ConfigError(f"only {len(prompts)} prompts share a token length; the check needs {count}")
    return prompts[:count]


def framework() -> dict:
    found = versions()
    return {"library": "trl", "version": found["trl"], "transformers": found["transformers"],
            "reference_call": "trl.experimental.online_dpo.OnlineDPOTrainer.training_step (2 completions per prompt, "
                              "reward function, sigmoid loss) after one train() step",
            "beta": FRAMEWORK_BETA, "tolerance_abs": FRAMEWORK_TOLERANCE}


def run_trl_online_dpo_step(*, seed: int = 0) -> dict:
    """One TRL online DPO step on the tiny model, then one more training step whose sampled completions,
    scores, loss and reward statistics are kept."""
    import os

    import torch
    from datasets import Dataset

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.online_dpo import OnlineDPOConfig, OnlineDPOTrainer

    reward = _RecordingReward()
    with quiet_trl():
        policy, reference, tokenizer = tiny_policy_and_reference(seed)
        reference_before = state_sha256(reference)
        prompts = framework_prompts(tokenizer)
        arguments = trainer_arguments(OnlineDPOConfig, per_device_train_batch_size=len(prompts), beta=FRAMEWORK_BETA,
                                      learning_rate=1e-2, seed=seed, max_new_tokens=FRAMEWORK_NEW_TOKENS,
                                      temperature=1.0)
        trainer = OnlineDPOTrainer(model=policy, ref_model=reference, reward_funcs=reward, args=arguments,
                                   train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                                   processing_class=tokenizer)
        silence_printer(trainer)
        trainer.train()
        torch.manual_seed(seed + 1)
        loss = float(trainer.training_step(policy, next(iter(trainer.get_train_dataloader()))))
        stats = {key: values[-1] for key, values in trainer.stats.items()}
    policy.zero_grad(set_to_none=True)
    return {"policy": policy, "reference": reference, "tokenizer": tokenizer, "sampled": reward.calls[-1],
            "eos_ids": list(trainer.eos_token_ids), "trl": {"loss": loss, **{key: float(stats[key]) for key in COMPARED
                                                                              if key != "loss"}},
            "reference_unchanged": state_sha256(reference) == reference_before}


def sampled_groups(step: Mapping, version: str) -> list[dict]:
    """TRL's samples as the chapter's groups: prompt k's two completions are rows k and k + B."""
    sampled = step["sampled"]
    half = len(sampled["prompts"]) // 2
    return [{"prompt_id": f"p{k}", "prompt": sampled["prompts"][k], "policy_version": version,
             "responses": [sampled["completions"][k], sampled["completions"][k + half]],
             "scores": [sampled["scores"][k], sampled["scores"][k + half]]} for k in range(half)]


def _until_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    for position, token in enumerate(ids):
        if token in eos_ids:
            return list(ids[:position + 1])
    return list(ids)


def compare_with_trl(step: Mapping, build_online_pairs: Callable) -> dict:
    """The learner's pairs against TRL's choice, then the DPO loss on TRL's completions against TRL's loss."""
    import torch

    version = state_sha256(step["policy"])
    groups = sampled_groups(step, version)
    built = build_online_pairs(groups, version)
    by_prompt = {pair["prompt_id"]: pair for pair in built["pairs"]}
    sampled, half = step["sampled"], len(groups)
    rows, agree = [], 0
    for k, group in enumerate(groups):
        first_wins = group["scores"][0] >= group["scores"][1]  # TRL: a tie goes to the first completion
        chosen, rejected = (k, k + half) if first_wins else (k + half, k)
        pair = by_prompt.get(group["prompt_id"])
        if pair is not None:
            agree += (pair["chosen"], pair["rejected"]) == (sampled["completions"][chosen], sampled["completions"][rejected])
        rows.append((chosen, rejected))
    tokenizer = step["tokenizer"]
    prompt_ids = [tokenizer(sampled["prompts"][k], add_special_tokens=False)["input_ids"] for k in range(half)]
    ids = [_until_eos(sampled["completion_ids"][index], step["eos_ids"]) for pair in rows for index in pair]
    batch = pack([prompt_ids[k] for k in range(half) for _ in (0, 1)], ids, tokenizer.pad_token_id)
    with torch.no_grad():
        policy = response_logprobs(step["policy"], batch, frozen=True).reshape(half, 2)
        reference = response_logprobs(step["reference"], batch, frozen=True).reshape(half, 2)
    loss = dpo_loss(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1], FRAMEWORK_BETA)
    ours = {"loss": float(loss["loss"]), "rewards/chosen": float(loss["chosen_rewards"].mean()),
            "rewards/rejected": float(loss["rejected_rewards"].mean()), "rewards/margins": float(loss["margins"].mean()),
            "rewards/accuracies": float(loss["accuracy"])}
    difference = max(abs(ours[key] - step["trl"][key]) for key in COMPARED)
    untied = half - len(built["ties"])
    return {"ours": ours, "trl": dict(step["trl"]), "max_abs_diff": difference, "prompts": half,
            "ties": list(built["ties"]), "stale": list(built["stale"]), "pairs_agreeing_with_trl": agree,
            "untied_prompts": untied,
            "matches": difference <= FRAMEWORK_TOLERANCE and agree == untied == len(built["pairs"])}


def trl_online_dpo_check(build_online_pairs: Callable, *, seed: int = 0) -> dict:
    step = run_trl_online_dpo_step(seed=seed)
    return {"framework": framework(), "reference_unchanged": step["reference_unchanged"],
            "completions": step["sampled"]["completions"], "scores": step["sampled"]["scores"],
            **compare_with_trl(step, build_online_pairs), "step": step}


def learner_comparison(step: Mapping, functions: Mapping[str, Callable]) -> dict:
    return framework_checks.learner_result(lambda: compare_with_trl(step, functions["build_online_pairs"]))


def framework_lines(result: Mapping) -> list[str]:
    check = result["framework"]
    lines = [
        (f"framework check: {check['library']} {check['version']} (transformers {check['transformers']}), "
         f"{check['reference_call']}, beta {check['beta']}, tolerance {check['tolerance_abs']:g} (absolute)"),
        (f"  {result['prompts']} prompts x 2 sampled completions; ties {result['ties']}; pairs that pick the same "
         f"chosen / rejected as TRL: {result['pairs_agreeing_with_trl']} of {result['untied_prompts']} untied prompts"),
        f"  {'quantity':<20}{'ours':>14}{'TRL':>14}",
    ]
    for key in COMPARED:
        lines.append(f"  {key:<20}{result['ours'][key]:>14.8f}{result['trl'][key]:>14.8f}")
    lines.append(f"  max |difference| {result['max_abs_diff']:.2e} -> matches: {result['matches']}; reference "
                 f"unchanged: {result['reference_unchanged']}")
    return lines


def framework_record(check: Mapping, learner: Mapping) -> dict:
    return framework_checks.record_body(check, learner)


def framework_summary(record: Mapping) -> list[str]:
    return framework_checks.summary_lines(record, framework_lines)


# ---------------------------------------------------------------------------
# Step 5.2: online rounds on the lab model (records of tools.experiments.preference.online_runs)
# ---------------------------------------------------------------------------

STEP5_CPU_MODEL = "lab"
"""cpu_smoke trains the course's lab model (python -m tools.models lab-build)."""
DECISION_STAGE = "online_decisions"
RUN_STAGES = ("setup", "round_1", "round_2")


def round_records(records: Mapping[str, Mapping]) -> list[Mapping]:
    """The `round_<k>` records of one run, in order."""
    return [records[stage] for stage in sorted((s for s in records if s.startswith("round_")),
                                               key=lambda s: int(s.split("_")[1]))]


def rederived(records: Mapping[str, Mapping], build_online_pairs: Callable, adoption_gate: Callable,
              guard_rollback: Callable) -> list[dict]:
    """Every round's decisions again, from its recorded groups, outcomes and guard numbers, through the
    chapter's three functions; beside each, the experiment's own decision, so a disagreement shows."""
    settings = records["setup"]["settings"]
    eval_ids = [task["task_id"] for task in records["setup"]["evaluation_tasks"]]
    log = [dict(entry) for entry in records["setup"]["version_log"]]
    found = []
    for record in round_records(records):
        if record["status"] != "ok":
            found.append({"round": record["round"], "status": record["status"]})
            continue
        pairs = build_online_pairs(record["groups"], record["serving_version"])
        entry = {"round": record["round"], "status": "ok", "pairs": len(pairs["pairs"]), "ties": len(pairs["ties"]),
                 "recorded_pairs": record["pair_count"], "recorded_gate": record["gate"]["decision"]}
        if record["candidate_version"] is not None:
            gate = adoption_gate(record["outcomes"], eval_ids, confidence=settings["confidence"],
                                 min_decisive=settings["min_decisive"])
            entry["gate"] = gate
            if gate["decision"] == "adopt":
                rolled = guard_rollback(log, {"version": record["candidate_version"],
                                              "parent": record["serving_version"]},
                                        record["guard"]["candidate"], settings["max_drop"])
                log = rolled["log"]
                entry["guard"] = {"candidate": record["guard"]["candidate"], "serving": record["guard"]["serving"],
                                  "drop": rolled["drop"], "rolled_back": rolled["rolled_back"],
                                  "recorded_rolled_back": record["guard"]["rolled_back"]}
        entry["serving_after"] = next(item["version"] for item in reversed(log) if item["state"] == "good")
        entry["recorded_serving_after"] = record["serving_after"]
        found.append(entry)
    return found


def decision_body(records: Mapping[str, Mapping], rounds: list[dict]) -> dict:
    """The `online_decisions` record: the rounds as the chapter's functions decide them, and whether every
    decision agrees with the experiment's."""
    agrees = all(entry["status"] != "ok" or (
        entry["pairs"] == entry["recorded_pairs"]
        and entry.get("gate", {}).get("decision", "keep") == entry["recorded_gate"]
        and entry["serving_after"] == entry["recorded_serving_after"]) for entry in rounds)
    last = [record for record in round_records(records) if record["status"] == "ok"]
    return {"model": records["setup"]["model"], "settings": records["setup"]["settings"], "rounds": rounds,
            "version_log": last[-1]["version_log"] if last else records["setup"]["version_log"],
            "agrees_with_the_experiment": agrees, "status": "ok"}


def decision_lines(record: Mapping) -> list[str]:
    """The `online_decisions` record as text."""
    settings = record["settings"]
    lines = [f"online DPO on {record['model']['model_id']}: gate on {settings['eval_problems']} two-digit sums "
             f"(confidence {settings['confidence']}, >= {settings['min_decisive']} decisive), guard on "
             f"{settings['guard_problems']} three-digit sums (max drop {settings['max_drop']})"]
    for entry in record["rounds"]:
        if entry["status"] != "ok":
            lines.append(f"  round {entry['round']}: {entry['status']}")
            continue
        text = f"  round {entry['round']}: {entry['pairs']} pairs ({entry['ties']} tied groups)"
        gate = entry.get("gate")
        if gate is not None:
            low, high = gate["interval"] or (float("nan"), float("nan"))
            text += (f"; gate {gate['wins']} wins / {gate['losses']} losses / {gate['ties']} ties, Wilson "
                     f"[{low:.3f}, {high:.3f}] -> {gate['decision']}")
        guard = entry.get("guard")
        if guard is not None:
            text += (f"; guard {guard['serving']:.3f} -> {guard['candidate']:.3f} (drop {guard['drop']:+.3f}) -> "
                     f"{'rolled back' if guard['rolled_back'] else 'kept'}")
        lines.append(text + f"; serving {short_hash(entry['serving_after'])}")
    lines.append(f"  the chapter's functions agree with the experiment's decisions: {record['agrees_with_the_experiment']}")
    return lines


def draw_rounds(record: Mapping):
    """Left: each round's gate verdicts (wins, losses, ties); right: the version log."""
    import matplotlib.pyplot as plt

    rounds = [entry for entry in record["rounds"] if entry.get("gate")]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [f"round {entry['round']}" for entry in rounds]
    bottom = [0] * len(rounds)
    for key, colour in (("wins", "tab:green"), ("losses", "tab:red"), ("ties", "lightgrey")):
        values = [entry["gate"][key] for entry in rounds]
        ax.bar(names, values, bottom=bottom, color=colour, label=key)
        bottom = [b + v for b, v in zip(bottom, values)]
    for index, entry in enumerate(rounds):
        ax.text(index, bottom[index] + 1, entry["gate"]["decision"], ha="center", fontsize=9)
    ax.set(ylabel="evaluation prompts", title="candidate vs serving version on the fixed evaluation set")
    ax.legend(loc="lower right")
    fig.tight_layout()
    log_figure = draw_version_log(record["version_log"], record["rounds"][-1].get("serving_after"))
    return fig, log_figure
