"""Project 86's stage on manifests built in a temporary folder (no chain run): an accepted, current candidate
is handed on with its adapter's sha256, a candidate built on an older delivery is stale even with intact
files, two adoptable candidates block, a missing file is named, and a changed manifest is refused before any
work. The page's own course-run checks are in tests/chapters/test_project_86.py."""

from __future__ import annotations

import hashlib
import json

import pytest

from tools.core.handoff import seal
from tools.core.records import encode_record, record_header
from tools.errors import UpstreamRecordError
from tools.experiments.contract import Plan, RecordSink, run
from tools.experiments.lifecycle import stage

LABEL = "lifecycle_test"
SLUGS = {"62": "62-sft-delivery", "84": "84-offline-dpo", "85": "85-online-reward-optimisation"}


def _write(root, relative, data: bytes) -> dict:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": relative, "sha256": hashlib.sha256(data).hexdigest()}


def _manifest(root, pid, schema, body) -> dict:
    record = {**record_header(schema_version=schema, chapter=pid, stage="manifest", run_mode="cpu_smoke",
                              run_label=LABEL), **body}
    return _write(root, f"{SLUGS[pid]}/{SLUGS[pid]}_manifest_{LABEL}.json", encode_record(seal(record)))


def build(root, decisions=("reject", "tune"), stale_85=False) -> dict:
    """62's delivery (adapter + rollback), then 84's and 85's candidates started from it (85 from an older one)."""
    adapter = _write(root, "62-sft-delivery/delivery/adapter/adapter_model.safetensors", b"sft lora")
    rollback = _write(root, f"62-sft-delivery/62-sft-delivery_rollback_{LABEL}.json", b'{"rollback_to": "base"}\n')
    delivery = _manifest(root, "62", stage.DELIVERY_SCHEMA, {
        "inputs": [], "candidates": [], "gates": [], "decision": {"decision": "delivered", "reasons": []},
        "next_action": "serve", "outputs": [{"role": "rollback_manifest", **rollback},
                                            {"role": "delivery/adapter/adapter_model.safetensors", **adapter}],
        "delivery": {"adapter": {"folder": "62-sft-delivery/delivery/adapter",
                                 "files": {"adapter_model.safetensors": adapter["sha256"]}, "adapter_sha256": "f" * 64}}})
    older = {"role": "upstream_manifest", "path": delivery["path"], "sha256": "0" * 64}
    started = {"role": "upstream_manifest", **delivery}
    dpo = _write(root, "84-offline-dpo/candidate/adapter/adapter_model.safetensors", b"dpo lora")
    _manifest(root, "84", stage.CANDIDATE_SCHEMAS["84"], {
        "inputs": [started], "candidates": [], "gates": [], "decision": {"decision": decisions[0], "reasons": []},
        "next_action": "x", "outputs": [{"role": "candidate/adapter/adapter_model.safetensors", **dpo}],
        "candidate": {"folder": "84-offline-dpo/candidate/adapter", "files": {"adapter_model.safetensors": dpo["sha256"]},
                      "trained_from": {"adapter_sha256": "f" * 64}}})
    grpo = _write(root, "85-online-reward-optimisation/candidate/adapter/adapter_model.safetensors", b"grpo lora")
    _manifest(root, "85", stage.CANDIDATE_SCHEMAS["85"], {
        "inputs": [older if stale_85 else started], "candidates": [], "gates": [],
        "decision": {"decision": decisions[1], "reasons": []}, "next_action": "x",
        "outputs": [{"role": "candidate/adapter/adapter_model.safetensors", **grpo}],
        "candidate": {"adapter_file": grpo["path"], "adapter_file_sha256": grpo["sha256"],
                      "started_from": {"adapter_sha256": "f" * 64}}})
    return {"dpo": dpo, "grpo": grpo, "adapter": adapter}


def run_stage(root):
    plan = Plan(experiment="lifecycle_recovery", chapter="86", run_mode="cpu_smoke", label=LABEL, results_dir=root)
    run(plan, RecordSink.for_plan(plan))
    folder = root / "86-lifecycle-recovery"
    return tuple(json.loads((folder / f"86-lifecycle-recovery_{name}_{LABEL}.json").read_text())
                 for name in ("evidence", "manifest"))


def test_nothing_adopted_hands_on_the_delivery_that_serves(tmp_path):
    files = build(tmp_path)
    evidence, manifest = run_stage(tmp_path)
    assert manifest["decision"] == {"decision": "ready", "reasons": []}
    assert manifest["handoff"]["adopt"] is None
    assert manifest["handoff"]["serving_adapter"]["sha256"] == files["adapter"]["sha256"]
    assert evidence["verification"]["checked"] == 4 and evidence["verification"]["intact"]


def test_an_accepted_current_candidate_is_handed_on_and_a_stale_one_is_not(tmp_path):
    files = build(tmp_path, decisions=("accept", "accept"), stale_85=True)
    evidence, manifest = run_stage(tmp_path)
    rows = {row["project"]: row for row in evidence["freshness"]}
    assert rows["85"]["reasons"] == ["stale_delivery"] and rows["85"]["current"] is False, "intact files, stale"
    assert manifest["decision"]["decision"] == "ready" and manifest["handoff"]["adopt"] == "84"
    assert manifest["handoff"]["serving_adapter"] == {"source": "project 84's candidate", "file": files["dpo"]["path"],
                                                      "sha256": files["dpo"]["sha256"]}


def test_two_adoptable_candidates_block(tmp_path):
    build(tmp_path, decisions=("accept", "accept"))
    _, manifest = run_stage(tmp_path)
    assert manifest["decision"] == {"decision": "blocked", "reasons": ["several_adoptable"]}
    assert manifest["handoff"]["adopt"] is None


def test_a_missing_rollback_target_blocks_and_is_named(tmp_path):
    build(tmp_path)
    (tmp_path / f"62-sft-delivery/62-sft-delivery_rollback_{LABEL}.json").unlink()
    evidence, manifest = run_stage(tmp_path)
    assert manifest["decision"] == {"decision": "blocked", "reasons": ["artefact_check_failed"]}
    assert [(f["path"], f["problem"], f["manifest"]) for f in evidence["verification"]["failures"]] == [
        (f"62-sft-delivery/62-sft-delivery_rollback_{LABEL}.json", "missing",
         f"62-sft-delivery/62-sft-delivery_manifest_{LABEL}.json")]


def test_a_changed_candidate_manifest_is_refused_before_any_work(tmp_path):
    build(tmp_path)
    path = tmp_path / f"85-online-reward-optimisation/85-online-reward-optimisation_manifest_{LABEL}.json"
    path.write_bytes(path.read_bytes().replace(b'"tune"', b'"accept"'))
    with pytest.raises(UpstreamRecordError, match="project 85"):
        run_stage(tmp_path)
    assert not (tmp_path / "86-lifecycle-recovery").exists()


def test_step5_runs_the_learners_functions_and_a_recovery_that_forgets_the_journal_blocks(tmp_path):
    """A learner whose `recovery_plan` reports a clean store whatever it finds, and whose `handoff_state` always
    says ready: the kill points expose the recovery, and the stage blocks the handoff over the learner's word."""
    from tools.experiments.contract import Mechanism
    from tools.experiments.lifecycle import gates

    def recovery_that_sees_nothing(journal, files):
        return gates.recovery_plan([], {})

    def always_ready(freshness, verification, recovery):
        return {"state": "ready", "reasons": [], "adopt": None}

    build(tmp_path)
    functions = {"recovery_plan": recovery_that_sees_nothing, "handoff_state": always_ready}
    plan = Plan(experiment="lifecycle_recovery", chapter="86", run_mode="cpu_smoke", label=LABEL, results_dir=tmp_path,
                mechanism=Mechanism(functions, {name: "learner" for name in functions}))
    run(plan, RecordSink.for_plan(plan))
    folder = tmp_path / "86-lifecycle-recovery"
    evidence, manifest = (json.loads((folder / f"86-lifecycle-recovery_{name}_{LABEL}.json").read_text())
                          for name in ("evidence", "manifest"))
    assert manifest["decision"] == {"decision": "blocked", "reasons": ["injected_failure_not_recovered"]}
    assert manifest["mechanism"]["recovery_plan"]["source"] == "learner"
    protocol = [row for row in evidence["kill_points"] if row["writer"] == "protocol" and row["kill_at"] != "none"]
    assert protocol and any(row["staging_after"] or row["unverified_after"] for row in protocol)
