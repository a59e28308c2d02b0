"""Project 86's four checks, as the lifecycle stage runs them (the notebook's TODOs teach the same
contracts; the tests bind the two together on generated inputs).

- `policy_freshness`: for every candidate, which policy version produced its artefact (the delivery
  manifest and adapter it started from, the run mode, its decision) and whether that version is still
  the delivery that serves now; a candidate built on an older delivery is stale even with intact files.
- `verify_artefacts`: every file a manifest promised, hashed end to end; a missing or altered file is a
  failure that names the file and the manifest that promised it.
- `recovery_plan`: after a crash at any point of the staged publish protocol (journal, staging, fsync,
  atomic rename), what brings the store back to its last good state: which entries are sealed, which
  are rolled forward or aborted, which files go, and which sealed entries are damaged (reported, never
  deleted).
- `handoff_state`: `ready` or `blocked` with every reason, and what the next part may serve.

Each checks its inputs before computing, raises ValueError on bad ones and leaves its arguments as they were.
Only the standard library: the store's writer runs in a child process that imports nothing heavy.
"""

from __future__ import annotations

import hashlib
import json
import re

RUN_MODES = ("cpu_smoke", "real_gpu")
DECISIONS = ("accept", "tune", "reject")
JOURNAL_OPS = ("intent", "sealed", "aborted")
FRESHNESS_REASONS = ("other_run_mode", "stale_delivery", "stale_adapter", "no_artefact", "not_accepted")
HANDOFF_REASONS = ("artefact_check_failed", "recovery_damaged", "recovery_pending", "several_adoptable")


def policy_freshness(candidates, serving):
    """Which policy version produced each candidate's artefact, and whether it is still current."""
    hexes = re.compile(r"[0-9a-f]{64}")
    run_modes, decisions = ("cpu_smoke", "real_gpu"), ("accept", "tune", "reject")

    def digest(value):
        return isinstance(value, str) and hexes.fullmatch(value) is not None

    def text(value):
        return isinstance(value, str) and value.strip() != ""

    keys = {"project", "artefact", "artefact_sha256", "run_mode", "decision", "upstream_manifest_sha256",
            "upstream_adapter_sha256"}
    if not isinstance(serving, dict) or set(serving) != {"run_mode", "manifest_sha256", "adapter_sha256"} \
            or serving["run_mode"] not in run_modes or not digest(serving["manifest_sha256"]) \
            or not digest(serving["adapter_sha256"]):
        raise ValueError("serving must be {'run_mode', 'manifest_sha256', 'adapter_sha256'} with 64 lowercase hex")
    if not isinstance(candidates, list) or not candidates:
        raise ValueError("candidates must be a non-empty list")
    seen = set()
    for candidate in candidates:
        if not isinstance(candidate, dict) or set(candidate) != keys:
            raise ValueError(f"a candidate has exactly the keys {sorted(keys)}: {candidate!r}")
        if not text(candidate["project"]) or candidate["project"] in seen:
            raise ValueError(f"project names must be non-blank and unique: {candidate['project']!r}")
        seen.add(candidate["project"])
        if candidate["run_mode"] not in run_modes or candidate["decision"] not in decisions:
            raise ValueError(f"unknown run mode or decision: {candidate!r}")
        if not digest(candidate["upstream_manifest_sha256"]) or not digest(candidate["upstream_adapter_sha256"]):
            raise ValueError(f"the upstream sha256 must be 64 lowercase hex: {candidate!r}")
        if (candidate["artefact"] is None) != (candidate["artefact_sha256"] is None) \
                or (candidate["artefact"] is not None
                    and (not text(candidate["artefact"]) or not digest(candidate["artefact_sha256"]))):
            raise ValueError(f"artefact and artefact_sha256 are both None or a path and its sha256: {candidate!r}")
    results = []
    for candidate in candidates:
        reasons = []
        if candidate["run_mode"] != serving["run_mode"]:
            reasons.append("other_run_mode")
        if candidate["upstream_manifest_sha256"] != serving["manifest_sha256"]:
            reasons.append("stale_delivery")
        if candidate["upstream_adapter_sha256"] != serving["adapter_sha256"]:
            reasons.append("stale_adapter")
        if candidate["artefact"] is None:
            reasons.append("no_artefact")
        if candidate["decision"] != "accept":
            reasons.append("not_accepted")
        current = not {"other_run_mode", "stale_delivery", "stale_adapter"} & set(reasons)
        results.append({"project": candidate["project"], "artefact": candidate["artefact"],
                        "produced_by": {"manifest_sha256": candidate["upstream_manifest_sha256"],
                                        "adapter_sha256": candidate["upstream_adapter_sha256"],
                                        "run_mode": candidate["run_mode"]},
                        "decision": candidate["decision"], "current": current, "adoptable": not reasons,
                        "reasons": reasons})
    return results


def verify_artefacts(promised, found):
    """Every promised file hashed end to end; failures name the file and the manifest that promised it."""
    hexes = re.compile(r"[0-9a-f]{64}")
    if not isinstance(promised, list) or not promised:
        raise ValueError("promised must be a non-empty list of {'manifest', 'path', 'sha256'}")
    for entry in promised:
        if not isinstance(entry, dict) or set(entry) != {"manifest", "path", "sha256"} \
                or not all(isinstance(entry[key], str) and entry[key].strip() for key in ("manifest", "path")) \
                or not isinstance(entry["sha256"], str) or hexes.fullmatch(entry["sha256"]) is None:
            raise ValueError(f"a promise is {{'manifest', 'path', 'sha256' (64 lowercase hex)}}: {entry!r}")
    if not isinstance(found, dict) or not all(isinstance(path, str) and isinstance(data, bytes)
                                              for path, data in found.items()):
        raise ValueError("found must map each path to the bytes read from it")
    verified, failures = [], []
    for entry in promised:
        path = entry["path"]
        if path not in found:
            failures.append({"manifest": entry["manifest"], "path": path, "problem": "missing",
                             "expected": entry["sha256"], "actual": None})
            continue
        actual = hashlib.sha256(found[path]).hexdigest()
        if actual == entry["sha256"]:
            verified.append(path)
        else:
            failures.append({"manifest": entry["manifest"], "path": path, "problem": "altered",
                             "expected": entry["sha256"], "actual": actual})
    return {"checked": len(promised), "verified": verified, "failures": failures, "intact": not failures}


def recovery_plan(journal, files):
    """What brings a store of the staged publish protocol back to its last good state after a crash."""
    layout = re.compile(r"(staging|sealed)/([A-Za-z0-9_.-]+)\.(artefact|manifest)")
    if not isinstance(journal, list) or not all(
            isinstance(entry, dict) and set(entry) == {"op", "name"} and entry["op"] in ("intent", "sealed", "aborted")
            and isinstance(entry["name"], str) and re.fullmatch(r"[A-Za-z0-9_.-]+", entry["name"])
            for entry in journal):
        raise ValueError("journal must be a list of {'op': intent|sealed|aborted, 'name': a plain name}")
    if not isinstance(files, dict) or not all(isinstance(path, str) and layout.fullmatch(path)
                                              and isinstance(data, bytes) for path, data in files.items()):
        raise ValueError("files must map staging/<name>.artefact|manifest or sealed/<name>.* paths to bytes")

    def sealed_in_files(name):
        artefact, manifest = files.get(f"sealed/{name}.artefact"), files.get(f"sealed/{name}.manifest")
        if artefact is None or manifest is None:
            return False
        try:
            record = json.loads(manifest.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return False
        return isinstance(record, dict) and record.get("name") == name \
            and record.get("artefact_sha256") == hashlib.sha256(artefact).hexdigest()

    names = {layout.fullmatch(path).group(2) for path in files} | {entry["name"] for entry in journal}
    sealed = sorted(name for name in names if sealed_in_files(name))
    ops = {name: [entry["op"] for entry in journal if entry["name"] == name] for name in names}
    damaged = sorted(name for name in names if "sealed" in ops[name] and name not in sealed)
    roll_forward = [name for name in sealed if "sealed" not in ops[name]]
    aborted = sorted(name for name in names if "intent" in ops[name] and name not in sealed
                     and "sealed" not in ops[name] and "aborted" not in ops[name])
    remove = sorted(path for path in files if path.startswith("staging/")
                    or layout.fullmatch(path).group(2) not in set(sealed) | set(damaged))
    return {"sealed": sealed, "roll_forward": roll_forward, "aborted": aborted, "remove": remove,
            "damaged": damaged,
            "journal_append": [{"op": "sealed", "name": name} for name in roll_forward]
            + [{"op": "aborted", "name": name} for name in aborted],
            "clean": not damaged and not remove and not roll_forward and not aborted}


def handoff_state(freshness, verification, recovery):
    """`ready` or `blocked` with every reason, and which candidate (if any) the next part may adopt."""
    if not isinstance(freshness, list) or not all(
            isinstance(item, dict) and isinstance(item.get("project"), str) and isinstance(item.get("adoptable"), bool)
            for item in freshness):
        raise ValueError("freshness must be policy_freshness's list (each with a str project and a bool adoptable)")
    if not isinstance(verification, dict) or not isinstance(verification.get("intact"), bool) \
            or not isinstance(verification.get("failures"), list) \
            or verification["intact"] != (not verification["failures"]):
        raise ValueError("verification must be verify_artefacts's result (intact exactly when no failure)")
    if not isinstance(recovery, dict) or not all(isinstance(recovery.get(key), list)
                                                 for key in ("damaged", "remove", "journal_append")):
        raise ValueError("recovery must be recovery_plan's result (damaged, remove and journal_append lists)")
    adoptable = [item["project"] for item in freshness if item["adoptable"]]
    reasons = []
    if not verification["intact"]:
        reasons.append("artefact_check_failed")
    if recovery["damaged"]:
        reasons.append("recovery_damaged")
    if recovery["remove"] or recovery["journal_append"]:
        reasons.append("recovery_pending")
    if len(adoptable) > 1:
        reasons.append("several_adoptable")
    adopt = adoptable[0] if not reasons and adoptable else None
    return {"state": "blocked" if reasons else "ready", "reasons": reasons, "adopt": adopt,
            "serving": "candidate" if adopt else "delivery"}
