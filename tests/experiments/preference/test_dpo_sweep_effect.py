"""Chapter 17's Step 5 effect on the lab model: a few DPO steps on pairs from its own samples raise the
training-pair accuracy and the held-out exact match, on every seed (one process, beta 0.10)."""

from __future__ import annotations

import pytest

from tools.experiments.contract import Plan, run

pytestmark = pytest.mark.slow  # three seeds of the cpu_smoke sweep at one beta on the lab model (~45 s)

SEEDS = (0, 1, 2)
MIN_EXACT_MATCH_GAIN = 0.03
"""The held-out exact-match rise each seed must show (200 problems: 6 more solved); measured 0.07-0.12 (seeds 0-4)."""
MIN_PAIR_ACCURACY = 0.6
"""The training-pair accuracy after 5 steps (0 before: the policy starts equal to its reference); measured 0.66-0.88 (seeds 0-4)."""


@pytest.fixture(scope="module")
def sweeps(lab_models, tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("dpo-effect")
    try:
        found = {}
        for seed in SEEDS:
            plan = Plan(experiment="dpo_beta_sweep", chapter="17", run_mode="cpu_smoke", label=f"effect-seed-{seed}",
                        results_dir=folder, model="lab", seeds=(seed,), variants=("beta_0.10",))
            found[seed] = {ref.stage: ref.load() for ref in run(plan)}
        return found
    finally:
        torch.set_num_threads(threads)


def test_dpo_raises_held_out_exact_match_and_pair_accuracy_on_every_seed(sweeps):
    for seed, records in sweeps.items():
        pairs, sweep = records["pairs"], records["sweep_beta_0.10"]
        assert sweep["status"] == "ok", (seed, sweep.get("error"))
        assert pairs["pair_counts"]["constructed_pairs"] == 0, "every pair comes from the lab model's own samples"
        exact = sweep["held_out_exact_match"]
        assert exact["after"] >= exact["before"] + MIN_EXACT_MATCH_GAIN, (seed, exact)
        assert sweep["history"][0]["pair_accuracy"] == 0.0, (seed, sweep["history"][0])
        assert sweep["train_pairs"]["pair_accuracy"] >= MIN_PAIR_ACCURACY, (seed, sweep["train_pairs"])
        assert sweep["held_out_pairs"]["margin"] > 0, (seed, sweep["held_out_pairs"])
