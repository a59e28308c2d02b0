"""Chapter 51's Step 5: rounds of online (iterative) DPO with an adoption gate, a guard metric and rollback by hash.

Stage `setup`: the fixed evaluation set the gate judges (held-out lab-task sums with a two-digit answer), the
guard set (validation sums with a three-digit answer), the starting model's version (sha256 of its tensors),
its exact match on both sets, and the version log's base entry. Each round names its training problems
(lab-task train split, a count per answer kind) and its judge.

Stage `round_<k>`: the serving version samples a group of replies per training prompt of the round; the
round's judge scores them (1 preferred, 0 not; the verifier's own scores are kept beside them); the chapter's
`build_online_pairs` pairs each group's first best against its first worst reply (ties and groups of
another version skipped); a trainable copy of the serving version takes the round's DPO updates against a
frozen copy of the serving version: the reference is reset to the serving version every round (iterative
DPO; TRL's OnlineDPOTrainer keeps one reference for the whole run). The candidate and the serving version
answer the evaluation set greedily and the verifier judges each prompt in both orders (win, loss or tie);
the chapter's `adoption_gate` decides; the guard metric (exact match on the guard set) is measured for
every candidate, and for an adopted one the chapter's `guard_rollback` records it in the version log and
rolls it back when its guard dropped beyond `max_drop`: the serving version stays the last good one,
identified by its hash. Every record carries which functions ran (`plan.mechanism.describe`); the
functions are the notebook's, else the package's copies below.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from tools.data.arithmetic import score_response
from tools.errors import ConfigError
from tools.experiments.preference import sampling, training
from tools.experiments.preference.judge import PairwiseJudge
from tools.experiments.preference.stage import (
    frozen_copy,
    lab_task_slice,
    load_model,
    manifest,
    measured,
    settings_for,
    trainable_copy,
)
from tools.experiments.preference.trl_runs import state_sha256

SCHEMA = "preference-online-dpo/v2"
MECHANISM = ("build_online_pairs", "adoption_gate", "guard_rollback")
DEFAULTS = {
    "cpu_smoke": {"eval_seed": 909, "eval_problems": 300, "guard_seed": 707, "guard_problems": 200,
                  "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 8, "max_drop": 0.02,
                  "max_new_tokens": 6, "seed": 0,
                  "rounds": [{"problems": {"two_digit": 256, "three_digit": 256}, "judge": "inverted_three_digit",
                              "control_judge": "verifier", "train_seed": 202, "steps": 4, "learning_rate": 3e-5},
                             {"problems": {"two_digit": 256}, "judge": "verifier", "train_seed": 101, "steps": 4,
                              "learning_rate": 3e-5},
                             {"problems": {"two_digit": 128}, "judge": "inverted", "train_seed": 303, "steps": 2,
                              "learning_rate": 3e-5}]},
    "real_gpu": {"eval_seed": 909, "eval_problems": 300, "guard_seed": 707, "guard_problems": 240,
                 "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 8, "max_drop": 0.05,
                 "max_new_tokens": 16, "seed": 0,
                 "rounds": [{"problems": {"two_digit": 16, "three_digit": 16}, "judge": "inverted_three_digit",
                             "control_judge": "verifier", "train_seed": 202, "steps": 12, "learning_rate": 5e-5},
                            {"problems": {"any": 16}, "judge": "verifier", "train_seed": 101, "steps": 4,
                             "learning_rate": 5e-6},
                            {"problems": {"any": 16}, "judge": "inverted", "train_seed": 303, "steps": 4,
                             "learning_rate": 5e-6}]},
}
"""The gate judges sums with a two-digit answer; the guard watches the sums with a three-digit answer. On the
GPU the guard holds 240 problems (of the 248 the validation split has), so one problem (0.0042) is under a
tenth of the guard's `max_drop` (48 made it 0.021, and the guard's decision turned on two or three problems);
the gate reads 300. Each
round's `problems` maps an answer kind (`any`, `two_digit`, `three_digit`) to how many training problems of
that kind it samples. Round 1 is a candidate trained with a judge that has a bug (right on two-digit answers,
inverted on three-digit ones): the two-digit evaluation set cannot see the bug, the guard can; round 2 is the
same amount of two-digit data judged by the verifier alone (the gate should adopt, the guard keep); round 3
is the gate's control: a judge that prefers wrong answers, whose candidate the gate must refuse. A round
with a `control_judge` also trains a control candidate from the same serving version on the same replies,
pairs built by the control judge (round 1: the verifier), the same steps and learning rate; it is measured
(evaluation set and guard) and never served, so the guard drop of the round's candidate can be read
against it: the bug's effect, not the effect of training on these prompts. What the runs measured, per profile and seed, is in
tests/experiments/preference/test_online_runs_effect.py and on the chapter's page."""

JUDGES = ("verifier", "inverted_three_digit", "inverted")
"""`verifier`: 1 for a right answer, 0 for a wrong one; `inverted_three_digit`: the verifier on sums with a
two-digit answer, its opposite on sums with a three-digit answer (a judge with a bug); `inverted`: the
verifier's opposite everywhere (a judge that prefers wrong answers)."""


def judge_score(task, reply: str, judge: str) -> int:
    """The round's judge score of one reply (see JUDGES)."""
    correct = int(score_response(task, reply)["correct"])
    if judge == "inverted" or (judge == "inverted_three_digit" and task.label >= 100):
        return 1 - correct
    return correct


ANSWER_KINDS = ("any", "two_digit", "three_digit")


def check_rounds(settings: dict) -> None:
    """Every round names a known judge and a non-empty `problems` mapping; refused before any work."""
    for number, round_settings in enumerate(settings["rounds"], start=1):
        if round_settings.get("judge") not in JUDGES:
            raise ConfigError(f"round {number}: judge must be one of {', '.join(JUDGES)}, "
                              f"got {round_settings.get('judge')!r}")
        if round_settings.get("control_judge", "verifier") not in JUDGES:
            raise ConfigError(f"round {number}: control_judge must be one of {', '.join(JUDGES)}, "
                              f"got {round_settings.get('control_judge')!r}")
        problems = round_settings.get("problems")
        if not isinstance(problems, dict) or not problems or any(
                kind not in ANSWER_KINDS or isinstance(count, bool) or not isinstance(count, int) or count < 1
                for kind, count in problems.items()):
            raise ConfigError(f"round {number}: problems must map answer kinds ({', '.join(ANSWER_KINDS)}) to "
                              f"positive counts, got {problems!r}")


def round_tasks(round_settings: dict) -> list:
    """The round's training problems: per answer kind, its count drawn with train_seed + the kind's index."""
    return [task for index, (answers, count) in enumerate(round_settings["problems"].items())
            for task in lab_task_slice("train", count, round_settings["train_seed"] + index, answers=answers)]


def stages_of(settings: dict) -> list[str]:
    return ["setup", *(f"round_{k}" for k in range(1, len(settings["rounds"]) + 1))]


# ---------------------------------------------------------------------------
# The package's copies of chapter 51's three functions (no input checks), for runs without a notebook
# ---------------------------------------------------------------------------

def wilson_bounds(wins: int, n: int, confidence: float) -> list[float]:
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def build_online_pairs(groups, current_version) -> dict:
    """Each fresh group's first best against its first worst reply; tied and stale groups reported."""
    pairs, ties, stale = [], [], []
    for group in groups:
        if group["policy_version"] != current_version:
            stale.append(group["prompt_id"])
            continue
        scores = list(group["scores"])
        if max(scores) == min(scores):
            ties.append(group["prompt_id"])
            continue
        chosen, rejected = scores.index(max(scores)), scores.index(min(scores))
        pairs.append({"prompt_id": group["prompt_id"], "prompt": group["prompt"], "chosen": group["responses"][chosen],
                      "rejected": group["responses"][rejected], "chosen_score": scores[chosen],
                      "rejected_score": scores[rejected], "policy_version": current_version})
    return {"pairs": pairs, "ties": ties, "stale": stale}


def adoption_gate(outcomes, eval_prompt_ids, confidence=0.95, min_decisive=8) -> dict:
    """Adopt on at least `min_decisive` decisive verdicts and a Wilson lower bound above 1/2."""
    wins = sum(outcome == "win" for outcome in outcomes.values())
    losses = sum(outcome == "loss" for outcome in outcomes.values())
    decisive = wins + losses
    interval = wilson_bounds(wins, decisive, confidence) if decisive else None
    if decisive < min_decisive:
        decision, reason = "keep", "too_few_decisive"
    elif interval[0] > 0.5:
        decision, reason = "adopt", None
    else:
        decision, reason = "keep", "not_better"
    return {"wins": wins, "losses": losses, "ties": len(outcomes) - decisive, "decisive": decisive,
            "win_rate": wins / decisive if decisive else None, "interval": interval, "decision": decision,
            "reason": reason}


def guard_rollback(log, candidate, guard, max_drop) -> dict:
    """Append the candidate to a copy of the log; roll back to the serving version when its guard dropped."""
    serving = next(entry["version"] for entry in reversed(log) if entry["state"] == "good")
    serving_guard = next(entry["guard"] for entry in reversed(log) if entry["version"] == serving)
    regressed = guard < serving_guard - max_drop
    entry = {"version": candidate["version"], "parent": candidate["parent"], "guard": guard,
             "state": "regressed" if regressed else "good"}
    return {"log": [dict(item) for item in log] + [entry], "serving": serving if regressed else candidate["version"],
            "rolled_back": regressed, "drop": float(serving_guard - guard)}


PACKAGE_FUNCTIONS = {"build_online_pairs": build_online_pairs, "adoption_gate": adoption_gate,
                     "guard_rollback": guard_rollback}


def judge_against_serving(candidate, serving, tokenizer, tasks, settings: dict) -> dict:
    """Greedy replies of both versions on the evaluation set, judged by the verifier in both orders."""
    judge = PairwiseJudge(position_bias=0.0, seed=settings["seed"])
    mine = sampling.greedy_replies(candidate, tokenizer, [task.prompt for task in tasks],
                                   max_new_tokens=settings["max_new_tokens"])
    theirs = sampling.greedy_replies(serving, tokenizer, [task.prompt for task in tasks],
                                     max_new_tokens=settings["max_new_tokens"])
    outcomes = {}
    for task, new, old in zip(tasks, mine, theirs):
        pair = (judge.verdict(task, new, old), judge.verdict(task, old, new))
        outcomes[task.task_id] = {("first", "second"): "win", ("second", "first"): "loss"}.get(pair, "tie")
    return outcomes


def exact_match(model, tokenizer, tasks, settings: dict) -> float:
    return sampling.exact_match(model, tokenizer, tasks, max_new_tokens=settings["max_new_tokens"])


def control_candidate(serving, tokenizer, tasks, groups, serving_version, round_settings: dict, settings: dict,
                      build_pairs, evaluation, guard_tasks) -> dict:
    """The round's control: the same replies scored by `control_judge`, paired by the chapter's function, trained
    from the same serving version with the same steps; measured on the evaluation and guard sets, never served."""
    judge = round_settings["control_judge"]
    rescored = [dict(group, scores=[judge_score(task, reply, judge) for reply in group["responses"]])
                for task, group in zip(tasks, groups)]
    built = build_pairs(rescored, serving_version)
    if not built["pairs"]:
        return {"judge": judge, "pair_count": 0, "guard": None, "evaluation_exact_match": None}
    candidate = trainable_copy(serving)
    training.dpo_updates(candidate, frozen_copy(serving), training.preference_rows(tokenizer, built["pairs"]),
                         beta=settings["beta"], steps=round_settings["steps"],
                         learning_rate=round_settings["learning_rate"], pad_id=tokenizer.pad_token_id)
    candidate.eval()
    return {"judge": judge, "pair_count": len(built["pairs"]),
            "guard": exact_match(candidate, tokenizer, guard_tasks, settings),
            "evaluation_exact_match": exact_match(candidate, tokenizer, evaluation, settings)}


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `setup`, then one `round_<k>` record per round."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    check_rounds(settings)
    if not plan.writes:
        if log:
            log(f"online DPO on {plan.model} ({plan.model_source}, {plan.device}): {len(settings['rounds'])} rounds of "
                f"{settings['group_size']} replies per prompt, judges "
                f"{' then '.join(r['judge'] for r in settings['rounds'])}, best-vs-worst pairs, DPO against the "
                f"serving version (reset every round); gate on {settings['eval_problems']} held-out two-digit sums "
                f"(Wilson lower bound > 0.5, >= {settings['min_decisive']} decisive), guard on "
                f"{settings['guard_problems']} three-digit sums (max drop {settings['max_drop']}); records "
                f"{', '.join(stages_of(settings))}")
        return
    sink.require_new(stages_of(settings))
    functions = {name: plan.mechanism.function(name, default) for name, default in PACKAGE_FUNCTIONS.items()}
    described = plan.mechanism.describe(PACKAGE_FUNCTIONS)
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        torch.manual_seed(settings["seed"])
        serving, tokenizer, identity = load_model(plan)
        evaluation = lab_task_slice("heldout", settings["eval_problems"], settings["eval_seed"], answers="two_digit")
        eval_ids = [task.task_id for task in evaluation]
        guard_tasks = lab_task_slice("validation", settings["guard_problems"], settings["guard_seed"],
                                     answers="three_digit")
        version_log = [{"version": state_sha256(serving), "parent": None,
                        "guard": exact_match(serving, tokenizer, guard_tasks, settings), "state": "good"}]
        evaluation_exact_match = {version_log[0]["version"]: exact_match(serving, tokenizer, evaluation, settings)}
        path, _ = sink.save_record("setup", {
            "plan": plan.public(), "settings": settings, "model": identity, "mechanism": described, "status": "ok",
            "evaluation_tasks": manifest(evaluation), "guard_tasks": manifest(guard_tasks),
            "evaluation_exact_match": evaluation_exact_match[version_log[0]["version"]],
            "version_log": version_log}, schema_version=SCHEMA)
        lineage = [sink.lineage(path)]
        serving_version = version_log[0]["version"]
        for number, round_settings in enumerate(settings["rounds"], start=1):
            tasks = round_tasks(round_settings)

            def work(tasks=tasks, round_settings=round_settings, number=number) -> dict:
                nonlocal serving, serving_version, version_log
                replies = sampling.sample_replies(serving, tokenizer, [task.prompt for task in tasks],
                                                  samples=settings["group_size"],
                                                  max_new_tokens=settings["max_new_tokens"],
                                                  seed=settings["seed"] + number)
                groups = [{"prompt_id": task.task_id, "prompt": task.prompt, "policy_version": serving_version,
                           "responses": group,
                           "scores": [judge_score(task, reply, round_settings["judge"]) for reply in group]}
                          for task, group in zip(tasks, replies)]
                verifier = {task.task_id: [int(score_response(task, reply)["correct"]) for reply in group]
                            for task, group in zip(tasks, replies)}
                built = functions["build_online_pairs"]([dict(group) for group in groups], serving_version)
                by_id = {task.task_id: task for task in tasks}
                wrong_chosen = sum(not score_response(by_id[pair["prompt_id"]], pair["chosen"])["correct"]
                                   for pair in built["pairs"])
                result = {"serving_version": serving_version, "groups": groups, "verifier_scores": verifier,
                          "pairs": built["pairs"], "ties": built["ties"], "stale": built["stale"],
                          "pair_count": len(built["pairs"]), "pairs_preferring_a_wrong_answer": wrong_chosen,
                          "serving_evaluation_exact_match": evaluation_exact_match[serving_version]}
                if not built["pairs"]:
                    return {**result, "candidate_version": None, "outcomes": {}, "gate": None,
                            "serving_after": serving_version, "version_log": [dict(e) for e in version_log]}
                reference = frozen_copy(serving)  # iterative DPO: the reference is this round's serving version
                candidate = trainable_copy(serving)
                result["history"] = training.dpo_updates(
                    candidate, reference, training.preference_rows(tokenizer, built["pairs"]), beta=settings["beta"],
                    steps=round_settings["steps"], learning_rate=round_settings["learning_rate"],
                    pad_id=tokenizer.pad_token_id)
                candidate.eval()
                result["candidate_version"] = state_sha256(candidate)
                result["candidate_evaluation_exact_match"] = exact_match(candidate, tokenizer, evaluation, settings)
                result["outcomes"] = judge_against_serving(candidate, serving, tokenizer, evaluation, settings)
                result["gate"] = functions["adoption_gate"](dict(result["outcomes"]), list(eval_ids),
                                                            confidence=settings["confidence"],
                                                            min_decisive=settings["min_decisive"])
                guard = exact_match(candidate, tokenizer, guard_tasks, settings)
                if round_settings.get("control_judge"):
                    result["control"] = control_candidate(serving, tokenizer, tasks, groups, serving_version,
                                                          round_settings, settings, functions["build_online_pairs"],
                                                          evaluation, guard_tasks)
                serving_guard = next(entry["guard"] for entry in version_log if entry["version"] == serving_version)
                result["guard"] = {"candidate": guard, "serving": serving_guard, "rolled_back": None}
                if result["gate"]["decision"] == "adopt":
                    rolled = functions["guard_rollback"]([dict(entry) for entry in version_log],
                                                         {"version": result["candidate_version"],
                                                          "parent": serving_version}, guard, settings["max_drop"])
                    version_log = [dict(entry) for entry in rolled["log"]]
                    result["guard"].update({"rolled_back": rolled["rolled_back"], "drop": rolled["drop"]})
                    if rolled["serving"] == result["candidate_version"]:  # what the chapter's function says serves
                        serving, serving_version = candidate, result["candidate_version"]
                        evaluation_exact_match[serving_version] = result["candidate_evaluation_exact_match"]
                result["serving_after"] = serving_version
                result["version_log"] = [dict(entry) for entry in version_log]
                return result

            body = measured(work, device=plan.device)
            sink.save_record(f"round_{number}", {"round": number, "round_settings": round_settings, "model": identity,
                                                 "mechanism": described, "lineage": lineage, **body},
                             schema_version=SCHEMA)
            if log:
                gate = body.get("gate") or {}
                log(f"round {number}: {body['status']}, gate {gate.get('decision')} in {body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
