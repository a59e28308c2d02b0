"""Chapter 18's stage: GRPO with the verifier integer-answer-v1, a minimal vs an extended candidate group.

The two variants sample the same number of rollouts per step (the matched budget): the extended group
G = 6 on `rollouts_per_step / 6` prompts, the minimal group G = 2 on `rollouts_per_step / 2`, with the same
steps, updates, learning rate and held-out problems. Each variant starts from the same weights (the model
is loaded afresh), measures held-out exact match, runs GRPO steps on training tasks and measures again;
it records per step how many rollouts entered the loss (those of scoreable groups), so the page can say
what the group size changed instead of guessing. One write-once record per variant (status ok, oom or
failed), then a decision record computed from them with their lineage. The decision never picks a group
size from the clip rate: the clip rate says how far the policy moved, not whether it got better.

The chapter's three functions come from the plan's mechanism (the notebook passes the learner's; the
command line and the GPU batch use this package's), and every record says which ran. Held-out answers
are judged by the package's verifier whatever verifier trained the policy.
"""

from __future__ import annotations

import time
from typing import Callable

from tools.data import lab_tasks
from tools.data.arithmetic import generate_tasks
from tools.errors import ConfigError
from tools.experiments.online_rl import advantages as advantages_module
from tools.experiments.online_rl import losses as losses_module
from tools.experiments.online_rl import verifier as verifier_module
from tools.experiments.online_rl.grpo import PACKAGE_MECHANISM, GrpoSettings, Mechanism, run_grpo
from tools.experiments.online_rl.models import load_quietly
from tools.measure.sampler import ResourceSampler, peaks
from tools.models.architectures import LAB_MODEL_IDS

VARIANTS = {"minimal": 2, "extended": 6}
"""Variant -> candidates sampled per prompt."""
SCHEMA = "grpo-rlvr-variant/v2"
DECISION_SCHEMA = "grpo-rlvr-decision/v1"
MIB = 2 ** 20
MIN_EXACT_MATCH_GAIN = 0.05
"""A variant is accepted when held-out exact match rises by at least this much (absolute)."""
PLANS = {
    "cpu_smoke": {"steps": 24, "rollouts_per_step": 96, "updates_per_batch": 2, "learning_rate": 3e-5,
                  "max_new_tokens": 6, "train_seed": 101, "eval_seed": 20240601, "per_operation": 4,
                  "eval_per_operation": 4, "train_problems": 384},
    "real_gpu": {"steps": 4, "rollouts_per_step": 12, "updates_per_batch": 1, "learning_rate": 1e-5,
                 "max_new_tokens": 16, "train_seed": 101, "eval_seed": 20240601, "per_operation": 2,
                 "eval_per_operation": 100},
}
"""Per run mode. In cpu_smoke both variants sample 6 replies per training problem in all: the extended group
once on each of the 384 problems (24 steps x 16 prompts), the minimal group three times two (24 steps x 48
prompts, three passes). real_gpu follows the original course's scale (the extended group on 2 prompts, 4 updates)
and reads its decision on 400 held-out problems (one problem = 0.0025, a twentieth of the +0.05
threshold). With a lab model (cpu_smoke's default), the tasks are the lab task's: `train_problems` drawn
from its train split with `train_seed`, and its whole held-out split (810 problems, disjoint by content
hash); with any other model, the arithmetic generator's: `per_operation` training problems of each
operation (seed `train_seed`) and `eval_per_operation` held-out ones (seed `eval_seed`, any problem that
is also a training problem left out)."""
LAB_TASK = lab_tasks.PRETRAINING_TASK
MECHANISM_DEFAULTS = {"verify_integer_answer": verifier_module.verify_integer_answer,
                      "group_advantages": advantages_module.group_advantages,
                      "clipped_grpo_loss": losses_module.clipped_grpo_loss}
"""The chapter's exercise functions by name, and the package's copies a run without a notebook uses."""


def stage_names(variants) -> list[str]:
    return [f"grpo_{variant}" for variant in variants] + ["decision"]


def settings_for(run_mode: str, variant: str, seed: int, overrides: dict | None = None) -> tuple[GrpoSettings, dict]:
    """The variant's settings: `rollouts_per_step / G` prompts per step (an explicit `prompts_per_step`
    override wins, and the record shows it), the rest from the run mode's plan."""
    plan = {**PLANS["real_gpu" if run_mode == "real_gpu" else "cpu_smoke"], **(overrides or {})}
    group_size = VARIANTS[variant]
    prompts = plan.get("prompts_per_step")
    if prompts is None:
        if plan["rollouts_per_step"] % group_size:
            raise ConfigError(f"rollouts_per_step {plan['rollouts_per_step']} is not a multiple of the group size "
                              f"{group_size}")
        prompts = plan["rollouts_per_step"] // group_size
    settings = GrpoSettings(group_size=group_size, steps=plan["steps"], prompts_per_step=prompts,
                            updates_per_batch=plan["updates_per_batch"], learning_rate=plan["learning_rate"],
                            max_new_tokens=plan["max_new_tokens"], seed=seed)
    return settings, plan


def mechanism_of(plan_mechanism) -> Mechanism:
    """The loop's functions: those the plan passes, the package's where it passes none."""
    return Mechanism(verify=plan_mechanism.function("verify_integer_answer", MECHANISM_DEFAULTS["verify_integer_answer"]),
                     advantages_of=plan_mechanism.function("group_advantages", MECHANISM_DEFAULTS["group_advantages"]),
                     loss_of=plan_mechanism.function("clipped_grpo_loss", MECHANISM_DEFAULTS["clipped_grpo_loss"]))


def tasks_for(model_id: str, plan: dict) -> tuple[list, list, dict]:
    """`(train, held_out, description)`: the lab task's splits for a lab model, else the arithmetic generator's."""
    if model_id in LAB_MODEL_IDS:
        train = lab_tasks.sample_problems(LAB_TASK, "train", plan["train_problems"], plan["train_seed"])
        held_out = lab_tasks.problems(LAB_TASK, "heldout")
        return train, held_out, {"source": lab_tasks.LAB_TASK_VERSION, "task": LAB_TASK,
                                 "train_seed": plan["train_seed"], "held_out_split": "heldout"}
    train = generate_tasks(plan["train_seed"], plan["per_operation"])
    seen = {(task.operation, task.a, task.b) for task in train}
    drawn = generate_tasks(plan["eval_seed"], plan["eval_per_operation"])
    held_out = [task for task in drawn if (task.operation, task.a, task.b) not in seen]
    return (train, held_out, {"source": "tools.data.arithmetic", "train_seed": plan["train_seed"],
                              "eval_seed": plan["eval_seed"], "held_out_dropped_as_seen": len(drawn) - len(held_out)})


LEARNER_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError)
"""What a learner's function may raise inside the loop; the variant is then recorded as failed."""


def run_variant(model_id: str, model_source: str, device: str, variant: str, seed: int, run_mode: str,
                overrides: dict | None = None, mechanism: Mechanism = PACKAGE_MECHANISM,
                log: Callable | None = None) -> dict:
    """One variant from fresh weights; the body of its record (measurements, or the failure as a status)."""
    import torch

    settings, plan = settings_for(run_mode, variant, seed, overrides)
    train, held_out, task_info = tasks_for(model_id, plan)
    model, tokenizer, identity = load_quietly(model_id, model_source, device)
    cuda = device.startswith("cuda")
    body = {"variant": variant, "group_size": settings.group_size, "settings": settings.public(), "model": identity,
            "rollouts_per_step": settings.group_size * settings.prompts_per_step,
            "tasks": {**task_info, "train": len(train), "held_out": len(held_out)}}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device="cuda" if cuda else "cpu")
    started = time.perf_counter()
    try:
        with sampler:
            result = run_grpo(model, tokenizer, train, held_out, settings, mechanism, log=log)
    except torch.OutOfMemoryError as error:
        return {**body, "status": "oom", "error": str(error).splitlines()[0]}
    except LEARNER_ERRORS as error:
        return {**body, "status": "failed", "error": f"{type(error).__name__}: {error}".splitlines()[0]}
    samples = sampler.snapshot()
    return {**body, "status": "ok", "error": None, **result, "seconds": time.perf_counter() - started,
            "peak_allocated_mib": torch.cuda.max_memory_allocated() / MIB if cuda else None,
            "sampled": {**peaks(samples), **sampler.summary()}}


def variant_summary(record: dict) -> dict:
    """What the decision reads from a variant record."""
    if record.get("status") != "ok":
        return {"variant": record["variant"], "status": record.get("status"), "exact_match_gain": None}
    updates = [update for step in record["steps"] for update in step["updates"]]
    return {"variant": record["variant"], "status": "ok", "group_size": record["group_size"],
            "exact_match_before": record["before"]["exact_match"], "exact_match_after": record["after"]["exact_match"],
            "exact_match_gain": record["after"]["exact_match"] - record["before"]["exact_match"],
            "scoreable_share_mean": sum(step["scoreable_share"] for step in record["steps"]) / len(record["steps"]),
            "rollouts_per_step": record.get("rollouts_per_step"),
            "rollouts_in_loss_mean": sum(step.get("rollouts_in_loss", 0) for step in record["steps"]) / len(record["steps"]),
            "retained_share": (record.get("retained") or {}).get("share"),
            "updates": len(updates),
            "clip_rate_mean": sum(update["clip_rate"] for update in updates) / len(updates) if updates else None}


def decide(summaries: list[dict]) -> dict:
    """Per-variant verdicts and the stage's; a group size is named only from held-out exact match."""
    verdicts = {}
    for item in summaries:
        if item["status"] != "ok":
            verdicts[item["variant"]] = {"decision": "reject", "reason": f"status {item['status']}"}
        elif item["updates"] == 0:
            verdicts[item["variant"]] = {"decision": "reject", "reason": "no scoreable group: nothing was updated"}
        elif item["exact_match_gain"] >= MIN_EXACT_MATCH_GAIN:
            verdicts[item["variant"]] = {"decision": "accept_mechanism",
                                         "reason": f"held-out exact match +{item['exact_match_gain']:.3f}"}
        else:
            verdicts[item["variant"]] = {"decision": "tune",
                                         "reason": f"held-out exact match {item['exact_match_gain']:+.3f}, below "
                                                   f"+{MIN_EXACT_MATCH_GAIN}"}
    accepted = [item for item in summaries if verdicts[item["variant"]]["decision"] == "accept_mechanism"]
    gains = sorted((item["exact_match_gain"] for item in accepted), reverse=True)
    if len(accepted) >= 2 and gains[0] - gains[1] < MIN_EXACT_MATCH_GAIN:
        choice = {"group_size": None, "reason": "the accepted variants' held-out gains differ by less than "
                                                f"{MIN_EXACT_MATCH_GAIN}; the clip rate is not a quality signal"}
    elif accepted:
        best = max(accepted, key=lambda item: item["exact_match_gain"])
        choice = {"group_size": best["group_size"], "reason": f"largest held-out gain ({best['variant']}); clip rate "
                                                              "not used"}
    else:
        choice = {"group_size": None, "reason": "no variant improved held-out exact match"}
    stage = "accept_mechanism" if accepted else ("tune" if any(v["decision"] == "tune" for v in verdicts.values())
                                                 else "reject")
    return {"decision": stage, "variants": verdicts, "group_size_choice": choice, "clip_rate_used": False}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: the plan's variants (default both), then the decision record."""
    variants = tuple(plan.variants) or tuple(VARIANTS)
    sink.require_new(stage_names(variants))
    seed = plan.seeds[0] if plan.seeds else 0
    say = log or (lambda _: None)
    if not plan.writes:
        for variant in variants:
            settings, _ = settings_for(plan.run_mode, variant, seed, dict(plan.options))
            say(f"would run GRPO variant {variant}: {settings.public()} on {plan.model} ({plan.model_source})")
        say(f"functions: {plan.mechanism.sources_line(MECHANISM_DEFAULTS)}")
        return
    summaries, lineage = [], []
    mechanism, functions = mechanism_of(plan.mechanism), plan.mechanism.describe(MECHANISM_DEFAULTS)
    for variant in variants:
        say(f"variant {variant} (group size {VARIANTS[variant]})")
        body = run_variant(plan.model, plan.model_source, plan.device, variant, seed, plan.run_mode,
                           dict(plan.options), mechanism, log=say)
        path, _ = sink.save_record(f"grpo_{variant}", {**body, "mechanism": functions}, schema_version=SCHEMA)
        lineage.append(sink.lineage(path))
        summaries.append(variant_summary(body))
    sink.save_record("decision", {"measurement": "decision computed from the variant records", "lineage": lineage,
                                  "mechanism": functions, "summaries": summaries, "decision": decide(summaries)},
                     schema_version=DECISION_SCHEMA)
