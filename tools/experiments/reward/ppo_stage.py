"""Chapter 16's stage: PPO with a value model on the plan's model, against a shuffled-reward control.

For each seed the plan's model is loaded afresh twice and trained by `ppo.train_ppo` on problems of the
lab task's `train` split: once rewarded by the verifier (the treatment), once with the same scores
shuffled across each iteration's batch (the negative control: the same mean reward, the same number of
updates, no link between a response and its reward). Greedy exact-match is measured on the `heldout`
split before and after (the splits go by content hash, so no held-out problem is ever trained on, here
or in the lab model's pretraining); the critic's loss is measured on a fixed probe batch of
`validation` problems, beside the loss of the best constant critic (the probe's mean return), which a
critic that learned only the level of the returns reaches. The losses and the resident account are the
plan's mechanism (the chapter's exercise functions when the notebook passes them, else the package's).
The record holds the configuration, the model's identity, every iteration of both arms, the paired
effects over the seeds (`tools.core.effects`), peak memory (CUDA only, `null` on the CPU) beside the
resident account of the three models this stage keeps (policy, reference, value; the verifier replaces
the reward model), and the decision computed from the effects.
"""

from __future__ import annotations

from dataclasses import fields, replace

from tools.core import effects
from tools.core.numerics import cpu_numerics
from tools.data import lab_tasks
from tools.experiments.reward import resident
from tools.experiments.reward.ppo import PACKAGE_LOSSES, PpoConfig, train_ppo
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch

STAGE = "ppo"
SCHEMA = "reward-ppo/v2"
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
TASK = lab_tasks.PRETRAINING_TASK
TRAIN_PROBLEMS, HELD_OUT_PROBLEMS, PROBE_PROBLEMS, TASK_SEED = 512, 400, 64, 1601
TIME_SHARE = 0.7
"""The share of the plan's time limit the training loops may use (loading, evaluation and the record
need the rest); no iteration starts that would pass it."""
MIN_GAIN_OVER_CONTROL = 0.05
"""The held-out exact match the verifier's reward must add over the shuffled control on every seed (20 of
the 400 held-out problems; one problem is 0.0025), and the margin the effect test asserts for the paired
interval over five seeds."""
MECHANISM = ("ppo_policy_loss", "ppo_value_loss", "ppo_resident_memory")
PACKAGE_FUNCTIONS = {**PACKAGE_LOSSES, "ppo_resident_memory": resident.resident_account}
"""The package's copies of the chapter's three exercise functions (a run without a notebook uses them)."""


def config_from(plan) -> PpoConfig:
    """The PPO settings: the defaults, with any the plan's options name (the reward is the stage's)."""
    chosen = {item.name: plan.option(item.name) for item in fields(PpoConfig) if item.name != "reward"}
    return PpoConfig(**{name: value for name, value in chosen.items() if value is not None})


def task_split() -> tuple[list, list, list]:
    """Training problems (train split), held-out problems (heldout split) and the critic's probe problems
    (validation split): three disjoint sets."""
    return (lab_tasks.sample_problems(TASK, "train", TRAIN_PROBLEMS, TASK_SEED),
            lab_tasks.sample_problems(TASK, "heldout", HELD_OUT_PROBLEMS, TASK_SEED),
            lab_tasks.sample_problems(TASK, "validation", PROBE_PROBLEMS, TASK_SEED))


def paired_effects(results: list[dict], controls: list[dict]) -> dict | None:
    """The paired effects over the seeds (None with fewer than two seeds: no interval):
    `exact_match_over_control` (verifier minus shuffled, after training), `exact_match_over_start` (the
    verifier arm's after minus before), `control_over_start`, `critic_over_constant` (the verifier arm's
    probe loss minus the best constant's: below 0 means the critic learned more than the mean return) and
    `critic_over_control` (its probe loss minus the shuffled arm's critic's)."""
    if len(results) < 2:
        return None

    def by_seed(items, key):
        return {item["seed"]: item[key] if not callable(key) else key(item) for item in items}

    after, control_after = by_seed(results, "exact_match_after"), by_seed(controls, "exact_match_after")
    before = by_seed(results, "exact_match_before")
    critic = by_seed(results, "value_loss_last")
    return {"exact_match_over_control": effects.paired_effect(after, control_after, metric="held-out exact match"),
            "exact_match_over_start": effects.paired_effect(after, before, metric="held-out exact match"),
            "control_over_start": effects.paired_effect(control_after, before, metric="held-out exact match"),
            "critic_over_constant": effects.paired_effect(
                critic, by_seed(results, lambda item: item["probe"]["constant_value_loss"]), metric="probe value loss"),
            "critic_over_control": effects.paired_effect(critic, by_seed(controls, "value_loss_last"),
                                                         metric="probe value loss")}


def decide(results: list[dict], controls: list[dict]) -> dict:
    """From the measurements: reject when on some seed the verifier's reward ends no higher than the
    shuffled control (the reward made no difference), or when the paired interval of the verifier arm's
    change from its start lies wholly below 0 (two or more seeds); accept_mechanism when on every seed the
    verifier's reward ends at least MIN_GAIN_OVER_CONTROL above the shuffled control; tune otherwise. (The
    effect test asserts the paired interval over five seeds; with three, as a notebook runs, the interval
    is reported, and this per-seed rule decides.)"""
    gains = {treated["seed"]: treated["exact_match_after"] - control["exact_match_after"]
             for treated, control in zip(results, controls)}
    found = paired_effects(results, controls)
    if any(gain <= 0 for gain in gains.values()):
        return {"decision": "reject", "reason": f"the verifier's reward ends no higher than the shuffled control on seeds "
                                                f"{sorted(seed for seed, gain in gains.items() if gain <= 0)}"}
    if found is not None and effects.holds(found["exact_match_over_start"], 0.0, "less"):
        return {"decision": "reject", "reason": "held-out exact match fell below the start (paired interval below 0)"}
    if all(gain >= MIN_GAIN_OVER_CONTROL for gain in gains.values()):
        return {"decision": "accept_mechanism",
                "reason": f"on every seed the verifier's reward ends at least {MIN_GAIN_OVER_CONTROL} above the shuffled "
                          "control on held-out exact match"}
    return {"decision": "tune", "reason": f"the verifier's reward beats the shuffled control on every seed, by less "
                                          f"than {MIN_GAIN_OVER_CONTROL} on some"}


def predicted_resident(model_config, config: PpoConfig, account=resident.resident_account) -> dict:
    """`account` (full fine-tuning, separate reference, float32 weights) of this stage's three models."""
    shape = {key: getattr(model_config, key) for key in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                          "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                          "tie_word_embeddings")}
    tokens = config.minibatch * (64 + config.max_new_tokens)
    found = account(shape, {"finetune": "full", "shared_reference": False, "weight_bytes": 4,
                            "batch_tokens": tokens}, 1e6)
    roles = {role: found["roles"][role] for role in ("policy", "reference", "value")}
    return {"roles": roles, "total_mb": sum(item["total"] for item in roles.values()) / 2 ** 20,
            "assumed_batch_tokens": tokens, "note": "float32 weights; prompts counted as 64 tokens; no reward model "
                                                     "(the verifier scores)"}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    config = config_from(plan)
    seeds = plan.seeds or DEFAULT_SEEDS
    functions = {name: plan.mechanism.function(name, PACKAGE_FUNCTIONS[name]) for name in MECHANISM}
    losses = {name: functions[name] for name in PACKAGE_LOSSES}
    train, held_out, probe = task_split()
    sink.require_new([STAGE])
    sources = plan.mechanism.sources_line(PACKAGE_FUNCTIONS)
    if not plan.writes:
        say(f"ppo (dry_run): {len(seeds)} seed(s) x 2 rewards (verifier, shuffled control) x {config.iterations} "
            f"iterations of {config.tasks_per_iteration} tasks x {config.samples_per_task} samples on {plan.model} "
            f"({plan.model_source}, {plan.device}); {len(train)} training, {len(held_out)} held-out and {len(probe)} "
            f"probe tasks; functions {sources}; nothing is loaded or written")
        return
    import time

    import torch

    from tools.measure.training import run_with_oom_guard

    results, controls, identity, model_config = [], [], None, None
    started = time.monotonic()
    budget = None if plan.limits.time_s is None else TIME_SHARE * plan.limits.time_s
    runs = [(seed, reward) for seed in seeds for reward in ("verifier", "shuffled")]

    def train_all() -> dict:
        nonlocal identity, model_config
        for index, (seed, reward) in enumerate(runs):
            model, tokenizer, identity = load_policy(plan)
            model_config = model.config
            deadline = None if budget is None else started + budget * (index + 1) / len(runs)
            outcome = train_ppo(model, tokenizer, train, held_out, replace(config, reward=reward), seed,
                                probe_tasks=probe, losses=losses, log=say, deadline=deadline)
            (results if reward == "verifier" else controls).append(outcome)
            del model
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(train_all, torch_module=torch)
    ok = outcome["status"] == "ok"
    body = {
        "measurement": "PPO with a value model on lab problems scored by the strict verifier, against the same loop "
                       "with the scores shuffled across each batch",
        "status": outcome["status"], "error": outcome.get("error"),
        "plan": plan.public(), "config": config.public(), "model": identity, "seeds": list(seeds),
        "cpu_numerics": cpu_numerics(),
        "mechanism": plan.mechanism.describe(PACKAGE_FUNCTIONS), "time_limit_s": plan.limits.time_s,
        "tasks": {"task": TASK, "version": lab_tasks.LAB_TASK_VERSION,
                  "train_pool_sha256": pool_sha256(train), "train": len(train),
                  "held_out_pool_sha256": pool_sha256(held_out), "held_out": len(held_out),
                  "probe_pool_sha256": pool_sha256(probe), "probe": len(probe)},
        "results": results, "controls": controls,
        "effects": paired_effects(results, controls) if ok else None,
        "min_gain_over_control": MIN_GAIN_OVER_CONTROL,
        "memory": {**memory, "predicted_resident": None if model_config is None else
                   predicted_resident(model_config, config, functions["ppo_resident_memory"])},
        "decision": decide(results, controls) if ok else {"decision": "reject", "reason": outcome["status"]},
    }
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"ppo: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
