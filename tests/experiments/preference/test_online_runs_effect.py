"""Chapter 51's Step 5 effect on the lab model, on every seed (one process): the first online round's
candidate really is better on the fixed evaluation set (many more wins than losses), the gate adopts it and
the guard keeps it; whatever round 2 does, the version log stays a consistent chain served by a good version."""

from __future__ import annotations

import pytest

from tools.experiments.contract import Plan, run

pytestmark = pytest.mark.slow  # three seeds of two online rounds on the lab model (~45 s)

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def rounds(lab_models, tmp_path_factory):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("online-effect")
    try:
        found = {}
        for seed in SEEDS:
            plan = Plan(experiment="online_dpo", chapter="51", run_mode="cpu_smoke", label=f"effect-seed-{seed}",
                        results_dir=folder, model="lab", seeds=(seed,))
            found[seed] = {ref.stage: ref.load() for ref in run(plan)}
        return found
    finally:
        torch.set_num_threads(threads)


def test_round_one_is_adopted_kept_and_really_better_on_every_seed(rounds):
    for seed, records in rounds.items():
        first = records["round_1"]
        assert first["status"] == "ok", (seed, first.get("error"))
        gate = first["gate"]
        assert gate["decision"] == "adopt" and gate["lower_bound"] > 0.6, (seed, gate)  # measured 0.73-0.81
        assert gate["wins"] >= 5 * gate["losses"], (seed, gate)  # measured 21:2, 33:2, 33:3
        assert first["guard"]["rolled_back"] is False and first["serving_after"] == first["candidate_version"], seed


def test_the_version_log_stays_a_chain_served_by_a_good_version(rounds):
    for seed, records in rounds.items():
        last = records["round_2"]
        assert last["status"] == "ok", (seed, last.get("error"))
        log, serving = last["version_log"], None
        for index, entry in enumerate(log):
            assert entry["parent"] == serving, (seed, index, entry)
            if entry["state"] == "good":
                serving = entry["version"]
        assert last["serving_after"] == serving, seed
        if last["gate"]["decision"] == "adopt" and last["guard"]["rolled_back"]:
            assert log[-1]["state"] == "regressed" and last["serving_after"] == records["round_1"]["candidate_version"]
