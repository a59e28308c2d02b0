"""PT-KTO's Step 5: KTO from binary labels of the model's own samples, on a balanced and an imbalanced set.

Stage `data`: the model samples replies to the training prompts; every distinct reply becomes an
unpaired example labelled desirable (correct, by the verifier) or undesirable; two sets are drawn
from them with a fixed seed: a balanced one and an imbalanced one (few desirable examples). Where the
model's own samples hold too few desirable replies (a random-init model answers nothing right), the
correct integer completes them, and the record says how many came from where. Held-out exact match
(greedy) of the starting model.

Stage `kto_<variant>`: a trainable copy of the start takes `steps` full-batch KTO updates against the
frozen start, then held-out exact match. Variants: `balanced` (weights 1 / 1), `imbalanced_weighted`
(lambda_D = lambda_U n_U / n_D, ratio 1) and `imbalanced_unweighted` (weights 1 / 1 on the imbalanced
set, the ratio the chapter's kto_class_weights refuses).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.errors import ConfigError
from tools.experiments.preference import sampling, training
from tools.experiments.preference.pairs import binary_examples
from tools.experiments.preference.stage import (
    frozen_copy,
    lab_task_splits,
    load_model,
    manifest,
    measured,
    settings_for,
    trainable_copy,
)

SCHEMA = "preference-kto/v1"
VARIANTS = ("balanced", "imbalanced_weighted", "imbalanced_unweighted")
DEFAULTS = {
    "cpu_smoke": {"train_seed": 101, "train_problems": 48, "eval_seed": 909, "eval_problems": 200,
                  "samples": 4, "balanced_per_class": 24, "imbalanced_desirable": 5, "imbalanced_undesirable": 30,
                  "steps": 5, "beta": 0.1, "learning_rate": 5e-5, "max_new_tokens": 6, "seed": 0},
    "real_gpu": {"train_seed": 101, "train_problems": 16, "eval_seed": 909, "eval_problems": 64,
                 "samples": 4, "balanced_per_class": 4, "imbalanced_desirable": 2, "imbalanced_undesirable": 8,
                 "steps": 4, "beta": 0.1, "learning_rate": 5e-6, "max_new_tokens": 16, "seed": 0},
}


def variant_names(chapter: str = "PT-KTO", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return VARIANTS


def stages_of(variants) -> list[str]:
    return ["data", *(f"kto_{name}" for name in variants)]


def draw_sets(examples: list[dict], tasks, settings: dict) -> tuple[dict, dict]:
    """The balanced and the imbalanced set (seeded draws), completed with correct integers where the
    model's own desirable replies are too few; and where each came from."""
    rng = random.Random(settings["seed"])
    good = [example for example in examples if example["label"]]
    bad = [example for example in examples if not example["label"]]
    wanted = max(settings["balanced_per_class"], settings["imbalanced_desirable"])
    own_good = len(good)
    for task in tasks:
        if len(good) >= wanted:
            break
        if not any(example["task_id"] == task.task_id for example in good):
            good.append({"task_id": task.task_id, "prompt": task.prompt, "completion": str(task.label), "label": True,
                         "source": "constructed"})
    needed_bad = max(settings["balanced_per_class"], settings["imbalanced_undesirable"])
    if len(bad) < needed_bad:
        raise ConfigError(f"only {len(bad)} undesirable replies; the sets need {needed_bad}")
    rng.shuffle(good)
    rng.shuffle(bad)
    sets = {"balanced": good[:settings["balanced_per_class"]] + bad[:settings["balanced_per_class"]],
            "imbalanced": good[:settings["imbalanced_desirable"]] + bad[:settings["imbalanced_undesirable"]]}
    for chosen in sets.values():
        rng.shuffle(chosen)
    return sets, {"own_desirable": own_good, "own_undesirable": len(bad),
                  "constructed_desirable": sum(example.get("source") == "constructed" for example in good)}


def weights_for(variant: str, examples: list[dict]) -> dict:
    n_good = sum(example["label"] for example in examples)
    n_bad = len(examples) - n_good
    if variant == "imbalanced_weighted":
        return {"desirable_weight": n_bad / n_good, "undesirable_weight": 1.0}
    return {"desirable_weight": 1.0, "undesirable_weight": 1.0}


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `data`, then one `kto_<variant>` record per variant."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    variants = plan.variants or VARIANTS
    if any(name not in VARIANTS for name in variants):
        raise ConfigError(f"unknown variant in {list(variants)}; choose from {', '.join(VARIANTS)}")
    if not plan.writes:
        if log:
            log(f"KTO from binary labels ({', '.join(variants)}) on {plan.model} ({plan.model_source}, {plan.device}): "
                f"{settings['samples']} replies per training prompt labelled by the verifier; a balanced set of "
                f"{settings['balanced_per_class']} + {settings['balanced_per_class']} and an imbalanced set of "
                f"{settings['imbalanced_desirable']} + {settings['imbalanced_undesirable']}; {settings['steps']} KTO "
                f"updates each; records {', '.join(stages_of(variants))}")
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
        replies = sampling.sample_replies(start, tokenizer, [task.prompt for task in splits["train"]],
                                          samples=settings["samples"], max_new_tokens=settings["max_new_tokens"],
                                          seed=settings["seed"])
        sets, sources = draw_sets(binary_examples(splits["train"], replies), splits["train"], settings)
        before = sampling.exact_match(start, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])
        data_path, _ = sink.save_record("data", {
            "plan": plan.public(), "settings": settings, "model": identity,
            "tasks": {"train": manifest(splits["train"]), "held_out": manifest(splits["held_out"])},
            "sets": sets, "sources": sources, "held_out_exact_match_before": before, "status": "ok"},
            schema_version=SCHEMA)
        lineage = [sink.lineage(data_path)]
        reference = frozen_copy(start)
        for name in variants:
            examples = sets["balanced" if name == "balanced" else "imbalanced"]
            weights = weights_for(name, examples)

            def work(examples=examples, weights=weights) -> dict:
                torch.manual_seed(settings["seed"])
                policy = trainable_copy(start)
                rows = training.binary_rows(tokenizer, examples)
                history = training.kto_updates(policy, reference, rows, beta=settings["beta"], steps=settings["steps"],
                                               learning_rate=settings["learning_rate"], pad_id=tokenizer.pad_token_id,
                                               **weights)
                return {"history": history,
                        "class_rewards": training.class_rewards(policy, reference, rows, beta=settings["beta"],
                                                                pad_id=tokenizer.pad_token_id),
                        "held_out_exact_match": {"before": before, "after": sampling.exact_match(
                    policy, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])}}

            n_good = sum(example["label"] for example in examples)
            body = measured(work, device=plan.device)
            sink.save_record(f"kto_{name}", {
                "variant": name, "model": identity, "lineage": lineage, "weights": weights,
                "counts": {"desirable": n_good, "undesirable": len(examples) - n_good},
                "weighted_ratio": weights["desirable_weight"] * n_good
                / (weights["undesirable_weight"] * (len(examples) - n_good)), **body}, schema_version=SCHEMA)
            if log:
                log(f"{name}: {body['status']} in {body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
