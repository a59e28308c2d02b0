"""PT-GRPO-FAMILY: the figures of Steps 1-4, the framework check against TRL and verl, and Step 5's page.

The learner writes the mechanism (`aggregate_loss`, `clipped_token_losses`, `fill_batch`,
`importance_sampling_weights`); nothing here implements it. The framework check takes those functions as
arguments and compares them on the same tensors with

- TRL 1.16's `GRPOTrainer.compute_loss` (loss types `grpo`, `bnpo`, `dr_grpo`, `dapo`, `epsilon_high`,
  `delta`, `beta` with the k3 estimator; its logged clip rates and KL), and its own generation step with
  `mask_truncated_completions` (which completions lose their loss mask);
- verl 0.9.1's `core_algos.compute_policy_loss_vanilla` (`clip_ratio_low/high`, dual clip `clip_ratio_c`,
  the `agg_loss` modes), `core_algos.kl_penalty` (k1 and k3) and `rollout_corr_helper.
  compute_rollout_correction_weights` (token / sequence, truncated or masked).

Step 5's tables and figures are read from the records of `tools.experiments.online_rl.family_stage`.
Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core import effects
from tools.core.environment import installed_version
from tools.data.arithmetic import generate_tasks
from tools.experiments.online_rl.batch import pack, prompt_token_ids, reply_token_ids
from tools.experiments.online_rl.family_stage import summary
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.reward import verl_reference

CHAPTER_ID = "PT-GRPO-FAMILY"
STEP5_CPU_MODEL = "lab"
FRAMEWORK_STAGE = "framework_check"
TRL_TOLERANCE = 1e-6
"""float32, the same per-token log-probabilities on both sides: only the order of additions differs."""
VERL_TOLERANCE = 1e-7
"""float64 tensors given to verl and to the learner's functions alike; verl's `seq-mean-token-mean` divides
each response's token sum by its count plus 1e-8, which moves the loss by about 1e-9."""
MAX_COMPLETION_LENGTH = 20
OLD_NOISE, REF_NOISE, VERL_OLD_NOISE = 0.3, 0.2, 0.5
"""Standard deviations of the seeded shifts that make the old and the reference log-probabilities differ from
the current ones, so that clipping and the KL term are exercised."""

TRL_CONFIGS = {
    "grpo": {"trl": {"loss_type": "grpo"}, "ours": {"loss_type": "grpo"}},
    "bnpo": {"trl": {"loss_type": "bnpo"}, "ours": {"loss_type": "bnpo"}},
    "dr_grpo": {"trl": {"loss_type": "dr_grpo", "max_completion_length": MAX_COMPLETION_LENGTH},
                "ours": {"loss_type": "dr_grpo", "max_completion_length": MAX_COMPLETION_LENGTH}},
    "dapo": {"trl": {"loss_type": "dapo"}, "ours": {"loss_type": "dapo"}, "extra_items": 7},
    "clip_higher": {"trl": {"loss_type": "dapo", "epsilon_high": 0.28}, "ours": {"loss_type": "dapo"},
                    "epsilon_high": 0.28, "extra_items": 0},
    "two_sided": {"trl": {"loss_type": "grpo", "delta": 1.5}, "ours": {"loss_type": "grpo"}, "delta": 1.5},
    "kl_in_loss": {"trl": {"loss_type": "grpo", "beta": 0.04, "use_bias_correction_kl": False},
                   "ours": {"loss_type": "grpo"}, "beta": 0.04},
}
"""Our call -> the GRPOConfig fields that compute the same loss (epsilon 0.2 unless said). TRL multiplies the
KL term by the importance ratio by default (`use_bias_correction_kl`); the chapter's contract is the plain
beta * k3 of GRPO and of verl's `use_kl_loss`, so the check turns TRL's factor off."""
VERL_AGG = {"grpo": "seq-mean-token-mean", "bnpo": "token-mean", "dr_grpo": "seq-mean-token-sum-norm",
            "dapo": "token-mean"}
IS_CHECKS = {"token_truncate": {"clip_max": 2.0, "clip_min": None, "verl": ("token", 2.0)},
             "sequence_truncate": {"clip_max": 2.0, "clip_min": None, "verl": ("sequence", 2.0)},
             "token_mask": {"clip_max": 1.5, "clip_min": 0.8, "verl": ("token", "0.8_1.5")},
             "sequence_mask": {"clip_max": 1.5, "clip_min": 0.8, "verl": ("sequence", "0.8_1.5")}}
"""The correction modes and verl's equivalent (`rollout_is`, `rollout_is_threshold`): a single bound is
truncated importance sampling, "lower_upper" masks the weights outside (IcePop)."""


# ---------------------------------------------------------------------------
# Steps 1-4: figures
# ---------------------------------------------------------------------------

def token_weights(lengths: Sequence[int], max_completion_length: int) -> dict[str, list[float]]:
    """The weight one token of each response carries under each aggregation (one micro-batch, every token
    of the generation batch in it)."""
    count, total = len(lengths), sum(lengths)
    return {"grpo": [1 / (count * n) for n in lengths], "bnpo": [1 / total] * count,
            "dr_grpo": [1 / (count * max_completion_length)] * count, "dapo": [1 / total] * count}


def draw_token_weights(lengths: Sequence[int] = (3, 6, 12), max_completion_length: int = 12):
    """Figure: per-token weight of a short, a middle and a long response under the four aggregations."""
    import matplotlib.pyplot as plt

    weights = token_weights(lengths, max_completion_length)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.2
    for offset, (name, values) in enumerate(weights.items()):
        ax.bar([index + (offset - 1.5) * width for index in range(len(lengths))], values, width=width, label=name)
    ax.set_xticks(range(len(lengths)), [f"{n} tokens" for n in lengths])
    ax.set_ylabel("weight of one token in the loss")
    ax.set_title(f"one response of each length, max_completion_length = {max_completion_length}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def surrogate(ratio: float, advantage: float, epsilon_low: float, epsilon_high: float, delta: float | None) -> float:
    """The objective per token (the loss is its negative): min(rho' A, clip(rho) A), rho' = min(rho, delta)."""
    capped = ratio if delta is None else min(ratio, delta)
    clipped = min(max(ratio, 1 - epsilon_low), 1 + epsilon_high)
    return min(capped * advantage, clipped * advantage)


def draw_clip_shapes():
    """Figure: the objective against the ratio for A = +1 (symmetric clip vs clip-higher) and A = -1 (without
    and with the two-sided delta)."""
    import matplotlib.pyplot as plt

    ratios = [0.3 + step / 100 for step in range(271)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    left.plot(ratios, [surrogate(r, 1.0, 0.2, 0.2, None) for r in ratios], label="eps_low = eps_high = 0.2")
    left.plot(ratios, [surrogate(r, 1.0, 0.2, 0.28, None) for r in ratios], ls="--", label="clip-higher: eps_high = 0.28")
    left.set(title="A = +1", xlabel="ratio rho", ylabel="objective")
    right.plot(ratios, [surrogate(r, -1.0, 0.2, 0.2, None) for r in ratios], label="no delta: -rho grows without bound")
    right.plot(ratios, [surrogate(r, -1.0, 0.2, 0.2, 2.0) for r in ratios], ls="--", label="delta = 2.0 (verl: clip_ratio_c)")
    right.set(title="A = -1", xlabel="ratio rho")
    for ax in (left, right):
        ax.axvline(1.0, color="grey", lw=0.6)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def draw_importance_modes(gaps: Sequence[float] = (-1.2, -0.6, -0.2, 0.0, 0.3, 0.8, 1.3), clip_min: float = 0.5,
                          clip_max: float = 2.0):
    """Figure: the raw ratio exp(gap) per token and the weight a truncating and a masking correction give it."""
    import matplotlib.pyplot as plt

    raw = [math.exp(gap) for gap in gaps]
    truncated = [min(max(value, clip_min), clip_max) for value in raw]
    masked = [value if clip_min <= value <= clip_max else 0.0 for value in raw]
    positions = range(len(gaps))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar([p - 0.25 for p in positions], raw, width=0.25, label="raw ratio pi_trainer / pi_sampler")
    ax.bar(list(positions), truncated, width=0.25, label=f"truncate to [{clip_min}, {clip_max}]")
    ax.bar([p + 0.25 for p in positions], masked, width=0.25, label=f"mask outside [{clip_min}, {clip_max}]")
    ax.set_xticks(list(positions), [f"{gap:+.1f}" for gap in gaps])
    ax.set(xlabel="log pi_trainer - log pi_sampler of one token", ylabel="weight")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# The framework check
# ---------------------------------------------------------------------------

def framework_replies() -> list[dict]:
    """Two training-seed tasks with three finished replies of different lengths each."""
    first, second = generate_tasks(101)[:2]
    return [{"prompt": first.prompt, "replies": [str(first.label), f"{first.label + 1} is my answer",
                                                  f"Let me think. {first.label}"]},
            {"prompt": second.prompt, "replies": [f"{second.label - 3}", str(second.label),
                                                   f"The sum is {second.label} I believe"]}]


ADVANTAGES = (1.0, -0.5, -0.5, -0.8, 1.2, -0.4)


def framework_batch(tokenizer) -> dict:
    """The packed batch (left-padded prompts, right-padded completions) and its advantages."""
    import torch

    prompts, responses = [], []
    for item in framework_replies():
        for reply in item["replies"]:
            prompts.append(prompt_token_ids(tokenizer, item["prompt"]))
            responses.append(reply_token_ids(tokenizer, reply))
    batch = pack(prompts, responses, tokenizer.pad_token_id)
    if batch["completion_ids"].shape[1] > MAX_COMPLETION_LENGTH:
        raise ValueError("a framework reply is longer than MAX_COMPLETION_LENGTH")
    return {**batch, "advantages": torch.tensor(ADVANTAGES, dtype=torch.float32)}


def _shifted(logps, mask, scale: float, seed: int):
    import torch

    noise = torch.randn(logps.shape, generator=torch.Generator().manual_seed(seed)) * scale
    return torch.where(mask, logps + noise, logps)


def compare_with_trl(functions: Mapping[str, Callable], *, seed: int = 0) -> dict:
    """Each TRL configuration's loss, clip rates and KL against the given functions on the same batch and the
    same per-token log-probabilities (TRL's own)."""
    import tempfile

    import torch

    from tools.experiments.online_rl import family_trl

    model, tokenizer, _ = load_quietly()
    batch = framework_batch(tokenizer)
    with tempfile.TemporaryDirectory() as folder:
        logps = family_trl.per_token_logps(family_trl.grpo_trainer(model, tokenizer, folder), model, batch)
    mask = batch["completion_mask"].bool()
    old, ref = _shifted(logps, mask, OLD_NOISE, seed), _shifted(logps, mask, REF_NOISE, seed + 1)
    rows = {}
    for name, config in TRL_CONFIGS.items():
        inputs = {**batch, "old_per_token_logps": old}
        if config.get("beta"):
            inputs["ref_per_token_logps"] = ref
        extra = {}
        if config["ours"]["loss_type"] == "dapo":
            items = int(mask.sum()) + config.get("extra_items", 0)
            inputs["num_items_in_batch"] = torch.tensor(items)
            extra["num_items_in_batch"] = items
        if config["ours"]["loss_type"] == "dr_grpo":
            extra["max_completion_length"] = MAX_COMPLETION_LENGTH
        theirs = family_trl.loss_on_batch(load_quietly()[0], tokenizer, inputs, **config["trl"])
        out = functions["clipped_token_losses"](logps, old, batch["advantages"], mask, 0.2,
                                                config.get("epsilon_high", 0.2), config.get("delta"),
                                                ref if config.get("beta") else None, config.get("beta", 0.0), "k3")
        loss = functions["aggregate_loss"](out["token_losses"], mask, config["ours"]["loss_type"], **extra)
        ours = {"loss": float(loss), "clip_ratio/low_mean": out["clip_low"], "clip_ratio/high_mean": out["clip_high"],
                "clip_ratio/region_mean": out["clip_region"]}
        if out["kl"] is not None:
            ours["kl"] = float(out["kl"][mask].mean())
        rows[name] = {"trl_config": config["trl"], "ours": ours, "trl": {key: theirs[key] for key in ours}}
    truncation = _truncation_masks(functions)
    differences = {name: max(abs(row["ours"][key] - row["trl"][key]) for key in row["ours"]) for name, row in rows.items()}
    return {"rows": rows, "differences": differences, "truncation": truncation,
            "max_abs_diff": max(differences.values()),
            "matches": max(differences.values()) <= TRL_TOLERANCE and truncation["matches"]}


TRUNCATION_LIMIT = 3
"""The completion limit of the truncation check: the lab model's two-digit sums and their end-of-turn token fit
in it, its three-digit sums do not."""


def truncation_prompts() -> list[list[dict]]:
    """The chats of two lab-task training problems, one with a two-digit and one with a three-digit sum."""
    from tools.data import lab_tasks

    pool = lab_tasks.problems(lab_tasks.PRETRAINING_TASK, "train")
    short = next(problem for problem in pool if problem.label < 100)
    long = next(problem for problem in pool if problem.label >= 100)
    return [short.messages(), long.messages()]


def _truncation_masks(functions: Mapping[str, Callable]) -> dict:
    """TRL's own generation by the lab model with a 3-token limit and `mask_truncated_completions=True`: which
    completions keep their loss mask, against `fill_batch`'s loss masks for the same completions."""
    from tools.experiments.online_rl import family_trl

    model, tokenizer, _ = load_quietly(STEP5_CPU_MODEL)
    generated = family_trl.generated_batch(model, tokenizer, truncation_prompts(), 4,
                                           max_completion_length=TRUNCATION_LIMIT, mask_truncated_completions=True)
    kept_by_trl = [bool(row.any()) for row in generated["completion_mask"].bool()]
    rewards = [1.0, 0.0, 0.5, 0.25]
    groups = [[{"reward": rewards[index], "truncated": not generated["ended"][start + index]} for index in range(4)]
              for start in (0, 4)]
    filled = functions["fill_batch"](groups, 2, 2, True)
    ours = [flag for mask in filled["loss_masks"] for flag in mask]
    return {"max_completion_length": TRUNCATION_LIMIT, "trl_kept": kept_by_trl, "ours_kept": ours,
            "truncated": sum(not ended for ended in generated["ended"]), "matches": ours == kept_by_trl}


def compare_with_verl(functions: Mapping[str, Callable], *, seed: int = 0) -> dict:
    """verl's policy loss (every aggregation, clip-higher, dual clip), KL estimators and rollout-correction
    weights against the given functions on the same float64 tensors."""
    import torch
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
    from verl.workers.config import ActorConfig

    generator = torch.Generator().manual_seed(seed)
    rows, width = 5, 7
    lengths = [7, 3, 5, 1, 6]
    mask = torch.tensor([[position < length for position in range(width)] for length in lengths])
    logps = -torch.rand(rows, width, generator=generator, dtype=torch.float64) * 3
    old = logps + torch.randn(rows, width, generator=generator, dtype=torch.float64) * VERL_OLD_NOISE
    old[1, 0] = logps[1, 0] - 1.0  # a negative-advantage token with ratio e: the dual clip binds on it
    ref = logps + torch.randn(rows, width, generator=generator, dtype=torch.float64) * REF_NOISE
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.7, 1.3], dtype=torch.float64)
    core = verl_reference.core_algos()
    results = {}
    for loss_type, mode in VERL_AGG.items():
        for label, high, dual in (("", 0.2, None), ("+clip_higher", 0.28, None), ("+dual_clip", 0.2, 1.5)):
            info = {"global_batch_size": rows}
            extra = {}
            if loss_type == "dr_grpo":
                info["loss_scale_factor"] = MAX_COMPLETION_LENGTH
                extra["max_completion_length"] = MAX_COMPLETION_LENGTH
            if loss_type == "dapo":
                info["batch_num_tokens"] = int(mask.sum()) + 9
                extra["num_items_in_batch"] = int(mask.sum()) + 9
            config = ActorConfig(strategy="fsdp", clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=high,
                                 clip_ratio_c=dual or verl_reference.DUAL_CLIP_OFF, rollout_n=1,
                                 ppo_micro_batch_size_per_gpu=1, global_batch_info=info)
            loss, metrics = core.compute_policy_loss_vanilla(old, logps, advantages.unsqueeze(1).expand(rows, width),
                                                             mask.to(torch.float64), loss_agg_mode=mode, config=config)
            out = functions["clipped_token_losses"](logps, old, advantages, mask, 0.2, high, dual)
            ours = functions["aggregate_loss"](out["token_losses"], mask, loss_type, **extra)
            results[f"{loss_type}{label}"] = {"verl_call": f"compute_policy_loss_vanilla(loss_agg_mode={mode!r}, "
                                                           f"clip_ratio_high={high}, clip_ratio_c={dual or 'off'})",
                                              "ours": [float(ours), out["clip_region"]],
                                              "verl": [float(loss), float(metrics["actor/pg_clipfrac"])]}
    for estimator, name in verl_reference.KL_ESTIMATORS.items():
        theirs = core.kl_penalty(logps, ref, kl_penalty=name)
        out = functions["clipped_token_losses"](logps, old, advantages, mask, 0.2, 0.2, None, ref, 0.0, estimator)
        results[f"kl_{estimator}"] = {"verl_call": f"kl_penalty({name!r})",
                                      "ours": [float(value) for value in out["kl"][mask]],
                                      "verl": [float(value) for value in theirs[mask]]}
    sampler = logps + torch.randn(rows, width, generator=generator, dtype=torch.float64) * 0.4
    for mode, check in IS_CHECKS.items():
        level, threshold = check["verl"]
        theirs, _ = compute_rollout_correction_weights(torch.where(mask, logps - sampler, torch.zeros_like(logps)),
                                                       mask.to(torch.float64), rollout_is=level,
                                                       rollout_is_threshold=threshold)
        ours = functions["importance_sampling_weights"](logps, sampler, mask, mode, check["clip_max"], check["clip_min"])
        results[f"is_{mode}"] = {"verl_call": f"compute_rollout_correction_weights({level!r}, {threshold!r})",
                                 "ours": [float(value) for value in ours["weights"][mask]],
                                 "verl": [float(value) for value in theirs[mask]]}
    differences = {name: max(abs(a - b) for a, b in zip(row["ours"], row["verl"])) for name, row in results.items()}
    return {"rows": results, "differences": differences, "max_abs_diff": max(differences.values()),
            "matches": max(differences.values()) <= VERL_TOLERANCE}


def framework() -> dict:
    return {"trl": installed_version("trl"), "verl": verl_reference.version(), "transformers": installed_version("transformers"),
            "trl_tolerance_abs": TRL_TOLERANCE, "verl_tolerance_abs": VERL_TOLERANCE}


def framework_check(functions: Mapping[str, Callable], *, seed: int = 0) -> dict:
    """Both comparisons with the given functions."""
    trl = compare_with_trl(functions, seed=seed)
    verl = compare_with_verl(functions, seed=seed)
    return {"framework": framework(), "trl": trl, "verl": verl, "matches": trl["matches"] and verl["matches"]}


def framework_lines(result: Mapping) -> list[str]:
    """The framework check as text."""
    versions = result["framework"]
    trl, verl = result["trl"], result["verl"]
    lines = [f"TRL {versions['trl']} GRPOTrainer.compute_loss on the tiny model (transformers {versions['transformers']}), "
             f"tolerance {versions['trl_tolerance_abs']:g}:",
             f"  {'setting':<13}{'loss ours':>12}{'loss TRL':>12}{'clip ours':>11}{'clip TRL':>10}{'|diff|':>10}  GRPOConfig"]
    for name, row in trl["rows"].items():
        lines.append(f"  {name:<13}{row['ours']['loss']:>12.7f}{row['trl']['loss']:>12.7f}"
                     f"{row['ours']['clip_ratio/region_mean']:>11.4f}{row['trl']['clip_ratio/region_mean']:>10.4f}"
                     f"{trl['differences'][name]:>10.1e}  {row['trl_config']}")
    truncation = trl["truncation"]
    lines.append(f"  mask_truncated_completions (max_completion_length {truncation['max_completion_length']}, "
                 f"{truncation['truncated']} of {len(truncation['trl_kept'])} truncated): TRL keeps "
                 f"{truncation['trl_kept']}, fill_batch keeps {truncation['ours_kept']} -> {truncation['matches']}")
    lines.append(f"verl {versions['verl']} core_algos / rollout_corr_helper on float64 tensors, tolerance "
                 f"{versions['verl_tolerance_abs']:g}:")
    for name, row in verl["rows"].items():
        shown = f"loss {row['ours'][0]:+.6f}, " if name.split("+")[0] in VERL_AGG else ""
        lines.append(f"  {name:<22}{shown:<20}|diff| {verl['differences'][name]:.1e}  {row['verl_call']}")
    lines.append(f"  largest |difference|: TRL {trl['max_abs_diff']:.1e}, verl {verl['max_abs_diff']:.1e} "
                 f"-> matches: {result['matches']}")
    return lines


def framework_summary(record: Mapping) -> list[str]:
    """Lines that show a `framework_check` record (this run's or an earlier cpu_smoke one)."""
    return [f"evidence level {record.get('evidence_level')}: an equality check of loss definitions, not a GPU "
            f"measurement; functions {record.get('functions')}", *framework_lines(record["results"])]


def framework_record(check: Mapping, sources: Mapping[str, str]) -> dict:
    return {"measurement": "equality check of loss definitions on fixed tensors and one batch of the tiny model "
                           "(random weights); not a GPU measurement",
            "results": dict(check), "functions": dict(sources)}


# ---------------------------------------------------------------------------
# Step 5: the comparison on the lab model
# ---------------------------------------------------------------------------

COMPARE_EXPERIMENT = "grpo_family"
STEP5_VARIANTS = ("grpo", "bnpo", "dr_grpo", "dapo", "clip_higher", "dapo_recipe")
"""The variants the notebook's cpu_smoke runs, on one seed."""


def profile_name(numerics: Mapping) -> str:
    """A record's CPU numerics in a few words: the kernel path torch used and the pinning variables."""
    return (f"{numerics.get('machine')}, torch {numerics.get('torch_cpu_capability')}, "
            f"ATEN_CPU_CAPABILITY={numerics.get('aten_cpu_capability')}, MKL_CBWR={numerics.get('mkl_cbwr')}")


def run_lines(records: Sequence[Mapping]) -> list[str]:
    """The learner's own run: which functions ran, the table, and this seed's grpo - dr_grpo in words."""
    first = records[0]
    sources = ", ".join(f"{name} ({entry['source']})" for name, entry in first["mechanism"].items())
    lines = [lesson_text.text("pt_grpo_family.functions", sources=sources), *table_lines(records)]
    done = {record["variant"]: summary(record) for record in records if record.get("status") == "ok"}
    if "grpo" in done and "dr_grpo" in done and done["grpo"]["length_wrong_last"] is not None \
            and done["dr_grpo"]["length_wrong_last"] is not None:
        lines.append(lesson_text.text(
            "pt_grpo_family.own_seed", seed=first["settings"]["seed"], profile=profile_name(first["cpu_numerics"]),
            wrong_length=done["grpo"]["length_wrong_last"] - done["dr_grpo"]["length_wrong_last"],
            exact_match=done["grpo"]["exact_match_after"] - done["dr_grpo"]["exact_match_after"]))
    return lines


def mismatch_lines(record: Mapping) -> list[str]:
    """The `mismatch` record as text: per sampler the gap, then each correction mode."""
    if record.get("status") != "ok":
        return [f"mismatch: status {record.get('status')} ({record.get('error')})"]
    lines = []
    for sampler, entry in record["samplers"].items():
        gap = entry["gap"]
        lines.append(lesson_text.text("pt_grpo_family.mismatch", sampler=sampler, tokens=entry["tokens"], mean=gap["mean"],
                                      mean_abs=gap["mean_abs"], max_abs=gap["max_abs"],
                                      sequence=entry["sequence_gap_max_abs"]))
        for mode, weights in entry["modes"].items():
            lines.append(lesson_text.text("pt_grpo_family.mode", mode=mode, changed=weights["changed"],
                                          mean=weights["mean_weight"], max=weights["max_weight"]))
    return lines


def table_lines(records: Sequence[Mapping]) -> list[str]:
    """The run's variant x metric table, the start (the same for every variant) first."""
    rows = [summary(record) for record in records if record.get("status") == "ok"]
    if not rows:
        return ["no variant finished"]
    lines = [f"  {'variant':<12}{'exact match':>12}{'length':>8}{'wrong len':>10}{'clip rate':>10}{'entropy':>9}"
             f"{'groups':>8}{'updates':>8}",
             f"  {'start':<12}{rows[0]['exact_match_before']:>12.4f}"]
    for row in rows:
        wrong = "-" if row["length_wrong_last"] is None else f"{row['length_wrong_last']:.3f}"
        clip = "-" if row["clip_rate"] is None else f"{row['clip_rate']:.4f}"
        entropy = "-" if row["entropy"] is None else f"{row['entropy']:.3f}"
        lines.append(f"  {row['variant']:<12}{row['exact_match_after']:>12.4f}{row['length_last']:>8.3f}{wrong:>10}"
                     f"{clip:>10}{entropy:>9}{row['rollout_groups']:>8}{row['updates']:>8}")
    return lines


def paired(by_seed: Mapping[int, Mapping[str, Mapping]], treatment: str, control: str, name: str) -> dict:
    """The paired effect `treatment - control` of one summary metric over seeds (seed -> variant -> record)."""
    return effects.paired_effect({seed: summary(records[treatment])[name] for seed, records in by_seed.items()},
                                 {seed: summary(records[control])[name] for seed, records in by_seed.items()},
                                 metric=f"{name}: {treatment} - {control}")


def draw_comparison(records: Sequence[Mapping]):
    """Left: the mean sampled completion length per step per variant; right: held-out exact match after."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    done = [record for record in records if record.get("status") == "ok"]
    for record in done:
        left.plot([step["mean_length"] for step in record["steps"]], marker="o", ms=3, label=record["variant"])
    left.set(xlabel="step", ylabel="mean sampled length (tokens)", title="sampled completion length")
    left.legend(fontsize=7)
    names = [record["variant"] for record in done]
    right.bar(["start"] + names, [done[0]["before"]["exact_match"]] + [record["after"]["exact_match"] for record in done],
              color=["grey"] + ["tab:blue"] * len(done))
    right.set(ylabel="held-out exact match (greedy)", ylim=(0, 1), title="held-out exact match")
    right.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    return fig
