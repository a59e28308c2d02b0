"""Chapter 17's Step 5 effect on the lab model, on every seed (one process, pinned CPU numerics).

The chapter's cpu_smoke sweep (6 steps at 3e-5 on 64 pairs from the lab model's own samples): training-pair
accuracy rises from 0 and held-out exact match rises at beta 0.10, and does not fall at any beta.
The longer sweep (dpo_sweep.LONGER_RUN: 12 steps at 5e-5): the betas separate; the smaller beta drifts
further from the reference and ends with a lower held-out exact match.
"""

from __future__ import annotations

import math

import pytest

from tools.experiments.contract import Plan, run
from tools.experiments.preference.dpo_sweep import LONGER_RUN

pytestmark = pytest.mark.slow  # three seeds of two sweeps, three betas each, on the lab model (~2 min)

SEEDS = (0, 1, 2)
BETAS = ("beta_0.05", "beta_0.10", "beta_0.30")
MIN_EXACT_MATCH_GAIN = 0.02
"""The held-out exact-match rise at beta 0.10 (200 problems: 4 more solved); measured 0.070 / 0.025 / 0.070
(seeds 0-2). At the other betas exact match must not fall; measured +0.015 to +0.075."""
MIN_PAIR_ACCURACY = 0.6
"""Training-pair accuracy after the updates (0 before: the policy starts equal to its reference);
measured 0.64-0.83 (seeds 0-2, every beta)."""
MIN_DRIFT_RATIO = 1.1
"""Longer sweep: k3 drift at beta 0.05 over k3 drift at beta 0.30; measured 1.19 / 1.48 / 1.22 (seeds 0-2);
the chapter's sweep gives only 1.04-1.09."""


def k3_drift(record: dict) -> float:
    """Mean k3 = exp(d) - 1 - d, d = log pi_ref - log pi, over every sampled token (the chapter's drift)."""
    samples = record["drift_samples"]
    values = [math.exp(reference - policy) - 1 - (reference - policy)
              for policy_row, reference_row in zip(samples["policy_logps"], samples["reference_logps"])
              for policy, reference in zip(policy_row, reference_row)]
    return sum(values) / len(values)


def sweep_per_seed(folder, options: dict, name: str) -> dict:
    found = {}
    for seed in SEEDS:
        plan = Plan(experiment="dpo_beta_sweep", chapter="17", run_mode="cpu_smoke", label=f"{name}-seed-{seed}",
                    results_dir=folder, model="lab", seeds=(seed,), variants=BETAS, options=options)
        found[seed] = {ref.stage: ref.load() for ref in run(plan)}
    return found


@pytest.fixture(scope="module")
def sweeps(lab_models, tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("dpo-effect")
    try:
        return {"chapter": sweep_per_seed(folder, {}, "effect"),
                "longer": sweep_per_seed(folder, LONGER_RUN, "effect-longer")}
    finally:
        torch.set_num_threads(threads)


@pytest.mark.effect
def test_dpo_raises_held_out_exact_match_and_pair_accuracy_on_every_seed(sweeps):
    for seed, records in sweeps["chapter"].items():
        assert records["pairs"]["pair_counts"]["constructed_pairs"] == 0, "every pair comes from the lab model"
        for name in BETAS:
            sweep = records[f"sweep_{name}"]
            assert sweep["status"] == "ok", (seed, name, sweep.get("error"))
            exact = sweep["held_out_exact_match"]
            gain = MIN_EXACT_MATCH_GAIN if name == "beta_0.10" else 0.0
            assert exact["after"] >= exact["before"] + gain, (seed, name, exact)
            assert sweep["history"][0]["pair_accuracy"] == 0.0, (seed, name, sweep["history"][0])
            assert sweep["train_pairs"]["pair_accuracy"] >= MIN_PAIR_ACCURACY, (seed, name, sweep["train_pairs"])
            assert sweep["held_out_pairs"]["margin"] > 0, (seed, name, sweep["held_out_pairs"])


@pytest.mark.effect
def test_in_the_longer_sweep_the_smaller_beta_drifts_further_and_keeps_less_exact_match(sweeps):
    for seed, records in sweeps["longer"].items():
        drift = {name: k3_drift(records[f"sweep_{name}"]) for name in BETAS}
        assert drift["beta_0.05"] > drift["beta_0.10"] > drift["beta_0.30"], (seed, drift)
        assert drift["beta_0.05"] >= MIN_DRIFT_RATIO * drift["beta_0.30"], (seed, drift)
        exact = {name: records[f"sweep_{name}"]["held_out_exact_match"]["after"] for name in BETAS}
        assert exact["beta_0.30"] > exact["beta_0.05"], (seed, exact)
