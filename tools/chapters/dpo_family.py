"""PT-DPO-FAMILY: the figures of Steps 1-3, the framework check against TRL, and Step 5's comparison page.

The learner writes the mechanism (`length_desensitised_logps`, `dpo_family_loss`, `reference_free_loss`);
nothing here implements it. The framework check takes those functions as arguments and compares what they
compute with TRL 1.16 on the same batch of the course's tiny model: every loss of DPOTrainer the chapter
teaches (`sigmoid`, `hinge`, `ipo`, `robust`, the conservative `cdpo` as TRL's weighted sum of `sigmoid` and
`robust`, RPO as `sigmoid` plus `sft`, LD-DPO's `ld_alpha`), CPOTrainer's `simpo` and ORPOTrainer. Step 5's
figures and tables are read from the records of `tools.experiments.preference.family_runs`; the effects
over seeds come from `tools.core.effects`. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core import effects
from tools.data.arithmetic import generate_tasks
from tools.experiments.preference.trl_runs import quiet_trl, silence_printer, tiny_policy_and_reference, \
    trainer_arguments, versions

CHAPTER_ID = "PT-DPO-FAMILY"
FRAMEWORK_STAGE = "framework_check"
FRAMEWORK_TOLERANCE = 1e-5
"""Largest absolute difference allowed between a loss of ours and TRL's on one batch (float32 on CPU; TRL's
fused LM head and our log-softmax add in different orders)."""
FRAMEWORK_BETA = 0.1
FRAMEWORK_SMOOTHING = 0.1
FRAMEWORK_RPO_ALPHA = 0.5
FRAMEWORK_LD_ALPHA = 0.5
FRAMEWORK_SIMPO = {"beta": 2.0, "gamma": 1.0}
FRAMEWORK_ORPO_LAMBDA = 0.1
FRAMEWORK_NOISE = 0.05
"""Standard deviation of the seeded noise added to the policy's weights, so that it differs from the
reference and the log-ratios are not all zero."""

DPO_CONFIGS = {
    "sigmoid": {"call": {"loss_type": "sigmoid"}, "trl": {"loss_type": ["sigmoid"]}},
    "hinge": {"call": {"loss_type": "hinge"}, "trl": {"loss_type": ["hinge"]}},
    "ipo": {"call": {"loss_type": "ipo"}, "trl": {"loss_type": ["ipo"]}},
    "robust": {"call": {"loss_type": "robust", "label_smoothing": FRAMEWORK_SMOOTHING},
               "trl": {"loss_type": ["robust"], "label_smoothing": FRAMEWORK_SMOOTHING}},
    "cdpo": {"call": {"loss_type": "cdpo", "label_smoothing": FRAMEWORK_SMOOTHING},
             "trl": {"loss_type": ["sigmoid", "robust"], "label_smoothing": FRAMEWORK_SMOOTHING,
                     "loss_weights": [2 * (1 - FRAMEWORK_SMOOTHING), -(1 - 2 * FRAMEWORK_SMOOTHING)]}},
    "rpo": {"call": {"loss_type": "sigmoid", "rpo_alpha": FRAMEWORK_RPO_ALPHA},
            "trl": {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, FRAMEWORK_RPO_ALPHA]}},
    "ld_dpo": {"call": {"loss_type": "sigmoid"}, "ld_alpha": FRAMEWORK_LD_ALPHA,
               "trl": {"loss_type": ["sigmoid"], "ld_alpha": FRAMEWORK_LD_ALPHA}},
}
"""Our call -> the DPOTrainer configuration that computes the same loss. TRL 1.16's `sigmoid` ignores
`label_smoothing`; the conservative loss -(1-e) logsig(bh) - e logsig(-bh) is 2(1-e) x sigmoid - (1-2e) x robust,
which TRL computes through `loss_weights`."""


# ---------------------------------------------------------------------------
# Steps 1-3: figures
# ---------------------------------------------------------------------------

def pair_loss_curves(margins, beta: float = 1.0, smoothing: float = 0.2) -> dict:
    """Loss per pair against the log-ratio margin h for the pairwise losses (IPO on h as a per-token margin)."""
    import torch
    import torch.nn.functional as F

    h = torch.as_tensor(margins, dtype=torch.float64)
    eps = smoothing
    return {"sigmoid (DPO)": -F.logsigmoid(beta * h),
            "hinge": torch.relu(1 - beta * h),
            "ipo": (h - 1 / (2 * beta)) ** 2,
            f"robust (e={eps})": (-(1 - eps) * F.logsigmoid(beta * h) + eps * F.logsigmoid(-beta * h)) / (1 - 2 * eps),
            f"cdpo (e={eps})": -(1 - eps) * F.logsigmoid(beta * h) - eps * F.logsigmoid(-beta * h)}


def draw_pair_losses(beta: float = 1.0, smoothing: float = 0.2):
    """Figure: each pairwise loss and the size of its gradient against the margin h."""
    import matplotlib.pyplot as plt
    import torch

    h = torch.linspace(-4, 6, 401, dtype=torch.float64, requires_grad=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    for name, values in pair_loss_curves(h, beta, smoothing).items():
        grad, = torch.autograd.grad(values.sum(), h)
        left.plot(h.detach(), values.detach(), label=name)
        right.plot(h.detach(), -grad, label=name)
    left.set(xlabel="h (log-ratio margin, nats)", ylabel="loss of one pair", ylim=(-0.2, 5),
             title=f"pairwise losses, beta = {beta}")
    right.set(xlabel="h", ylabel="-d loss / d h", ylim=(-1.2, 1.6), title="how hard a pair still pushes h up")
    for ax in (left, right):
        ax.axhline(0, color="grey", lw=0.6)
        ax.axvline(0, color="grey", lw=0.6)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def draw_odds_ratio():
    """Figure: ORPO's log-odds log(p / (1 - p)) against the mean per-token log-probability, beside SimPO's
    plain mean; near p = 1 the odds grow without bound."""
    import matplotlib.pyplot as plt
    import torch

    mean_logp = torch.linspace(-6, -0.01, 400, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(mean_logp, mean_logp, label="SimPO: mean log p")
    ax.plot(mean_logp, mean_logp - torch.log(-torch.expm1(mean_logp)), label="ORPO: log odds = log p - log(1 - p)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set(xlabel="mean per-token log-probability of a response", ylabel="score", ylim=(-6, 6),
           title="the score each reference-free loss compares between chosen and rejected")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check: TRL's trainers on the tiny model
# ---------------------------------------------------------------------------

def framework_pairs() -> list[dict]:
    """Four arithmetic pairs (training seed 101) whose chosen and rejected replies differ in length, so that
    IPO's per-token means, LD-DPO's tail and SimPO's normalisation all matter."""
    tasks = generate_tasks(seed=101, per_operation=1)[:4]
    rejected = [f"{tasks[0].label + 1} is the answer", str(tasks[1].label + 10),
                f"I think {tasks[2].label - 1}", f"{tasks[3].label}0"]
    return [{"prompt": task.prompt, "chosen": str(task.label), "rejected": wrong} for task, wrong in zip(tasks, rejected)]


def framework() -> dict:
    """What the check compares with: the library, its version, the calls and the tolerance."""
    found = versions()
    return {"library": "trl", "version": found["trl"], "transformers": found["transformers"],
            "reference_calls": {**{name: f"DPOTrainer.compute_loss {config['trl']}" for name, config in DPO_CONFIGS.items()},
                                "simpo": f"CPOTrainer.compute_loss loss_type='simpo', cpo_alpha=0, {FRAMEWORK_SIMPO}",
                                "orpo": f"ORPOTrainer.odds_ratio_loss and compute_loss, beta={FRAMEWORK_ORPO_LAMBDA}"},
            "beta": FRAMEWORK_BETA, "tolerance_abs": FRAMEWORK_TOLERANCE}


def _perturbed_models(seed: int):
    """The tiny model twice: a policy whose weights carry seeded noise, and the unchanged frozen reference."""
    import torch

    policy, reference, tokenizer = tiny_policy_and_reference(seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * FRAMEWORK_NOISE)
    policy.eval()
    return policy, reference, tokenizer


def token_table(model, input_ids, attention_mask, completion_mask):
    """Per-token log-probabilities [rows, time - 1] of the next token (our own log-softmax and gather) and the
    response mask shifted to match (bool)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
        picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return picked, completion_mask[:, 1:].bool()


def _split(table, mask):
    half = table.shape[0] // 2
    return table[:half], table[half:], mask[:half], mask[half:]


def _dpo_trainer(policy, reference, tokenizer, trl_settings: dict, seed: int):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    arguments = trainer_arguments(DPOConfig, per_device_train_batch_size=len(framework_pairs()), beta=FRAMEWORK_BETA,
                                  seed=seed, **trl_settings)
    trainer = DPOTrainer(model=policy, ref_model=reference, args=arguments,
                         train_dataset=Dataset.from_list(framework_pairs()), processing_class=tokenizer)
    silence_printer(trainer)
    return trainer


def _trl_loss(trainer, model, batch) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        return float(trainer.compute_loss(model, batch))


def trl_losses(*, seed: int = 0) -> dict:
    """TRL's losses on its own batches, and those batches (for the comparison with the learner's functions)."""
    import os

    from datasets import Dataset

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    results = {}
    with quiet_trl():
        policy, reference, tokenizer = _perturbed_models(seed)
        for name, config in DPO_CONFIGS.items():
            trainer = _dpo_trainer(policy, reference, tokenizer, config["trl"], seed)
            batch = next(iter(trainer.get_train_dataloader()))
            results[name] = {"trl_loss": _trl_loss(trainer, policy, batch), "batch": batch}
        pairs = Dataset.from_list(framework_pairs())
        simpo = CPOTrainer(model=policy, args=trainer_arguments(
            CPOConfig, per_device_train_batch_size=len(pairs), loss_type="simpo", cpo_alpha=0.0,
            simpo_gamma=FRAMEWORK_SIMPO["gamma"], beta=FRAMEWORK_SIMPO["beta"], seed=seed),
            train_dataset=pairs, processing_class=tokenizer)
        silence_printer(simpo)
        batch = next(iter(simpo.get_train_dataloader()))
        results["simpo"] = {"trl_loss": _trl_loss(simpo, policy, batch),
                            "batch": simpo.concatenated_inputs(batch, padding_value=tokenizer.pad_token_id)}
        orpo = ORPOTrainer(model=policy, args=trainer_arguments(
            ORPOConfig, per_device_train_batch_size=len(pairs), beta=FRAMEWORK_ORPO_LAMBDA, seed=seed),
            train_dataset=pairs, processing_class=tokenizer)
        silence_printer(orpo)
        batch = next(iter(orpo.get_train_dataloader()))
        import torch

        with torch.no_grad():
            chosen, rejected, _, _, nll = orpo.concatenated_forward(policy, batch)[:5]
            terms = orpo.odds_ratio_loss(chosen, rejected)[0]
        results["orpo"] = {"trl_loss": _trl_loss(orpo, policy, batch),
                           "trl_pair_losses": [float(-value) for value in terms], "trl_nll_prompt_and_response": float(nll),
                           "batch": orpo.concatenated_inputs(batch, padding_value=orpo.padding_value)}
    return {"policy": policy, "reference": reference, "results": results}


def compare_with_trl(trl: Mapping, functions: Mapping[str, Callable]) -> dict:
    """Each loss the given functions compute from the batch TRL used, against TRL's; the largest difference."""
    policy, reference = trl["policy"], trl["reference"]
    rows = {}
    for name, config in DPO_CONFIGS.items():
        batch = trl["results"][name]["batch"]
        ids, attention, completion = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
        mine = functions["length_desensitised_logps"](*_split(*token_table(policy, ids, attention, completion)),
                                                      config.get("ld_alpha"))
        theirs = functions["length_desensitised_logps"](*_split(*token_table(reference, ids, attention, completion)),
                                                        config.get("ld_alpha"))
        call = {"label_smoothing": 0.0, "rpo_alpha": 0.0, **config["call"]}
        out = functions["dpo_family_loss"](mine["chosen"], mine["rejected"], theirs["chosen"], theirs["rejected"],
                                           mine["chosen_lengths"], mine["rejected_lengths"], call["loss_type"],
                                           FRAMEWORK_BETA, call["label_smoothing"], call["rpo_alpha"])
        rows[name] = {"ours": float(out["loss"]), "trl": trl["results"][name]["trl_loss"]}
    for name in ("simpo", "orpo"):
        batch = trl["results"][name]["batch"]
        labels = batch["concatenated_labels"]
        table, _ = token_table(policy, batch["concatenated_input_ids"], batch["concatenated_attention_mask"], labels)
        mask = labels[:, 1:] != -100
        sums = functions["length_desensitised_logps"](*_split(table, mask), None)
        settings = FRAMEWORK_SIMPO if name == "simpo" else {"beta": FRAMEWORK_ORPO_LAMBDA, "gamma": 0.0}
        out = functions["reference_free_loss"](sums["chosen"], sums["rejected"], sums["chosen_lengths"],
                                               sums["rejected_lengths"], name, settings["beta"], settings["gamma"])
        if name == "simpo":
            rows[name] = {"ours": float(out["loss"]), "trl": trl["results"][name]["trl_loss"]}
            continue
        attention = batch["concatenated_attention_mask"][:, 1:].bool()
        half = table.shape[0] // 2
        whole_row_nll = float(-(table[:half][attention[:half]]).mean())
        rows["orpo_odds_ratio_terms"] = {
            "ours": [float(value) for value in out["pair_losses"]], "trl": trl["results"][name]["trl_pair_losses"]}
        rows["orpo"] = {"ours": float(out["loss"] - out["sft_loss"]) + whole_row_nll, "trl": trl["results"][name]["trl_loss"],
                        "note": "TRL's ORPO NLL covers prompt and response; ours covers the response: compared "
                                "after swapping in the whole-row NLL from our own log-probabilities",
                        "our_response_nll": float(out["sft_loss"]), "whole_row_nll": whole_row_nll,
                        "trl_whole_row_nll": trl["results"][name]["trl_nll_prompt_and_response"]}

    def gap(row) -> float:
        ours, theirs = row["ours"], row["trl"]
        if isinstance(ours, list):
            return max(abs(a - b) for a, b in zip(ours, theirs))
        return abs(ours - theirs)

    differences = {name: gap(row) for name, row in rows.items()}
    worst = max(differences.values())
    return {"rows": rows, "differences": differences, "max_abs_diff": worst, "matches": worst <= FRAMEWORK_TOLERANCE}


def framework_check(functions: Mapping[str, Callable], *, seed: int = 0) -> dict:
    """The whole check with the given functions (see `trl_losses` and `compare_with_trl`)."""
    trl = trl_losses(seed=seed)
    return {"framework": framework(), "pairs": framework_pairs(), **compare_with_trl(trl, functions)}


def framework_lines(result: Mapping) -> list[str]:
    """The framework check as text."""
    check = result["framework"]
    lines = [f"framework check: {check['library']} {check['version']} (transformers {check['transformers']}), "
             f"tolerance {check['tolerance_abs']:g} (absolute), {len(result['pairs'])} pairs on the tiny model",
             f"  {'loss':<24}{'ours':>14}{'TRL':>14}{'|diff|':>11}  TRL call"]
    for name, row in result["rows"].items():
        if isinstance(row["ours"], list):
            lines.append(f"  {name:<24}{'per pair':>14}{'per pair':>14}{result['differences'][name]:>11.1e}")
            continue
        call = check["reference_calls"].get(name, "")
        lines.append(f"  {name:<24}{row['ours']:>14.8f}{row['trl']:>14.8f}{result['differences'][name]:>11.1e}  {call}")
    lines.append(f"  max |difference| {result['max_abs_diff']:.2e} -> matches: {result['matches']}")
    orpo = result["rows"].get("orpo")
    if orpo:
        lines.append(f"  orpo: TRL's NLL covers prompt and response ({orpo['trl_whole_row_nll']:.6f}; ours over the "
                     f"same tokens {orpo['whole_row_nll']:.6f}); the chapter's SFT term covers the response only "
                     f"({orpo['our_response_nll']:.6f})")
    return lines


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    return [f"evidence level {record.get('evidence_level')}: an equality check of loss definitions, not a GPU "
            f"measurement; functions {record.get('functions')}", *framework_lines(record["results"])]


def framework_record(check: Mapping, sources: Mapping[str, str]) -> dict:
    """The `framework_check` record's body."""
    return {"measurement": "equality check of loss definitions on one batch of the tiny model (random weights, "
                           "seeded noise on the policy); not a GPU measurement",
            "results": dict(check), "functions": dict(sources)}


# ---------------------------------------------------------------------------
# Step 5: the comparison on the lab model (records of tools.experiments.preference.family_runs)
# ---------------------------------------------------------------------------

STEP5_CPU_MODEL = "lab"
COMPARE_EXPERIMENT = "dpo_family"
STEP5_VARIANTS = ("dpo", "ipo", "hinge", "robust", "cdpo", "rpo", "ld_dpo", "simpo", "orpo")
"""The variants the notebook's cpu_smoke runs (clean and noisy), on one seed."""
METRICS = {"exact_match": ("greedy", "exact_match"), "pair_accuracy": ("held_out_pairs", "pair_accuracy"),
           "chosen_logp_change": ("held_out_pairs", "chosen_logp_change"),
           "rejected_logp_change": ("held_out_pairs", "rejected_logp_change"), "mean_length": ("greedy", "mean_length")}
"""The metrics a variant record carries, and where."""


def metric(record: Mapping, name: str) -> float | None:
    section, key = METRICS[name]
    return record[section][key] if record.get("status") == "ok" else None


def variant_table(records: Mapping[str, Mapping]) -> list[dict]:
    """One row per variant record of a run: labels, variant and every metric."""
    rows = []
    for stage, record in records.items():
        if stage == "pairs" or "variant" not in record:
            continue
        rows.append({"variant": record["variant"], "labels": record["labels"], "status": record["status"],
                     **{name: metric(record, name) for name in METRICS}})
    return rows


def table_lines(records: Mapping[str, Mapping]) -> list[str]:
    """The run's variant x metric table, the start first (the baseline row)."""
    pairs = records["pairs"]
    baseline = pairs["baseline"]
    lines = [f"pairs: {len(pairs['pairs'])} training ({pairs['pair_counts']}), {len(pairs['held_out_pairs'])} held-out; "
             f"noisy labels: {len(pairs['flipped'])} of {len(pairs['pairs'])} training pairs swapped",
             f"  {'labels':<7}{'variant':<9}{'exact match':>12}{'pair acc':>10}{'d logp chosen':>15}"
             f"{'d logp rejected':>17}{'length':>8}",
             f"  {'start':<16}{baseline['exact_match']:>12.3f}{'-':>10}{'-':>15}{'-':>17}{baseline['mean_length']:>8.2f}"]
    for row in variant_table(records):
        if row["status"] != "ok":
            lines.append(f"  {row['labels']:<7}{row['variant']:<9}  status {row['status']}")
            continue
        lines.append(f"  {row['labels']:<7}{row['variant']:<9}{row['exact_match']:>12.3f}{row['pair_accuracy']:>10.3f}"
                     f"{row['chosen_logp_change']:>+15.3f}{row['rejected_logp_change']:>+17.3f}{row['mean_length']:>8.2f}")
    return lines


def profile_name(numerics: Mapping) -> str:
    """A record's CPU numerics in a few words: the kernel path torch used and the pinning variables."""
    return (f"{numerics.get('machine')}, torch {numerics.get('torch_cpu_capability')}, "
            f"ATEN_CPU_CAPABILITY={numerics.get('aten_cpu_capability')}, MKL_CBWR={numerics.get('mkl_cbwr')}")


def run_lines(records: Mapping[str, Mapping]) -> list[str]:
    """The learner's own run: which functions ran, the table, and this seed's differences in words."""
    pairs = records["pairs"]
    sources = ", ".join(f"{name} ({entry['source']})" for name, entry in pairs["mechanism"].items())
    lines = [lesson_text.text("pt_dpo_family.functions", sources=sources), *table_lines(records)]
    rows = {(row["variant"], row["labels"]): row for row in variant_table(records) if row["status"] == "ok"}

    def gap(treatment, control):
        if treatment not in rows or control not in rows:
            return None
        return rows[treatment]["exact_match"] - rows[control]["exact_match"]

    gaps = {"orpo": gap(("orpo", "clean"), ("dpo", "clean")), "rpo": gap(("rpo", "clean"), ("dpo", "clean")),
            "cdpo": gap(("cdpo", "noisy"), ("dpo", "noisy")), "robust": gap(("robust", "noisy"), ("dpo", "noisy"))}
    if all(value is not None for value in gaps.values()):
        lines.append(lesson_text.text("pt_dpo_family.own_seed", seed=pairs["settings"]["seed"],
                                      profile=profile_name(pairs["cpu_numerics"]),
                                      orpo=gaps["orpo"], rpo=gaps["rpo"], cdpo=gaps["cdpo"], robust=gaps["robust"]))
    return lines


def paired(by_seed: Mapping[int, Mapping[str, Mapping]], treatment: tuple[str, str], control: tuple[str, str],
           name: str) -> dict:
    """The paired effect `treatment - control` of one metric over seeds; each side is (variant, labels) and
    `by_seed` maps a seed to that seed's records (stage -> record)."""
    def value(records, side):
        return metric(records[f"{side[0]}_{side[1]}"], name)

    return effects.paired_effect({seed: value(records, treatment) for seed, records in by_seed.items()},
                                 {seed: value(records, control) for seed, records in by_seed.items()},
                                 metric=f"{name}: {treatment[0]}/{treatment[1]} - {control[0]}/{control[1]}")


def draw_comparison(records: Mapping[str, Mapping], metrics: Sequence[str] = ("exact_match", "pair_accuracy",
                                                                                  "chosen_logp_change")):
    """Bars per variant, clean and noisy side by side, one panel per metric; the start's exact match and the
    coin's pair accuracy as lines."""
    import matplotlib.pyplot as plt

    rows = [row for row in variant_table(records) if row["status"] == "ok"]
    variants = list(dict.fromkeys(row["variant"] for row in rows))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.8))
    for ax, name in zip(axes, metrics):
        for offset, labels in ((-0.2, "clean"), (0.2, "noisy")):
            values = {row["variant"]: row[name] for row in rows if row["labels"] == labels}
            ax.bar([index + offset for index, variant in enumerate(variants) if variant in values],
                   [values[variant] for variant in variants if variant in values], width=0.4, label=labels)
        if name == "exact_match":
            ax.axhline(records["pairs"]["baseline"]["exact_match"], color="black", lw=0.8, ls="--", label="start")
        if name == "pair_accuracy":
            ax.axhline(0.5, color="black", lw=0.8, ls="--", label="coin")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(range(len(variants)), variants, rotation=45, fontsize=8)
        ax.set_title(name)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
