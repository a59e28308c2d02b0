"""Project 86's stage: the lifecycle checks and the injected-failure recovery, then the handoff.

Before any work the runner reads 84's and 85's sealed candidate manifests (present, promised sha256
(required in real_gpu), seal, run mode, label; any decision: a candidate that was not adopted is
still accounted for) and 62's delivery manifest of the same label (the delivery that serves now) with
its sealed rollback manifest. Nothing is trained. Then, with the plan's four functions (the
learner's when the notebook passes them, else `tools.experiments.lifecycle.gates`):

1. `policy_freshness`: each candidate's producing version (62's manifest and adapter it started from,
   run mode, decision) against the delivery that serves now;
2. `verify_artefacts`: every file 84, 85 and 62 promised (their outputs, 62's delivered adapter and
   the rollback manifest) read and hashed;
3. the kill-point experiment (`injection`): writer processes SIGKILLed at every point of the staged
   protocol and of the naive in-place control, each recovered with `recovery_plan` and checked;
4. the handoff store of this run (`<slug>/<slug>_store_<label>/`): the upstream manifests published
   into it through the protocol, then `recovery_plan` on it, and `handoff_state` on the three results.

Records: `evidence` (the lifecycle evidence: freshness, verification, every kill-point row, the store's
recovery plan) and the sealed handoff `manifest` (state, reasons, serving adapter and its sha256, the
rollback target, the upstream manifests' sha256). A protocol kill point that did not end in the last
good state blocks the handoff (`injected_failure_not_recovered`), whatever the learner's function said.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from tools.core.catalog import find_chapter
from tools.core.handoff import check_manifest_body, fix_command, require_manifest, seal
from tools.core.records import load_record
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.lifecycle import gates as package_gates
from tools.experiments.lifecycle import injection, store

CHAPTER_ID = "86"
GATE_NAMES = ("policy_freshness", "verify_artefacts", "recovery_plan", "handoff_state")
RECORD_STAGES = ("evidence", "manifest")
EVIDENCE_SCHEMA = "lifecycle-evidence/v1"
MANIFEST_SCHEMA = "lifecycle-handoff-manifest/v1"
CANDIDATE_SCHEMAS = {"84": "offline-dpo-candidate-manifest/v1", "85": "online-reward-manifest/v1"}
"""84's and 85's manifest schemas (a test ties them to the stages that write them)."""
DELIVERY_ID, DELIVERY_SCHEMA = "62", "sft-delivery-manifest/v2"
ROLLBACK_SCHEMA = "sft-delivery-rollback/v1"
ADAPTER_FILE = "adapter_model.safetensors"
NEXT_ACTIONS = {
    "ready_candidate": "adopt the candidate this manifest names: serve its adapter (sha256 checked at load); the "
                      "rollback target stays 62's rollback manifest",
    "ready_delivery": "adopt no candidate: 62's delivered adapter keeps serving (sha256 checked at load); the rollback "
                      "target stays 62's rollback manifest; rerun 84 or 85 under a new label with the changes their "
                      "reasons name",
    "blocked": "hand on nothing new: keep what serves now, fix what the reasons name (rerun the chain under a new "
               "label, or repair the store with recovery_plan), then run 86 again",
}


def describe(run_mode: str) -> str:
    return (f"lifecycle_recovery ({run_mode}): reads 84's and 85's candidate manifests and 62's delivery and rollback "
            "manifests, checks freshness and every promised sha256, SIGKILLs a writer at each kill point of the "
            "staged protocol and of an in-place control, recovers, and writes the lifecycle evidence and the sealed "
            "handoff manifest; nothing is trained")


def promised(options, upstream_id: str) -> str | None:
    value = options.get("upstream_sha256") or {}
    if isinstance(value, (list, tuple)):
        value = dict(value)
    if not isinstance(value, dict):
        raise ConfigError(f"UPSTREAM_SHA256 must be a dict {{project id: sha256}}, got {value!r}")
    return value.get(upstream_id)


def read_upstreams(plan, sink) -> dict:
    """84's, 85's and 62's manifests, every handoff check passed (module docstring)."""
    label = plan.options.get("upstream_label") or sink.run_label
    if plan.run_mode == "real_gpu":
        missing = [pid for pid in CANDIDATE_SCHEMAS if promised(plan.options, pid) is None]
        if missing:
            raise ConfigError(f"project 86 in real_gpu needs UPSTREAM_SHA256 for {', '.join(missing)}: the seal alone "
                              f"does not catch a manifest edited and sealed again. Nothing was run. Fix: "
                              f"{fix_command(CHAPTER_ID, plan.run_mode)}")
    schemas = {**CANDIDATE_SCHEMAS, DELIVERY_ID: DELIVERY_SCHEMA}
    return {pid: require_manifest(sink.results_root, chapter_id=pid, slug=find_chapter(pid).slug, label=label,
                                  run_mode=plan.run_mode, promised_sha256=promised(plan.options, pid),
                                  schema_version=schema, decisions=("delivered",) if pid == DELIVERY_ID else None,
                                  reader="project 86", reader_id=CHAPTER_ID)
            for pid, schema in schemas.items()}


def _input(record: dict, role: str) -> dict:
    entry = next((item for item in record.get("inputs", []) if item.get("role") == role), None)
    if entry is None:
        raise UpstreamRecordError(f"a candidate manifest lists no input {role!r}; another version of the course wrote "
                                  "it. Nothing was run.", stage="manifest")
    return entry


def candidate_rows(upstreams: dict, root: Path) -> list[dict]:
    """What each candidate manifest says produced its artefact (policy_freshness's input)."""
    rows = []
    for pid in CANDIDATE_SCHEMAS:
        record = upstreams[pid].record
        started = _input(record, "upstream_manifest")
        candidate = record.get("candidate")
        if pid == "84":
            artefact = None if candidate is None else f"{candidate['folder']}/{ADAPTER_FILE}"
            artefact_sha = None if candidate is None else candidate["files"][ADAPTER_FILE]
            if candidate is not None:
                adapter_sha = candidate["trained_from"]["adapter_sha256"]
            else:  # no candidate was trained: the adapter of the delivery it read (path and sha256 checked)
                delivery = load_record(root / started["path"], expected_sha256=started["sha256"])
                adapter_sha = delivery["delivery"]["adapter"]["adapter_sha256"]
        else:
            artefact, artefact_sha = candidate["adapter_file"], candidate["adapter_file_sha256"]
            adapter_sha = candidate["started_from"]["adapter_sha256"]
        rows.append({"project": pid, "artefact": artefact, "artefact_sha256": artefact_sha,
                     "run_mode": record["run_mode"], "decision": record["decision"]["decision"],
                     "upstream_manifest_sha256": started["sha256"], "upstream_adapter_sha256": adapter_sha})
    return rows


def promised_files(upstreams: dict, root: Path) -> list[dict]:
    """Every file a manifest promised: 84's and 85's outputs, 62's delivered adapter and rollback manifest."""
    entries = []
    for pid in (*CANDIDATE_SCHEMAS, DELIVERY_ID):
        manifest = upstreams[pid].path.relative_to(root).as_posix()
        outputs = upstreams[pid].record["outputs"]
        if pid == DELIVERY_ID:
            outputs = [entry for entry in outputs if entry["role"] == "rollback_manifest"
                       or entry["role"].startswith("delivery/adapter/")]
        entries += [{"manifest": manifest, "path": entry["path"], "sha256": entry["sha256"]} for entry in outputs]
    return entries


def read_found(entries: list[dict], root: Path) -> dict[str, bytes]:
    """The bytes of every promised file that exists (a missing one is absent: the check names it)."""
    found = {}
    for entry in entries:
        path = root / entry["path"]
        if path.is_file():
            found[entry["path"]] = path.read_bytes()
    return found


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    if not plan.writes:
        say(describe(plan.run_mode))
        return
    fns = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(package_gates, name)) for name in GATE_NAMES})
    mechanism = plan.mechanism.describe({name: getattr(package_gates, name) for name in GATE_NAMES})
    sink.require_new(RECORD_STAGES)
    root = sink.results_root
    store_root = root / sink.slug / f"{sink.slug}_store_{sink.run_label}"
    if store_root.exists():
        raise RecordExistsError(f"{store_root} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    upstreams = read_upstreams(plan, sink)
    say(describe(plan.run_mode))
    delivery = upstreams[DELIVERY_ID].record["delivery"]
    serving = {"run_mode": plan.run_mode, "manifest_sha256": upstreams[DELIVERY_ID].sha256,
               "adapter_sha256": delivery["adapter"]["adapter_sha256"]}
    candidates = candidate_rows(upstreams, root)
    freshness = fns.policy_freshness(candidates, serving)
    entries = promised_files(upstreams, root)
    verification = fns.verify_artefacts(entries, read_found(entries, root))

    manifest_bytes = {pid: upstreams[pid].path.read_bytes() for pid in upstreams}
    rollback_entry = upstreams[DELIVERY_ID].output("rollback_manifest")
    rollback_bytes = (root / rollback_entry["path"]).read_bytes() if (root / rollback_entry["path"]).is_file() else b""
    earlier = {"candidate-84": manifest_bytes["84"], "candidate-85": manifest_bytes["85"], "rollback-62": rollback_bytes}
    kills = injection.run_kill_points(fns.recovery_plan, earlier, manifest_bytes[DELIVERY_ID],
                                      json.dumps({"freshness": freshness, "verification": verification},
                                                 sort_keys=True).encode("utf-8"))
    for row in kills:
        row["passed"] = injection.row_passed(row)
    protocol_ok = all(row["passed"] for row in kills if row["writer"] == "protocol")

    store.prepare(store_root)
    for name, data in {**earlier, "delivery-62": manifest_bytes[DELIVERY_ID]}.items():
        store.publish(store_root, name, data)
    journal, files = store.read_store(store_root)
    recovery = fns.recovery_plan(journal, files)
    state = fns.handoff_state(freshness, verification, recovery)
    decision, reasons = state["state"], list(state["reasons"])
    if not protocol_ok:
        decision, reasons = "blocked", reasons + ["injected_failure_not_recovered"]
    adopt = state["adopt"] if decision == "ready" else None

    evidence = {"serving": serving, "candidates": candidates, "freshness": freshness, "promised": entries,
                "verification": verification,
                "kill_points": kills, "store": {"folder": store_root.relative_to(root).as_posix(), "journal": journal,
                                                "recovery": recovery},
                "handoff_state": state, "mechanism": mechanism,
                "writers": {name: {"previous": previous, "new": new, "kill_points": list(points)}
                            for name, (previous, new, points) in injection.WRITERS.items()}}
    evidence_path, _ = sink.save_record("evidence", evidence, schema_version=EVIDENCE_SCHEMA)

    adapter_files = delivery["adapter"]["files"]
    if adopt is not None:
        chosen = next(row for row in candidates if row["project"] == adopt)
        serving_adapter = {"source": f"project {adopt}'s candidate", "file": chosen["artefact"],
                           "sha256": chosen["artefact_sha256"]}
    else:
        serving_adapter = {"source": "project 62's delivered adapter",
                           "file": f"{delivery['adapter']['folder']}/{ADAPTER_FILE}",
                           "sha256": adapter_files[ADAPTER_FILE]}
    rollback_record = upstreams[DELIVERY_ID].record.get("delivery", {})
    kill_rows = [row for row in kills if row["writer"] == "protocol"]
    body = {
        "inputs": [upstreams[pid].entry(root) for pid in (*CANDIDATE_SCHEMAS, DELIVERY_ID)]
        + [{"role": "rollback_manifest", "path": rollback_entry["path"], "sha256": rollback_entry["sha256"]}],
        "candidates": [{"project": row["project"], "artefact": row["artefact"], "decision": row["decision"],
                        "current": row["current"], "adoptable": row["adoptable"], "reasons": row["reasons"],
                        "produced_by": row["produced_by"]} for row in freshness],
        "gates": [
            {"name": "candidates_current", "threshold": "every candidate built on the serving delivery",
             "measured": {row["project"]: row["current"] for row in freshness},
             "passed": all(row["current"] for row in freshness)},
            {"name": "artefacts_intact", "threshold": verification["checked"],
             "measured": len(verification["verified"]), "passed": verification["intact"]},
            {"name": "store_recovered", "threshold": "nothing damaged, nothing pending",
             "measured": {key: len(recovery[key]) for key in ("damaged", "remove", "journal_append")},
             "passed": not recovery["damaged"] and not recovery["remove"] and not recovery["journal_append"]},
            {"name": "kill_points_recovered", "threshold": len(kill_rows),
             "measured": sum(row["passed"] for row in kill_rows), "passed": protocol_ok},
        ],
        "decision": {"decision": decision, "reasons": reasons},
        "next_action": NEXT_ACTIONS["blocked" if decision == "blocked"
                                    else "ready_candidate" if adopt else "ready_delivery"],
        "outputs": [{"role": "lifecycle_evidence", **sink.lineage(evidence_path)}],
        "handoff": {"state": decision, "reasons": reasons, "adopt": adopt, "serving_adapter": serving_adapter,
                    "rollback_target": {"manifest": rollback_entry["path"], "sha256": rollback_entry["sha256"],
                                        "delivered_adapter_sha256": rollback_record.get("adapter", {}).get(
                                            "adapter_sha256")},
                    "upstream_manifest_sha256": {pid: upstreams[pid].sha256 for pid in upstreams}},
        "mechanism": mechanism,
    }
    check_manifest_body(body)
    record = {**sink.header("manifest", MANIFEST_SCHEMA), "runtime": sink.runtime(), **body}
    ref = sink.save(sink.record_path("manifest"), seal(record), stage="manifest")
    say(f"86 handoff: {decision} {reasons or ''}; serving {serving_adapter['source']}; manifest {ref.path.name}")
