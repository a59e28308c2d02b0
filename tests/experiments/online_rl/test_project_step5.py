"""Step 5 of project 85 runs the learner's gate functions: a planted wrong coverage gate (a chapter mutant, a
plausible learner mistake), passed the way the notebook passes the learner's, changes what the stage decides
through the same `run(plan)` the notebook calls, and the records say the function was the learner's."""

from __future__ import annotations

import json
import shutil

import pytest
from planted_functions import learner_mechanism

from tools.experiments.contract import Plan, run

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("course_run")]  # one more 85 stage on the course run's 62


def test_a_coverage_gate_that_divides_by_rollouts_blocks_every_update(course_smoke_run, tmp_path):
    """The scoreable share over rollouts instead of groups (at most 1 / group size) refuses every batch: no
    step updates, the candidate is 62's adapter itself, and the decision is reject for no effective update,
    where the reference gate lets the batches through."""
    slug = "85-online-reward-optimisation"
    reference = json.loads((course_smoke_run.results / slug / f"{slug}_manifest_{course_smoke_run.label}.json")
                           .read_text(encoding="utf-8"))
    assert "no_effective_update" not in reference["decision"]["reasons"]
    results = tmp_path / "results"  # a copy of 62's delivery: the course run's folder stays as written
    shutil.copytree(course_smoke_run.results / "62-sft-delivery", results / "62-sft-delivery")
    plan = Plan(experiment="online_reward", chapter="85", run_mode="cpu_smoke", label="step5_85_planted",
                results_dir=results, options={"upstream_label": course_smoke_run.label},
                mechanism=learner_mechanism("85", "share_over_rollouts", tmp_path))
    records = {ref.stage: ref.load() for ref in run(plan)}
    manifest, rollouts = records["manifest"], records["rollouts"]
    assert manifest["decision"]["decision"] == "reject" and manifest["decision"]["reasons"][0] == "no_effective_update"
    assert all(step["optimizer_steps"] == 0 and step["coverage"]["reasons"] == ["too_few_scoreable"]
               for run_ in rollouts["runs"].values() for step in run_["steps"])
    assert manifest["mechanism"]["rollout_coverage"]["source"] == "learner"
    assert manifest["mechanism"]["adoption_decision"]["source"] == "package"
