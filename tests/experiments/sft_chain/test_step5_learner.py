"""Step 5 of each SFT project runs the learner's gate functions: a planted wrong function (a chapter mutant,
a plausible learner mistake), passed the way a notebook passes the learner's, changes what the stage
decides through the same `run(plan)` the notebook calls, and the records say the function was the
learner's. (64's papermill test with a correct, differently written function is in
tests/chapters/test_project_64.py.)"""

from __future__ import annotations

import json

import pytest
from planted import learner_mechanism, mutant

from tools.experiments.contract import Plan, run

# 63 and 65 train their matrices once more with the planted gate (about 100 CPU s); the references' runs of 64, 63
# and 65 are test_chain_stages' (conftest.py), in the same xdist group
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sft_chain")]
LABEL = "chain_stages"  # chain_upstream's label (conftest.py)


@pytest.fixture(scope="module")
def upstream(chain_upstream):
    """64, 63 and 65 with their references (the package's gates), once for the folder."""
    return chain_upstream


def planted_plan(experiment: str, chapter: str, results, label: str, name: str, namespace: dict | None = None) -> Plan:
    exercise, function = mutant(chapter, name, namespace or {"math": __import__("math")})
    return Plan(experiment=experiment, chapter=chapter, run_mode="cpu_smoke", label=label, results_dir=results,
                options={"upstream_label": LABEL}, mechanism=learner_mechanism({exercise: function}))


def test_64_a_learner_who_reports_the_evaluation_copy_rejects_the_delivery(upstream):
    """find_leaks reporting the higher split's copy flags the frozen evaluation split: the admission
    that accepts with the reference rejects with the learner's function."""
    results, refs = upstream
    assert refs["64"]["manifest"].load()["decision"]["decision"] == "accept"
    records = {ref.stage: ref for ref in run(planted_plan("sft_data_admission", "64", results, "step5_64_planted",
                                                          "higher_copy_reported", {"unicodedata": __import__("unicodedata")}))}
    manifest = records["manifest"].load()
    assert manifest["decision"]["decision"] == "reject" and "admitted_data" not in records
    assert manifest["mechanism"]["find_leaks"]["source"] == "learner"
    assert manifest["mechanism"]["merge_blockers"]["source"] == "package"


def test_63_a_learner_who_subtracts_the_other_way_finds_nothing_learned(upstream):
    results, refs = upstream
    assert refs["63"]["manifest"].load()["decision"]["decision"] == "accept"
    records = {ref.stage: ref for ref in run(planted_plan("lora_selection", "63", results, "step5_63_planted",
                                                          "gain_reversed"))}
    manifest, matrix = records["manifest"].load(), records["matrix"].load()
    assert manifest["decision"]["decision"] == "tune" and manifest["selected_config"] is None
    assert all("no_task_gain" in row["reasons"] for row in matrix["gating"]["gated"]["candidates"].values())
    assert matrix["mechanism"]["gate_candidates"]["source"] == "learner"


def test_65_a_learner_who_compares_unmeasured_ladders_claims_a_missing_gain(upstream):
    results, refs = upstream
    reference = refs["65"]["manifest"].load()["decision"]
    assert reference["reasons"][0] == "capacity_not_measured"
    records = {ref.stage: ref for ref in run(planted_plan("qlora_branch", "65", results, "step5_65_planted",
                                                          "claims_without_measurement"))}
    planted = records["manifest"].load()
    assert "capacity_not_measured" not in planted["decision"]["reasons"]
    assert "no_capacity_gain" in planted["decision"]["reasons"] and planted["next_action"] != \
        refs["65"]["manifest"].load()["next_action"]
    assert json.loads(records["pairs"].path.read_text(encoding="utf-8"))["mechanism"]["capacity_gain"]["source"] == \
        "learner"
