"""Project 85 through the course run in cpu_smoke (it reads 62's delivered manifest from the same run): its
records, the sealed candidate manifest 86 reads, every step's coverage and throughput re-derived from the
rollout summary, and the decision re-derived from the paired evaluation. The effects the page claims are
asserted over the seeds, under both numerics profiles, on the chain's own stage run
(tests/experiments/sft_chain/test_chain_stages.py): an effect test on the course run would rebuild the whole
course under the second profile."""

from __future__ import annotations

import json

import pytest

from tools.chapters import online_reward as page
from tools.core.handoff import require_manifest
from tools.core.records import sha256_file
from tools.experiments.online_rl import project_gates as gates
from tools.experiments.online_rl import project_stage as stage
from tools.experiments.online_rl.project_policy import verdicts_of

SLUG = "85-online-reward-optimisation"
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]


def _record(course_smoke_run, stage_name, slug=SLUG):
    return json.loads((course_smoke_run.results / slug / f"{slug}_{stage_name}_{course_smoke_run.label}.json")
                      .read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def records(course_smoke_run):
    outcome = course_smoke_run.outcomes["85"]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    return {name: _record(course_smoke_run, name) for name in stage.RECORD_STAGES}


def test_the_course_run_writes_85s_records_with_the_reference(records):
    for name, record in records.items():
        assert record["evidence_level"] == "cpu_smoke" and record["chapter"] == "85", name
        assert {entry["source"] for entry in record["mechanism"].values()} == {"reference"}, name
        assert set(record["mechanism"]) == set(stage.GATE_NAMES)


def test_the_candidate_manifest_is_sealed_and_names_what_86_needs(course_smoke_run, records):
    manifest = require_manifest(course_smoke_run.results, chapter_id="85", slug=SLUG, label=course_smoke_run.label,
                                run_mode="cpu_smoke", schema_version=stage.MANIFEST_SCHEMA)
    upstream = course_smoke_run.results / "62-sft-delivery" / f"62-sft-delivery_manifest_{course_smoke_run.label}.json"
    candidate = manifest.record["candidate"]
    assert candidate["run_mode"] == "cpu_smoke" and candidate["upstream_manifest_sha256"] == sha256_file(upstream)
    assert sha256_file(course_smoke_run.results / candidate["adapter_file"]) == candidate["adapter_file_sha256"]
    for entry in manifest.record["outputs"] + manifest.record["inputs"]:
        assert sha256_file(course_smoke_run.results / entry["path"]) == entry["sha256"], entry["role"]
    assert manifest.record["decision"]["decision"] in gates.DECISIONS
    assert manifest.record["next_action"] == gates.NEXT_ACTIONS[manifest.record["decision"]["decision"]]
    assert {gate["name"] for gate in manifest.record["gates"]} == {"effective_updates", "task_gain", "base_skill_kept",
                                                                   "resource"}


def test_every_step_passed_the_coverage_gate_before_it_updated(records):
    rollouts = records["rollouts"]
    group_size = rollouts["settings"]["group_size"]
    for name, run in rollouts["runs"].items():
        for step in run["steps"]:
            coverage = step["coverage"]
            assert coverage == gates.rollout_coverage(verdicts_of(step["verdicts"]), rollouts["settings"]["min_scoreable_share"],
                                                      rollouts["settings"]["max_truncation"],
                                                      rollouts["settings"]["max_parse_failure"]), (name, step["step"])
            expected = group_size * len(coverage["scoreable"]) if coverage["update_allowed"] else 0
            assert step["rollouts_in_loss"] == expected and (step["optimizer_steps"] > 0) == (expected > 0)
        assert run["throughput"] == gates.update_throughput(page.throughput_input(run), rollouts["min_policy_change"])


def test_the_decision_is_the_gates_on_the_recorded_evidence(records):
    evaluation, rollouts, manifest = records["evaluation"], records["rollouts"], records["manifest"]
    again = page.recheck(evaluation, rollouts, gates.rollout_coverage, gates.update_throughput,
                         gates.adoption_decision)
    assert again["coverage_same"] and again["throughput_same"]
    assert [again["decision"], again["reasons"]] == [manifest["decision"]["decision"], manifest["decision"]["reasons"]]
    assert evaluation["held_out_sizes"] == {"task_held_out": 300, "skill_held_out": 300}
    baseline = evaluation["exact_match"]["sft_adapter"]
    assert manifest["candidates"][0]["name"] == "sft_adapter" and manifest["candidates"][0]["baseline"] is True
    assert manifest["candidates"][0]["task_held_out_exact_match"] == baseline["task_held_out"]
