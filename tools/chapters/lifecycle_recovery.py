"""Project 86's page code: the protocol check of its framework cell, the tables and sentences of Step 5,
the picture, and the recheck of the recorded handoff state with the page's own functions. Nothing
here prints; sentences come from `lesson_text` (section `lifecycle_recovery`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.experiments.lifecycle import gates


def protocol_check(verify: Callable) -> dict:
    """What the protocol relies on, checked on this machine: `os.replace` swaps a file whole, `os.fsync`
    works on files and folders, and `verify` agrees with the package's check on the same bytes."""
    with tempfile.TemporaryDirectory(prefix="lifecycle_check_") as folder:
        root = Path(folder)
        (root / "target").write_bytes(b"old version")
        (root / "staged").write_bytes(b"new version, longer")
        os.replace(root / "staged", root / "target")
        replaced = (root / "target").read_bytes() == b"new version, longer" and not (root / "staged").exists()
        try:
            with open(root / "target", "rb+") as handle:
                os.fsync(handle.fileno())
            descriptor = os.open(root, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            synced = True
        except OSError:
            synced = False
    files = {"a.bin": b"weights", "b.json": b"{}", "c.txt": b"card"}
    promised = [{"manifest": "m.json", "path": "a.bin", "sha256": hashlib.sha256(b"weights").hexdigest()},
                {"manifest": "m.json", "path": "b.json", "sha256": hashlib.sha256(b"{ }").hexdigest()},
                {"manifest": "n.json", "path": "d.txt", "sha256": hashlib.sha256(b"card").hexdigest()}]
    mine, package = verify(promised, files), gates.verify_artefacts(promised, files)
    return {"replace_atomic": replaced, "fsync_available": synced, "hashes_match": mine == package,
            "failures": [(failure["path"], failure["problem"]) for failure in package["failures"]]}


def protocol_lines(check: Mapping) -> str:
    return "\n".join([f"os.replace swaps the whole file: {check['replace_atomic']}",
                      f"os.fsync on a file and on its folder: {check['fsync_available']}",
                      f"your verify_artefacts == hashlib sha256 check of the package: {check['hashes_match']} "
                      f"(failures {check['failures']})"])


def mechanism_line(record: Mapping) -> str:
    """Which of the four functions Step 5 ran (the learner's, the reference, the package's), from a record."""
    functions = ", ".join(f"{name} ({entry['source']})" for name, entry in record.get("mechanism", {}).items())
    return lesson_text.text("lifecycle_recovery.mechanism", functions=functions)


def freshness_table(evidence: Mapping) -> str:
    serving = evidence["serving"]
    lines = [f"serving now: 62's manifest {serving['manifest_sha256'][:12]}, adapter {serving['adapter_sha256'][:12]} "
             f"({serving['run_mode']})",
             f"{'project':<9}{'decision':<10}{'started from 62':<18}{'current':<9}{'adoptable':<11}reasons"]
    for row in evidence["freshness"]:
        lines.append(f"{row['project']:<9}{row['decision']:<10}{row['produced_by']['manifest_sha256'][:12]:<18}"
                     f"{str(row['current']):<9}{str(row['adoptable']):<11}{', '.join(row['reasons']) or '-'}")
    return "\n".join(lines)


def verification_lines(evidence: Mapping) -> str:
    verification = evidence["verification"]
    manifests = sorted({entry["manifest"] for entry in evidence.get("promised", [])})
    lines = [f"files checked {verification['checked']}, verified {len(verification['verified'])}, "
             f"intact {verification['intact']}" + (f" (manifests: {', '.join(manifests)})" if manifests else "")]
    lines += [f"  FAILED {failure['problem']}: {failure['path']} (promised by {failure['manifest']})"
              for failure in verification["failures"]]
    return "\n".join(lines)


def kill_table(evidence: Mapping) -> str:
    lines = [f"{'writer':<10}{'kill point':<20}{'exit':>5}  {'bad files before':>16}  {'after':>5}  "
             f"{'earlier intact':<15}{'new entry':<10}{'handoff':<8}passed"]
    for row in evidence["kill_points"]:
        lines.append(f"{row['writer']:<10}{row['kill_at']:<20}{row['exit_code']:>5}  "
                     f"{len(row['unverified_before_recovery']):>16}  {len(row['unverified_after']):>5}  "
                     f"{str(row['earlier_intact']):<15}{row['new_entry']:<10}{str(row['handoff_available']):<8}"
                     f"{row['passed']}")
    return "\n".join(lines)


def findings(evidence: Mapping, manifest: Mapping) -> list[str]:
    """The page's sentences, each from a recorded figure."""
    rows = evidence["kill_points"]
    protocol = [row for row in rows if row["writer"] == "protocol" and row["kill_at"] != "none"]
    naive = [row for row in rows if row["writer"] == "naive" and row["kill_at"] != "none"]
    stale = [row["project"] for row in evidence["freshness"] if not row["current"]]
    lines = [lesson_text.text("lifecycle_recovery.stale", projects=", ".join(stale)) if stale
             else lesson_text.text("lifecycle_recovery.current", count=len(evidence["freshness"]))]
    verification = evidence["verification"]
    lines.append(lesson_text.text("lifecycle_recovery.intact", checked=verification["checked"])
                 if verification["intact"] else
                 lesson_text.text("lifecycle_recovery.not_intact", checked=verification["checked"],
                                  failed=len(verification["failures"])))
    lines.append(lesson_text.text("lifecycle_recovery.protocol", kills=len(protocol),
                                  recovered=sum(row["passed"] for row in protocol)))
    lines.append(lesson_text.text("lifecycle_recovery.naive", kills=len(naive),
                                  lost=sum(not row["earlier_intact"] for row in naive),
                                  half=sum(bool(row["unverified_before_recovery"]) for row in naive),
                                  unavailable=sum(not row["handoff_available"] for row in naive)))
    handoff = manifest["handoff"]
    serving = {"adapter": handoff["serving_adapter"]["file"], "sha": handoff["serving_adapter"]["sha256"][:12],
               "rollback": handoff["rollback_target"]["manifest"]}
    if handoff["state"] == "blocked":
        lines.append(lesson_text.text("lifecycle_recovery.blocked", reasons=", ".join(handoff["reasons"])))
    elif handoff["adopt"]:
        lines.append(lesson_text.text("lifecycle_recovery.ready_candidate", adopt=handoff["adopt"], **serving))
    else:
        lines.append(lesson_text.text("lifecycle_recovery.ready_delivery", **serving))
    return lines


def draw(evidence: Mapping):
    """Per kill point, for each writer: a handoff still available after recovery, earlier records intact."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
    for axis, writer in zip(axes, ("protocol", "naive")):
        rows = [row for row in evidence["kill_points"] if row["writer"] == writer]
        names = [row["kill_at"] for row in rows]
        positions = range(len(rows))
        axis.bar([p - 0.2 for p in positions], [int(row["handoff_available"]) for row in rows], 0.4,
                 color="tab:blue", label="a handoff version verifies")
        axis.bar([p + 0.2 for p in positions], [int(row["earlier_intact"]) for row in rows], 0.4,
                 color="tab:green", label="earlier sealed files intact")
        axis.set_xticks(list(positions), names, rotation=30, ha="right", fontsize=8)
        axis.set_title(f"{writer} writer, after recovery")
        axis.set_yticks([0, 1], ["no", "yes"])
    axes[0].legend(fontsize=8, loc="lower left")
    figure.tight_layout()
    return figure


def recheck(evidence: Mapping, freshness_fn: Callable, handoff_fn: Callable) -> dict:
    """The handoff state again, from the recorded candidates, verification and store recovery, with the
    page's own functions (the file bytes are not in the record, so the recorded verification is used)."""
    freshness = freshness_fn([dict(row) for row in evidence["candidates"]], dict(evidence["serving"]))
    if freshness != evidence["freshness"]:
        raise AssertionError("policy_freshness gives another result on the recorded candidates")
    return handoff_fn(freshness, evidence["verification"], evidence["store"]["recovery"])


def record_summary(record: Mapping) -> list[str]:
    """Lines that show project 86's handoff manifest."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    handoff = record.get("handoff") or {}
    if handoff:
        lines.append(f"handoff {handoff['state']}: serving {handoff['serving_adapter']['source']} "
                     f"{handoff['serving_adapter']['file']} sha256 {handoff['serving_adapter']['sha256'][:12]}; "
                     f"rollback target {handoff['rollback_target']['manifest']}")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines
