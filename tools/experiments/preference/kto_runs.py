"""PT-KTO's Step 5: KTO from binary labels of the model's own samples, beside a shuffled-label control, on a
balanced and an imbalanced set; every claim read on held-out examples.

Stage `data`: the model samples replies to the training prompts; every distinct reply becomes an unpaired
example labelled desirable (correct, by the verifier) or undesirable; two sets are drawn from them with a
fixed seed: a balanced one and an imbalanced one (few desirable examples). Where the model's own samples
hold too few desirable replies (a random-init model answers nothing right), the correct integer completes
them, and the record says how many came from where. The same is done on held-out prompts for the
held-out examples every run is measured on (never trained on). The chapter's `kto_class_weights` sets
the weighted variant's weights from the imbalanced set's labels, and is asked whether it accepts equal
weights there (its refusal is recorded). Held-out exact match (greedy) of the starting model.

Stage `kto_<variant>`: a trainable copy of the start takes `steps` full-batch KTO updates against the frozen
start, with the chapter's `kto_reference_point` and `kto_loss` (the notebook's, else the package's copies);
then, measured with the package's own code, the mean implicit reward of each class on the training
examples and on the held-out examples (the held-out gap D - U, and the share of same-prompt (D, U) pairs of
held-out replies the run ranks the right way round), and held-out exact match.
Variants: `balanced` (weights 1 / 1), `shuffled` (the control: the balanced set's examples with their
labels shuffled, same counts per class, weights 1 / 1), `imbalanced_weighted` (the weights
kto_class_weights gives, ratio lambda_D n_D / (lambda_U n_U) = 1) and `imbalanced_unweighted` (weights
1 / 1 on the imbalanced set, the ratio kto_class_weights refuses).
Every record carries which functions ran (`plan.mechanism.describe`).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.errors import ConfigError
from tools.experiments.preference import sampling, training
from tools.experiments.preference.losses import kto_loss, kto_reference_point
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

SCHEMA = "preference-kto/v2"
VARIANTS = ("balanced", "shuffled", "imbalanced_weighted", "imbalanced_unweighted")
CONTROL = "shuffled"
MECHANISM = ("kto_reference_point", "kto_loss", "kto_class_weights")
DEFAULTS = {
    "cpu_smoke": {"train_seed": 101, "train_problems": 48, "eval_seed": 909, "eval_problems": 200,
                  "held_out_problems": 128, "samples": 4, "balanced_per_class": 24, "imbalanced_desirable": 5,
                  "imbalanced_undesirable": 30, "steps": 5, "beta": 0.1, "learning_rate": 5e-5, "max_new_tokens": 6,
                  "seed": 0},
    "real_gpu": {"train_seed": 101, "train_problems": 16, "eval_seed": 909, "eval_problems": 64,
                 "held_out_problems": 16, "samples": 4, "balanced_per_class": 4, "imbalanced_desirable": 2,
                 "imbalanced_undesirable": 8, "steps": 4, "beta": 0.1, "learning_rate": 5e-6, "max_new_tokens": 16,
                 "seed": 0},
}
"""What the runs measured, per profile and seed, is in tests/experiments/preference/test_kto_runs_effect.py and
on the chapter's page."""


def class_weights(labels, undesirable_weight=1.0, desirable_weight=None) -> dict:
    """The package's copy of PT-KTO's kto_class_weights (no input checks): lambda_D so that
    lambda_D n_D / (lambda_U n_U) lies in [1, 4/3] (its lower end when not given); ValueError outside."""
    n_desirable = sum(labels)
    n_undesirable = len(labels) - n_desirable
    if not n_desirable or not n_undesirable:
        raise ValueError("both classes are needed to weigh them")
    balanced = undesirable_weight * n_undesirable / n_desirable
    weight = balanced if desirable_weight is None else desirable_weight
    ratio = weight * n_desirable / (undesirable_weight * n_undesirable)
    if not 1 - 1e-9 <= ratio <= 4 / 3 + 1e-9:
        raise ValueError(f"lambda_D n_D / (lambda_U n_U) = {ratio:.4g} lies outside [1, 4/3]")
    return {"n_desirable": n_desirable, "n_undesirable": n_undesirable, "desirable_weight": float(weight),
            "undesirable_weight": float(undesirable_weight), "ratio": ratio,
            "desirable_range": [balanced, balanced * 4 / 3]}


PACKAGE_FUNCTIONS = {"kto_reference_point": kto_reference_point, "kto_loss": kto_loss,
                     "kto_class_weights": class_weights}


def variant_names(chapter: str = "PT-KTO", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return VARIANTS


def stages_of(variants) -> list[str]:
    return ["data", *(f"kto_{name}" for name in variants)]


def _completed(examples: list[dict], tasks, wanted: int) -> tuple[list[dict], list[dict], int]:
    """The desirable and undesirable examples, the desirable ones completed with correct integers (one per task
    without an own correct reply) up to `wanted`; and how many desirable ones were the model's own."""
    good = [example for example in examples if example["label"]]
    bad = [example for example in examples if not example["label"]]
    own_good = len(good)
    for task in tasks:
        if len(good) >= wanted:
            break
        if not any(example["task_id"] == task.task_id for example in good):
            good.append({"task_id": task.task_id, "prompt": task.prompt, "completion": str(task.label), "label": True,
                         "source": "constructed"})
    return good, bad, own_good


def draw_sets(examples: list[dict], tasks, settings: dict) -> tuple[dict, dict]:
    """The balanced, shuffled and imbalanced sets (seeded draws), completed with correct integers where the
    model's own desirable replies are too few; and where each came from."""
    rng = random.Random(settings["seed"])
    wanted = max(settings["balanced_per_class"], settings["imbalanced_desirable"])
    good, bad, own_good = _completed(examples, tasks, wanted)
    needed_bad = max(settings["balanced_per_class"], settings["imbalanced_undesirable"])
    if len(bad) < needed_bad:
        raise ConfigError(f"only {len(bad)} undesirable replies; the sets need {needed_bad}")
    rng.shuffle(good)
    rng.shuffle(bad)
    sets = {"balanced": good[:settings["balanced_per_class"]] + bad[:settings["balanced_per_class"]],
            "imbalanced": good[:settings["imbalanced_desirable"]] + bad[:settings["imbalanced_undesirable"]]}
    for chosen in sets.values():
        rng.shuffle(chosen)
    labels = [example["label"] for example in sets["balanced"]]
    rng.shuffle(labels)
    sets["shuffled"] = [dict(example, label=label) for example, label in zip(sets["balanced"], labels)]
    return sets, {"own_desirable": own_good, "own_undesirable": len(bad),
                  "constructed_desirable": sum(example.get("source") == "constructed" for example in good)}


def held_out_examples(examples: list[dict], settings: dict) -> list[dict]:
    """The held-out examples every run is measured on: the model's own distinct replies to held-out prompts,
    at most as many desirable as undesirable ones (a seeded draw), so both classes weigh alike."""
    rng = random.Random(f"held-out|{settings['seed']}")
    good = [example for example in examples if example["label"]]
    bad = [example for example in examples if not example["label"]]
    per_class = min(len(good), len(bad))
    return rng.sample(good, per_class) + rng.sample(bad, per_class)


def set_of(variant: str) -> str:
    return {"balanced": "balanced", "shuffled": "shuffled"}.get(variant, "imbalanced")


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
                f"{settings['balanced_per_class']} + {settings['balanced_per_class']}, the same with shuffled labels "
                f"(the control) and an imbalanced set of {settings['imbalanced_desirable']} + "
                f"{settings['imbalanced_undesirable']}; {settings['steps']} KTO updates each; class rewards on "
                f"held-out replies to {settings['held_out_problems']} held-out prompts; records "
                f"{', '.join(stages_of(variants))}")
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
        held_tasks = splits["held_out"][:settings["held_out_problems"]]
        replies = sampling.sample_replies(start, tokenizer, [task.prompt for task in splits["train"]],
                                          samples=settings["samples"], max_new_tokens=settings["max_new_tokens"],
                                          seed=settings["seed"])
        sets, sources = draw_sets(binary_examples(splits["train"], replies), splits["train"], settings)
        held_replies = sampling.sample_replies(start, tokenizer, [task.prompt for task in held_tasks],
                                               samples=settings["samples"], max_new_tokens=settings["max_new_tokens"],
                                               seed=settings["seed"] + 1)
        held = held_out_examples(binary_examples(held_tasks, held_replies), settings)
        if not held:
            raise ConfigError("the held-out replies hold no desirable or no undesirable example to measure on")
        weights = {"balanced": {"desirable_weight": 1.0, "undesirable_weight": 1.0}}
        imbalanced_labels = [example["label"] for example in sets["imbalanced"]]
        try:
            chosen = functions["kto_class_weights"](imbalanced_labels)
            weights["imbalanced_weighted"] = {"desirable_weight": chosen["desirable_weight"],
                                              "undesirable_weight": chosen["undesirable_weight"]}
            weighting = {"class_weights": chosen, "error": None}
        except Exception as error:  # a learner's function that refuses valid labels: recorded, its run fails
            weighting = {"class_weights": None, "error": f"{type(error).__name__}: {error}"}
        try:
            functions["kto_class_weights"](imbalanced_labels, desirable_weight=1.0)
            weighting["equal_weights_refused"] = None
        except ValueError as error:
            weighting["equal_weights_refused"] = str(error)
        before = sampling.exact_match(start, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])
        data_path, _ = sink.save_record("data", {
            "plan": plan.public(), "settings": settings, "model": identity, "mechanism": described,
            "tasks": {"train": manifest(splits["train"]), "held_out": manifest(splits["held_out"])},
            "sets": sets, "sources": sources, "held_out_examples": held, "weighting": weighting,
            "held_out_exact_match_before": before, "status": "ok"}, schema_version=SCHEMA)
        lineage = [sink.lineage(data_path)]
        reference = frozen_copy(start)
        pad_id = tokenizer.pad_token_id
        held_rows = training.binary_rows(tokenizer, held)
        for name in variants:
            examples = sets[set_of(name)]
            weight = weights.get(name, weights["balanced"] if name != "imbalanced_weighted" else None)

            def work(examples=examples, weight=weight) -> dict:
                if weight is None:
                    raise ConfigError(f"kto_class_weights gave no weights: {weighting['error']}")
                torch.manual_seed(settings["seed"])
                policy = trainable_copy(start)
                rows = training.binary_rows(tokenizer, examples)
                history = training.kto_updates(policy, reference, rows, beta=settings["beta"], steps=settings["steps"],
                                               learning_rate=settings["learning_rate"], pad_id=pad_id,
                                               loss=functions["kto_loss"],
                                               reference_point=functions["kto_reference_point"], **weight)
                return {"history": history,
                        "class_rewards": training.class_rewards(policy, reference, rows, beta=settings["beta"],
                                                                pad_id=pad_id),
                        "held_out_rewards": training.class_rewards(
                            policy, reference, held_rows, beta=settings["beta"], pad_id=pad_id,
                            groups=[example["task_id"] for example in held]),
                        "held_out_exact_match": {"before": before, "after": sampling.exact_match(
                            policy, tokenizer, splits["held_out"], max_new_tokens=settings["max_new_tokens"])}}

            n_good = sum(example["label"] for example in examples)
            body = measured(work, device=plan.device)
            ratio = None if weight is None else weight["desirable_weight"] * n_good / (
                weight["undesirable_weight"] * (len(examples) - n_good))
            sink.save_record(f"kto_{name}", {
                "variant": name, "control": name == CONTROL, "model": identity, "lineage": lineage,
                "mechanism": described, "weights": weight,
                "counts": {"desirable": n_good, "undesirable": len(examples) - n_good},
                "weighted_ratio": ratio, **body}, schema_version=SCHEMA)
            if log:
                log(f"{name}: {body['status']} in {body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
