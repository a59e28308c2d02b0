"""Chapter 51's Step 5 effect on the lab model, on every seed (one process): round 1 (two careful updates
on two-digit sums, judged by the verifier) really is better on the fixed evaluation set, is adopted and
kept. Round 2 (three updates, a judge that inverts three-digit answers) does what its numbers say: adopted
and kept, adopted and rolled back, or not adopted, depending on the seed (measured under pinned CPU
numerics, seeds 0-2: kept with the guard 0.627 -> 0.607, rolled back with the guard 0.613 -> 0.540, not
adopted with a lower bound of 0.47), and whatever happens the version log stays a chain served by the
last good version."""

from __future__ import annotations

import pytest

from tools.experiments.contract import Plan, run

pytestmark = pytest.mark.slow  # three seeds of two online rounds on the lab model (~25 s)

SEEDS = (0, 1, 2)
ROUND_ONE_LOWER_BOUND = 0.65  # measured 0.71-0.77 (seeds 0-4)
ROUND_ONE_WIN_FACTOR = 8  # wins >= 8 x max(losses, 1); measured 20:1, 19:2, 20:1 (seeds 0-2), 17:1, 20:2 (3-4)
ROUND_ONE_GUARD_SLACK = 0.01  # the guard may move by at most this much below the start; measured -0.007..+0.007


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
        assert first["pairs_preferring_a_wrong_answer"] == 0, seed  # the verifier judged round 1
        gate = first["gate"]
        assert gate["decision"] == "adopt" and gate["lower_bound"] > ROUND_ONE_LOWER_BOUND, (seed, gate)
        assert gate["wins"] >= ROUND_ONE_WIN_FACTOR * max(gate["losses"], 1), (seed, gate)
        guard = first["guard"]
        assert guard["candidate"] >= guard["serving"] - ROUND_ONE_GUARD_SLACK, (seed, guard)
        assert guard["rolled_back"] is False and first["serving_after"] == first["candidate_version"], seed


def test_round_two_follows_its_gate_and_guard_on_every_seed(rounds):
    for seed, records in rounds.items():
        first, second = records["round_1"], records["round_2"]
        max_drop = records["setup"]["settings"]["max_drop"]
        assert second["status"] == "ok", (seed, second.get("error"))
        assert second["serving_version"] == first["candidate_version"], seed  # sampled by round 1's version
        assert second["pairs_preferring_a_wrong_answer"] > 0, seed  # the faulty judge left its mark
        if second["gate"]["decision"] != "adopt":
            assert "guard" not in second and second["serving_after"] == first["candidate_version"], seed
            continue
        guard = second["guard"]
        assert guard["rolled_back"] is (guard["candidate"] < guard["serving"] - max_drop), (seed, guard)
        expected = first["candidate_version"] if guard["rolled_back"] else second["candidate_version"]
        assert second["serving_after"] == expected, seed


def test_the_version_log_stays_a_chain_served_by_a_good_version(rounds):
    for seed, records in rounds.items():
        last = records["round_2"]
        log, serving = last["version_log"], None
        assert [entry["state"] for entry in log][:2] == ["good", "good"], seed
        for index, entry in enumerate(log):
            assert entry["parent"] == serving, (seed, index, entry)
            if entry["state"] == "good":
                serving = entry["version"]
        assert last["serving_after"] == serving, seed
