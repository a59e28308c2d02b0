"""The chain's stages in cpu_smoke, run once through the experiment contract (64, 63, 65, 62 on one label):
what each record holds, that each decision is the gates' on its own evidence, that the delivered adapter
learned the task over the no-adapter base and kept the base's addition (effects asserted over seeds, under
both numerics profiles), that its files are what 63 selected and can be shipped, and that an adapter that
forgets is not delivered."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tools.core import effects
from tools.core.handoff import SEAL_FIELD, _seal_of, require_manifest, seal
from tools.core.records import encode_record, sha256_file
from tools.experiments.contract import Plan, run
from tools.experiments.preference import offline_gates
from tools.experiments.sft_chain import delivery, delivery_gates, qlora, selection, selection_gates
from tools.experiments.sft_chain.training import file_hashes, state_sha256

# four stages train the lab model (cpu_smoke): about three CPU minutes; the first three are shared (conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sft_chain")]
LABEL = "chain_stages"  # chain_upstream's label (conftest.py)
GAIN_MARGIN = 0.2
"""The smallest answer gain the pages claim is 'above 0'; the effect tests ask for more than the spread measured
across seeds and both numerics profiles (the gains measured were +0.42 to +0.55, seed sd about 0.06)."""
FORGETTING_MARGIN = 0.2
"""Dropping replay costs the base skill about 0.45 to 0.55 (both profiles); the page claims more than the
tolerance (0.05)."""


@pytest.fixture(scope="module")
def chain(chain_upstream):
    """64, 63 and 65 (shared with test_step5_learner, conftest.py), then 62 on the same label."""
    results, upstream = chain_upstream
    refs = dict(upstream)
    refs["62"] = {ref.stage: ref for ref in run(Plan(experiment="sft_delivery", chapter="62", run_mode="cpu_smoke",
                                                     label=LABEL, results_dir=results))}
    return results, refs


# ---- 64 ------------------------------------------------------------------------------------------

def test_64_hands_down_train_and_validation_and_seals_the_evaluation_split_apart(chain):
    results, refs = chain
    admitted, manifest = refs["64"]["admitted_data"].load(), refs["64"]["manifest"].load()
    assert set(admitted["splits"]) == {"train", "validation"} and "evaluation" not in admitted
    assert [entry["role"] for entry in manifest["outputs"]] == ["admitted_data", "evaluation_split"]
    split = json.loads(refs["64"]["evaluation_split"].path.read_text(encoding="utf-8"))
    assert split[SEAL_FIELD] == _seal_of(split) and split["openers"] == ["62"]
    assert manifest["paraphrase_leaks"]["train"] == ["leak-7", "leak-8", "leak-9"]


# ---- 63 ------------------------------------------------------------------------------------------

def test_63_matrix_reads_validation_against_the_base_and_excludes_the_leftover(chain):
    _, refs = chain
    matrix, manifest = refs["63"]["matrix"].load(), refs["63"]["manifest"].load()
    names = [run["name"] for run in matrix["runs"]]
    assert len(names) == len(selection.RANKS) * len(selection.SEEDS) + 1 and names[-1] == "r32_s1_leftover"
    assert [run["name"] for run in matrix["controls"]] == [f"r8_s{seed}_no_replay" for seed in selection.SEEDS]
    assert matrix["gating"]["comparability"]["excluded"] == [{"value": 32, "reasons": ["differs:steps", "seeds"]}]
    assert set(matrix["base_metrics"]) == {selection.TASK_SET, selection.SKILL_SET}
    assert all(set(run["metrics"]) == {selection.TASK_SET, selection.SKILL_SET} for run in matrix["runs"])
    assert all(run["quality"] == run["metrics"][selection.TASK_SET]["exact_match"] for run in matrix["runs"])
    again = selection.gate(matrix["runs"], "cpu_smoke", matrix["runs"][0]["config"]["data_sha256"],
                           matrix["base_metrics"], matrix["memory_budget"], selection_gates)
    assert json.loads(json.dumps(again)) == matrix["gating"]
    assert manifest["decision"]["decision"] == again["choice"]["decision"]
    assert matrix["memory_metric"] == "training_state_bytes" and matrix["memory_budget"] == 1024 * 1024
    assert all(run["peak_allocated_bytes"] is None for run in matrix["runs"])  # a CPU measures no device memory
    assert matrix["numerics"]["cpu_numerics"]["torch_cpu_capability"]
    assert all(entry["source"] == "package" for entry in matrix["mechanism"].values())


@pytest.mark.effect
def test_effect_every_rank_learns_the_task_over_the_base(chain):
    _, refs = chain
    matrix = refs["63"]["matrix"].load()
    for rank in selection.RANKS:
        gain = matrix["effects"][f"rank_{rank}_task_gain"]
        assert len(gain["seeds"]) >= 3 and effects.holds(gain, GAIN_MARGIN), (rank, effects.describe(gain))


@pytest.mark.effect
def test_effect_without_replay_the_base_forgets_its_addition(chain):
    _, refs = chain
    matrix = refs["63"]["matrix"].load()
    forgetting = matrix["effects"]["no_replay_base_skill_change"]
    assert effects.holds(forgetting, FORGETTING_MARGIN, "less"), effects.describe(forgetting)


def test_63_budget_and_quality_change_the_choice_on_the_recorded_matrix(chain):
    """No retraining: the same measurements decided under another budget, or with the best candidate's
    measurements lowered, choose otherwise."""
    _, refs = chain
    matrix = refs["63"]["matrix"].load()
    base, data = matrix["base_metrics"], matrix["runs"][0]["config"]["data_sha256"]
    chosen = matrix["gating"]["choice"]["chosen"]
    if chosen is None:
        pytest.skip("this run chose no rank")
    peak = matrix["gating"]["gated"]["candidates"][str(chosen)]["peak_memory_bytes"]
    tight = selection.gate(matrix["runs"], "cpu_smoke", data, base, peak - 1, selection_gates)["choice"]
    assert tight["chosen"] != chosen
    worse = [dict(run, quality=run["quality"] - 0.5) if run["config"]["rank"] == chosen else run
             for run in matrix["runs"]]
    assert selection.gate(worse, "cpu_smoke", data, base, matrix["memory_budget"], selection_gates)["choice"][
        "chosen"] != chosen


def test_63_chosen_adapter_files_are_the_chosen_run(chain):
    results, refs = chain
    manifest = refs["63"]["manifest"].load()
    if manifest["decision"]["decision"] != "accept":
        pytest.skip("no rank was chosen in this run")
    files = [entry for entry in manifest["outputs"] if entry["role"].startswith("chosen_adapter/")]
    assert files and all(sha256_file(results / entry["path"]) == entry["sha256"] for entry in files)
    from safetensors.torch import load_file

    weights = next(entry for entry in files if entry["path"].endswith("adapter_model.safetensors"))
    assert state_sha256(load_file(str(results / weights["path"]))) == manifest["chosen_adapter"]["adapter_sha256"]
    assert manifest["selected_config"]["rank"] == manifest["decision"]["chosen_rank"]


# ---- 65 ------------------------------------------------------------------------------------------

def test_65_pairs_start_from_both_bases_say_which_path_ran_and_claim_no_memory_on_a_cpu(chain):
    _, refs = chain
    pairs, manifest = refs["65"]["pairs"].load(), refs["65"]["manifest"].load()
    assert all(pairs["bases"][base]["status"] == "ok" and pairs["bases"][base]["quality"] is not None
               for base in qlora.BASES)
    assert pairs["adapter"]["target_modules"] == list(selection.SHARED["target_modules"])
    assert pairs["adapter"]["replay_fraction"] == selection.SHARED["replay_fraction"] and "float32" in \
        pairs["difference_from_delivery"]
    path = manifest["bitsandbytes_path"]
    assert path["quant_type"] == "nf4" and path["linear4bit_layers"] > 0 and path["backend"] == "cpu"
    for seed in map(str, qlora.SEEDS):
        bf16, nf4 = pairs["runs"]["bf16"][seed], pairs["runs"]["nf4"][seed]
        assert bf16["status"] == nf4["status"] == "ok"
        assert nf4["base_tensor_bytes"] < bf16["base_tensor_bytes"]  # 4-bit storage, counted from the tensors
        assert bf16["peak_allocated_bytes"] is None and nf4["peak_allocated_bytes"] is None
    assert pairs["ladders"] == {"bf16": [], "nf4": []} and "CUDA only" in pairs["ladder_note"]
    assert manifest["decision"]["decision"] in ("tune", "reject")
    if manifest["decision"]["decision"] == "tune":
        assert manifest["decision"]["reasons"][0] == "capacity_not_measured"


# ---- 62 ------------------------------------------------------------------------------------------

@pytest.mark.effect
def test_effect_the_delivered_adapter_learns_the_task_and_keeps_the_base_skill(chain):
    """Done when: on >= 3 seeds the answer gain over the no-adapter base has a paired interval above 0 (here
    above GAIN_MARGIN) on the evaluation split, and the base's addition stays within the tolerance."""
    _, refs = chain
    report, manifest = refs["62"]["evaluation"].load(), refs["62"]["manifest"].load()
    gain, skill = report["effects"]["task_gain"], report["effects"]["base_skill_change"]
    assert len(gain["seeds"]) >= 3 and effects.holds(gain, GAIN_MARGIN), effects.describe(gain)
    assert skill["mean"] >= -delivery.REGRESSION_TOLERANCE, effects.describe(skill)
    assert manifest["decision"]["decision"] == "delivered" and manifest["decision"]["reasons"] == []


def test_62_identity_is_read_back_from_the_files_and_matches_63s_chosen_run(chain):
    results, refs = chain
    report = refs["62"]["evaluation"].load()
    selected, chosen = refs["63"]["manifest"].load()["selected_config"], refs["63"]["manifest"].load()["chosen_adapter"]
    assert report["identity"] == {"matches": True, "mismatches": []}
    assert report["used"]["adapter_sha256"] == chosen["adapter_sha256"] == report["runs"]["1"]["adapter_sha256"]
    folder = delivery.delivery_folder(_Sink(results))
    config = json.loads((folder / "adapter" / "adapter_config.json").read_text(encoding="utf-8"))
    assert set(config["target_modules"]) == set(selected["target_modules"])
    assert config["revision"] == report["model"]["base_revision"] and config["revision"].startswith("sha256:")
    # peft's order is not a mismatch when the key is unordered; the same list in another order is, otherwise
    reordered = dict(report["used"], target_modules=list(reversed(selected["target_modules"])))
    expected = delivery.expected_of(selected, chosen)
    assert delivery_gates.upstream_identity(expected, reordered, list(delivery_gates.UNORDERED))["matches"]
    assert not delivery_gates.upstream_identity(expected, reordered)["matches"]
    assert not delivery_gates.upstream_identity(expected, dict(report["used"], rank=report["used"]["rank"] * 2),
                                                list(delivery_gates.UNORDERED))["matches"]


class _Sink:
    """The two names `delivery.delivery_folder` reads, for this module's label."""

    def __init__(self, results):
        self.results_root, self.slug, self.run_label = results, "62-sft-delivery", LABEL


def test_62_resume_reload_and_merge_reproduce_and_a_changed_byte_asks_for_a_rerun(chain):
    results, refs = chain
    report, manifest = refs["62"]["evaluation"].load(), refs["62"]["manifest"].load()
    k = report["checkpoint_step"]
    assert report["resumed"]["optimiser_steps"][0] == k + 1
    assert report["resumed"]["losses"] == report["runs"]["1"]["losses"][k:]
    assert report["resumed"]["adapter_sha256"] == report["runs"]["1"]["adapter_sha256"]
    assert report["reloaded"]["eval_loss"] == report["in_process_validation"]["eval_loss"]
    assert report["merged"]["within_tolerance"] and report["merged"]["max_logit_difference"] <= delivery.MERGE_TOLERANCE
    delivered = [entry for entry in manifest["outputs"] if entry["role"].startswith("delivery/")]
    assert all(sha256_file(results / entry["path"]) == entry["sha256"] for entry in delivered)
    copy = results.parent / "changed"
    shutil.copytree(results, copy)
    folder = delivery.delivery_folder(_Sink(copy))
    adapter = folder / "adapter" / "adapter_model.safetensors"
    data = bytearray(adapter.read_bytes())
    data[-1] ^= 1
    adapter.write_bytes(bytes(data))
    files = {"recorded": report["files"]["recorded"], "found": {path: digest for path, digest in file_hashes(folder).items()
                                                                if path in report["files"]["recorded"]}}
    resume = {"reference_losses": report["runs"]["1"]["losses"], "checkpoint_step": k,
              "resumed_losses": report["resumed"]["losses"], "resumed_first_step": report["resumed"]["optimiser_steps"][0]}
    reload = {"in_process": report["in_process_validation"]["eval_loss"], "reloaded": report["reloaded"]["eval_loss"]}
    state = delivery_gates.delivery_state({"matches": True, "mismatches": []},
                                          delivery_gates.artifact_checks(files, resume, reload),
                                          report["evaluation_gates"])
    assert state["state"] == "needs_rerun" and state["reasons"] == ["files_intact:changed:adapter/adapter_model.safetensors"]


def test_62_merged_export_equals_base_plus_adapter_within_the_tolerance(chain):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tools.experiments.sft_chain.training import load_base

    results, _ = chain
    folder = delivery.delivery_folder(_Sink(results))
    base, _, _ = load_base("lab", "local", "float32", "cpu")
    adapted = PeftModel.from_pretrained(base, str(folder / "adapter")).eval()
    merged = AutoModelForCausalLM.from_pretrained(folder / "merged").eval()
    ids = torch.arange(5, 45).reshape(2, 20)
    with torch.no_grad():
        gap = float((merged(input_ids=ids).logits - adapted(input_ids=ids).logits).abs().max())
    assert gap <= delivery.MERGE_TOLERANCE


def test_62_ships_a_model_card_a_sealed_rollback_and_no_machine_path(chain):
    results, refs = chain
    manifest, report = refs["62"]["manifest"].load(), refs["62"]["evaluation"].load()
    interface = manifest["delivery"]
    card = (results / interface["model_card"]["path"]).read_text(encoding="utf-8")
    for expected in (report["model"]["base_revision"], report["config"]["data_sha256"], "## Known limits",
                     "| evaluation |", "| base_skill_heldout |", "QLoRA branch (project 65)", "answer gain over the base"):
        assert expected in card, expected
    rollback = json.loads((results / interface["rollback_manifest"]["path"]).read_text(encoding="utf-8"))
    assert rollback[SEAL_FIELD] == _seal_of(rollback) and sha256_file(
        results / interface["rollback_manifest"]["path"]) == interface["rollback_manifest"]["sha256"]
    assert rollback["rollback_to"]["model_id"] == "lab" and rollback["rollback_to"]["weights_sha256"]
    machine = re.compile(r"(/home/|/root/|/work/|/tmp/|/Users/|[A-Za-z]:\\\\)")
    for path in sorted(results.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        assert str(results).encode() not in data, path
        if path.suffix in (".json", ".md", ".jinja", ".txt"):
            assert not machine.search(data.decode("utf-8")), path
    upstream = require_manifest(results, chapter_id="62", slug="62-sft-delivery", label=LABEL, run_mode="cpu_smoke",
                                promised_sha256=refs["62"]["manifest"].sha256, decisions=("delivered",))
    assert upstream.record["delivery"]["adapter"]["adapter_sha256"] == report["runs"]["1"]["adapter_sha256"]


def test_the_evaluation_split_was_opened_once_by_62_only(chain):
    results, refs = chain
    receipts = sorted((results / "64-sft-data-admission" / "evaluation_reads").rglob("*.json"))
    assert [path.name for path in receipts] == [f"62_{LABEL}.json"]
    assert refs["62"]["evaluation"].load()["evaluation_split"]["earlier_reads"] == []


# ---- a forgotten skill, planted ----------------------------------------------------------------------

def test_a_delivery_that_forgets_the_base_skill_is_rejected_and_nothing_is_delivered(chain, tmp_path):
    """63's manifest edited to select the no-replay configuration and sealed again (no promise in cpu_smoke:
    the seal alone cannot see it). 62 trains it, the base's addition collapses on the held-out suite, and the
    delivery is rejected: no model card, no merged export listed, no rollback manifest, and a downstream
    project that starts only from a delivered manifest is refused."""
    results, refs = chain
    copy = tmp_path / "results"
    shutil.copytree(results, copy, ignore=shutil.ignore_patterns("62-sft-delivery", "evaluation_reads"))
    path = copy / refs["63"]["manifest"].path.relative_to(results)
    record = json.loads(path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    record["selected_config"]["replay_fraction"] = 0.0
    record["chosen_adapter"] = None  # no run of 63 trained this configuration
    path.write_bytes(encode_record(seal(record)))
    refs_62 = {ref.stage: ref for ref in run(Plan(experiment="sft_delivery", chapter="62", run_mode="cpu_smoke",
                                                  label=LABEL, results_dir=copy))}
    manifest, report = refs_62["manifest"].load(), refs_62["evaluation"].load()
    assert manifest["decision"]["decision"] == "rejected", manifest["decision"]
    assert "evaluation:base_skill_kept" in manifest["decision"]["reasons"]
    assert report["effects"]["base_skill_change"]["mean"] < -delivery.REGRESSION_TOLERANCE
    assert sorted(refs_62) == ["evaluation", "manifest"] and manifest["delivery"] is None
    folder = delivery.delivery_folder(_Sink(copy))
    assert not (folder / "adapter" / "README.md").exists()
    assert not any(entry["role"] == "rollback_manifest" for entry in manifest["outputs"])
    from tools.errors import UpstreamRecordError

    with pytest.raises(UpstreamRecordError, match="decided 'rejected'.*starts only from 'delivered'.*nothing is delivered"):
        require_manifest(copy, chapter_id="62", slug="62-sft-delivery", label=LABEL, run_mode="cpu_smoke",
                         decisions=("delivered",), reader="project 84")
    # Step 5 runs the learner's delivery_state: one that never reads the evaluation delivers the same adapter
    from planted import learner_mechanism, mutant

    exercise, function = mutant("62", "evaluation_ignored", {"NEXT_ACTIONS": delivery_gates.NEXT_ACTIONS})
    planted = {ref.stage: ref for ref in run(Plan(experiment="sft_delivery", chapter="62", run_mode="cpu_smoke",
                                                  label="planted_62", results_dir=copy,
                                                  options={"upstream_label": LABEL},
                                                  mechanism=learner_mechanism({exercise: function})))}
    assert planted["manifest"].load()["decision"]["decision"] == "delivered"
    assert planted["evaluation"].load()["mechanism"]["delivery_state"]["source"] == "learner"


# ---- a re-sealed selection without a promise ------------------------------------------------------------

def test_a_resealed_selection_without_a_promise_is_blocked_by_the_identity_read_from_the_files(chain, tmp_path):
    """63's manifest edited to another rank (one 63 did not choose) and sealed again, with no sha256 promised
    (cpu_smoke): the seal cannot see it, but 62 trains that rank, reads back an adapter whose hash is not the
    chosen run's, and blocks: nothing is delivered."""
    results, refs = chain
    copy = tmp_path / "results"
    shutil.copytree(results, copy, ignore=shutil.ignore_patterns("62-sft-delivery", "evaluation_reads"))
    selected = refs["63"]["manifest"].load()["selected_config"]
    if selected is None:
        pytest.skip("this run chose no rank")
    other = next(rank for rank in selection.RANKS if rank != selected["rank"])
    path = copy / refs["63"]["manifest"].path.relative_to(results)
    record = json.loads(path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    record["selected_config"]["rank"] = other
    record["decision"]["chosen_rank"] = other
    path.write_bytes(encode_record(seal(record)))
    refs_62 = {ref.stage: ref for ref in run(Plan(experiment="sft_delivery", chapter="62", run_mode="cpu_smoke",
                                                  label=LABEL, results_dir=copy))}
    manifest, report = refs_62["manifest"].load(), refs_62["evaluation"].load()
    assert report["used"]["rank"] == other  # what the files say was trained
    assert manifest["decision"]["decision"] == "blocked", manifest["decision"]
    assert "mismatch:adapter_sha256" in manifest["decision"]["reasons"]
    assert manifest["delivery"] is None and sorted(refs_62) == ["evaluation", "manifest"]
    assert not (delivery.delivery_folder(_Sink(copy)) / "adapter" / "README.md").exists()
    # nothing measured on the evaluation split could change a blocked state: it stays sealed
    assert report["evaluation_split"] is None and report["effects"] is None
    assert not list(copy.rglob("evaluation_reads/*/*.json")), "a read receipt was written"
    assert [gate["name"] for gate in manifest["gates"] if not gate["passed"]][-1] == "final_report"
    assert {entry["role"] for entry in manifest["inputs"]}.isdisjoint({"evaluation_split", "evaluation_read_receipt"})
    from tools.chapters import sft_delivery as page

    assert "still sealed" in page.report_lines(report) and page.findings(report)[0].startswith("评测切分：没有打开")
    assert page.draw_delivery(report).axes


# ---- 84: offline DPO from 62's delivered adapter (the chain's first reader) --------------------------

PAIRS_MARGIN = 0.25
"""84: the DPO candidate's held-out pair accuracy (both orders) minus chance 0.5, per seed 1, 2, 3: pinned
+0.475 +0.494 +0.469, generic +0.438 +0.475 +0.456. The page claims 'above chance'; the margin asks for a
quarter more than chance, below every measured value and beyond the spread (largest interval half-width 0.047)."""
CONTROL_MARGIN = 0.5
"""84: DPO minus its mislabelled control (the same pairs swapped), held-out pair accuracy: pinned +0.950 +0.988
+0.931, generic +0.925 +0.969 +0.950."""
REGRESSION_MARGIN = 0.05
"""84: DPO minus 62's adapter on the base's own addition: pinned -0.120 -0.117 -0.133, generic -0.123 -0.116
-0.117; the page claims a loss beyond the regression tolerance (0.05). Not claimed, because it differs between
the profiles: the task change (pinned -0.106 -0.075 -0.094, generic +0.038 +0.069 +0.044) and whether the
mislabelled control keeps the base skill (pinned yes, generic no: both arms fall to about 0.61)."""


@pytest.fixture(scope="module")
def offline_dpo(chain):
    results, _ = chain
    return {ref.stage: ref for ref in run(Plan(experiment="offline_dpo", chapter="84", run_mode="cpu_smoke",
                                               label=LABEL, results_dir=results))}


@pytest.mark.effect
def test_effect_84_dpo_learns_the_held_out_preference_and_the_regression_gate_catches_what_it_costs(offline_dpo):
    report = offline_dpo["evaluation"].load()
    found = report["effects"]
    assert len(found["pair_accuracy_over_chance"]["seeds"]) >= 3
    assert effects.holds(found["pair_accuracy_over_chance"], PAIRS_MARGIN), effects.describe(found["pair_accuracy_over_chance"])
    assert effects.holds(found["pair_accuracy_over_control"], CONTROL_MARGIN), effects.describe(found["pair_accuracy_over_control"])
    skill = found["base_skill_change"]
    assert effects.holds(skill, REGRESSION_MARGIN, "less"), effects.describe(skill)
    seeds = sorted(report["arms"]["dpo"])
    control_skill = [report["arms"]["swapped"][s]["base_skill_heldout"] for s in seeds]
    manifest = offline_dpo["manifest"].load()
    assert manifest["decision"]["decision"] == "reject" and "base_skill_kept" in manifest["decision"]["reasons"]
    print(f"84 per seed: pair accuracy - 0.5 {found['pair_accuracy_over_chance']['differences']}, base skill change "
          f"{skill['differences']}, task change {found['task_gain']['differences']}, control's base skill "
          f"{control_skill} (62's adapter {report['baseline']['base_skill_heldout']})")


def test_84_a_learner_whose_regression_only_tunes_changes_the_decision(chain, offline_dpo):
    """Step 5 runs the learner's adoption_decision: a planted mutant (a lost base skill sent back to tune)
    turns the reference's reject into tune through the same run(plan) the notebook calls."""
    import math

    from planted import learner_mechanism, mutant

    results, _ = chain
    exercise, function = mutant("84", "regression_only_tunes", {"math": math, "NEXT_ACTIONS": offline_gates.NEXT_ACTIONS})
    planted = {ref.stage: ref for ref in run(Plan(
        experiment="offline_dpo", chapter="84", run_mode="cpu_smoke", label="chain_stages_84_planted",
        results_dir=results, options={"upstream_label": LABEL}, mechanism=learner_mechanism({exercise: function})))}
    reference, learner = offline_dpo["manifest"].load(), planted["manifest"].load()
    assert reference["decision"]["decision"] == "reject" and learner["decision"]["decision"] == "tune"
    assert learner["mechanism"]["adoption_decision"]["source"] == "learner"
    assert learner["mechanism"]["admit_pairs"]["source"] == "package"


# ---- 85: online reward optimisation (GRPO / RLVR) from 62's delivered adapter ------------------------

@pytest.fixture(scope="module")
def online_reward(chain):
    results, _ = chain
    return {ref.stage: ref for ref in run(Plan(experiment="online_reward", chapter="85", run_mode="cpu_smoke",
                                               label=LABEL, results_dir=results))}


@pytest.mark.effect
def test_effect_85_the_verifier_reward_not_the_update_moves_the_task(online_reward):
    """GRPO against the shuffled-reward control at the same budget (same seeds, problems, steps, rollouts and
    updates): the held-out task is higher with the verifier's reward by more than the page's margin."""
    from tools.chapters import online_reward as page

    signal = online_reward["evaluation"].load()["effects"]["reward_signal"]
    assert len(signal["seeds"]) >= 5 and effects.holds(signal, page.CONTROL_MARGIN), effects.describe(signal)


@pytest.mark.effect
def test_effect_85_grpo_on_the_new_task_costs_the_base_skill(online_reward):
    """GRPO against 62's adapter on what the input model already knew (plain sums): the whole interval is below
    -SKILL_MARGIN, which is why the regression gate is part of the adoption decision."""
    from tools.chapters import online_reward as page

    skill = online_reward["evaluation"].load()["effects"]["skill_change"]
    assert len(skill["seeds"]) >= 5 and effects.holds(skill, page.SKILL_MARGIN, "less"), effects.describe(skill)
    assert online_reward["manifest"].load()["decision"]["decision"] != "accept"
