"""Chapter 51 (online DPO): the Wilson interval the gate reads, the figures of Steps 1-3, and the framework
check against TRL's experimental OnlineDPOTrainer.

The learner writes the mechanism (`build_online_pairs`, `adoption_gate`, `guard_rollback`); nothing here
implements it. The framework check takes `build_online_pairs`: TRL 1.16's OnlineDPOTrainer samples two
completions for each row of a batch in which every prompt appears twice (so four per prompt) from the tiny
model and scores them with a coarse reward (0 or 1), so that ties are common. Per row (a group of two) the
learner's pair must be TRL's chosen and rejected where the scores differ, and a tie must be reported as a
tie where TRL trains on it anyway (first completion chosen: the one difference on purpose). Per prompt (a
group of four, in TRL's completion order) the learner's pair must be what TRL's own rule (`first >= second`,
ties to the earlier completion) picks when it is run as a knock-out over the group: the first best and the
first worst. The DPO loss the package computes on TRL's pairs must equal TRL's. Nothing here prints.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from tools.chapters import framework_checks, lesson_text
from tools.chapters.framework_checks import functions_ran_line
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

def tied_score(prompts, completions, completion_ids=None, **_) -> list[float]:
    """A coarse reward, 0.0 or 1.0 from the sha256 of the text: it tells completions apart only half the time,
    so a batch holds tied groups (the check needs ties and repeated best scores, not meaningful scores)."""
    return [float(int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 2) for text in completions]


class _RecordingReward:
    """A reward function that remembers what TRL showed it (the last call's prompts, completions, ids, scores)."""

    __name__ = "tied_score"

    def __init__(self):
        self.calls = []

    def __call__(self, prompts, completions, completion_ids, **kwargs):
        scores = tied_score(prompts, completions)
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
            "reference_call": "trl.experimental.online_dpo.OnlineDPOTrainer.training_step (2 completions per row, every "
                              "prompt in two rows, a 0/1 reward function, sigmoid loss) after one train() step",
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
        rows = [prompt for prompt in prompts for _ in (0, 1)]
        arguments = trainer_arguments(OnlineDPOConfig, per_device_train_batch_size=len(rows), beta=FRAMEWORK_BETA,
                                      learning_rate=1e-2, seed=seed, max_new_tokens=FRAMEWORK_NEW_TOKENS,
                                      temperature=1.0)
        trainer = OnlineDPOTrainer(model=policy, ref_model=reference, reward_funcs=reward, args=arguments,
                                   train_dataset=Dataset.from_list([{"prompt": p} for p in rows]),
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
    """TRL's samples as the chapter's groups of two: row k's completions are k and k + B."""
    sampled = step["sampled"]
    half = len(sampled["prompts"]) // 2
    return [{"prompt_id": f"row{k}", "prompt": sampled["prompts"][k], "policy_version": version,
             "responses": [sampled["completions"][k], sampled["completions"][k + half]],
             "scores": [sampled["scores"][k], sampled["scores"][k + half]]} for k in range(half)]


def prompt_groups(step: Mapping, version: str) -> tuple[list[dict], list[list[int]]]:
    """TRL's samples as one group per prompt (every completion of that prompt, in TRL's order), and the
    completion indices of each group."""
    sampled = step["sampled"]
    order: dict[str, list[int]] = {}
    for index, prompt in enumerate(sampled["prompts"]):
        order.setdefault(prompt, []).append(index)
    groups = [{"prompt_id": f"prompt{number}", "prompt": prompt, "policy_version": version,
               "responses": [sampled["completions"][index] for index in indices],
               "scores": [sampled["scores"][index] for index in indices]}
              for number, (prompt, indices) in enumerate(order.items())]
    return groups, list(order.values())


def trl_rule_knockout(scores: Sequence[float]) -> tuple[int, int] | None:
    """TRL's pair rule (`first >= second` makes the first the chosen one) run as a knock-out over a group:
    the position kept as chosen and the position kept as rejected; None when every score ties."""
    if max(scores) == min(scores):
        return None
    chosen = rejected = 0
    for position in range(1, len(scores)):
        chosen = chosen if scores[chosen] >= scores[position] else position
        rejected = rejected if scores[position] >= scores[rejected] else position
    return chosen, rejected


def _until_eos(ids: Sequence[int], eos_ids: Sequence[int]) -> list[int]:
    for position, token in enumerate(ids):
        if token in eos_ids:
            return list(ids[:position + 1])
    return list(ids)


def _pairs_agree(built: Mapping, groups: Sequence[Mapping], expected: Mapping[str, tuple[int, int] | None]) -> dict:
    """How the learner's pairs and ties compare with the expected (chosen, rejected) positions per group."""
    by_prompt = {pair["prompt_id"]: pair for pair in built["pairs"]}
    agree = tied_reported = 0
    for group in groups:
        want = expected[group["prompt_id"]]
        pair = by_prompt.get(group["prompt_id"])
        if want is None:
            tied_reported += pair is None and group["prompt_id"] in built["ties"]
        elif pair is not None:
            agree += (pair["chosen"], pair["rejected"]) == (group["responses"][want[0]], group["responses"][want[1]])
    tied = sum(value is None for value in expected.values())
    return {"groups": len(groups), "untied": len(groups) - tied, "agreeing": agree, "tied": tied,
            "ties_reported": tied_reported,
            "all_agree": agree == len(groups) - tied and tied_reported == tied
            and len(built["pairs"]) == len(groups) - tied}


def compare_with_trl(step: Mapping, build_online_pairs: Callable) -> dict:
    """The learner's pairs against TRL's choice (groups of two) and TRL's rule as a knock-out (groups of four),
    then the package's DPO loss on TRL's pairs against TRL's loss."""
    import torch

    version = state_sha256(step["policy"])
    rows = sampled_groups(step, version)
    sampled, half = step["sampled"], len(rows)
    trl_choice = {}
    for k, group in enumerate(rows):
        first_wins = group["scores"][0] >= group["scores"][1]  # TRL: a tie goes to the first completion
        trl_choice[group["prompt_id"]] = (k, k + half) if first_wins else (k + half, k)
    two = _pairs_agree(build_online_pairs(rows, version), rows,
                       {group["prompt_id"]: None if group["scores"][0] == group["scores"][1]
                        else ((0, 1) if group["scores"][0] > group["scores"][1] else (1, 0)) for group in rows})
    groups, _ = prompt_groups(step, version)
    four = _pairs_agree(build_online_pairs(groups, version), groups,
                        {group["prompt_id"]: trl_rule_knockout(group["scores"]) for group in groups})
    tokenizer = step["tokenizer"]
    prompt_ids = [tokenizer(sampled["prompts"][k], add_special_tokens=False)["input_ids"] for k in range(half)]
    ids = [_until_eos(sampled["completion_ids"][index], step["eos_ids"]) for k in range(half)
           for index in trl_choice[f"row{k}"]]
    batch = pack([prompt_ids[k] for k in range(half) for _ in (0, 1)], ids, tokenizer.pad_token_id)
    with torch.no_grad():
        policy = response_logprobs(step["policy"], batch, frozen=True).reshape(half, 2)
        reference = response_logprobs(step["reference"], batch, frozen=True).reshape(half, 2)
    loss = dpo_loss(policy[:, 0], policy[:, 1], reference[:, 0], reference[:, 1], FRAMEWORK_BETA)
    ours = {"loss": float(loss["loss"]), "rewards/chosen": float(loss["chosen_rewards"].mean()),
            "rewards/rejected": float(loss["rejected_rewards"].mean()), "rewards/margins": float(loss["margins"].mean()),
            "rewards/accuracies": float(loss["accuracy"])}
    difference = max(abs(ours[key] - step["trl"][key]) for key in COMPARED)
    return {"ours": ours, "trl": dict(step["trl"]), "max_abs_diff": difference, "rows": half,
            "groups_of_two": two, "groups_of_four": four, "trl_trains_on_ties": two["tied"],
            "matches": difference <= FRAMEWORK_TOLERANCE and two["all_agree"] and four["all_agree"]}


def trl_online_dpo_check(build_online_pairs: Callable, *, seed: int = 0) -> dict:
    step = run_trl_online_dpo_step(seed=seed)
    return {"framework": framework(), "reference_unchanged": step["reference_unchanged"],
            "completions": step["sampled"]["completions"], "scores": step["sampled"]["scores"],
            **compare_with_trl(step, build_online_pairs), "step": step}


def learner_comparison(step: Mapping, functions: Mapping[str, Callable]) -> dict:
    return framework_checks.learner_result(lambda: compare_with_trl(step, functions["build_online_pairs"]))


def framework_lines(result: Mapping) -> list[str]:
    check, two, four = result["framework"], result["groups_of_two"], result["groups_of_four"]
    lines = [
        (f"framework check: {check['library']} {check['version']} (transformers {check['transformers']}), "
         f"{check['reference_call']}, beta {check['beta']}, tolerance {check['tolerance_abs']:g} (absolute)"),
        (f"  groups of two (TRL's rows): {two['agreeing']} of {two['untied']} untied groups pick TRL's chosen / "
         f"rejected; {two['ties_reported']} of {two['tied']} tied groups reported as ties (TRL trains on them, "
         "first completion chosen)"),
        (f"  groups of four (one per prompt): {four['agreeing']} of {four['untied']} untied groups pick what TRL's "
         f"rule picks as a knock-out (first best, first worst); {four['ties_reported']} of {four['tied']} fully tied "
         "groups reported as ties"),
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
RUN_STAGES = ("setup", "round_1", "round_2", "round_3")


def round_records(records: Mapping[str, Mapping]) -> list[Mapping]:
    """The `round_<k>` records of one run, in order."""
    return [records[stage] for stage in sorted((s for s in records if s.startswith("round_")),
                                               key=lambda s: int(s.split("_")[1]))]


def round_summary(record: Mapping) -> dict:
    """What the page shows of one round: its judge, pairs, the gate's verdict, the exact match of both versions
    on the evaluation set, the guard and where serving went."""
    if record["status"] != "ok":
        return {"round": record["round"], "status": record["status"], "error": record.get("error")}
    return {"round": record["round"], "status": "ok", "judge": record["round_settings"]["judge"],
            "pairs": record["pair_count"], "ties": len(record["ties"]), "stale": len(record["stale"]),
            "pairs_preferring_a_wrong_answer": record["pairs_preferring_a_wrong_answer"],
            "gate": record.get("gate"), "serving_exact_match": record["serving_evaluation_exact_match"],
            "candidate_exact_match": record.get("candidate_evaluation_exact_match"), "guard": record.get("guard"),
            "control": record.get("control"), "serving_version": record["serving_version"], "candidate_version": record.get("candidate_version"),
            "serving_after": record["serving_after"]}


def decision_body(records: Mapping[str, Mapping]) -> dict:
    """The `online_decisions` record: every round as the chapter's functions decided it inside the run, and the
    version log after the last round."""
    rounds = round_records(records)
    finished = [record for record in rounds if record["status"] == "ok"]
    return {"model": records["setup"]["model"], "settings": records["setup"]["settings"],
            "mechanism": records["setup"].get("mechanism"),
            "start_evaluation_exact_match": records["setup"]["evaluation_exact_match"],
            "start_guard": records["setup"]["version_log"][0]["guard"],
            "rounds": [round_summary(record) for record in rounds],
            "version_log": finished[-1]["version_log"] if finished else records["setup"]["version_log"],
            "status": "ok"}


def decision_lines(record: Mapping) -> list[str]:
    """The `online_decisions` record as text."""
    settings = record["settings"]
    lines = [functions_ran_line(record["mechanism"])] if record.get("mechanism") else []
    lines.append(f"online DPO on {record['model']['model_id']}: gate on {settings['eval_problems']} held-out two-digit "
                 f"sums (confidence {settings['confidence']}, >= {settings['min_decisive']} decisive), guard on "
                 f"{settings['guard_problems']} three-digit sums (max drop {settings['max_drop']}); start: exact match "
                 f"{record['start_evaluation_exact_match']:.3f} on the evaluation set, guard {record['start_guard']:.3f}")
    for entry in record["rounds"]:
        if entry["status"] != "ok":
            lines.append(f"  round {entry['round']}: {entry['status']} ({entry.get('error')})")
            continue
        text = (f"  round {entry['round']} (judge {entry['judge']}): {entry['pairs']} pairs, {entry['ties']} tied groups, "
                f"{entry['pairs_preferring_a_wrong_answer']} pairs prefer a wrong answer")
        gate = entry.get("gate")
        if gate is not None:
            low, high = gate["interval"] or (float("nan"), float("nan"))
            text += (f"; exact match {entry['serving_exact_match']:.3f} -> {entry['candidate_exact_match']:.3f}; gate "
                     f"{gate['wins']} wins / {gate['losses']} losses / {gate['ties']} ties, Wilson [{low:.3f}, "
                     f"{high:.3f}] -> {gate['decision']}")
        guard = entry.get("guard")
        if guard is not None:
            verdict = {True: "rolled back", False: "kept", None: "not adopted, not logged"}[guard["rolled_back"]]
            text += f"; guard {guard['serving']:.3f} -> {guard['candidate']:.3f} ({verdict})"
        control = entry.get("control")
        if control and control.get("guard") is not None:
            text += (f"; control (same replies judged by the {control['judge']}, {control['pair_count']} pairs, never "
                     f"served): guard {control['guard']:.3f}, exact match {control['evaluation_exact_match']:.3f}")
        lines.append(text + f"; serving {short_hash(entry['serving_after'])}")
    return lines


def findings(record: Mapping) -> list[str]:
    """Sentences the page prints from this run's `online_decisions` record: what each round measured."""
    found = []
    for entry in record["rounds"]:
        gate, guard = entry.get("gate"), entry.get("guard")
        if entry["status"] != "ok" or gate is None:
            continue
        fields = {"round": entry["round"], "before": f"{entry['serving_exact_match']:.3f}",
                  "after": f"{entry['candidate_exact_match']:.3f}", "decision": gate["decision"]}
        found.append(lesson_text.text("online_dpo.gate", **fields))
        if guard is not None and guard["rolled_back"] is not None:
            key = "online_dpo.guard_rolled_back" if guard["rolled_back"] else "online_dpo.guard_kept"
            found.append(lesson_text.text(key, round=entry["round"], serving=f"{guard['serving']:.3f}",
                                          candidate=f"{guard['candidate']:.3f}"))
        control = entry.get("control")
        if guard is not None and control and control.get("guard") is not None:
            found.append(lesson_text.text("online_dpo.guard_control", round=entry["round"],
                                          candidate=f"{guard['candidate']:.3f}", control=f"{control['guard']:.3f}",
                                          serving=f"{guard['serving']:.3f}"))
    return found


def draw_rounds(record: Mapping):
    """Left: each round's gate verdicts (wins, losses, ties); right: the version log."""
    import matplotlib.pyplot as plt

    rounds = [entry for entry in record["rounds"] if entry.get("gate")]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [f"round {entry['round']}\n({entry['judge']})" for entry in rounds]
    bottom = [0] * len(rounds)
    for key, colour in (("wins", "tab:green"), ("losses", "tab:red"), ("ties", "lightgrey")):
        values = [entry["gate"][key] for entry in rounds]
        ax.bar(names, values, bottom=bottom, color=colour, label=key)
        bottom = [b + v for b, v in zip(bottom, values)]
    for index, entry in enumerate(rounds):
        ax.text(index, bottom[index] + 1, entry["gate"]["decision"], ha="center", fontsize=9)
    ax.set(ylabel="evaluation prompts", title="candidate vs serving version on the fixed evaluation set")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(loc="lower right")
    fig.tight_layout()
    log_figure = draw_version_log(record["version_log"], record["rounds"][-1].get("serving_after"))
    return fig, log_figure
