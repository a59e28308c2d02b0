"""Chapter 51's Step 5: rounds of online DPO with an adoption gate, a guard metric and rollback by hash.

Stage `setup`: the fixed evaluation set the gate judges (held-out lab-task sums with a two-digit answer),
the guard set (other sums, with a three-digit answer), the starting model's version (sha256 of its
tensors), its guard metric (exact match on the guard set) and the version log's base entry. Each round
names the training problems it samples (lab-task train split: every sum, or only the two-digit ones).

Stage `round_<k>`: the serving version samples a group of replies per training prompt of the round's
operations; the verifier scores them (1 right, 0 wrong); each group gives its first best against its
first worst reply, ties and groups of another version are skipped; a trainable copy of the serving
version takes the round's DPO updates (the serving version is the frozen reference); the candidate and
the serving version answer the evaluation set greedily and the verifier judges each prompt in both
orders (win, loss or tie); the gate adopts on enough decisive verdicts and a Wilson lower bound above
one half; an adopted candidate's guard metric is measured, and a drop beyond `max_drop` below the serving
version's rolls it back: the serving version stays the last good one, identified by its hash.
The chapter's notebook re-derives every decision from these records with its own three functions.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from tools.data.arithmetic import score_response
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
    "cpu_smoke": {"eval_seed": 909, "eval_problems": 150, "guard_seed": 707, "guard_problems": 150,
                  "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 8, "max_drop": 0.02,
                  "max_new_tokens": 6, "seed": 0,
                  "rounds": [{"answers": "any", "train_seed": 101, "train_problems": 48, "steps": 3,
                              "learning_rate": 5e-5},
                             {"answers": "two_digit", "train_seed": 202, "train_problems": 48, "steps": 5,
                              "learning_rate": 5e-5}]},
    "real_gpu": {"eval_seed": 909, "eval_problems": 48, "guard_seed": 707, "guard_problems": 48,
                 "group_size": 4, "beta": 0.1, "confidence": 0.95, "min_decisive": 4, "max_drop": 0.05,
                 "max_new_tokens": 16, "seed": 0,
                 "rounds": [{"answers": "any", "train_seed": 101, "train_problems": 16, "steps": 4,
                             "learning_rate": 5e-6},
                            {"answers": "two_digit", "train_seed": 202, "train_problems": 16, "steps": 12,
                             "learning_rate": 5e-5}]},
}
"""The gate judges sums with a two-digit answer; the guard watches the sums with a three-digit answer,
which round 2 (trained on two-digit answers only) does not see."""


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
    if not plan.writes:
        if log:
            log(f"online DPO on {plan.model} ({plan.model_source}, {plan.device}): {len(settings['rounds'])} rounds of "
                f"{settings['group_size']} replies per prompt, verifier scores, best-vs-worst pairs, DPO; gate on "
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
            tasks = lab_task_slice("train", round_settings["train_problems"], round_settings["train_seed"],
                                   answers=round_settings["answers"])

            def work(tasks=tasks, round_settings=round_settings, number=number) -> dict:
                nonlocal serving
                serving_version = log_entries[-1]["version"] if log_entries[-1]["state"] == "good" else \
                    next(entry["version"] for entry in reversed(log_entries) if entry["state"] == "good")
                replies = sampling.sample_replies(serving, tokenizer, [task.prompt for task in tasks],
                                                  samples=settings["group_size"], max_new_tokens=settings["max_new_tokens"],
                                                  seed=settings["seed"] + number)
                groups = [{"prompt_id": task.task_id, "prompt": task.prompt, "policy_version": serving_version,
                           "responses": group, "scores": [int(score_response(task, reply)["correct"]) for reply in group]}
                          for task, group in zip(tasks, replies)]
                pairs = [{"prompt": group["prompt"], "chosen": group["responses"][group["scores"].index(max(group["scores"]))],
                          "rejected": group["responses"][group["scores"].index(min(group["scores"]))]}
                         for group in groups if max(group["scores"]) != min(group["scores"])]
                result = {"serving_version": serving_version, "groups": groups, "pair_count": len(pairs)}
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
