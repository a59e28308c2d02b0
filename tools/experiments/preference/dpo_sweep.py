"""Chapter 17's Step 5: DPO on pairs from the model's own samples, once per beta, from the same start.

Stage `pairs`: the model samples replies to the training prompts; the verifier pairs a correct reply
with a wrong one per prompt (prompts whose samples are all right or all wrong give none); the same is
done on held-out prompts for the margin; held-out exact match (greedy) of the starting model. Where
the model's own samples give fewer pairs than the run asks for (a random-init model answers nothing
right), the pairs are completed with the correct integer as chosen against one of the model's wrong
replies, and the record says how many pairs came from where.

Stage `sweep_<variant>` (one per beta): a trainable copy of the start takes `steps` full-batch DPO
updates against the frozen start; then pair accuracy on the training pairs, held-out exact match,
held-out log-ratio margin, and the per-token log-probabilities of the trained policy's own samples on
held-out prompts under the policy and the reference (the drift the chapter's k3 estimate reads).
The decision is the chapter's: its notebook reads these records with its `judge_beta_sweep`.
"""

from __future__ import annotations

from collections.abc import Callable

from tools.data.arithmetic import score_response
from tools.errors import ConfigError
from tools.experiments.preference import sampling, training
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

SCHEMA = "preference-dpo-sweep/v1"
BETAS = {"beta_0.05": 0.05, "beta_0.10": 0.10, "beta_0.30": 0.30}
DEFAULTS = {
    "cpu_smoke": {"train_seed": 101, "train_problems": 48, "eval_seed": 909, "eval_problems": 200,
                  "held_out_pair_problems": 48, "samples": 4, "pairs": 28, "steps": 5, "learning_rate": 5e-5,
                  "drift_samples": 2, "max_new_tokens": 6, "seed": 0},
    "real_gpu": {"train_seed": 101, "train_problems": 16, "eval_seed": 909, "eval_problems": 64,
                 "held_out_pair_problems": 16, "samples": 4, "pairs": 4, "steps": 4, "learning_rate": 5e-6,
                 "drift_samples": 2, "max_new_tokens": 16, "seed": 0},
}
"""cpu_smoke trains the lab model (python -m tools.models lab-build); its problems come from the lab task's
train and heldout splits (tools.data.lab_tasks), the same prompts real_gpu gives Qwen2.5-0.5B-Instruct."""


def variant_names(chapter: str = "17", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return tuple(BETAS)


def stages_of(variants) -> list[str]:
    return ["pairs", *(f"sweep_{name}" for name in variants)]


def describe(plan, settings: dict, variants) -> list[str]:
    return [f"DPO beta sweep ({', '.join(variants)}) on {plan.model} ({plan.model_source}, {plan.device}):",
            (f"  pairs from the model's own samples: {settings['samples']} replies per training prompt "
             f"({settings['train_problems']} lab-task train problems, seed {settings['train_seed']}), up to "
             f"{settings['pairs']} verified pairs; {settings['eval_problems']} held-out problems "
             f"(seed {settings['eval_seed']})"),
            (f"  per beta: {settings['steps']} full-batch DPO updates at learning rate {settings['learning_rate']}, "
             "then pair accuracy, held-out exact match, held-out margin and drift samples"),
            f"  records: {', '.join(stages_of(variants))}"]


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


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `pairs`, then one `sweep_<variant>` record per beta."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    variants = plan.variants or tuple(BETAS)
    unknown = [name for name in variants if name not in BETAS]
    if unknown:
        raise ConfigError(f"unknown variant(s) {unknown}; choose from {', '.join(BETAS)}")
    if not plan.writes:
        for line in describe(plan, settings, variants):
            (log or (lambda _: None))(line)
        return
    sink.require_new(stages_of(variants))
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        torch.manual_seed(settings["seed"])
        start, tokenizer, identity = load_model(plan)
        splits = lab_task_splits(settings["train_seed"], settings["train_problems"], settings["eval_seed"],
                                 settings["eval_problems"])
        pairs, counts = build_pairs(start, tokenizer, splits["train"], settings, seed=settings["seed"])
        held_pairs, held_counts = build_pairs(start, tokenizer, splits["held_out"][:settings["held_out_pair_problems"]],
                                              settings, seed=settings["seed"] + 1)
        if not pairs:
            raise ConfigError("no training pair could be built from the model's replies")
        before = sampling.exact_match(start, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])
        pairs_path, _ = sink.save_record("pairs", {
            "schema_note": "training and held-out preference pairs of the DPO beta sweep",
            "plan": plan.public(), "settings": settings, "model": identity,
            "tasks": {"train": manifest(splits["train"]), "held_out": manifest(splits["held_out"])},
            "pairs": pairs, "pair_counts": counts, "held_out_pairs": held_pairs, "held_out_pair_counts": held_counts,
            "held_out_exact_match_before": before, "status": "ok"}, schema_version=SCHEMA)
        lineage = [sink.lineage(pairs_path)]
        rows = training.preference_rows(tokenizer, pairs)
        held_rows = training.preference_rows(tokenizer, held_pairs) if held_pairs else []
        reference = frozen_copy(start)
        pad_id = tokenizer.pad_token_id
        for name in variants:
            beta = BETAS[name]

            def work(beta=beta) -> dict:
                torch.manual_seed(settings["seed"])
                policy = trainable_copy(start)
                history = training.dpo_updates(policy, reference, rows, beta=beta, steps=settings["steps"],
                                               learning_rate=settings["learning_rate"], pad_id=pad_id)
                held = [task.prompt for task in splits["held_out"][:settings["held_out_pair_problems"]]]
                samples = sampling.sample_replies(policy, tokenizer, held, samples=settings["drift_samples"],
                                                  max_new_tokens=settings["max_new_tokens"], seed=settings["seed"] + 2)
                prompts = [training.chat_prompt_ids(tokenizer, prompt) for prompt, group in zip(held, samples)
                           for _ in group]
                replies = [training.reply_ids(tokenizer, reply) for group in samples for reply in group]
                return {"beta": beta, "history": history,
                        "train_pairs": training.preference_margin(policy, reference, rows, pad_id),
                        "held_out_pairs": training.preference_margin(policy, reference, held_rows, pad_id)
                        if held_rows else None,
                        "held_out_exact_match": {"before": before, "after": sampling.exact_match(
                            policy, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])},
                        "drift_samples": training.sample_logps(policy, reference, prompts, replies, pad_id)}

            body = measured(work, device=plan.device)
            sink.save_record(f"sweep_{name}", {"variant": name, "model": identity, "lineage": lineage, **body},
                             schema_version=SCHEMA)
            if log:
                log(f"{name}: {body['status']} in {body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
