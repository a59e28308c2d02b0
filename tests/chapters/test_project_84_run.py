"""Project 84 in the course run (cpu_smoke, read from `course_smoke_run`, never executed again): what its
records hold, that its decision is its functions' on its own records, that the candidate manifest names
every file by sha256; and that a missing, altered, undelivered or unpromised upstream stops the stage
before any work (copies of the course run's project 62, no training)."""

from __future__ import annotations

import json
import shutil

import pytest

from tools.chapters import offline_dpo as page
from tools.core.handoff import require_manifest, seal
from tools.core.records import encode_record, sha256_file
from tools.data import preference_pairs
from tools.errors import ConfigError, UpstreamRecordError
from tools.experiments.contract import Plan, run
from tools.experiments.preference import offline_gates, offline_project

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]
SLUG, UPSTREAM_SLUG = "84-offline-dpo", "62-sft-delivery"


def records_of(course_run) -> dict:
    folder = course_run.results / SLUG
    return {stage: json.loads((folder / f"{SLUG}_{stage}_{course_run.label}.json").read_text(encoding="utf-8"))
            for stage in offline_project.RECORD_STAGES}


def test_84_reads_62s_delivery_and_hands_86_a_sealed_candidate_manifest(course_smoke_run):
    outcome = course_smoke_run.outcomes["84"]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    root, label = course_smoke_run.results, course_smoke_run.label
    manifest = require_manifest(root, chapter_id="84", slug=SLUG, label=label, run_mode="cpu_smoke",
                                schema_version=offline_project.MANIFEST_SCHEMA).record
    upstream = manifest["inputs"][0]
    assert upstream["role"] == "upstream_manifest" and upstream["path"].startswith(f"{UPSTREAM_SLUG}/")
    assert sha256_file(root / upstream["path"]) == upstream["sha256"]
    for entry in manifest["inputs"][1:] + manifest["outputs"]:
        assert sha256_file(root / entry["path"]) == entry["sha256"], entry["role"]
    candidate = manifest["candidate"]
    assert candidate["seed"] == 1 and candidate["adapter_sha256"] == candidate["files"]["adapter_model.safetensors"]
    assert {entry["role"] for entry in manifest["outputs"]} >= {f"candidate/adapter/{name}" for name in candidate["files"]}
    assert {gate["name"] for gate in manifest["gates"]} == set(offline_gates.GATES)
    assert manifest["next_action"] == offline_gates.NEXT_ACTIONS[manifest["decision"]["decision"]]
    assert {entry["source"] for entry in manifest["mechanism"].values()} == {"reference"}


def test_the_decision_is_the_gates_on_the_records_and_the_evaluation_split_is_the_pinned_one(course_smoke_run):
    records = records_of(course_smoke_run)
    report, admission, manifest = records["evaluation"], records["admission"], records["manifest"]
    again = page.recheck(report, admission, offline_gates.admit_pairs, offline_gates.independent_evaluation,
                         offline_gates.adoption_decision)
    assert (again["decision"], again["reasons"]) == (manifest["decision"]["decision"], manifest["decision"]["reasons"])
    assert report["evaluation_split"]["sha256"] == preference_pairs.pairs_sha256(preference_pairs.build_split("evaluation"))
    assert admission["admission"]["train"]["refused"] == [
        {"id": pair_id, "reasons": ["response_truncated"] if kind == "long_reply" else ["identical_responses"]}
        for pair_id, kind in sorted(admission["planted"].items()) if kind != "long_context"]
    assert admission["admission"]["train"]["prompt_truncated"] == sorted(
        pair_id for pair_id, kind in admission["planted"].items() if kind == "long_context")
    assert set(report["arms"]) == set(offline_project.ARMS) and all(len(runs) == 3 for runs in report["arms"].values())
    train_prompts = set(report["train_prompts"])
    assert not any(item["prompt"] in train_prompts for item in report["candidate_judgements"])


@pytest.fixture
def upstream_copy(course_smoke_run, tmp_path):
    """Project 62's records and files of the course run, copied: the 84 stage may read them, a test may break them."""
    results = tmp_path / "results"
    shutil.copytree(course_smoke_run.results / UPSTREAM_SLUG, results / UPSTREAM_SLUG)
    return results, course_smoke_run.label


def plan(results, upstream_label, run_mode="cpu_smoke", **options) -> Plan:
    return Plan(experiment="offline_dpo", chapter="84", run_mode=run_mode, label="refused", results_dir=results,
                options={"upstream_label": upstream_label, **options})


def test_an_altered_adapter_byte_stops_84_naming_the_file(upstream_copy):
    results, label = upstream_copy
    adapter = results / UPSTREAM_SLUG / f"{UPSTREAM_SLUG}_delivery_{label}" / "adapter" / "adapter_model.safetensors"
    data = bytearray(adapter.read_bytes())
    data[-1] ^= 1
    adapter.write_bytes(bytes(data))
    with pytest.raises(UpstreamRecordError, match="adapter_model.safetensors is changed"):
        run(plan(results, label))
    assert not (results / SLUG).exists()


def test_a_missing_an_undelivered_and_an_unpromised_upstream_stop_84_before_any_work(upstream_copy):
    results, label = upstream_copy
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        run(plan(results, "no_such_label"))
    path = results / UPSTREAM_SLUG / f"{UPSTREAM_SLUG}_manifest_{label}.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    undelivered = {key: value for key, value in record.items() if key != "seal_sha256"}
    undelivered["decision"] = {"decision": "rejected", "reasons": ["evaluation:task_gain"]}
    path.write_bytes(encode_record(seal(undelivered)))
    with pytest.raises(UpstreamRecordError, match="starts only from 'delivered'"):
        run(plan(results, label))
    with pytest.raises(ConfigError, match="UPSTREAM_SHA256"):
        run(plan(results, label, run_mode="real_gpu"))
    assert not (results / SLUG).exists()
