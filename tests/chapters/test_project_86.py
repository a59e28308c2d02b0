"""Project 86 through the course run in cpu_smoke (it reads 84's and 85's candidate manifests and 62's delivery
from the same run): its evidence and its sealed handoff manifest, every promised file it says it verified
hashed again here, the protocol's kill points recovered and the in-place control's losses recorded, and the
handoff state re-derived from the evidence. Nothing here depends on CPU arithmetic (files and processes)."""

from __future__ import annotations

import json

import pytest

from tools.core.handoff import require_manifest
from tools.core.records import sha256_file
from tools.experiments.lifecycle import gates, injection, stage

SLUG = "86-lifecycle-recovery"
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]


@pytest.fixture(scope="module")
def records(course_smoke_run):
    outcome = course_smoke_run.outcomes["86"]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    return {name: json.loads((course_smoke_run.results / SLUG / f"{SLUG}_{name}_{course_smoke_run.label}.json")
                             .read_text(encoding="utf-8")) for name in stage.RECORD_STAGES}


def test_the_handoff_manifest_is_sealed_and_names_what_serves(course_smoke_run, records):
    manifest = require_manifest(course_smoke_run.results, chapter_id="86", slug=SLUG, label=course_smoke_run.label,
                                run_mode="cpu_smoke", schema_version=stage.MANIFEST_SCHEMA).record
    for entry in manifest["inputs"] + manifest["outputs"]:
        assert sha256_file(course_smoke_run.results / entry["path"]) == entry["sha256"], entry["role"]
    handoff = manifest["handoff"]
    assert handoff["state"] == manifest["decision"]["decision"] in ("ready", "blocked")
    assert sha256_file(course_smoke_run.results / handoff["serving_adapter"]["file"]) == handoff["serving_adapter"]["sha256"]
    assert sha256_file(course_smoke_run.results / handoff["rollback_target"]["manifest"]) == \
        handoff["rollback_target"]["sha256"]
    upstream = {pid: sha256_file(course_smoke_run.results / f"{slug}/{slug}_manifest_{course_smoke_run.label}.json")
                for pid, slug in (("84", "84-offline-dpo"), ("85", "85-online-reward-optimisation"),
                                  ("62", "62-sft-delivery"))}
    assert handoff["upstream_manifest_sha256"] == upstream
    decisions = {row["project"]: row["decision"] for row in manifest["candidates"]}
    if "accept" not in decisions.values():  # cpu_smoke: 84 rejects, 85 tunes; 62's adapter keeps serving
        assert handoff["adopt"] is None and handoff["serving_adapter"]["source"] == "project 62's delivered adapter"


def test_every_promised_file_was_really_checked(course_smoke_run, records):
    evidence = records["evidence"]
    found = {entry["path"]: (course_smoke_run.results / entry["path"]).read_bytes() for entry in evidence["promised"]}
    assert gates.verify_artefacts(evidence["promised"], found) == evidence["verification"]
    assert evidence["verification"]["intact"] and evidence["verification"]["checked"] >= 10
    manifests = {entry["manifest"].split("/")[0] for entry in evidence["promised"]}
    assert manifests == {"84-offline-dpo", "85-online-reward-optimisation", "62-sft-delivery"}


def test_the_recorded_kill_points_show_the_protocol_recovering_and_the_control_losing(records):
    rows = records["evidence"]["kill_points"]
    protocol = [row for row in rows if row["writer"] == "protocol"]
    naive = [row for row in rows if row["writer"] == "naive" and row["kill_at"] != "none"]
    assert len(protocol) == 7 and all(row["passed"] and injection.row_passed(row) for row in protocol)
    assert naive and all(not row["earlier_intact"] and not row["handoff_available"] for row in naive)


def test_the_handoff_state_is_the_checks_on_the_recorded_evidence(records):
    evidence, manifest = records["evidence"], records["manifest"]
    assert gates.policy_freshness(evidence["candidates"], evidence["serving"]) == evidence["freshness"]
    state = gates.handoff_state(evidence["freshness"], evidence["verification"], evidence["store"]["recovery"])
    assert state == evidence["handoff_state"]
    assert manifest["decision"] == {"decision": state["state"], "reasons": state["reasons"]}
    assert {entry["source"] for entry in manifest["mechanism"].values()} == {"reference"}

