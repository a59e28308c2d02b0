"""Chapter 16's stage: PPO with a value model on the plan's model, one record.

For each seed the plan's model is loaded afresh and trained by `ppo.train_ppo` on problems of the
lab task's `train` split; greedy exact-match is measured on its `heldout` split (the splits go by
content hash, so no held-out problem is ever trained on, here or in the lab model's pretraining). The record holds the configuration, the model's identity, every
iteration's measurements, the exact-match before and after, peak memory (CUDA only, `null` on the
CPU) beside the resident account of the three models this stage keeps (policy, reference, value;
the verifier replaces the reward model), and the decision computed from the measurements.
"""

from __future__ import annotations

from dataclasses import fields

from tools.data import lab_tasks
from tools.experiments.reward import resident
from tools.experiments.reward.rollouts import pool_sha256
from tools.experiments.reward.ppo import PpoConfig, train_ppo
from tools.experiments.reward.stage import cpu_threads, load_policy, memory_watch

STAGE = "ppo"
SCHEMA = "reward-ppo/v1"
DEFAULT_SEEDS = (0,)
TASK = lab_tasks.PRETRAINING_TASK
TRAIN_PROBLEMS, HELD_OUT_PROBLEMS, TASK_SEED = 512, 400, 1601
TIME_SHARE = 0.7
"""The share of the plan's time limit the training loops may use (loading, evaluation and the record
need the rest); no iteration starts that would pass it."""


def config_from(plan) -> PpoConfig:
    """The PPO settings: the defaults, with any the plan's options name."""
    chosen = {item.name: plan.option(item.name) for item in fields(PpoConfig)}
    return PpoConfig(**{name: value for name, value in chosen.items() if value is not None})


def task_split() -> tuple[list, list]:
    """Training problems from the lab task's train split and held-out problems from its heldout split."""
    return (lab_tasks.sample_problems(TASK, "train", TRAIN_PROBLEMS, TASK_SEED),
            lab_tasks.sample_problems(TASK, "heldout", HELD_OUT_PROBLEMS, TASK_SEED))


def decide(results: list[dict]) -> dict:
    """accept_mechanism when every seed's held-out exact-match rose and its value loss fell; tune when
    only one of the two held for some seed; reject when exact-match fell for a seed."""
    rose = [result["exact_match_after"] > result["exact_match_before"] for result in results]
    fell = [result["value_loss_last"] < result["value_loss_first"] for result in results]
    dropped = [result["exact_match_after"] < result["exact_match_before"] for result in results]
    if all(rose) and all(fell):
        return {"decision": "accept_mechanism", "reason": "held-out exact-match rose and the value loss fell for every seed"}
    if any(dropped):
        return {"decision": "reject", "reason": "held-out exact-match fell for some seed"}
    return {"decision": "tune", "reason": f"exact-match rose for {sum(rose)} of {len(rose)} seeds, value loss fell for "
                                          f"{sum(fell)} of {len(fell)}"}


def predicted_resident(model_config, config: PpoConfig) -> dict:
    """The resident account (full fine-tuning, separate reference) of this stage's three models."""
    shape = {key: getattr(model_config, key) for key in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                          "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                          "tie_word_embeddings")}
    tokens = config.minibatch * (64 + config.max_new_tokens)
    account = resident.resident_account(shape, {"finetune": "full", "shared_reference": False, "weight_bytes": 4,
                                                "batch_tokens": tokens}, gpu_gib=1e6)
    roles = {role: account["roles"][role] for role in ("policy", "reference", "value")}
    return {"roles": roles, "total_mb": sum(item["total"] for item in roles.values()) / 2 ** 20,
            "assumed_batch_tokens": tokens, "note": "float32 weights; prompts counted as 64 tokens; no reward model "
                                                     "(the verifier scores)"}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda _: None)
    config = config_from(plan)
    seeds = plan.seeds or DEFAULT_SEEDS
    train, held_out = task_split()
    sink.require_new([STAGE])
    if not plan.writes:
        say(f"ppo (dry_run): {len(seeds)} seed(s) x {config.iterations} iterations of {config.tasks_per_iteration} "
            f"tasks x {config.samples_per_task} samples on {plan.model} ({plan.model_source}, {plan.device}); "
            f"{len(train)} training and {len(held_out)} held-out tasks; nothing is loaded or written")
        return
    import torch

    from tools.measure.training import run_with_oom_guard

    import time

    results, identity, model_config = [], None, None
    started = time.monotonic()
    budget = None if plan.limits.time_s is None else TIME_SHARE * plan.limits.time_s

    def train_all() -> dict:
        nonlocal identity, model_config
        for index, seed in enumerate(seeds):
            model, tokenizer, identity = load_policy(plan)
            model_config = model.config
            deadline = None if budget is None else started + budget * (index + 1) / len(seeds)
            results.append(train_ppo(model, tokenizer, train, held_out, config, seed, log=say, deadline=deadline))
            del model
        return {"status": "ok"}

    with memory_watch(plan) as memory, cpu_threads(plan):
        outcome = run_with_oom_guard(train_all, torch_module=torch)
    body = {
        "measurement": "PPO with a value model on lab problems scored by the strict verifier",
        "status": outcome["status"], "error": outcome.get("error"),
        "plan": plan.public(), "config": config.public(), "model": identity, "seeds": list(seeds),
        "time_limit_s": plan.limits.time_s,
        "tasks": {"task": TASK, "version": lab_tasks.LAB_TASK_VERSION,
                  "train_pool_sha256": pool_sha256(train), "train": len(train),
                  "held_out_pool_sha256": pool_sha256(held_out), "held_out": len(held_out)},
        "results": results,
        "memory": {**memory, "predicted_resident": None if model_config is None else predicted_resident(model_config, config)},
        "decision": decide(results) if outcome["status"] == "ok" else {"decision": "reject", "reason": outcome["status"]},
    }
    path, digest = sink.save_record(STAGE, body, schema_version=SCHEMA)
    say(f"ppo: wrote {path.name} (sha256 {digest[:12]}), decision {body['decision']['decision']}")
