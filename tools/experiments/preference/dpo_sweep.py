"""Chapter 17's Step 5: DPO on pairs from the model's own samples, once per beta, from the same start, beside a
mislabelled control; then the chapter's beta decision.

Stage `pairs`: the model samples replies to the training prompts; the verifier pairs a correct reply with a
wrong one per prompt (prompts whose samples are all right or all wrong give none); the same is done on
held-out prompts for the held-out pair measures; held-out exact match (greedy) of the starting model, and
its held-out pairs measured at the start (every margin 0: the baseline row). Where the model's own samples
give fewer pairs than the run asks for (a random-init model answers nothing right), the pairs are
completed with the correct integer as chosen against one of the model's wrong replies, and the record says
how many pairs came from where.

Stage `sweep_<variant>` (one per beta, and the control): a trainable copy of the start takes `steps`
full-batch DPO updates against the frozen start, with the chapter's `sequence_logprobs` and `dpo_loss`
(the notebook's, else the package's copies); the control `mislabelled_0.10` trains at beta 0.10 on the same
pairs with chosen and rejected swapped in a seeded half of them, so it keeps every reply, step and token
but carries no preference. Then, measured with the package's own code: pair accuracy and margin on the
training pairs, held-out exact match, and on the held-out pairs the margin h, the pair accuracy (h > 0;
chance is 1/2), the ties at h = 0 and the log-ratios of chosen and rejected replies apart; and the
per-token log-probabilities, under the policy and the reference, of replies the trained policy sampled
on held-out prompts, as it sampled them (cut only at `drift_max_new_tokens`, closed by an end-of-turn
token only where the policy wrote one).

Stage `beta_decision`: the chapter's `judge_beta_sweep` on the beta runs (held-out margin, drift samples)
with the gates `max_kl` and `min_margin`; the control is not a candidate.
Every record carries which functions ran (`plan.mechanism.describe`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from tools.data.arithmetic import score_response
from tools.errors import ConfigError
from tools.experiments.preference import sampling, training
from tools.experiments.preference.logprobs import sequence_logprobs
from tools.experiments.preference.losses import dpo_loss
from tools.experiments.preference.pairs import verified_pairs
from tools.experiments.preference.stage import (
    frozen_copy,
    lab_task_splits,
    load_model,
    manifest,
    measured,
    settings_for,
    trainable_copy,
)
from tools.models import lab_sampling

SCHEMA = "preference-dpo-sweep/v2"
BETAS = {"beta_0.05": 0.05, "beta_0.10": 0.10, "beta_0.30": 0.30}
CONTROL = "mislabelled_0.10"
"""The negative control: beta 0.10, the same pairs with chosen and rejected swapped in a seeded half."""
VARIANT_BETAS = {**BETAS, CONTROL: 0.10}
MAX_KL = 0.05
"""The drift gate of the decision: mean k3 per sampled token, in nats."""
MIN_MARGIN = 0.1
"""The margin gate of the decision: mean held-out log-ratio margin h, in nats."""
DECISION_STAGE = "beta_decision"
MECHANISM = ("sequence_logprobs", "dpo_loss", "judge_beta_sweep")
DEFAULTS = {
    "cpu_smoke": {"train_seed": 101, "train_problems": 96, "eval_seed": 909, "eval_problems": 200,
                  "held_out_pair_problems": 48, "samples": 4, "pairs": 64, "steps": 12, "learning_rate": 5e-5,
                  "drift_samples": 8, "max_new_tokens": 6, "drift_max_new_tokens": 16, "seed": 0},
    "real_gpu": {"train_seed": 101, "train_problems": 16, "eval_seed": 909, "eval_problems": 64,
                 "held_out_pair_problems": 16, "samples": 4, "pairs": 4, "steps": 4, "learning_rate": 5e-6,
                 "drift_samples": 2, "max_new_tokens": 16, "drift_max_new_tokens": 64, "seed": 0},
}
"""cpu_smoke trains the lab model; its problems come from the lab task's train and heldout splits
(tools.data.lab_tasks), the same prompts real_gpu gives Qwen2.5-0.5B-Instruct. What the runs measured, per
profile and seed, is in tests/experiments/preference/test_dpo_sweep_effect.py and on the chapter's page."""

GENTLER_RUN = {"steps": 6, "learning_rate": 3e-5}
"""Options for a gentler cpu_smoke sweep (Plan options): the policy barely moves (held-out margins of a few
hundredths of a nat), so neither the preference nor the displacement is large enough to read."""


def variant_names(chapter: str = "17", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return (*BETAS, CONTROL)


def stages_of(variants) -> list[str]:
    return ["pairs", *(f"sweep_{name}" for name in variants), DECISION_STAGE]


def describe(plan, settings: dict, variants) -> list[str]:
    return [f"DPO beta sweep ({', '.join(variants)}) on {plan.model} ({plan.model_source}, {plan.device}):",
            (f"  pairs from the model's own samples: {settings['samples']} replies per training prompt "
             f"({settings['train_problems']} lab-task train problems, seed {settings['train_seed']}), up to "
             f"{settings['pairs']} verified pairs; {settings['eval_problems']} held-out problems "
             f"(seed {settings['eval_seed']})"),
            (f"  per variant: {settings['steps']} full-batch DPO updates at learning rate {settings['learning_rate']} "
             f"(the control {CONTROL}: half the pairs swapped), then held-out exact match, held-out pair accuracy "
             "and margin, chosen and rejected log-ratios, and drift samples"),
            f"  decision: judge_beta_sweep with max_kl {MAX_KL}, min_margin {MIN_MARGIN}",
            f"  records: {', '.join(stages_of(variants))}"]


def k3_drift(policy_logps, reference_logps) -> float:
    """Mean k3 = exp(d) - 1 - d, d = reference - policy, over every sampled token."""
    terms = [math.exp(ref - pol) - 1 - (ref - pol) for mine, theirs in zip(policy_logps, reference_logps)
             for pol, ref in zip(mine, theirs)]
    return sum(terms) / len(terms)


def judge_beta_sweep(sweep, max_kl, min_margin):
    """The package's copy of chapter 17's judgement (no input checks): k3 drift per beta, the two gates, and the
    eligible beta with the largest margin (ties: smaller drift, then smaller beta)."""
    judged = []
    for run in sorted(sweep, key=lambda run: run["beta"]):
        kl = k3_drift(run["policy_logps"], run["reference_logps"])
        reasons = [reason for reason, failed in (("margin_too_small", run["margin"] < min_margin),
                                                 ("drift_too_large", kl > max_kl)) if failed]
        judged.append({"beta": run["beta"], "kl": kl, "margin": run["margin"], "eligible": not reasons,
                       "reasons": reasons})
    eligible = [entry for entry in judged if entry["eligible"]]
    chosen = min(eligible, key=lambda entry: (-entry["margin"], entry["kl"], entry["beta"]))["beta"] if eligible else None
    return {"per_beta": judged, "chosen_beta": chosen, "decision": "accept_mechanism" if eligible else "tune"}


PACKAGE_FUNCTIONS = {"sequence_logprobs": sequence_logprobs, "dpo_loss": dpo_loss,
                     "judge_beta_sweep": judge_beta_sweep}


def _constructed(tasks, replies, wanted: int, have: list[dict]) -> list[dict]:
    """Pairs that complete the model's own: the correct integer against one of the model's wrong replies."""
    used = {pair["task_id"] for pair in have}
    extra = []
    for task, group in zip(tasks, replies):
        if len(have) + len(extra) >= wanted or task.task_id in used:
            continue
        wrong = next((reply for reply in group if not score_response(task, reply)["correct"]), None)
        if wrong is not None and wrong.strip() != str(task.label):
            extra.append({"task_id": task.task_id, "prompt": task.prompt, "chosen": str(task.label), "rejected": wrong})
    return extra


def build_pairs(model, tokenizer, tasks, settings: dict, *, seed: int) -> tuple[list[dict], dict]:
    replies = sampling.sample_replies(model, tokenizer, [task.prompt for task in tasks], samples=settings["samples"],
                                      max_new_tokens=settings["max_new_tokens"], seed=seed)
    own, counts = verified_pairs(tasks, replies)
    own = own[:settings["pairs"]]
    extra = _constructed(tasks, replies, settings["pairs"], own)
    for pair in own:
        pair["source"] = "own_samples"
    for pair in extra:
        pair["source"] = "constructed"
    return own + extra, {**counts, "own_pairs": len(own), "constructed_pairs": len(extra)}


def mislabelled(pairs: list[dict], seed: int) -> tuple[list[dict], list[int]]:
    """The control's pairs: the same pairs, chosen and rejected swapped in a seeded half of them (the indices)."""
    swapped = sorted(random.Random(f"mislabelled|{seed}").sample(range(len(pairs)), len(pairs) // 2))
    flipped = [dict(pair, chosen=pair["rejected"], rejected=pair["chosen"]) if index in swapped else dict(pair)
               for index, pair in enumerate(pairs)]
    return flipped, swapped


def judge_inputs(runs: list[dict]) -> list[dict]:
    """What `judge_beta_sweep` reads of the beta runs: the held-out margin and the drift samples."""
    return [{"beta": run["beta"], "margin": (run["held_out_pairs"] or run["train_pairs"])["margin"],
             "policy_logps": run["drift_samples"]["policy_logps"],
             "reference_logps": run["drift_samples"]["reference_logps"]} for run in runs]


def decision_body(pairs_record: dict, runs: dict[str, dict], judged: dict) -> dict:
    """The `beta_decision` record's body: the gates, the judgement, and per run what the page shows."""
    def summary(run: dict) -> dict:
        held = run.get("held_out_pairs") or {}
        return {"variant": run["variant"], "beta": run["beta"], "status": run["status"],
                "held_out_exact_match_after": (run.get("held_out_exact_match") or {}).get("after"),
                "held_out_pair_accuracy": held.get("pair_accuracy"), "held_out_margin": held.get("margin"),
                "held_out_chosen_logratio": held.get("chosen_logratio"),
                "held_out_rejected_logratio": held.get("rejected_logratio"),
                "train_pair_accuracy": (run.get("train_pairs") or {}).get("pair_accuracy")}

    return {"gates": {"max_kl": MAX_KL, "min_margin": MIN_MARGIN}, "model": pairs_record["model"],
            "pair_counts": pairs_record["pair_counts"],
            "held_out_exact_match_before": pairs_record["held_out_exact_match_before"],
            "held_out_pairs_at_start": pairs_record["held_out_pairs_at_start"],
            "runs": [summary(run) for run in runs.values()], "judgement": dict(judged),
            "decision": judged["decision"]}


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `pairs`, one `sweep_<variant>` record per variant, then `beta_decision`."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    variants = plan.variants or variant_names()
    unknown = [name for name in variants if name not in VARIANT_BETAS]
    if unknown:
        raise ConfigError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANT_BETAS)}")
    if not plan.writes:
        for line in describe(plan, settings, variants):
            (log or (lambda _: None))(line)
        return
    sink.require_new(stages_of(variants))
    functions = {name: plan.mechanism.function(name, default) for name, default in PACKAGE_FUNCTIONS.items()}
    described = plan.mechanism.describe(PACKAGE_FUNCTIONS)
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        torch.manual_seed(settings["seed"])
        start, tokenizer, identity = load_model(plan)
        splits = lab_task_splits(settings["train_seed"], settings["train_problems"], settings["eval_seed"],
                                 settings["eval_problems"])
        held_tasks = splits["held_out"][:settings["held_out_pair_problems"]]
        pairs, counts = build_pairs(start, tokenizer, splits["train"], settings, seed=settings["seed"])
        held_pairs, held_counts = build_pairs(start, tokenizer, held_tasks, settings, seed=settings["seed"] + 1)
        if not pairs:
            raise ConfigError("no training pair could be built from the model's replies")
        reference = frozen_copy(start)
        pad_id = tokenizer.pad_token_id
        rows = training.preference_rows(tokenizer, pairs)
        held_rows = training.preference_rows(tokenizer, held_pairs) if held_pairs else []
        control_pairs, swapped = mislabelled(pairs, settings["seed"])
        before = sampling.exact_match(start, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])
        at_start = training.preference_margin(start, reference, held_rows, pad_id) if held_rows else None
        pairs_path, _ = sink.save_record("pairs", {
            "schema_note": "training and held-out preference pairs of the DPO beta sweep, and the start's measures",
            "plan": plan.public(), "settings": settings, "model": identity, "mechanism": described,
            "tasks": {"train": manifest(splits["train"]), "held_out": manifest(splits["held_out"])},
            "pairs": pairs, "pair_counts": counts, "held_out_pairs": held_pairs, "held_out_pair_counts": held_counts,
            "control_swapped": swapped, "held_out_exact_match_before": before,
            "held_out_pairs_at_start": at_start, "status": "ok"}, schema_version=SCHEMA)
        pairs_record = {"model": identity, "pair_counts": counts, "held_out_exact_match_before": before,
                        "held_out_pairs_at_start": at_start}
        lineage = [sink.lineage(pairs_path)]
        runs = {}
        for name in variants:
            beta = VARIANT_BETAS[name]
            trained_on = training.preference_rows(tokenizer, control_pairs) if name == CONTROL else rows

            def work(beta=beta, trained_on=trained_on) -> dict:
                torch.manual_seed(settings["seed"])
                policy = trainable_copy(start)
                history = training.dpo_updates(policy, reference, trained_on, beta=beta, steps=settings["steps"],
                                               learning_rate=settings["learning_rate"], pad_id=pad_id,
                                               loss=functions["dpo_loss"], summed=functions["sequence_logprobs"])
                samples = lab_sampling.sample(policy, tokenizer, [task.prompt for task in held_tasks],
                                              n=settings["drift_samples"], temperature=1.0,
                                              max_new_tokens=settings["drift_max_new_tokens"], seed=settings["seed"] + 2)
                return {"beta": beta, "history": history,
                        "train_pairs": training.preference_margin(policy, reference, rows, pad_id),
                        "held_out_pairs": training.preference_margin(policy, reference, held_rows, pad_id)
                        if held_rows else None,
                        "held_out_exact_match": {"before": before, "after": sampling.exact_match(
                            policy, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])},
                        "drift_samples": training.sampled_logps(policy, reference, samples, pad_id)}

            body = measured(work, device=plan.device)
            runs[name] = {"variant": name, "beta": beta, **body}
            sink.save_record(f"sweep_{name}", {"variant": name, "model": identity, "lineage": lineage,
                                               "mechanism": described, "control": name == CONTROL, "beta": beta,
                                               **body}, schema_version=SCHEMA)
            if log:
                log(f"{name}: {body['status']} in {body['seconds']:.1f} s")
        judged_runs = [run for name, run in runs.items() if name in BETAS and run["status"] == "ok"]

        def decide() -> dict:
            if not judged_runs:
                raise ConfigError("no beta run finished; nothing to judge")
            judged = functions["judge_beta_sweep"](judge_inputs(judged_runs), max_kl=MAX_KL, min_margin=MIN_MARGIN)
            return decision_body(pairs_record, runs, judged)

        decision = measured(decide, device="cpu")
        sink.save_record(DECISION_STAGE, {"lineage": lineage, "mechanism": described, **decision},
                         schema_version=SCHEMA)
        if log:
            log(f"{DECISION_STAGE}: {decision['status']}, decision {decision.get('decision')}")
    finally:
        torch.set_num_threads(threads)
