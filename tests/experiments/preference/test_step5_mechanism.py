"""Step 5 of chapters 17, PT-KTO and 51 runs the functions the notebook passes: a planted wrong learner function
(one of the chapter's mutants, as grading builds it) changes what the stage measures or decides, through the
same `run(plan)` the notebook calls, and every record says the function came from the learner."""

from __future__ import annotations

import pytest

from tools.errors import ConfigError
from tools.experiments.contract import Mechanism, Plan, run
from tools.experiments.preference import dpo_sweep, kto_runs, online_runs

pytestmark = pytest.mark.slow  # each test trains the lab model twice (reference and planted function)


def records_of(folder, label: str, **plan) -> dict:
    plan = Plan(run_mode="cpu_smoke", label=label, results_dir=folder, model="lab", seeds=(0,), **plan)
    return {ref.stage: ref.load() for ref in run(plan)}


@pytest.fixture(scope="module")
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_17_a_dpo_loss_with_the_margin_reversed_teaches_the_rejected_answers(lab_models, tmp_path, mechanism_of,
                                                                             one_thread):
    names = dpo_sweep.MECHANISM
    found = {}
    for label, mutant in (("reference", None), ("planted", "margin_sign_flipped")):
        found[label] = records_of(tmp_path, label, experiment="dpo_beta_sweep", chapter="17", variants=("beta_0.10",),
                                  mechanism=mechanism_of("17", names, mutant))
    right, wrong = (found[label]["sweep_beta_0.10"] for label in ("reference", "planted"))
    assert right["held_out_pairs"]["margin"] > 0.05 > -0.05 > wrong["held_out_pairs"]["margin"], (
        right["held_out_pairs"], wrong["held_out_pairs"])
    assert wrong["mechanism"]["dpo_loss"]["source"] == "learner"
    assert right["mechanism"]["dpo_loss"]["source"] == "reference"
    assert found["planted"][dpo_sweep.DECISION_STAGE]["mechanism"]["dpo_loss"]["source"] == "learner"


def test_17_an_undeclared_function_is_refused_before_any_work(tmp_path):
    stray = Mechanism({"kto_loss": len}, {"kto_loss": "learner"})
    with pytest.raises(ConfigError, match="kto_loss"):
        run(Plan(experiment="dpo_beta_sweep", chapter="17", run_mode="cpu_smoke", label="stray", results_dir=tmp_path,
                 model="lab", mechanism=stray))
    assert not list(tmp_path.rglob("*.json"))


def test_pt_kto_swapped_class_weights_hold_the_few_desirable_examples_back(lab_models, tmp_path, mechanism_of,
                                                                          one_thread):
    names = kto_runs.MECHANISM
    found = {}
    for label, mutant in (("reference", None), ("planted", "weights_swapped")):
        found[label] = records_of(tmp_path, label, experiment="kto_binary", chapter="PT-KTO",
                                  variants=("imbalanced_weighted",), mechanism=mechanism_of("PT-KTO", names, mutant))
    right, wrong = (found[label]["kto_imbalanced_weighted"] for label in ("reference", "planted"))
    assert right["weights"] == wrong["weights"], "the same weights reach the loss; the loss applies them swapped"
    assert wrong["class_rewards"]["desirable"] < right["class_rewards"]["desirable"] - 0.005, (
        right["class_rewards"], wrong["class_rewards"])
    assert wrong["mechanism"]["kto_loss"]["source"] == "learner"


def test_pt_kto_a_loss_that_pushes_undesirable_replies_up_pushes_them_up(lab_models, tmp_path, mechanism_of,
                                                                         one_thread):
    names = kto_runs.MECHANISM
    found = {}
    for label, mutant in (("reference", None), ("planted", "undesirable_sign_flipped")):
        found[label] = records_of(tmp_path, label, experiment="kto_binary", chapter="PT-KTO", variants=("balanced",),
                                  mechanism=mechanism_of("PT-KTO", names, mutant))
    right, wrong = (found[label]["kto_balanced"] for label in ("reference", "planted"))
    assert right["class_rewards"]["undesirable"] < 0 < wrong["class_rewards"]["undesirable"], (
        right["class_rewards"], wrong["class_rewards"])
    assert wrong["mechanism"]["kto_loss"]["source"] == "learner"


ROUND_ONE_MUTANTS = ("ties_paired_anyway", "ties_count_against", "regressed_version_serves")
"""51's planted learner functions whose round one is compared with the reference's: one per exercise."""


@pytest.fixture(scope="module")
def round_one(lab_models, tmp_path_factory, mechanism_of, one_thread) -> dict:
    """Round one of 51's Step 5 (a judge wrong on three-digit sums: the gate adopts, the guard rolls back), with
    the reference and with each planted function: `label -> round_1 record` (and `"setup"`)."""
    folder = tmp_path_factory.mktemp("online_round_one")
    rounds = [dict(online_runs.DEFAULTS["cpu_smoke"]["rounds"][0])]
    found = {}
    for mutant in (None, *ROUND_ONE_MUTANTS):
        label = mutant or "reference"
        records = records_of(folder, label, experiment="online_dpo", chapter="51", options={"rounds": rounds},
                             mechanism=mechanism_of("51", online_runs.MECHANISM, mutant))
        found[label] = records["round_1"]
        found.setdefault("setup", records["setup"])
    return found


def test_51_pairing_tied_groups_changes_what_round_one_trains_on(round_one):
    right, wrong = round_one["reference"], round_one["ties_paired_anyway"]
    assert right["ties"] and right["pair_count"] + len(right["ties"]) == len(right["groups"])
    assert wrong["pair_count"] > right["pair_count"], "tied groups were paired, against the contract"
    assert wrong["candidate_version"] != right["candidate_version"]
    assert wrong["mechanism"]["build_online_pairs"]["source"] == "learner"
    assert round_one["setup"]["mechanism"]["build_online_pairs"]["source"] == "reference"


def test_51_the_reference_adopts_round_one_and_its_guard_rolls_it_back(round_one):
    right = round_one["reference"]
    assert right["gate"]["decision"] == "adopt" and right["guard"]["rolled_back"] is True
    assert right["serving_after"] == right["serving_version"] != right["candidate_version"]


def test_51_a_gate_that_counts_ties_as_comparisons_refuses_round_one(round_one):
    """A learner's adoption_gate that counts ties (the greedy replies agree on most prompts) refuses the
    candidate the reference adopts: the same candidate, another decision, and no guard check at all."""
    right, wrong = round_one["reference"], round_one["ties_count_against"]
    assert wrong["candidate_version"] == right["candidate_version"]
    assert right["gate"]["decision"] == "adopt" and wrong["gate"]["decision"] != "adopt"
    assert wrong["guard"]["rolled_back"] is None and len(wrong["version_log"]) == 1
    assert wrong["mechanism"]["adoption_gate"]["source"] == "learner"


def test_51_a_rollback_that_keeps_the_regressed_candidate_serves_it(round_one):
    """A learner's guard_rollback that records the regression but keeps the candidate: round one's regressed
    candidate serves, where the reference's serving version stays the base."""
    right, wrong = round_one["reference"], round_one["regressed_version_serves"]
    assert wrong["candidate_version"] == right["candidate_version"] and wrong["guard"]["rolled_back"] is True
    assert right["serving_after"] == right["serving_version"]
    assert wrong["serving_after"] == wrong["candidate_version"] != wrong["serving_version"]
    assert wrong["mechanism"]["guard_rollback"]["source"] == "learner"
