"""A handoff store on disk: the staged publish protocol, a naive in-place writer, reading a store back
and applying a recovery plan.

Layout under a store root: `journal.jsonl` (one `{"op", "name"}` per line, appended and fsynced),
`staging/<name>.artefact|manifest` (files being written), `sealed/<name>.artefact|manifest` (published).
A manifest is `{"name", "artefact_sha256", ...}`; an entry is sealed when its manifest is in `sealed/`
and names the sha256 of the artefact beside it.

`publish` (the protocol) passes these kill points in order, each after an fsync:
`intent_logged` (journal says the entry is coming), `artefact_partial` (half the artefact's bytes in
staging), `artefact_staged`, `manifest_staged`, `artefact_published` (artefact renamed into sealed/),
`manifest_published` (manifest renamed into sealed/: the commit point), then the journal's `sealed` line.
`publish_naive` writes the artefact and then the manifest straight into sealed/, in place, with no journal
and no fsync; its kill points are `artefact_partial`, `artefact_written` and `manifest_partial`.

`python -m tools.experiments.lifecycle.store ROOT NAME PAYLOAD_FILE [--kill-at POINT] [--naive]` runs a
writer in a child process; at `POINT` the child sends itself SIGKILL (a real crash: no cleanup, no
flush of anything not yet written).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from pathlib import Path

PROTOCOL_POINTS = ("intent_logged", "artefact_partial", "artefact_staged", "manifest_staged",
                   "artefact_published", "manifest_published")
NAIVE_POINTS = ("artefact_partial", "artefact_written", "manifest_partial")
JOURNAL = "journal.jsonl"


def manifest_bytes(name: str, artefact: bytes) -> bytes:
    """The manifest that seals `artefact` under `name` (canonical JSON, newline-terminated)."""
    record = {"name": name, "artefact_sha256": hashlib.sha256(artefact).hexdigest(), "bytes": len(artefact)}
    return (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write(path: Path, data: bytes, *, sync: bool = True, kill_half: bool = False) -> None:
    with open(path, "wb") as handle:
        if kill_half:
            handle.write(data[: len(data) // 2])
            handle.flush()
            os.fsync(handle.fileno())
            _die()
        handle.write(data)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())


def _append_journal(root: Path, op: str, name: str) -> None:
    with open(root / JOURNAL, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"op": op, "name": name}, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def prepare(root: Path) -> None:
    """An empty store (folders and journal) at `root`."""
    for folder in ("staging", "sealed"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / JOURNAL).touch()


def publish(root: Path, name: str, artefact: bytes, kill_at: str | None = None) -> None:
    """The staged protocol (module docstring); `kill_at` names the point where the process kills itself."""
    def point(label: str) -> None:
        if kill_at == label:
            _die()

    staging, sealed = root / "staging", root / "sealed"
    _append_journal(root, "intent", name)
    point("intent_logged")
    _write(staging / f"{name}.artefact", artefact, kill_half=kill_at == "artefact_partial")
    point("artefact_staged")
    _write(staging / f"{name}.manifest", manifest_bytes(name, artefact))
    _fsync_dir(staging)
    point("manifest_staged")
    os.replace(staging / f"{name}.artefact", sealed / f"{name}.artefact")
    _fsync_dir(sealed)
    point("artefact_published")
    os.replace(staging / f"{name}.manifest", sealed / f"{name}.manifest")
    _fsync_dir(sealed)
    _fsync_dir(staging)
    point("manifest_published")
    _append_journal(root, "sealed", name)


def publish_naive(root: Path, name: str, artefact: bytes, kill_at: str | None = None) -> None:
    """The control: artefact then manifest written in place into sealed/, no journal, no staging."""
    sealed = root / "sealed"
    _write(sealed / f"{name}.artefact", artefact, sync=False, kill_half=kill_at == "artefact_partial")
    if kill_at == "artefact_written":
        _die()
    _write(sealed / f"{name}.manifest", manifest_bytes(name, artefact), sync=False,
           kill_half=kill_at == "manifest_partial")


def read_store(root: Path) -> tuple[list[dict], dict[str, bytes]]:
    """The journal's entries (a torn last line is dropped: it was never fsynced whole) and every file
    under staging/ and sealed/ as `{relative path: bytes}`."""
    journal = []
    for line in (root / JOURNAL).read_text(encoding="utf-8").splitlines():
        try:
            journal.append(json.loads(line))
        except json.JSONDecodeError:
            break
    files = {}
    for folder in ("staging", "sealed"):
        for path in sorted((root / folder).iterdir()):
            files[f"{folder}/{path.name}"] = path.read_bytes()
    return journal, files


def apply_plan(root: Path, plan: dict) -> None:
    """Carry out a recovery plan: remove its files, then append its journal lines (fsynced)."""
    for relative in plan["remove"]:
        (root / relative).unlink()
    for folder in ("staging", "sealed"):
        _fsync_dir(root / folder)
    for entry in plan["journal_append"]:
        _append_journal(root, entry["op"], entry["name"])


def sha256_tree(root: Path) -> dict[str, str]:
    """`{relative path: sha256}` of every file under sealed/."""
    return {f"sealed/{path.name}": hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted((root / "sealed").iterdir())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write one entry into a handoff store (a child process)")
    parser.add_argument("root", type=Path)
    parser.add_argument("name")
    parser.add_argument("payload", type=Path)
    parser.add_argument("--kill-at", default=None)
    parser.add_argument("--naive", action="store_true")
    arguments = parser.parse_args(argv)
    writer = publish_naive if arguments.naive else publish
    writer(arguments.root, arguments.name, arguments.payload.read_bytes(), arguments.kill_at)


if __name__ == "__main__":
    main()
