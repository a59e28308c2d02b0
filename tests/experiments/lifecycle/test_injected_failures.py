"""Project 86's injected failures, in a temporary folder: writer processes SIGKILLed at every kill point.

With the staged protocol and `recovery_plan`, every kill point ends in the last good state (earlier sealed
files intact, nothing unverified visible, staging empty, a second recovery with nothing to do, the new entry
whole or absent). The same kills on the in-place control lose the previous handoff. Without recovery, or
with a planted recovery that forgets sealed/ orphans, the protocol's kill points are not all recovered: the
test fails when recovery is removed. The result depends on files and processes, not on CPU arithmetic."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from pathlib import Path
from planted import mutant

from tools.experiments.lifecycle import gates, injection, store

EARLIER = {"candidate-84": b'{"decision": "reject"}' * 40, "candidate-85": b'{"decision": "tune"}' * 40,
           "rollback-62": b'{"rollback_to": "base"}' * 40}
PREVIOUS, NEW = b'{"handoff": 1}' * 300, b'{"handoff": 2}' * 400


@pytest.fixture(scope="module")
def recovered():
    return injection.run_kill_points(gates.recovery_plan, EARLIER, PREVIOUS, NEW)


def test_every_kill_point_was_reached_by_a_real_sigkill(recovered):
    points = [(row["writer"], row["kill_at"]) for row in recovered]
    assert points == [("protocol", point) for point in (*store.PROTOCOL_POINTS, "none")] + \
        [("naive", point) for point in (*store.NAIVE_POINTS, "none")]
    assert all(row["reached"] for row in recovered)
    assert all(row["exit_code"] == -9 for row in recovered if row["kill_at"] != "none")


def test_the_protocol_recovers_the_last_good_state_at_every_kill_point(recovered):
    protocol = [row for row in recovered if row["writer"] == "protocol"]
    assert all(injection.row_passed(row) for row in protocol), [row for row in protocol if not injection.row_passed(row)]
    states = {row["kill_at"]: row["new_entry"] for row in protocol}
    assert states == {"intent_logged": "absent", "artefact_partial": "absent", "artefact_staged": "absent",
                      "manifest_staged": "absent", "artefact_published": "absent", "manifest_published": "sealed",
                      "none": "sealed"}
    half = next(row for row in protocol if row["kill_at"] == "artefact_published")
    assert half["unverified_before_recovery"] == ["sealed/handoff-2.artefact"], "the crash left an orphan to clean"


def test_the_in_place_control_loses_the_previous_handoff(recovered):
    naive = {row["kill_at"]: row for row in recovered if row["writer"] == "naive"}
    for point in store.NAIVE_POINTS:
        assert not naive[point]["earlier_intact"] and not naive[point]["handoff_available"], point
        assert naive[point]["plan"]["damaged"] == ["handoff"], "the journal of the earlier seal reports the loss"
    assert injection.row_passed(naive["none"])


def test_without_recovery_the_protocol_kill_points_are_not_recovered():
    rows = injection.run_kill_points(None, EARLIER, PREVIOUS, NEW, writers=("protocol",))
    failed = [row["kill_at"] for row in rows if not injection.row_passed(row)]
    assert failed == ["artefact_partial", "artefact_staged", "manifest_staged", "artefact_published"], failed


def test_a_recovery_that_forgets_sealed_orphans_fails_the_experiment():
    _, staging_only = mutant("86", "staging_only", {"hashlib": hashlib, "json": json, "re": re})
    rows = injection.run_kill_points(staging_only, EARLIER, PREVIOUS, NEW, writers=("protocol",))
    assert [row["kill_at"] for row in rows if not injection.row_passed(row)] == ["artefact_published"]


def test_the_protocol_syncs_each_file_before_its_rename_and_logs_the_seal_last(tmp_path, monkeypatch):
    """The order SIGKILL cannot show (it keeps the page cache): each staged file is fsynced before it is renamed,
    each rename is followed by an fsync of its folder, the intent comes first and the journal's seal last."""
    import os

    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        return real_fsync(descriptor)

    def replace(source, target):
        events.append(("replace", str(source), str(target)))
        return real_replace(source, target)

    monkeypatch.setattr(store.os, "fsync", fsync)
    monkeypatch.setattr(store.os, "replace", replace)
    root = tmp_path.resolve()
    store.prepare(root)
    store.publish(root, "entry", b"payload")
    synced = [event[1] for event in events if event[0] == "fsync"]
    renames = [index for index, event in enumerate(events) if event[0] == "replace"]
    assert len(renames) == 2 and events[renames[1]][2].endswith("sealed/entry.manifest"), events
    for index in renames:
        source, target = events[index][1], events[index][2]
        assert ("fsync", source) in events[:index], f"{source} renamed before it was synced"
        assert ("fsync", str(Path(target).parent)) in events[index + 1:], f"{target}'s folder never synced"
    journal = str(root / store.JOURNAL)
    assert synced[0] == journal and synced[-1] == journal, "intent first, seal last"
    assert [line for line in (root / store.JOURNAL).read_text().splitlines()] == [
        '{"name": "entry", "op": "intent"}', '{"name": "entry", "op": "sealed"}']
