"""Chapter 51's Step 5: rounds of online DPO with an adoption gate, a guard metric and rollback by hash.

Stage `setup`: the fixed evaluation set the gate judges (held-out lab-task sums with a two-digit answer),
the guard set (other sums, with a three-digit answer), the starting model's version (sha256 of its
tensors), its guard metric (exact match on the guard set) and the version log's base entry. Each round
names its training problems (lab-task train split, a count per answer kind) and its judge.

Stage `round_<k>`: the serving version samples a group of replies per training prompt of the round;
the round's judge scores them (1 preferred, 0 not; the verifier's own scores are kept beside them); each
group gives its first best against its first worst reply, ties and groups of another version are
skipped; a trainable copy of the serving version takes the round's DPO updates (the serving version is
the frozen reference); the candidate and the serving version answer the evaluation set greedily and the
verifier judges each prompt in both orders (win, loss or tie); the gate adopts on enough decisive
verdicts and a Wilson lower bound above one half; an adopted candidate's guard metric is measured, and a
drop beyond `max_drop` below the serving version's rolls it back: the serving version stays the last
good one, identified by its hash.
The chapter's notebook re-derives every decision from these records with its own three functions.
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

SCHEMA = "preference-online-dpo/v1"
DEFAULTS = {
    "cpu_smoke": {"eval_seed": 909, "eval_problems": 300, "guard_seed": 707, "guard_problems": 150,
                  "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 8, "max_drop": 0.02,
                  "max_new_tokens": 6, "seed": 0,
                  "rounds": [{"problems": {"two_digit": 64}, "judge": "verifier", "train_seed": 101, "steps": 2,
                              "learning_rate": 3e-5},
                             {"problems": {"two_digit": 48, "three_digit": 16}, "judge": "inverted_three_digit",
                              "train_seed": 202, "steps": 5, "learning_rate": 5e-5}]},
    "real_gpu": {"eval_seed": 909, "eval_problems": 48, "guard_seed": 707, "guard_problems": 48,
                 "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 4, "max_drop": 0.05,
                 "max_new_tokens": 16, "seed": 0,
                 "rounds": [{"problems": {"any": 16}, "judge": "verifier", "train_seed": 101, "steps": 4,
                             "learning_rate": 5e-6},
                            {"problems": {"two_digit": 16, "three_digit": 6}, "judge": "inverted_three_digit",
                             "train_seed": 202, "steps": 12, "learning_rate": 5e-5}]},
}
"""The gate judges sums with a two-digit answer; the guard watches the sums with a three-digit answer.
Each round's `problems` maps an answer kind (`any`, `two_digit`, `three_digit`) to how many training
problems of that kind it samples. Round 1 is two careful updates on two-digit sums judged by the verifier
(cpu_smoke, pinned CPU numerics, seeds 0-4: wins 17-20 against 1-2 losses, Wilson lower bound 0.71-0.77,
adopted; the guard moves by at most 0.007, kept). Round 2 is the aggressive candidate: five updates, and a
judge with a bug (right on two-digit answers, inverted on three-digit ones), so a quarter of its problems
reward wrong three-digit answers: the gate's two-digit evaluation set cannot see that, the guard can.
Seeds 0-2: adopted (32:8, 40:11, 46:16), guard 0.627 -> 0.547, 0.613 -> 0.487, 0.620 -> 0.547, rolled
back; seed 4 the same (0.613 -> 0.567); on seed 3 the update hurts two-digit sums too (34 wins, 54 losses)
and the gate does not adopt it. With three updates round 2 was kept, rolled back or not adopted depending
on the seed; more three-digit problems made the gate refuse it on more seeds."""

JUDGES = ("verifier", "inverted_three_digit")
"""`verifier`: 1 for a right answer, 0 for a wrong one; `inverted_three_digit`: the verifier on sums with a
two-digit answer, its opposite on sums with a three-digit answer (a judge with a bug)."""


def judge_score(task, reply: str, judge: str) -> int:
    """The round's judge score of one reply (see JUDGES)."""
    correct = int(score_response(task, reply)["correct"])
    return 1 - correct if judge == "inverted_three_digit" and task.label >= 100 else correct


ANSWER_KINDS = ("any", "two_digit", "three_digit")


def check_rounds(settings: dict) -> None:
    """Every round names a known judge and a non-empty `problems` mapping; refused before any work."""
    for number, round_settings in enumerate(settings["rounds"], start=1):
        if round_settings.get("judge") not in JUDGES:
            raise ConfigError(f"round {number}: judge must be one of {', '.join(JUDGES)}, "
                              f"got {round_settings.get('judge')!r}")
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


def wilson_lower(wins: int, n: int, confidence: float) -> float:
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    return max(0.0, centre - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n))


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


def gate(outcomes: dict, settings: dict) -> dict:
    wins = sum(value == "win" for value in outcomes.values())
    losses = sum(value == "loss" for value in outcomes.values())
    decisive = wins + losses
    if decisive < settings["min_decisive"]:
        return {"wins": wins, "losses": losses, "decisive": decisive, "decision": "keep", "reason": "too_few_decisive"}
    lower = wilson_lower(wins, decisive, settings["confidence"])
    adopted = lower > 0.5
    return {"wins": wins, "losses": losses, "decisive": decisive, "lower_bound": lower,
            "decision": "adopt" if adopted else "keep", "reason": None if adopted else "not_better"}


def guard_metric(model, tokenizer, tasks, settings: dict) -> float:
    return sampling.exact_match(model, tokenizer, tasks, max_new_tokens=settings["max_new_tokens"])


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `setup`, then one `round_<k>` record per round."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    check_rounds(settings)
    if not plan.writes:
        if log:
            log(f"online DPO on {plan.model} ({plan.model_source}, {plan.device}): {len(settings['rounds'])} rounds of "
                f"{settings['group_size']} replies per prompt, judges "
                f"{' then '.join(r['judge'] for r in settings['rounds'])}, best-vs-worst pairs, DPO; gate on "
                f"{settings['eval_problems']} held-out two-digit sums (Wilson lower bound > 0.5, >= "
                f"{settings['min_decisive']} decisive), guard on {settings['guard_problems']} three-digit sums "
                f"(max drop {settings['max_drop']}); records "
                f"{', '.join(stages_of(settings))}")
        return
    sink.require_new(stages_of(settings))
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        torch.manual_seed(settings["seed"])
        serving, tokenizer, identity = load_model(plan)
        evaluation = lab_task_slice("heldout", settings["eval_problems"], settings["eval_seed"], answers="two_digit")
        guard_tasks = lab_task_slice("validation", settings["guard_problems"], settings["guard_seed"],
                                     answers="three_digit")
        version = state_sha256(serving)
        log_entries = [{"version": version, "parent": None, "guard": guard_metric(serving, tokenizer, guard_tasks, settings),
                        "state": "good"}]
        path, _ = sink.save_record("setup", {
            "plan": plan.public(), "settings": settings, "model": identity, "status": "ok",
            "evaluation_tasks": manifest(evaluation), "guard_tasks": manifest(guard_tasks),
            "version_log": log_entries}, schema_version=SCHEMA)
        lineage = [sink.lineage(path)]
        for number, round_settings in enumerate(settings["rounds"], start=1):
            tasks = round_tasks(round_settings)

            def work(tasks=tasks, round_settings=round_settings, number=number) -> dict:
                nonlocal serving
                serving_version = log_entries[-1]["version"] if log_entries[-1]["state"] == "good" else \
                    next(entry["version"] for entry in reversed(log_entries) if entry["state"] == "good")
                replies = sampling.sample_replies(serving, tokenizer, [task.prompt for task in tasks],
                                                  samples=settings["group_size"], max_new_tokens=settings["max_new_tokens"],
                                                  seed=settings["seed"] + number)
                groups = [{"prompt_id": task.task_id, "prompt": task.prompt, "policy_version": serving_version,
                           "responses": group, "scores": [judge_score(task, reply, round_settings["judge"]) for reply in group],
                           "verifier_scores": [int(score_response(task, reply)["correct"]) for reply in group]}
                          for task, group in zip(tasks, replies)]
                pairs = [{"prompt": group["prompt"], "chosen": group["responses"][group["scores"].index(max(group["scores"]))],
                          "rejected": group["responses"][group["scores"].index(min(group["scores"]))]}
                         for group in groups if max(group["scores"]) != min(group["scores"])]
                wrong_chosen = sum(group["verifier_scores"][group["scores"].index(max(group["scores"]))] == 0
                                   for group in groups if max(group["scores"]) != min(group["scores"]))
                result = {"serving_version": serving_version, "groups": groups, "pair_count": len(pairs),
                          "pairs_preferring_a_wrong_answer": wrong_chosen}
                if not pairs:
                    return {**result, "candidate_version": None, "outcomes": {}, "gate": {"decision": "keep",
                                                                                      "reason": "no_pairs"}}
                reference = frozen_copy(serving)
                candidate = trainable_copy(serving)
                result["history"] = training.dpo_updates(
                    candidate, reference, training.preference_rows(tokenizer, pairs), beta=settings["beta"],
                    steps=round_settings["steps"], learning_rate=round_settings["learning_rate"],
                    pad_id=tokenizer.pad_token_id)
                candidate.eval()
                result["candidate_version"] = state_sha256(candidate)
                result["outcomes"] = judge_against_serving(candidate, serving, tokenizer, evaluation, settings)
                result["gate"] = gate(result["outcomes"], settings)
                if result["gate"]["decision"] == "adopt":
                    guard = guard_metric(candidate, tokenizer, guard_tasks, settings)
                    serving_guard = next(entry["guard"] for entry in reversed(log_entries)
                                         if entry["version"] == serving_version)
                    regressed = guard < serving_guard - settings["max_drop"]
                    log_entries.append({"version": result["candidate_version"], "parent": serving_version,
                                        "guard": guard, "state": "regressed" if regressed else "good"})
                    result["guard"] = {"candidate": guard, "serving": serving_guard, "rolled_back": regressed}
                    if not regressed:
                        serving = candidate
                result["serving_after"] = next(entry["version"] for entry in reversed(log_entries)
                                               if entry["state"] == "good")
                result["version_log"] = [dict(entry) for entry in log_entries]
                return result

            body = measured(work, device=plan.device)
            sink.save_record(f"round_{number}", {"round": number, "round_settings": round_settings, "model": identity,
                                                 "lineage": lineage, **body}, schema_version=SCHEMA)
            if log:
                log(f"round {number}: {body['status']}, gate {body.get('gate', {}).get('decision')} in "
                    f"{body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
