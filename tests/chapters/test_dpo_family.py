"""PT-DPO-FAMILY: the package's losses against the notebook's reference, the framework check against TRL,
Step 5 running the learner's functions, and the effects the page claims (paired over seeds)."""

from __future__ import annotations

import math
import random

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT

from tools.chapters import dpo_family as page
from tools.core import effects
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.experiments.contract import Mechanism, Plan, RecordSink, run
from tools.experiments.preference import family_losses, family_runs
from tools.experiments.preference.stage import frozen_copy

EXERCISES = ("length_desensitised_logps", "dpo_family_loss", "reference_free_loss")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations."""
    notebook = read_notebook(find_chapter(page.CHAPTER_ID, REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch, "F": torch.nn.functional}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def _same(expected, actual):
    if isinstance(expected, dict):
        assert set(expected) == set(actual)
        for key in expected:
            _same(expected[key], actual[key])
    elif isinstance(expected, torch.Tensor):
        assert expected.dtype == actual.dtype and expected.shape == actual.shape
        assert torch.allclose(expected.detach().double(), actual.detach().double(), rtol=1e-6, atol=1e-9, equal_nan=True)
    else:
        assert expected == actual


def _outcome(function, *args):
    try:
        return "value", function(*args)
    except ValueError as error:
        return "raised", type(error)


def test_the_package_losses_compute_what_the_notebook_reference_computes(reference):
    """The package copies (run headless: the command line, the GPU batch) agree with the notebook's reference
    on random valid inputs of every kind and on the invalid ones the contract names."""
    rng = random.Random(0)
    for case in range(120):
        generator = torch.Generator().manual_seed(case)
        dtype = rng.choice([torch.float32, torch.float64])
        pairs = rng.randint(1, 4)
        tables = [(-3 * torch.rand(pairs, rng.randint(1, 5), generator=generator)).to(dtype) for _ in range(2)]
        masks = [torch.rand(table.shape, generator=generator) < 0.7 for table in tables]
        for mask in masks:
            mask[:, 0] |= ~mask.any(dim=1)
        alpha = rng.choice([None, 0.0, 0.5, 1])
        _same(reference["length_desensitised_logps"](*tables, *masks, alpha),
              family_losses.length_desensitised_logps(*tables, *masks, alpha))
        sums = [(-4 * torch.rand(pairs, generator=generator)).to(dtype) for _ in range(4)]
        lengths = [torch.randint(1, 5, (pairs,), generator=generator) for _ in range(2)]
        loss_type = rng.choice(family_losses.PAIR_LOSSES)
        smoothing = rng.choice([0.0, 0.2]) if loss_type in family_losses.SMOOTHED else 0.0
        args = (*sums, *lengths, loss_type, rng.choice([0.1, 1.0]), smoothing, rng.choice([0.0, 1.0]))
        _same(reference["dpo_family_loss"](*args), family_losses.dpo_family_loss(*args))
        free = (sums[0], sums[1], *lengths, rng.choice(family_losses.REFERENCE_FREE), 2.0)
        free = (*free, 0.5 if free[4] == "simpo" else 0.0)
        _same(reference["reference_free_loss"](*free), family_losses.reference_free_loss(*free))
    ones = torch.ones(2, dtype=torch.int64)
    for bad in [(torch.zeros(2), torch.zeros(2), ones, ones, "orpo", 0.1),
                (-torch.ones(2), -torch.ones(2), ones, ones, "simpo", 0.1, -1.0),
                (-torch.ones(2), -torch.ones(2), ones, ones, "orpo", 0.1, 0.5)]:
        assert _outcome(family_losses.reference_free_loss, *bad)[0] == _outcome(reference["reference_free_loss"], *bad)[0] \
            == "raised"


def test_planted_noise_swaps_the_drawn_share_and_names_it():
    pairs = [{"prompt": str(i), "chosen": f"c{i}", "rejected": f"r{i}"} for i in range(10)]
    noisy, flipped = family_runs.planted_noise(pairs, 0.3, seed=4)
    assert len(flipped) == 3 and flipped == sorted(flipped)
    assert all(noisy[i]["chosen"] == f"r{i}" and noisy[i]["flipped"] for i in flipped)
    assert all(noisy[i] == pairs[i] for i in range(10) if i not in flipped) and pairs[flipped[0]]["chosen"].startswith("c")
    assert family_runs.planted_noise(pairs, 0.3, seed=4)[1] == flipped and family_runs.planted_noise(pairs, 0.3, seed=5)[1] != flipped
    with pytest.raises(ValueError):
        family_runs.planted_noise(pairs, 1.0, seed=0)


def test_the_experiment_describes_itself_in_dry_run_and_refuses_unknown_variants(capsys):
    lines = []
    plan = Plan(experiment="dpo_family", chapter=page.CHAPTER_ID, run_mode="dry_run", label="x")
    assert run(plan, log=lines.append) == []
    assert "DPO family" in lines[0] and "orpo_noisy" in lines[0]
    with pytest.raises(ValueError, match="unknown variant"):
        run(plan.replace(variants=("dpo", "kto")))
    with pytest.raises(ValueError, match="mechanism"):
        run(plan.replace(mechanism=Mechanism({"verify": print}, {"verify": "learner"})))


@pytest.mark.slow
def test_the_reference_matches_every_trl_loss_within_the_tolerance(reference, one_cpu_thread):
    check = page.framework_check(reference, seed=0)
    assert check["framework"]["version"] == "1.16.0"
    assert check["matches"], page.framework_lines(check)
    expected = set(page.DPO_CONFIGS) | {"simpo", "orpo", "orpo_odds_ratio_terms"}
    assert set(check["rows"]) == expected
    sigmoid = check["rows"]["sigmoid"]["trl"]
    assert abs(sigmoid - math.log(2)) > 1e-3, "the policy must differ from the reference, or the check compares ln 2"
    distinct = {round(check["rows"][name]["trl"], 6) for name in ("sigmoid", "robust", "cdpo", "ld_dpo", "rpo")}
    assert len(distinct) == 5, "each configuration must compute a different loss, or one check stands for another"
    orpo = check["rows"]["orpo"]
    assert abs(orpo["whole_row_nll"] - orpo["trl_whole_row_nll"]) < page.FRAMEWORK_TOLERANCE
    assert abs(orpo["our_response_nll"] - orpo["whole_row_nll"]) > 0.01
    record = page.framework_record(check, {name: "reference" for name in EXERCISES})
    lines = page.framework_summary({"evidence_level": "cpu_smoke", **record})
    assert any("1.16.0" in line for line in lines) and any("tolerance 1e-05" in line for line in lines)

    def ipo_on_sums(*args):
        args = list(args)
        if args[6] == "ipo":
            args[4] = args[5] = torch.ones_like(args[4])
        return reference["dpo_family_loss"](*args)

    wrong = page.compare_with_trl(page.trl_losses(seed=0), {**reference, "dpo_family_loss": ipo_on_sums})
    assert not wrong["matches"] and wrong["differences"]["ipo"] > 1e-3


# ---------------------------------------------------------------------------
# Step 5 on the lab model
# ---------------------------------------------------------------------------

def _sft_sign_flipped(policy_chosen, policy_rejected, reference_chosen, reference_rejected, chosen_lengths,
                      rejected_lengths, loss_type, beta, label_smoothing=0.0, rpo_alpha=0.0):
    """A learner's slip: RPO's SFT term written as the chosen tokens' mean log-likelihood instead of its
    negative, so the 'anchor' pushes the chosen replies down."""
    result = family_losses.dpo_family_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                                           chosen_lengths, rejected_lengths, loss_type, beta, label_smoothing, rpo_alpha)
    if result["sft_loss"] is None:
        return result
    return {**result, "sft_loss": -result["sft_loss"], "loss": result["loss"] - 2 * rpo_alpha * result["sft_loss"]}


@pytest.mark.effect
@pytest.mark.slow
def test_a_planted_wrong_learner_function_changes_step_5(tmp_path, one_cpu_thread):
    """Step 5 takes the learner's functions through `run(plan)`: with RPO's SFT term of the wrong sign, RPO loses
    held-out exact match instead of keeping it, and the record says the function was the learner's."""
    def rpo_run(label, mechanism):
        plan = Plan(experiment="dpo_family", chapter=page.CHAPTER_ID, run_mode="cpu_smoke", label=label,
                    results_dir=tmp_path, variants=("rpo",), seeds=(0,), model="lab", mechanism=mechanism,
                    options={"labels": ("clean",)})
        return {ref.stage: ref.load() for ref in run(plan, RecordSink.for_plan(plan))}

    reference_run = rpo_run("reference_rpo", Mechanism())
    planted = rpo_run("planted_rpo", Mechanism({"dpo_family_loss": _sft_sign_flipped}, {"dpo_family_loss": "learner"}))
    assert planted["rpo_clean"]["mechanism"]["dpo_family_loss"]["source"] == "learner"
    assert reference_run["rpo_clean"]["mechanism"]["dpo_family_loss"]["source"] == "package"
    kept = page.metric(reference_run["rpo_clean"], "exact_match")
    lost = page.metric(planted["rpo_clean"], "exact_match")
    assert kept - lost > PLANTED_MARGIN, (kept, lost)
    assert page.metric(planted["rpo_clean"], "chosen_logp_change") < page.metric(reference_run["rpo_clean"],
                                                                                 "chosen_logp_change")


PLANTED_MARGIN = 0.05
"""Held-out exact match, RPO minus RPO with its SFT term's sign flipped, seed 0: 0.5875 - 0.395 = 0.193 on the
pinned profile, 0.7375 - 0.6525 = 0.085 on the generic one."""
EFFECT_SEEDS = tuple(range(8))
"""The seeds of the effect tests (the page's claims table shows the same runs)."""
EFFECTS = {
    ("exact_match", ("orpo", "clean"), ("dpo", "clean")): (0.01, "greater"),
    ("exact_match", ("rpo", "clean"), ("dpo", "clean")): (0.005, "greater"),
    ("exact_match", ("rpo", "noisy"), ("dpo", "noisy")): (0.02, "greater"),
    ("exact_match", ("cdpo", "noisy"), ("dpo", "noisy")): (0.005, "greater"),
    ("exact_match", ("robust", "noisy"), ("dpo", "noisy")): (0.0, "less"),
    ("chosen_logp_change", ("rpo", "clean"), ("dpo", "clean")): (0.01, "greater"),
}
"""metric, treatment, control -> (margin, direction): the differences the page claims, each asserted over
EFFECT_SEEDS. Measured (95 % intervals over seeds 0-7), pinned profile / generic profile:
ORPO - DPO clean exact match +0.092 [+0.053, +0.132] / +0.051 [+0.020, +0.082];
RPO - DPO clean +0.048 [+0.029, +0.067] / +0.031 [+0.012, +0.050]; noisy +0.048 [+0.039, +0.057] / +0.042
[+0.027, +0.058]; cDPO - DPO noisy +0.046 [+0.019, +0.072] / +0.031 [+0.012, +0.049]; robust - DPO noisy
-0.049 [-0.082, -0.016] / -0.036 [-0.066, -0.006]; RPO - DPO chosen log-probability change (clean, nats)
+0.059 [+0.029, +0.088] / +0.028 [+0.016, +0.039]."""


@pytest.fixture(scope="module")
def seed_records(one_cpu_thread):
    """Per seed, the variant bodies the effects read (the experiment's own `prepare` and `train_variant`)."""
    from tools.experiments.online_rl.models import load_quietly

    wanted = sorted({side for _, *sides in EFFECTS for side in sides} | {side for _, side in BASELINE_EFFECTS})
    by_seed = {}
    for seed in EFFECT_SEEDS:
        start, tokenizer, _ = load_quietly("lab")
        start.eval()
        settings = {**family_runs.DEFAULTS["cpu_smoke"], "seed": seed}
        prepared = family_runs.prepare(start, tokenizer, settings)
        reference = frozen_copy(start)
        by_seed[seed] = {f"{name}_{label}": {"status": "ok", **family_runs.train_variant(
            start, reference, tokenizer, prepared, name, label, settings, family_runs.MECHANISM_DEFAULTS)}
            for name, label in wanted}
        by_seed[seed]["start"] = prepared["baseline"]
    return by_seed


BASELINE_EFFECTS = {
    ("pair_accuracy", ("dpo", "clean")): (0.5, 0.03, "greater"),
    ("exact_match", ("dpo", "noisy")): ("start", 0.01, "less"),
}
"""metric, variant -> (what it is compared with, margin, direction): DPO on clean pairs ranks held-out pairs
better than a coin (+0.099 [+0.044, +0.154] / +0.147 [+0.114, +0.180]); with 30 % of the pairs swapped it ends
below the start's held-out exact match (-0.096 [-0.155, -0.037] / -0.057 [-0.099, -0.015])."""


@pytest.mark.effect
@pytest.mark.slow
@pytest.mark.parametrize("claim", list(BASELINE_EFFECTS), ids=lambda claim: f"{claim[0]}-{claim[1][0]}_{claim[1][1]}")
def test_dpo_against_its_baseline_over_seeds(seed_records, claim):
    metric, side = claim
    against, margin, direction = BASELINE_EFFECTS[claim]
    treatment = {seed: page.metric(records[f"{side[0]}_{side[1]}"], metric) for seed, records in seed_records.items()}
    control = {seed: records["start"]["exact_match"] if against == "start" else against
               for seed, records in seed_records.items()}
    effect = effects.paired_effect(treatment, control, metric=f"{metric}: {side} - {against}")
    assert effects.holds(effect, margin, direction), effects.describe(effect)


@pytest.mark.effect
@pytest.mark.slow
@pytest.mark.parametrize("claim", list(EFFECTS), ids=lambda claim: f"{claim[1][0]}_{claim[1][1]}-{claim[2][0]}")
def test_the_claimed_difference_holds_over_seeds(seed_records, claim):
    metric, treatment, control = claim
    margin, direction = EFFECTS[claim]
    effect = page.paired(seed_records, treatment, control, metric)
    assert effects.holds(effect, margin, direction), effects.describe(effect)
