"""Chapter 51's Step 5 effect on the lab model, on every seed (one process, pinned CPU numerics): round 1
(two careful updates on two-digit sums, judged by the verifier) really is better on the fixed evaluation
set, is adopted and kept; round 2 (five updates, a judge that inverts three-digit answers) passes the gate
on the two-digit evaluation set, then drops on the three-digit guard well beyond `max_drop` and is rolled
back to round 1's version by hash, with the version log a consistent chain. (Seed 3, not tested: the gate
already refuses round 2, 34 wins to 54 losses.)"""

from __future__ import annotations

import pytest

from tools.experiments.contract import Plan, run

pytestmark = pytest.mark.slow  # three seeds of two online rounds on the lab model (~25 s)

SEEDS = (0, 1, 2)
ROUND_ONE_LOWER_BOUND = 0.65  # measured 0.71-0.77 (seeds 0-4)
ROUND_ONE_WIN_FACTOR = 8  # wins >= 8 x max(losses, 1); measured 20:1, 19:2, 20:1 (seeds 0-2), 17:1, 20:2 (3-4)
ROUND_ONE_GUARD_SLACK = 0.01  # the guard may move by at most this much below the start; measured -0.007..+0.007
ROUND_TWO_DROP = 0.04  # guard drop of round 2 >= 2 x max_drop (0.02); measured 0.080 / 0.127 / 0.073 (seeds 0-2)


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


@pytest.mark.effect
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


@pytest.mark.effect
def test_round_two_passes_the_gate_regresses_on_the_guard_and_rolls_back_on_every_seed(rounds):
    for seed, records in rounds.items():
        first, second = records["round_1"], records["round_2"]
        assert second["status"] == "ok", (seed, second.get("error"))
        assert second["serving_version"] == first["candidate_version"], seed  # sampled by round 1's version
        assert second["pairs_preferring_a_wrong_answer"] > 0, seed  # the faulty judge left its mark
        assert second["gate"]["decision"] == "adopt", (seed, second["gate"])
        guard = second["guard"]
        assert guard["serving"] - guard["candidate"] >= ROUND_TWO_DROP, (seed, guard)
        assert guard["rolled_back"] is True, (seed, guard)
        assert second["serving_after"] == first["candidate_version"] != second["candidate_version"], seed
        assert second["version_log"][-1] == {"version": second["candidate_version"], "parent": first["candidate_version"],
                                             "guard": guard["candidate"], "state": "regressed"}, seed


@pytest.mark.effect
def test_the_version_log_stays_a_chain_served_by_a_good_version(rounds):
    for seed, records in rounds.items():
        last = records["round_2"]
        log, serving = last["version_log"], None
        assert [entry["state"] for entry in log] == ["good", "good", "regressed"], seed
        for index, entry in enumerate(log):
            assert entry["parent"] == serving, (seed, index, entry)
            if entry["state"] == "good":
                serving = entry["version"]
        assert last["serving_after"] == serving, seed
