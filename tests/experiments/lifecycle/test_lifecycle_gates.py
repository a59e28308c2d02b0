"""Project 86: the checks its stage runs are the checks its notebook teaches.

The notebook's reference solution is executed on its own and compared, on seeded generated inputs (valid
and not), with `tools.experiments.lifecycle.gates`: the same value or the same exception class. A planted
mutant of the notebook must differ on the same inputs (the comparison can fail)."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest
from planted import mutant, references

from tools.experiments.lifecycle import gates
from tools.experiments.lifecycle.stage import GATE_NAMES

NAMESPACE = {"hashlib": hashlib, "json": json, "re": re}
HEX = ["a" * 64, "b" * 64, "c" * 64]


@pytest.fixture(scope="module")
def notebook():
    """The notebook's reference implementations of the four graded functions."""
    return references("86", GATE_NAMES, NAMESPACE)


def outcome_of(function, *arguments):
    try:
        return function(*arguments)
    except ValueError:
        return ValueError


def candidate_sets(count=300, seed=0):
    rng = random.Random(seed)
    for _ in range(count):
        candidates = []
        for number in range(rng.randint(1, 4)):
            has = rng.random() < 0.8
            candidates.append({"project": f"p{number}", "artefact": "x" if has else None,
                               "artefact_sha256": rng.choice(HEX) if has else None,
                               "run_mode": rng.choice(["cpu_smoke", "real_gpu"]),
                               "decision": rng.choice(["accept", "tune", "reject"]),
                               "upstream_manifest_sha256": rng.choice(HEX[:2]),
                               "upstream_adapter_sha256": rng.choice(HEX[1:])})
        if rng.random() < 0.15:
            candidates[0][rng.choice(["decision", "run_mode", "upstream_manifest_sha256"])] = "A" * 64
        yield candidates, {"run_mode": "cpu_smoke", "manifest_sha256": HEX[0], "adapter_sha256": HEX[1]}


def promise_sets(count=300, seed=1):
    rng = random.Random(seed)
    for _ in range(count):
        promised, found = [], {}
        for _ in range(rng.randint(1, 5)):
            data, path = rng.choice([b"", b"a", b"weights"]), f"f{rng.randrange(3)}"
            promised.append({"manifest": f"m{rng.randrange(2)}", "path": path, "sha256": hashlib.sha256(data).hexdigest()})
            state = rng.choice(["same", "altered", "missing"])
            if state != "missing":
                found.setdefault(path, data if state == "same" else data + b"!")
        if rng.random() < 0.1:
            promised[0]["sha256"] = promised[0]["sha256"].upper()
        yield promised, found


def stores(count=300, seed=2):
    rng = random.Random(seed)
    for _ in range(count):
        journal, files = [], {}
        for number in range(rng.randint(1, 4)):
            name, data = f"e{number}", rng.choice([b"x", b"payload"])
            manifest = json.dumps({"name": name, "artefact_sha256": hashlib.sha256(data).hexdigest()}).encode()
            state = rng.choice(["staged", "half", "sealed", "torn", "mismatch", "none"])
            if state == "staged":
                files[f"staging/{name}.artefact"] = data
            elif state == "half":
                files.update({f"sealed/{name}.artefact": data, f"staging/{name}.manifest": manifest})
            elif state != "none":
                files.update({f"sealed/{name}.artefact": data + (b"!" if state == "mismatch" else b""),
                              f"sealed/{name}.manifest": manifest[:9] if state == "torn" else manifest})
            journal += [{"op": op, "name": name} for op in rng.choice([[], ["intent"], ["intent", "sealed"],
                                                                       ["intent", "aborted"]])]
        if rng.random() < 0.1:
            journal.append({"op": "commit", "name": "e0"})
        yield journal, files


def states(count=300, seed=3):
    rng = random.Random(seed)
    for _ in range(count):
        freshness = [{"project": f"p{n}", "adoptable": rng.random() < 0.4} for n in range(rng.randint(0, 3))]
        failed = rng.random() < 0.3
        recovery = {key: ["x"] if rng.random() < 0.2 else [] for key in ("damaged", "remove", "journal_append")}
        yield freshness, {"intact": not failed, "failures": [{"path": "x"}] if failed else []}, recovery


CALLS = {"policy_freshness": candidate_sets, "verify_artefacts": promise_sets, "recovery_plan": stores,
         "handoff_state": states}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_stage_check_is_the_notebook_reference(notebook, name):
    valid = 0
    for call in CALLS[name]():
        expected = outcome_of(getattr(gates, name), *call)
        valid += expected is not ValueError
        assert outcome_of(notebook[name], *call) == expected, call
    assert valid > 100, f"too few valid calls of {name} ({valid})"


@pytest.mark.parametrize("name, planted", [("policy_freshness", "intact_files_mean_current"),
                                           ("verify_artefacts", "existence_only"),
                                           ("recovery_plan", "deletes_damaged_records"),
                                           ("handoff_state", "ready_with_failed_check")])
def test_a_planted_slip_is_told_apart_on_the_same_inputs(name, planted):
    exercise, function = mutant("86", planted, dict(NAMESPACE))
    assert exercise == name
    assert any(outcome_of(function, *call) != outcome_of(getattr(gates, name), *call) for call in CALLS[name]())


def test_the_stage_reads_the_schemas_its_upstreams_write():
    from tools.experiments.lifecycle import stage
    from tools.experiments.online_rl import project_stage as online
    from tools.experiments.preference import offline_project as offline
    from tools.experiments.sft_chain import delivery

    assert stage.CANDIDATE_SCHEMAS == {"84": offline.MANIFEST_SCHEMA, "85": online.MANIFEST_SCHEMA}
    assert (stage.DELIVERY_SCHEMA, stage.ROLLBACK_SCHEMA) == (delivery.MANIFEST_SCHEMA, delivery.ROLLBACK_SCHEMA)
    assert set(stage.GATE_NAMES) == {"policy_freshness", "verify_artefacts", "recovery_plan", "handoff_state"}
