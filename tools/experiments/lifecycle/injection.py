"""Injected failures: a writer process SIGKILLed at each kill point, then recovered and checked.

Both writers do the same job: hand on a new version of the handoff while earlier sealed entries (the
upstream candidates' records and the previous handoff) sit in the same store.

- protocol: the new version is a new write-once entry (`handoff-2`) written through
  `store.publish` (journal, staging, fsync, atomic rename); the previous one (`handoff-1`) is never touched.
- naive (the control): the handoff is overwritten in place (`store.publish_naive` on the name `handoff`),
  no journal, no staging.

For every kill point of each writer (and one run that is not killed), a fresh store gets the earlier
entries, a child process runs the writer and kills itself at the point, then the parent reads the store,
asks `recovery_plan` (the learner's, when the notebook passes it) what to do, applies it, and checks:
every earlier sealed file still has its sha256, no file in sealed/ fails its manifest, staging is empty,
a second recovery has nothing left to do, the new entry is either sealed whole or absent, and some
handoff version still verifies (the last good state). Nothing is trained; each child is a short
standard-library process.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from tools.experiments.lifecycle import store

WRITERS = {"protocol": ("handoff-1", "handoff-2", store.PROTOCOL_POINTS),
           "naive": ("handoff", "handoff", store.NAIVE_POINTS)}
"""writer -> (the previous handoff's entry name, the new version's entry name, its kill points)."""
CHILD_TIMEOUT_S = 60


def verifying(files: Mapping[str, bytes]) -> list[str]:
    """The entry names whose manifest in sealed/ names the sha256 of the artefact beside it."""
    import json

    names = []
    for path in sorted(files):
        if path.startswith("sealed/") and path.endswith(".manifest"):
            name = path[len("sealed/"):-len(".manifest")]
            artefact = files.get(f"sealed/{name}.artefact")
            try:
                record = json.loads(files[path].decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                continue
            if artefact is not None and isinstance(record, dict) and record.get("name") == name \
                    and record.get("artefact_sha256") == hashlib.sha256(artefact).hexdigest():
                names.append(name)
    return names


def unverified_visible(files: Mapping[str, bytes]) -> list[str]:
    """The files in sealed/ that belong to no verifying entry (half-written, orphaned or altered)."""
    good = set(verifying(files))
    return sorted(path for path in files if path.startswith("sealed/")
                  and path[len("sealed/"):].rsplit(".", 1)[0] not in good)


def _child(root: Path, name: str, payload: Path, kill_at: str | None, naive: bool) -> int:
    command = [sys.executable, "-m", "tools.experiments.lifecycle.store", str(root), name, str(payload)]
    command += ["--kill-at", kill_at] if kill_at else []
    command += ["--naive"] if naive else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]),
                                                                      os.environ.get("PYTHONPATH")]))}
    return subprocess.run(command, env=env, timeout=CHILD_TIMEOUT_S, capture_output=True).returncode


def one_run(work: Path, writer: str, kill_at: str | None, earlier: Mapping[str, bytes], previous: bytes,
            new: bytes, plan_fn: Callable | None) -> dict:
    """One writer, one kill point: the store before and after recovery (module docstring).
    `plan_fn` None runs no recovery (what a reader sees right after the crash)."""
    previous_name, new_name, _ = WRITERS[writer]
    root = work / f"{writer}_{kill_at or 'none'}"
    store.prepare(root)
    for name, data in {**earlier, previous_name: previous}.items():
        store.publish(root, name, data)
    sealed_before = store.sha256_tree(root)
    payload = work / f"{writer}_{kill_at or 'none'}.payload"
    payload.write_bytes(new)
    code = _child(root, new_name, payload, kill_at, writer == "naive")
    _, crashed = store.read_store(root)
    plan = None
    if plan_fn is not None:
        journal, files = store.read_store(root)
        plan = plan_fn(journal, files)
        store.apply_plan(root, plan)
    journal, files = store.read_store(root)
    second = plan_fn(journal, files) if plan_fn is not None else None
    after = store.sha256_tree(root)
    good = verifying(files)
    new_sha = hashlib.sha256(new).hexdigest()
    if new_name in good and hashlib.sha256(files[f"sealed/{new_name}.artefact"]).hexdigest() == new_sha:
        new_state = "sealed"
    elif any(path.startswith(f"sealed/{new_name}.") for path in files) and new_name != previous_name:
        new_state = "partial"
    else:
        new_state = "absent"
    changed = sorted(path for path, digest in sealed_before.items()
                     if after.get(path) != digest and not (writer == "naive" and new_state == "sealed"
                                                           and path.startswith(f"sealed/{previous_name}.")))
    return {
        "writer": writer, "kill_at": kill_at or "none", "exit_code": code,
        "killed": code == -9, "reached": (code == -9) == (kill_at is not None),
        "unverified_before_recovery": unverified_visible(crashed),
        "staging_before_recovery": sorted(path for path in crashed if path.startswith("staging/")),
        "plan": None if plan is None else {key: plan[key] for key in ("sealed", "roll_forward", "aborted", "remove",
                                                                        "damaged")},
        "earlier_sealed": sorted(sealed_before),
        "earlier_changed": changed,
        "earlier_intact": not changed,
        "unverified_after": unverified_visible(files),
        "staging_after": sorted(path for path in files if path.startswith("staging/")),
        "second_pass_clean": None if second is None else bool(second["clean"]),
        "new_entry": new_state,
        "handoff_available": any(name in good for name in {previous_name, new_name}),
    }


def run_kill_points(plan_fn: Callable | None, earlier: Mapping[str, bytes], previous: bytes, new: bytes,
                    writers=("protocol", "naive")) -> list[dict]:
    """Every kill point of every writer (and one run of each that is not killed), each on a fresh store."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="lifecycle_kills_") as folder:
        for writer in writers:
            for kill_at in (*WRITERS[writer][2], None):
                rows.append(one_run(Path(folder), writer, kill_at, earlier, previous, new, plan_fn))
    return rows


def row_passed(row: Mapping) -> bool:
    """A run that ended in the last good state: earlier sealed files intact, nothing unverified visible,
    staging empty, a second recovery with nothing to do, the new entry whole or absent, a handoff available."""
    return (row["reached"] and row["earlier_intact"] and not row["unverified_after"] and not row["staging_after"]
            and row["second_pass_clean"] is not False and row["new_entry"] in ("sealed", "absent")
            and row["handoff_available"])
