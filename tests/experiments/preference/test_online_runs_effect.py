"""Chapter 51's Step 5 on the lab model, paired over seeds 0-4, on the held-out evaluation set (300 two-digit sums)
and the validation guard set (200 three-digit sums), run by `make test` under the pinned and the generic numerics
profile. Round 1's judge inverts three-digit answers, round 2's is the verifier, round 3's prefers wrong answers.
What holds under both profiles is asserted; the rest is measured and shown on the page, not asserted.

                                             profile A (pinned, committed)        profile B (generic, built)
  round 2 (verifier): candidate minus serving
    on the evaluation set                    +0.013 +0.050 +0.073 +0.057 +0.030   +0.033 +0.030 +0.040 +0.053 +0.040
                                             [+0.016, +0.074]                     [+0.028, +0.050]
  round 3 (prefers wrong answers): gate      keep on every seed (0:16 ... 5:8)    keep on every seed (0:2 ... 2:14)
  round 1 (inverted three-digit judge):
    guard drop of the candidate              +0.065 +0.040 +0.050 +0.020 +0.015   +0.070 +0.060 +0.040 +0.045 +0.060
                                             [+0.012, +0.064]                     [+0.040, +0.070]
    guard drop of the control (the same      -0.040 -0.025 -0.020 +0.020 -0.015   -0.075 -0.090 -0.085 -0.085 -0.065
    replies judged by the verifier)
    candidate minus control                  [+0.004, +0.104]                     [+0.120, +0.150]
  round 1 adopted / rolled back (seeds)      adopted 0 1 2 4, rolled back 0 1 2   adopted none: the gate refused it
  round 2 adopted / rolled back (seeds)      adopted 1 2 3, rolled back 3         adopted every seed, kept
Not asserted: that the guard rolls a candidate back on every seed (profile B never adopts round 1), and the exact
match round 3 loses (its interval reaches 0 under profile B). The bug's share of the guard drop (candidate
minus control) is asserted in direction only: profile A's interval starts at +0.004.
"""

from __future__ import annotations

import pytest

from tools.core.effects import describe, holds, paired_effect
from tools.experiments.contract import Plan, run

pytestmark = pytest.mark.slow  # five seeds of three online rounds on the lab model

SEEDS = (0, 1, 2, 3, 4)
BUGGY, VERIFIER, INVERTED = "round_1", "round_2", "round_3"
MIN_VERIFIER_GAIN = 0.01
"""Evaluation-set exact match, the verifier round's candidate minus the version serving then (3 of 300 prompts)."""
MIN_GUARD_DROP = 0.01
"""Guard drop of the buggy judge's candidate below the version serving then (2 of 200 prompts)."""
MIN_GUARD_DROP_OVER_CONTROL = 0.0
"""Guard drop of the buggy judge's candidate over the verifier-judged control's: the direction only (profile A's
interval starts at +0.004; the page claims no size)."""


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


def per_seed(rounds, stage: str, read) -> dict:
    return {seed: read(records[stage]) for seed, records in rounds.items()}


def exact_match_change(record) -> float:
    return record["candidate_evaluation_exact_match"] - record["serving_evaluation_exact_match"]


def test_every_decision_is_the_one_its_numbers_call_for(rounds):
    for seed, records in rounds.items():
        settings = records["setup"]["settings"]
        serving = records["setup"]["version_log"][0]["version"]
        for stage in (BUGGY, VERIFIER, INVERTED):
            record = records[stage]
            assert record["status"] == "ok", (seed, stage, record.get("error"))
            assert record["serving_version"] == serving, (seed, stage)
            gate, guard = record["gate"], record["guard"]
            assert (gate["wins"] - gate["losses"]) / settings["eval_problems"] == pytest.approx(
                exact_match_change(record)), "with the verifier as judge a win is a prompt only the candidate solves"
            if gate["decision"] == "adopt":
                assert gate["interval"][0] > 0.5 and gate["decisive"] >= settings["min_decisive"], (seed, stage, gate)
                regressed = guard["candidate"] < guard["serving"] - settings["max_drop"]
                assert guard["rolled_back"] is regressed, (seed, stage, guard)
                if not regressed:
                    serving = record["candidate_version"]
            else:
                assert guard["rolled_back"] is None, (seed, stage, guard)
            assert record["serving_after"] == serving, (seed, stage)
        log, good = records[INVERTED]["version_log"], None
        for index, entry in enumerate(log):
            assert entry["parent"] == good, (seed, index, entry)
            if entry["state"] == "good":
                good = entry["version"]
        assert good == serving, seed


@pytest.mark.effect
def test_the_verifier_rounds_candidate_is_better_on_the_evaluation_set(rounds):
    effect = paired_effect(per_seed(rounds, VERIFIER, exact_match_change), dict.fromkeys(SEEDS, 0.0),
                           metric="evaluation-set exact match, verifier round's candidate minus serving")
    print(effect["metric"], [round(v, 3) for v in effect["treatment"]], [round(v, 3) for v in effect["control"]], describe(effect))
    assert holds(effect, MIN_VERIFIER_GAIN), describe(effect)


@pytest.mark.effect
def test_the_gate_refuses_the_candidate_of_a_judge_that_prefers_wrong_answers_on_every_seed(rounds):
    for seed, records in rounds.items():
        for stage in (BUGGY, VERIFIER, INVERTED):
            print(seed, stage, records[stage]["gate"]["decision"], records[stage]["gate"]["wins"],
                  records[stage]["gate"]["losses"], records[stage]["guard"])
        record = records[INVERTED]
        assert record["pairs_preferring_a_wrong_answer"] == record["pair_count"] > 0, seed
        assert record["gate"]["decision"] == "keep", (seed, record["gate"])
        assert record["serving_after"] == record["serving_version"], seed


@pytest.mark.effect
def test_the_buggy_judges_candidate_drops_on_the_guard(rounds):
    def drop(record):
        return record["guard"]["serving"] - record["guard"]["candidate"]

    for records in rounds.values():
        assert records[BUGGY]["pairs_preferring_a_wrong_answer"] > 0
    effect = paired_effect(per_seed(rounds, BUGGY, drop), dict.fromkeys(SEEDS, 0.0),
                           metric="guard drop of the buggy judge's candidate")
    print(effect["metric"], [round(v, 3) for v in effect["treatment"]], [round(v, 3) for v in effect["control"]], describe(effect))
    assert holds(effect, MIN_GUARD_DROP), describe(effect)


@pytest.mark.effect
def test_the_guard_drop_comes_from_the_judges_bug_not_from_training_on_these_prompts(rounds):
    """The control candidate: the same replies of round 1 judged by the verifier, the same steps, from the same
    serving version. The buggy judge's candidate drops further on the guard than the control's."""
    def drop(record):
        return record["guard"]["serving"] - record["guard"]["candidate"]

    def control_drop(record):
        assert record["control"]["judge"] == "verifier" and record["control"]["pair_count"] > 0
        return record["guard"]["serving"] - record["control"]["guard"]

    effect = paired_effect(per_seed(rounds, BUGGY, drop), per_seed(rounds, BUGGY, control_drop),
                           metric="guard drop, buggy judge's candidate minus the verifier-judged control's")
    print(effect["metric"], [round(v, 3) for v in effect["treatment"]], [round(v, 3) for v in effect["control"]],
          describe(effect))
    assert holds(effect, MIN_GUARD_DROP_OVER_CONTROL), describe(effect)

