"""PT-DPO-FAMILY's Step 5: the DPO family side by side on pairs from the model's own samples.

Stage `pairs`: the start model samples replies to training and held-out prompts; the verifier pairs a
correct with a wrong reply per prompt (chapter 17's `dpo_sweep.build_pairs`); a seeded share of the
training pairs is swapped (chosen <-> rejected) to plant label noise, and the record names which. The
start's held-out exact match and greedy reply length are measured once.

Stage `<variant>_<labels>` (labels `clean` or `noisy`): a trainable copy of the start takes `steps`
full-batch updates with the variant's loss (the same pairs, steps, learning rate and seed for every
variant: a matched budget), against the frozen start as reference where the loss has one. Then, on
data never trained on: held-out exact match (greedy), held-out pair accuracy (share of held-out pairs
whose log-ratio margin h against the start is > 0; 0.5 is a coin), the mean change of the chosen and of
the rejected log-probability on the held-out pairs (likelihood displacement), and the mean greedy reply
length in tokens.

The mechanism functions (`length_desensitised_logps`, `dpo_family_loss`, `reference_free_loss`) come
from `plan.mechanism`: the learner's, passed by the notebook, or this package's `family_losses`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tools.core.numerics import cpu_numerics
from tools.errors import ConfigError
from tools.experiments.preference import family_losses, sampling, training
from tools.experiments.preference.dpo_sweep import build_pairs
from tools.experiments.preference.logprobs import _token_table, pack
from tools.experiments.preference.stage import (
    frozen_copy,
    lab_task_splits,
    load_model,
    manifest,
    measured,
    settings_for,
    trainable_copy,
)

SCHEMA = "preference-dpo-family/v1"
MECHANISM_DEFAULTS = {"length_desensitised_logps": family_losses.length_desensitised_logps,
                      "dpo_family_loss": family_losses.dpo_family_loss,
                      "reference_free_loss": family_losses.reference_free_loss}
VARIANTS = {
    "dpo": {"loss": "dpo_family_loss", "loss_type": "sigmoid", "beta": 1.0},
    "ipo": {"loss": "dpo_family_loss", "loss_type": "ipo", "beta": 1.0},
    "hinge": {"loss": "dpo_family_loss", "loss_type": "hinge", "beta": 1.0},
    "robust": {"loss": "dpo_family_loss", "loss_type": "robust", "beta": 1.0, "label_smoothing": 0.2},
    "cdpo": {"loss": "dpo_family_loss", "loss_type": "cdpo", "beta": 1.0, "label_smoothing": 0.2},
    "rpo": {"loss": "dpo_family_loss", "loss_type": "sigmoid", "beta": 1.0, "rpo_alpha": 1.0},
    "ld_dpo": {"loss": "dpo_family_loss", "loss_type": "sigmoid", "beta": 1.0, "ld_alpha": 0.5},
    "simpo": {"loss": "reference_free_loss", "loss_type": "simpo", "beta": 2.0, "gamma": 1.0},
    "orpo": {"loss": "reference_free_loss", "loss_type": "orpo", "beta": 0.1},
}
"""Variant -> which loss, with which settings (TRL's defaults or the papers' recommended values)."""
LABELS = ("clean", "noisy")
DEFAULTS = {
    "cpu_smoke": {"train_seed": 101, "train_problems": 96, "eval_seed": 909, "eval_problems": 400,
                  "held_out_pair_problems": 64, "samples": 4, "pairs": 64, "steps": 12, "learning_rate": 5e-5,
                  "noise_rate": 0.3, "max_new_tokens": 6, "labels": ("clean", "noisy"), "seed": 0},
    "real_gpu": {"train_seed": 101, "train_problems": 32, "eval_seed": 909, "eval_problems": 64,
                 "held_out_pair_problems": 16, "samples": 4, "pairs": 16, "steps": 4, "learning_rate": 5e-6,
                 "noise_rate": 0.3, "max_new_tokens": 16, "labels": ("clean", "noisy"), "seed": 0},
}


def variant_names(chapter: str = "PT-DPO-FAMILY", run_mode: str = "cpu_smoke") -> tuple[str, ...]:
    return tuple(VARIANTS)


def stages_of(variants, labels) -> list[str]:
    return ["pairs", *(f"{name}_{label}" for label in labels for name in variants)]


def planted_noise(pairs: list[dict], rate: float, seed: int) -> tuple[list[dict], list[int]]:
    """A copy of `pairs` with round(rate * len) of them, drawn with `seed`, swapped (chosen <-> rejected);
    and the indices swapped, ascending."""
    if not 0 <= rate < 1:
        raise ConfigError(f"noise_rate must lie in [0, 1), got {rate!r}")
    flipped = sorted(random.Random(f"noise|{seed}").sample(range(len(pairs)), round(rate * len(pairs))))
    noisy = [dict(pair) for pair in pairs]
    for index in flipped:
        noisy[index]["chosen"], noisy[index]["rejected"] = pairs[index]["rejected"], pairs[index]["chosen"]
        noisy[index]["flipped"] = True
    return noisy, flipped


def _token_tables(model, rows, pad_id: int, *, frozen: bool):
    """Per-token log-probabilities and response masks of the chosen rows and of the rejected rows."""
    prompts = [row.prompt_ids for row in rows]
    batch = pack(prompts + prompts, [row.chosen_ids for row in rows] + [row.rejected_ids for row in rows], pad_id)
    picked, mask = _token_table(model, batch, frozen=frozen)
    count = len(rows)
    return picked[:count], picked[count:], mask[:count], mask[count:]


def variant_loss(functions: dict, variant: dict, policy_tables, reference_tables):
    """The variant's loss dict from per-token tables (through the given mechanism functions)."""
    ld_alpha = variant.get("ld_alpha")
    chosen, rejected, chosen_mask, rejected_mask = policy_tables
    sums = functions["length_desensitised_logps"](chosen, rejected, chosen_mask, rejected_mask, ld_alpha)
    if variant["loss"] == "reference_free_loss":
        return functions["reference_free_loss"](sums["chosen"], sums["rejected"], sums["chosen_lengths"],
                                                sums["rejected_lengths"], variant["loss_type"], variant["beta"],
                                                variant.get("gamma", 0.0))
    reference = functions["length_desensitised_logps"](*reference_tables, ld_alpha)
    return functions["dpo_family_loss"](sums["chosen"], sums["rejected"], reference["chosen"], reference["rejected"],
                                        sums["chosen_lengths"], sums["rejected_lengths"], variant["loss_type"],
                                        variant["beta"], variant.get("label_smoothing", 0.0),
                                        variant.get("rpo_alpha", 0.0))


def train(policy, reference, rows, variant: dict, functions: dict, *, steps: int, learning_rate: float,
          pad_id: int) -> list[dict]:
    """`steps` full-batch updates of `policy` with the variant's loss; per step the loss and the training
    pairs' mean margin (as the loss defines it) measured before that step's update."""
    import torch

    parameters = [parameter for parameter in policy.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)
    reference_tables = _token_tables(reference, rows, pad_id, frozen=True)
    history = []
    policy.train()
    for step in range(steps):
        result = variant_loss(functions, variant, _token_tables(policy, rows, pad_id, frozen=False), reference_tables)
        optimizer.zero_grad(set_to_none=True)
        result["loss"].backward()
        optimizer.step()
        history.append({"step": step, "loss": float(result["loss"].detach()),
                        "margin": float(result["margins"].float().mean()),
                        "sft_loss": None if result["sft_loss"] is None else float(result["sft_loss"].detach())})
    policy.eval()
    optimizer.zero_grad(set_to_none=True)
    return history


def pair_logps(model, rows, pad_id: int) -> tuple[list[float], list[float]]:
    """Summed log-probabilities of each pair's chosen and rejected reply (no graph)."""
    chosen, rejected, chosen_mask, rejected_mask = _token_tables(model, rows, pad_id, frozen=True)
    total = family_losses.length_desensitised_logps(chosen, rejected, chosen_mask, rejected_mask)
    return [float(value) for value in total["chosen"]], [float(value) for value in total["rejected"]]


def held_out_measures(policy, start_logps: tuple, rows, pad_id: int) -> dict:
    """Pair accuracy (share of held-out pairs whose margin h against the start is > 0) and the mean change
    of the chosen and of the rejected log-probability."""
    chosen, rejected = pair_logps(policy, rows, pad_id)
    start_chosen, start_rejected = start_logps
    chosen_shift = [after - before for after, before in zip(chosen, start_chosen)]
    rejected_shift = [after - before for after, before in zip(rejected, start_rejected)]
    margins = [c - r for c, r in zip(chosen_shift, rejected_shift)]
    count = len(rows)
    return {"pairs": count, "pair_accuracy": sum(margin > 0 for margin in margins) / count,
            "margin": sum(margins) / count, "chosen_logp_change": sum(chosen_shift) / count,
            "rejected_logp_change": sum(rejected_shift) / count}


def greedy_measures(model, tokenizer, tasks, max_new_tokens: int) -> dict:
    """Held-out exact match and mean greedy reply length (tokens, end-of-turn included)."""
    from tools.data.arithmetic import score_response

    replies = sampling.greedy_replies(model, tokenizer, [task.prompt for task in tasks], max_new_tokens=max_new_tokens)
    lengths = [len(training.reply_ids(tokenizer, reply)) for reply in replies]
    correct = sum(score_response(task, reply)["correct"] for task, reply in zip(tasks, replies))
    return {"exact_match": correct / len(tasks), "mean_length": sum(lengths) / len(lengths), "problems": len(tasks)}


def prepare(start, tokenizer, settings: dict) -> dict:
    """Everything the variants share for one seed: the pairs (clean and with planted noise), the held-out
    pairs and the start's log-probabilities on them, and the start's greedy measures (the baseline row)."""
    splits = lab_task_splits(settings["train_seed"], settings["train_problems"], settings["eval_seed"],
                             settings["eval_problems"])
    pairs, counts = build_pairs(start, tokenizer, splits["train"], settings, seed=settings["seed"])
    held_tasks = splits["held_out"][:settings["held_out_pair_problems"]]
    held_pairs, held_counts = build_pairs(start, tokenizer, held_tasks, settings, seed=settings["seed"] + 1)
    if not pairs or not held_pairs:
        raise ConfigError("no training or held-out pair could be built from the model's replies")
    noisy, flipped = planted_noise(pairs, settings["noise_rate"], settings["seed"])
    pad_id = tokenizer.pad_token_id
    held_rows = training.preference_rows(tokenizer, held_pairs)
    return {"splits": splits, "pairs": pairs, "pair_counts": counts, "held_out_pairs": held_pairs,
            "held_out_pair_counts": held_counts, "flipped": flipped, "pad_id": pad_id, "held_rows": held_rows,
            "rows": {"clean": training.preference_rows(tokenizer, pairs), "noisy": training.preference_rows(tokenizer, noisy)},
            "start_logps": pair_logps(start, held_rows, pad_id),
            "baseline": greedy_measures(start, tokenizer, splits["held_out"], settings["max_new_tokens"])}


def train_variant(start, reference, tokenizer, prepared: dict, name: str, label: str, settings: dict,
                  functions: dict) -> dict:
    """One variant on one label set from a fresh copy of `start`: its history and held-out measures."""
    import torch

    torch.manual_seed(settings["seed"])
    policy = trainable_copy(start)
    history = train(policy, reference, prepared["rows"][label], VARIANTS[name], functions, steps=settings["steps"],
                    learning_rate=settings["learning_rate"], pad_id=prepared["pad_id"])
    return {"history": history,
            "held_out_pairs": held_out_measures(policy, prepared["start_logps"], prepared["held_rows"], prepared["pad_id"]),
            "greedy": greedy_measures(policy, tokenizer, prepared["splits"]["held_out"], settings["max_new_tokens"])}


def run(plan, sink, *, log: Callable[[str], None] | None = None) -> None:
    """The contract runner: `pairs`, then one record per variant and label set."""
    import torch

    settings = settings_for(plan, DEFAULTS)
    variants = plan.variants or tuple(VARIANTS)
    unknown = [name for name in variants if name not in VARIANTS]
    if unknown:
        raise ConfigError(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    labels = tuple(settings["labels"])
    if not labels or any(label not in LABELS for label in labels):
        raise ConfigError(f"labels must be among {LABELS}, got {labels!r}")
    say = log or (lambda _: None)
    if not plan.writes:
        say(f"DPO family ({', '.join(variants)}) x labels ({', '.join(labels)}) on {plan.model}: "
            f"{settings['steps']} full-batch updates at {settings['learning_rate']} on up to {settings['pairs']} "
            f"pairs, noise rate {settings['noise_rate']}; records {', '.join(stages_of(variants, labels))}")
        return
    sink.require_new(stages_of(variants, labels))
    functions = {name: plan.mechanism.function(name, default) for name, default in MECHANISM_DEFAULTS.items()}
    described = plan.mechanism.describe(MECHANISM_DEFAULTS)
    threads = torch.get_num_threads()
    if plan.device == "cpu":
        torch.set_num_threads(plan.limits.cpu_threads or 1)
    try:
        torch.manual_seed(settings["seed"])
        start, tokenizer, identity = load_model(plan)
        prepared = prepare(start, tokenizer, settings)
        splits = prepared["splits"]
        pairs_path, _ = sink.save_record("pairs", {
            "plan": plan.public(), "settings": settings, "model": identity, "mechanism": described,
            "cpu_numerics": cpu_numerics(),
            "tasks": {"train": manifest(splits["train"]), "held_out": manifest(splits["held_out"])},
            **{key: prepared[key] for key in ("pairs", "pair_counts", "held_out_pairs", "held_out_pair_counts",
                                              "flipped", "baseline")}, "status": "ok"}, schema_version=SCHEMA)
        lineage = [sink.lineage(pairs_path)]
        reference = frozen_copy(start)
        for label in labels:
            for name in variants:
                body = measured(lambda name=name, label=label: train_variant(
                    start, reference, tokenizer, prepared, name, label, settings, functions), device=plan.device)
                sink.save_record(f"{name}_{label}", {"variant": name, "labels": label, "settings": VARIANTS[name],
                                                      "mechanism": described, "model": identity, "lineage": lineage,
                                                      "cpu_numerics": cpu_numerics(), "seed": settings["seed"],
                                                      **body}, schema_version=SCHEMA)
                say(f"{name} ({label}): {body['status']} in {body['seconds']:.1f} s")
    finally:
        torch.set_num_threads(threads)
