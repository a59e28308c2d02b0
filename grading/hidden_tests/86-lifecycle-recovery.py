# %% hidden exercise=policy_freshness points=1 name=a_candidate_from_an_older_delivery_is_stale_with_intact_files
# hint: current compares the delivery manifest and the adapter the candidate started from with the serving ones; the candidate's own artefact and decision do not make it current.
old, new, adapter, other = "1" * 64, "2" * 64, "3" * 64, "4" * 64
serving = {"run_mode": "real_gpu", "manifest_sha256": new, "adapter_sha256": adapter}
fresh = {"project": "85", "artefact": "85/a.safetensors", "artefact_sha256": "5" * 64, "run_mode": "real_gpu",
         "decision": "accept", "upstream_manifest_sha256": new, "upstream_adapter_sha256": adapter}
stale = dict(fresh, project="84", upstream_manifest_sha256=old)
moved = dict(fresh, project="88", upstream_adapter_sha256=other)
result = policy_freshness([stale, fresh, moved], serving)
assert [(row["project"], row["current"], row["adoptable"]) for row in result] == [
    ("84", False, False), ("85", True, True), ("88", False, False)], result
assert result[0]["reasons"] == ["stale_delivery"] and result[2]["reasons"] == ["stale_adapter"]
assert result[0]["produced_by"] == {"manifest_sha256": old, "adapter_sha256": adapter, "run_mode": "real_gpu"}

# %% hidden exercise=policy_freshness points=1 name=every_reason_in_order_and_current_reads_only_the_version
# hint: reasons are other_run_mode, stale_delivery, stale_adapter, no_artefact, not_accepted in this order; a candidate with no artefact or a tune decision is still current when its version is the serving one.
new, adapter = "a" * 64, "b" * 64
serving = {"run_mode": "cpu_smoke", "manifest_sha256": new, "adapter_sha256": adapter}
base = {"project": "p", "artefact": None, "artefact_sha256": None, "run_mode": "cpu_smoke", "decision": "tune",
        "upstream_manifest_sha256": new, "upstream_adapter_sha256": adapter}
everything = dict(base, project="q", run_mode="real_gpu", upstream_manifest_sha256="c" * 64,
                  upstream_adapter_sha256="d" * 64, decision="reject")
result = policy_freshness([base, everything], serving)
assert result[0]["reasons"] == ["no_artefact", "not_accepted"] and result[0]["current"] is True, result[0]
assert result[0]["adoptable"] is False and result[0]["decision"] == "tune" and result[0]["artefact"] is None
assert result[1]["reasons"] == ["other_run_mode", "stale_delivery", "stale_adapter", "no_artefact", "not_accepted"]
assert result[1]["current"] is False

# %% hidden exercise=policy_freshness points=1 name=wrong_freshness_calls_raise_and_good_calls_do_not
# hint: a non-empty list of candidates with exactly the seven keys, unique non-blank projects, known run modes and decisions, 64 lowercase hex digests, artefact and its sha256 both None or both given; serving with exactly its three keys.
new, adapter = "a" * 64, "b" * 64
serving = {"run_mode": "cpu_smoke", "manifest_sha256": new, "adapter_sha256": adapter}
good = {"project": "84", "artefact": "x", "artefact_sha256": "c" * 64, "run_mode": "cpu_smoke", "decision": "accept",
        "upstream_manifest_sha256": new, "upstream_adapter_sha256": adapter}
assert policy_freshness([good], serving)[0]["adoptable"] is True
assert policy_freshness([dict(good, decision="reject")], serving)[0]["adoptable"] is False
bad_calls = [([], serving), (None, serving), ((good,), serving), ([good], None), ([good, dict(good)], serving),
             ([dict(good, project=" ")], serving), ([dict(good, project=84)], serving),
             ([dict(good, run_mode="dry_run")], serving), ([dict(good, decision="adopt")], serving),
             ([dict(good, upstream_manifest_sha256="A" * 64)], serving), ([dict(good, upstream_adapter_sha256="b" * 63)], serving),
             ([dict(good, artefact=None)], serving), ([dict(good, artefact_sha256=None)], serving),
             ([dict(good, artefact_sha256="g" * 64)], serving), ([dict(good, extra=1)], serving),
             ([{key: value for key, value in good.items() if key != "decision"}], serving),
             ([good], dict(serving, run_mode="dry_run")), ([good], dict(serving, adapter_sha256="B" * 64)),
             ([good], dict(serving, extra=1)), (["84"], serving)]
for number, arguments in enumerate(bad_calls):
    try:
        policy_freshness(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=policy_freshness points=2 name=agrees_with_reference_on_generated_candidates
# hint: any candidates and serving delivery, valid or with one defect: the same rows, or the same ValueError.
from tools.course.grader.clauses import each_of

_digests = ["a" * 64, "b" * 64, "c" * 64]
_defects = ([("valid", n) for n in range(40)]
            + [("key", key) for key in ("project", "artefact", "artefact_sha256", "run_mode", "decision",
                                        "upstream_manifest_sha256", "upstream_adapter_sha256")]
            + [("value", kind) for kind in ("duplicate", "blank_project", "run_mode", "decision", "upper_hex",
                                            "short_hex", "artefact_only", "sha_only", "extra_key", "not_dict")]
            + [("serving", kind) for kind in ("run_mode", "hex", "extra", "missing", "none")]
            + [("list", kind) for kind in ("empty", "tuple")])


def _candidate(rng, number):
    has = rng.random() < 0.8
    return {"project": f"p{number}", "artefact": f"p{number}/adapter" if has else None,
            "artefact_sha256": rng.choice(_digests) if has else None,
            "run_mode": rng.choice(["cpu_smoke", "cpu_smoke", "real_gpu"]),
            "decision": rng.choice(["accept", "accept", "tune", "reject"]),
            "upstream_manifest_sha256": rng.choice(_digests[:2]), "upstream_adapter_sha256": rng.choice(_digests[1:])}


def _freshness_case(defect, rng):
    kind, value = defect
    candidates = [_candidate(rng, n) for n in range(rng.randint(1, 4))]
    serving = {"run_mode": "cpu_smoke", "manifest_sha256": "a" * 64, "adapter_sha256": "b" * 64}
    at = rng.choice([0, len(candidates) - 1, rng.randrange(len(candidates))])
    if kind == "key":
        del candidates[at][value]
    elif kind == "value":
        edits = {"duplicate": lambda c: c.update(project=candidates[0]["project"]) if len(candidates) > 1 and at != 0
                 else candidates.append(dict(candidates[0])),
                 "blank_project": lambda c: c.update(project="  "), "run_mode": lambda c: c.update(run_mode="dry_run"),
                 "decision": lambda c: c.update(decision="Accept"),
                 "upper_hex": lambda c: c.update(upstream_manifest_sha256="A" * 64),
                 "short_hex": lambda c: c.update(upstream_adapter_sha256="b" * 63),
                 "artefact_only": lambda c: c.update(artefact="x", artefact_sha256=None),
                 "sha_only": lambda c: c.update(artefact=None, artefact_sha256="c" * 64),
                 "extra_key": lambda c: c.update(seed=1), "not_dict": None}
        if value == "not_dict":
            candidates[at] = "p0"
        else:
            edits[value](candidates[at])
    elif kind == "serving":
        serving = {"run_mode": lambda: dict(serving, run_mode="dry_run"), "hex": lambda: dict(serving, manifest_sha256="a" * 65),
                   "extra": lambda: dict(serving, label="x"), "missing": lambda: {"run_mode": "cpu_smoke",
                                                                                  "manifest_sha256": "a" * 64},
                   "none": lambda: None}[value]()
    elif kind == "list":
        candidates = [] if value == "empty" else tuple(candidates)
    return candidates, serving


def _freshness_ok(candidates, serving):
    try:
        reference("policy_freshness")(candidates, serving)
        return True
    except ValueError:
        return False


reference.agrees("policy_freshness", each_of(_defects, _freshness_case, variants=2), cases=2 * len(_defects), clauses={
    "a missing key": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and len(c) == 6 for c in cs),
    "a duplicate project": lambda cs, s: isinstance(cs, list) and len({c["project"] for c in cs if isinstance(c, dict)
                                                                         and "project" in c}) < len(cs),
    "a blank project": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("project") == "  " for c in cs),
    "an unknown run mode": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("run_mode") == "dry_run" for c in cs),
    "an unknown decision": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("decision") == "Accept" for c in cs),
    "an uppercase digest": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("upstream_manifest_sha256") == "A" * 64 for c in cs),
    "a short digest": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("upstream_adapter_sha256") == "b" * 63 for c in cs),
    "an artefact without its sha256": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and c.get("artefact") == "x" for c in cs),
    "a sha256 without its artefact": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and "artefact" in c and c["artefact"] is None and c.get("artefact_sha256") == "c" * 64 for c in cs),
    "an extra key": lambda cs, s: isinstance(cs, list) and any(isinstance(c, dict) and "seed" in c for c in cs),
    "a candidate that is not a dict": lambda cs, s: isinstance(cs, list) and any(not isinstance(c, dict) for c in cs),
    "a bad serving delivery": lambda cs, s: not isinstance(s, dict) or s.get("run_mode") == "dry_run" or len(s) != 3
                                            or s.get("manifest_sha256") == "a" * 65,
    "no candidates or a tuple": lambda cs, s: not isinstance(cs, list) or cs == [],
    "a stale candidate among valid ones": lambda cs, s: _freshness_ok(cs, s) and any(c["upstream_manifest_sha256"] != s["manifest_sha256"] for c in cs),
    "a stale adapter only": lambda cs, s: _freshness_ok(cs, s) and any(c["upstream_manifest_sha256"] == s["manifest_sha256"] and c["upstream_adapter_sha256"] != s["adapter_sha256"] for c in cs),
    "another run mode": lambda cs, s: _freshness_ok(cs, s) and any(c["run_mode"] != s["run_mode"] for c in cs),
    "an adoptable candidate": lambda cs, s: _freshness_ok(cs, s) and any(r["adoptable"] for r in reference("policy_freshness")(cs, s)),
    "a current candidate that is not adoptable": lambda cs, s: _freshness_ok(cs, s) and any(
        r["current"] and not r["adoptable"] for r in reference("policy_freshness")(cs, s)),
})

# %% hidden exercise=verify_artefacts points=1 name=each_promise_is_hashed_from_the_bytes
# hint: the sha256 of the bytes found decides; a file that exists with the same size but other bytes is altered, and each promise of a path is checked on its own.
import hashlib

data = b"adapter weights v1"
same_size = b"adapter weights v2"
digest = hashlib.sha256(data).hexdigest()
promised = [{"manifest": "84.json", "path": "shared/adapter", "sha256": digest},
            {"manifest": "85.json", "path": "shared/adapter", "sha256": hashlib.sha256(same_size).hexdigest()}]
result = verify_artefacts(promised, {"shared/adapter": data})
assert result["verified"] == ["shared/adapter"] and result["checked"] == 2 and result["intact"] is False, result
assert result["failures"] == [{"manifest": "85.json", "path": "shared/adapter", "problem": "altered",
                               "expected": hashlib.sha256(same_size).hexdigest(), "actual": digest}], result["failures"]
swapped = verify_artefacts(promised[:1], {"shared/adapter": same_size})
assert swapped["intact"] is False and swapped["failures"][0]["problem"] == "altered" and swapped["verified"] == []

# %% hidden exercise=verify_artefacts points=1 name=failures_keep_promised_order_and_name_their_manifest
# hint: every failure, in the order of the promises, names the manifest, the path, missing or altered, the expected digest and the actual one (None when missing); files that were not promised are ignored.
import hashlib

def _promise(manifest, path, data):
    return {"manifest": manifest, "path": path, "sha256": hashlib.sha256(data).hexdigest()}

promised = [_promise("62.json", "rollback.json", b"r"), _promise("84.json", "a", b"a"), _promise("85.json", "b", b"b"),
            _promise("85.json", "c", b"c")]
found = {"a": b"a", "b": b"B", "extra": b"not promised"}
result = verify_artefacts(promised, found)
assert [(f["manifest"], f["path"], f["problem"], f["actual"]) for f in result["failures"]] == [
    ("62.json", "rollback.json", "missing", None), ("85.json", "b", "altered", hashlib.sha256(b"B").hexdigest()),
    ("85.json", "c", "missing", None)], result["failures"]
assert result["verified"] == ["a"] and result["checked"] == 4 and result["intact"] is False
whole = verify_artefacts(promised, {"rollback.json": b"r", "a": b"a", "b": b"b", "c": b"c"})
assert whole["intact"] is True and whole["failures"] == [] and whole["verified"] == ["rollback.json", "a", "b", "c"]

# %% hidden exercise=verify_artefacts points=1 name=wrong_verification_calls_raise_and_good_calls_do_not
# hint: a non-empty list of promises with exactly manifest, path (non-blank str) and sha256 (64 lowercase hex); found maps str paths to bytes.
import hashlib

good = {"manifest": "m", "path": "p", "sha256": hashlib.sha256(b"x").hexdigest()}
assert verify_artefacts([good], {"p": b"x"})["intact"] is True
assert verify_artefacts([good], {})["intact"] is False
bad_calls = [([], {}), (None, {}), ((good,), {}), ([dict(good, sha256=good["sha256"].upper())], {}),
             ([dict(good, sha256=good["sha256"][:-1])], {}), ([dict(good, path=" ")], {}), ([dict(good, manifest="")], {}),
             ([dict(good, extra=1)], {}), ([{"manifest": "m", "path": "p"}], {}), (["p"], {}), ([good], None),
             ([good], {"p": "x"}), ([good], {1: b"x"}), ([good], [("p", b"x")]), ([dict(good, path=None)], {})]
for number, arguments in enumerate(bad_calls):
    try:
        verify_artefacts(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=verify_artefacts points=2 name=agrees_with_reference_on_generated_promises
# hint: any promises and files found, valid or with one defect: the same verification, or the same ValueError.
import hashlib

from tools.course.grader.clauses import each_of

_contents = [b"", b"a", b"ab", b"weights", b"\x00\xff"]
_verify_defects = ([("valid", n) for n in range(40)]
                   + [("promise", kind) for kind in ("upper", "short", "blank_path", "blank_manifest", "extra", "missing_key",
                                                     "not_dict", "path_none")]
                   + [("found", kind) for kind in ("str_value", "int_key", "list", "none")]
                   + [("list", kind) for kind in ("empty", "tuple")])


def _verify_case(defect, rng):
    kind, value = defect
    promised, found = [], {}
    for number in range(rng.randint(1, 5)):
        path = f"f{rng.randrange(3)}"
        data = rng.choice(_contents)
        promised.append({"manifest": f"m{rng.randrange(2)}", "path": path, "sha256": hashlib.sha256(data).hexdigest()})
        state = rng.choice(["same", "same", "altered", "missing"])
        if state == "same":
            found.setdefault(path, data)
        elif state == "altered":
            found.setdefault(path, data + b"!")
    if rng.random() < 0.3:
        found["unpromised"] = b"z"
    at = rng.choice([0, len(promised) - 1, rng.randrange(len(promised))])
    if kind == "promise":
        entry = promised[at]
        if value == "upper":
            entry["sha256"] = entry["sha256"].upper() if entry["sha256"][0].isalpha() else "A" + entry["sha256"][1:]
        elif value == "short":
            entry["sha256"] = entry["sha256"][:63]
        elif value == "blank_path":
            entry["path"] = " "
        elif value == "blank_manifest":
            entry["manifest"] = ""
        elif value == "extra":
            entry["role"] = "adapter"
        elif value == "missing_key":
            del entry["manifest"]
        elif value == "path_none":
            entry["path"] = None
        else:
            promised[at] = "f0"
    elif kind == "found":
        found = {"str_value": dict(found, f0="text"), "int_key": {**found, 0: b"x"}, "list": list(found.items()),
                 "none": None}[value]
    elif kind == "list":
        promised = [] if value == "empty" else tuple(promised)
    return promised, found


def _verify_ok(promised, found):
    try:
        reference("verify_artefacts")(promised, found)
        return True
    except ValueError:
        return False


def _entries(promised):
    return [p for p in promised if isinstance(p, dict)] if isinstance(promised, list) else []


reference.agrees("verify_artefacts", each_of(_verify_defects, _verify_case, variants=2), cases=2 * len(_verify_defects), clauses={
    "an uppercase digest": lambda p, f: any(isinstance(e.get("sha256"), str) and e["sha256"] != e["sha256"].lower() for e in _entries(p)),
    "a short digest": lambda p, f: any(isinstance(e.get("sha256"), str) and len(e["sha256"]) == 63 for e in _entries(p)),
    "a blank path": lambda p, f: any(e.get("path") == " " for e in _entries(p)),
    "a path that is None": lambda p, f: any("path" in e and e["path"] is None for e in _entries(p)),
    "a blank manifest": lambda p, f: any(e.get("manifest") == "" for e in _entries(p)),
    "an extra key": lambda p, f: any("role" in e for e in _entries(p)),
    "a missing key": lambda p, f: any("manifest" not in e for e in _entries(p)),
    "a promise that is not a dict": lambda p, f: isinstance(p, list) and any(not isinstance(e, dict) for e in p),
    "found with a str value": lambda p, f: isinstance(f, dict) and any(isinstance(v, str) for v in f.values()),
    "found with an int key": lambda p, f: isinstance(f, dict) and any(not isinstance(k, str) for k in f),
    "found that is not a dict": lambda p, f: not isinstance(f, dict),
    "no promises or a tuple": lambda p, f: not isinstance(p, list) or p == [],
    "a missing file": lambda p, f: _verify_ok(p, f) and any(e["path"] not in f for e in p),
    "an altered file": lambda p, f: _verify_ok(p, f) and any(e["path"] in f and hashlib.sha256(f[e["path"]]).hexdigest() != e["sha256"] for e in p),
    "one path promised twice": lambda p, f: _verify_ok(p, f) and len({e["path"] for e in p}) < len(p),
    "everything intact": lambda p, f: _verify_ok(p, f) and reference("verify_artefacts")(p, f)["intact"],
    "an empty file": lambda p, f: _verify_ok(p, f) and any(v == b"" for v in f.values()),
})

# %% hidden exercise=recovery_plan points=1 name=each_kill_point_rolls_back_or_forward
# hint: before the manifest's rename the entry is aborted and every staged or orphaned file goes; after it the entry is sealed and the journal is rolled forward; sealed entries keep every file.
import hashlib
import json


def _sealed(name, data):
    manifest = json.dumps({"name": name, "artefact_sha256": hashlib.sha256(data).hexdigest()}).encode()
    return {f"sealed/{name}.artefact": data, f"sealed/{name}.manifest": manifest}


old = _sealed("handoff-1", b"v1")
new = _sealed("handoff-2", b"v2")
journal = [{"op": "intent", "name": "handoff-1"}, {"op": "sealed", "name": "handoff-1"}, {"op": "intent", "name": "handoff-2"}]
states = {
    "intent_logged": ({**old}, [], "aborted"),
    "artefact_partial": ({**old, "staging/handoff-2.artefact": b"v"}, ["staging/handoff-2.artefact"], "aborted"),
    "manifest_staged": ({**old, "staging/handoff-2.artefact": b"v2", "staging/handoff-2.manifest": new["sealed/handoff-2.manifest"]},
                        ["staging/handoff-2.artefact", "staging/handoff-2.manifest"], "aborted"),
    "artefact_published": ({**old, "sealed/handoff-2.artefact": b"v2", "staging/handoff-2.manifest": new["sealed/handoff-2.manifest"]},
                           ["sealed/handoff-2.artefact", "staging/handoff-2.manifest"], "aborted"),
    "manifest_published": ({**old, **new}, [], "forward"),
}
for point, (files, removed, way) in states.items():
    plan = recovery_plan(journal, files)
    assert plan["remove"] == removed, (point, plan["remove"])
    assert "handoff-1" in plan["sealed"] and plan["damaged"] == [], point
    if way == "aborted":
        assert plan["aborted"] == ["handoff-2"] and plan["roll_forward"] == [], (point, plan)
        assert plan["journal_append"] == [{"op": "aborted", "name": "handoff-2"}], point
    else:
        assert plan["sealed"] == ["handoff-1", "handoff-2"] and plan["roll_forward"] == ["handoff-2"], (point, plan)
        assert plan["aborted"] == [] and plan["journal_append"] == [{"op": "sealed", "name": "handoff-2"}], point
    assert plan["clean"] is False, point

# %% hidden exercise=recovery_plan points=1 name=a_manifest_that_does_not_verify_is_not_trusted
# hint: a sealed/ manifest counts only when it is JSON of a dict naming its own entry and the sha256 of the artefact beside it; a torn, misnamed or mismatched one is removed with its artefact (when nothing marked it sealed).
import hashlib
import json

data = b"payload"
digest = hashlib.sha256(data).hexdigest()
variants = {
    "torn": b'{"name": "e", "artefact_sha',
    "other name": json.dumps({"name": "f", "artefact_sha256": digest}).encode(),
    "other digest": json.dumps({"name": "e", "artefact_sha256": "0" * 64}).encode(),
    "a list": json.dumps(["e", digest]).encode(),
    "not utf-8": b"\xff\xfe",
}
for label, manifest in variants.items():
    plan = recovery_plan([], {"sealed/e.artefact": data, "sealed/e.manifest": manifest})
    assert plan["sealed"] == [] and plan["remove"] == ["sealed/e.artefact", "sealed/e.manifest"], (label, plan)
    assert plan["damaged"] == [] and plan["aborted"] == [] and plan["clean"] is False, label
good = recovery_plan([], {"sealed/e.artefact": data, "sealed/e.manifest": json.dumps({"name": "e", "artefact_sha256": digest}).encode()})
assert good["sealed"] == ["e"] and good["roll_forward"] == ["e"] and good["remove"] == []
alone = recovery_plan([], {"sealed/e.manifest": json.dumps({"name": "e", "artefact_sha256": digest}).encode()})
assert alone["sealed"] == [] and alone["remove"] == ["sealed/e.manifest"]

# %% hidden exercise=recovery_plan points=1 name=damaged_sealed_records_are_reported_never_removed
# hint: a name the journal marked sealed whose files no longer verify is damaged: listed, its files kept; an aborted name is not aborted twice; a clean store has nothing to do.
import hashlib
import json


def _sealed(name, data):
    manifest = json.dumps({"name": name, "artefact_sha256": hashlib.sha256(data).hexdigest()}).encode()
    return {f"sealed/{name}.artefact": data, f"sealed/{name}.manifest": manifest}


journal = [{"op": "intent", "name": "a"}, {"op": "sealed", "name": "a"}, {"op": "intent", "name": "b"},
           {"op": "sealed", "name": "b"}, {"op": "intent", "name": "c"}, {"op": "aborted", "name": "c"}]
files = {**_sealed("a", b"A"), **_sealed("b", b"B")}
clean = recovery_plan(journal, files)
assert clean == {"sealed": ["a", "b"], "roll_forward": [], "aborted": [], "remove": [], "damaged": [],
                 "journal_append": [], "clean": True}, clean
hurt = dict(files, **{"sealed/b.artefact": b"B, truncated"})
del hurt["sealed/a.manifest"]
plan = recovery_plan(journal, hurt)
assert plan["damaged"] == ["a", "b"] and plan["remove"] == [] and plan["sealed"] == [], plan
assert plan["aborted"] == [] and plan["journal_append"] == [] and plan["clean"] is False

# %% hidden exercise=recovery_plan points=1 name=wrong_recovery_calls_raise_and_good_calls_do_not
# hint: journal is a list of {op, name} with a known op and a plain name; files maps staging/ or sealed/ <name>.artefact|manifest paths to bytes.
good_files = {"staging/x.artefact": b"1"}
assert recovery_plan([{"op": "intent", "name": "x"}], good_files)["aborted"] == ["x"]
assert recovery_plan([], {})["clean"] is True
bad_calls = [(None, {}), (({"op": "intent", "name": "x"},), {}), ([{"op": "begin", "name": "x"}], {}),
             ([{"op": "intent"}], {}), ([{"op": "intent", "name": "x", "at": 1}], {}), ([{"op": "intent", "name": "a/b"}], {}),
             ([{"op": "intent", "name": ""}], {}), ([{"op": "intent", "name": 3}], {}), (["intent x"], {}), ([], None),
             ([], {"staging/x.artefact": "1"}), ([], {"other/x.artefact": b"1"}), ([], {"sealed/x.bin": b"1"}),
             ([], {"sealed/x.artefact.tmp": b"1"}), ([], {"sealed/a/b.artefact": b"1"}), ([], [("staging/x.artefact", b"1")])]
for number, arguments in enumerate(bad_calls):
    try:
        recovery_plan(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=recovery_plan points=2 name=agrees_with_reference_on_generated_stores
# hint: any journal and store after a crash at any point, valid or with one defect: the same plan, or the same ValueError.
import hashlib
import json

from tools.course.grader.clauses import each_of

_store_defects = ([("valid", n) for n in range(50)]
                  + [("journal", kind) for kind in ("op", "name_slash", "name_blank", "extra", "missing", "not_list",
                                                    "not_dict")]
                  + [("files", kind) for kind in ("str_value", "folder", "suffix", "nested", "not_dict")])


def _entry_files(name, data, state, rng):
    manifest = json.dumps({"name": name, "artefact_sha256": hashlib.sha256(data).hexdigest()}).encode()
    if state == "torn":
        manifest = manifest[: len(manifest) // 2]
    elif state == "mismatch":
        data = data + b"!"
    return {"staged_artefact": {f"staging/{name}.artefact": data[: rng.randint(0, len(data))]},
            "staged_both": {f"staging/{name}.artefact": data, f"staging/{name}.manifest": manifest},
            "half_published": {f"sealed/{name}.artefact": data, f"staging/{name}.manifest": manifest},
            "orphan_manifest": {f"sealed/{name}.manifest": manifest},
            "sealed": {f"sealed/{name}.artefact": data, f"sealed/{name}.manifest": manifest},
            "torn": {f"sealed/{name}.artefact": data, f"sealed/{name}.manifest": manifest},
            "mismatch": {f"sealed/{name}.artefact": data, f"sealed/{name}.manifest": manifest},
            "none": {}}[state]


def _store_case(defect, rng):
    kind, value = defect
    journal, files = [], {}
    for number in range(rng.randint(1, 4)):
        name = f"e-{number}"
        state = rng.choice(["staged_artefact", "staged_both", "half_published", "orphan_manifest", "sealed", "sealed",
                            "torn", "mismatch", "none"])
        files.update(_entry_files(name, rng.choice([b"x", b"payload", b"\x00\x01"]), state, rng))
        ops = rng.choice([[], ["intent"], ["intent", "sealed"], ["intent", "aborted"], ["sealed"]])
        journal += [{"op": op, "name": name} for op in ops]
    rng.shuffle(journal) if rng.random() < 0.2 else None
    if kind == "journal":
        entry = {"op": "intent", "name": "e-0"}
        broken = {"op": dict(entry, op="commit"), "name_slash": dict(entry, name="e/0"), "name_blank": dict(entry, name=""),
                  "extra": dict(entry, at=1), "missing": {"op": "intent"}, "not_dict": "intent e-0"}
        if value == "not_list":
            journal = {str(number): entry for number, entry in enumerate(journal)}
        else:
            journal.insert(rng.randint(0, len(journal)), broken[value])
    elif kind == "files":
        if value == "not_dict":
            files = list(files.items())
        else:
            bad = {"str_value": ("sealed/z.artefact", "text"), "folder": ("tmp/z.artefact", b"1"),
                   "suffix": ("sealed/z.json", b"1"), "nested": ("sealed/a/z.artefact", b"1")}[value]
            files[bad[0]] = bad[1]
    return journal, files


def _plan_ok(journal, files):
    try:
        reference("recovery_plan")(journal, files)
        return True
    except ValueError:
        return False


def _plan(journal, files):
    return reference("recovery_plan")(journal, files)


reference.agrees("recovery_plan", each_of(_store_defects, _store_case, variants=2), cases=2 * len(_store_defects), clauses={
    "an unknown op": lambda j, f: isinstance(j, list) and any(isinstance(e, dict) and e.get("op") == "commit" for e in j),
    "a name with a slash": lambda j, f: isinstance(j, list) and any(isinstance(e, dict) and e.get("name") == "e/0" for e in j),
    "a blank name": lambda j, f: isinstance(j, list) and any(isinstance(e, dict) and e.get("name") == "" for e in j),
    "an entry with an extra key": lambda j, f: isinstance(j, list) and any(isinstance(e, dict) and "at" in e for e in j),
    "an entry without a name": lambda j, f: isinstance(j, list) and any(isinstance(e, dict) and "name" not in e for e in j),
    "an entry that is not a dict": lambda j, f: isinstance(j, list) and any(not isinstance(e, dict) for e in j),
    "a journal that is not a list": lambda j, f: not isinstance(j, list),
    "a file that is text": lambda j, f: isinstance(f, dict) and any(isinstance(v, str) for v in f.values()),
    "a path outside staging and sealed": lambda j, f: isinstance(f, dict) and "tmp/z.artefact" in f,
    "a path with another suffix": lambda j, f: isinstance(f, dict) and "sealed/z.json" in f,
    "a nested path": lambda j, f: isinstance(f, dict) and "sealed/a/z.artefact" in f,
    "files that are not a dict": lambda j, f: not isinstance(f, dict),
    "an entry to roll forward": lambda j, f: _plan_ok(j, f) and _plan(j, f)["roll_forward"] != [],
    "an entry to abort": lambda j, f: _plan_ok(j, f) and _plan(j, f)["aborted"] != [],
    "a damaged sealed entry": lambda j, f: _plan_ok(j, f) and _plan(j, f)["damaged"] != [],
    "an orphan in sealed/": lambda j, f: _plan_ok(j, f) and any(p.startswith("sealed/") for p in _plan(j, f)["remove"]),
    "a torn manifest": lambda j, f: _plan_ok(j, f) and any(p.endswith(".manifest") and p.startswith("sealed/")
                                                           and not f[p].endswith(b"}") for p in f),
    "a name already aborted": lambda j, f: _plan_ok(j, f) and any(e["op"] == "aborted" for e in j),
    "a clean store": lambda j, f: _plan_ok(j, f) and _plan(j, f)["clean"],
})

# %% hidden exercise=handoff_state points=1 name=a_failed_check_is_never_ready
# hint: any failed verification, damaged record or pending recovery blocks the handoff, whatever the candidates say; nothing is adopted while blocked.
fresh = [{"project": "85", "adoptable": True}]
intact = {"intact": True, "failures": []}
broken = {"intact": False, "failures": [{"path": "x"}]}
clean = {"damaged": [], "remove": [], "journal_append": []}
assert handoff_state(fresh, intact, clean)["state"] == "ready"
for label, verification, recovery, reasons in [
        ("verification", broken, clean, ["artefact_check_failed"]),
        ("damaged", intact, dict(clean, damaged=["a"]), ["recovery_damaged"]),
        ("files to remove", intact, dict(clean, remove=["staging/a.artefact"]), ["recovery_pending"]),
        ("journal lines", intact, dict(clean, journal_append=[{"op": "sealed", "name": "a"}]), ["recovery_pending"])]:
    result = handoff_state(fresh, verification, recovery)
    assert result == {"state": "blocked", "reasons": reasons, "adopt": None, "serving": "delivery"}, (label, result)

# %% hidden exercise=handoff_state points=1 name=every_reason_in_order_and_one_adoptable_candidate_at_most
# hint: reasons are artefact_check_failed, recovery_damaged, recovery_pending, several_adoptable in this order; two adoptable candidates block; ready adopts the single adoptable one.
two = [{"project": "84", "adoptable": True}, {"project": "85", "adoptable": True}]
everything = handoff_state(two, {"intact": False, "failures": [{}]}, {"damaged": ["a"], "remove": ["x"], "journal_append": []})
assert everything["reasons"] == ["artefact_check_failed", "recovery_damaged", "recovery_pending", "several_adoptable"]
assert everything["state"] == "blocked" and everything["adopt"] is None
one = handoff_state([{"project": "84", "adoptable": False, "reasons": ["not_accepted"]}, two[1]],
                    {"intact": True, "failures": []}, {"damaged": [], "remove": [], "journal_append": []})
assert one == {"state": "ready", "reasons": [], "adopt": "85", "serving": "candidate"}, one
none = handoff_state([], {"intact": True, "failures": []}, {"damaged": [], "remove": [], "journal_append": []})
assert none == {"state": "ready", "reasons": [], "adopt": None, "serving": "delivery"}, none

# %% hidden exercise=handoff_state points=1 name=wrong_handoff_calls_raise_and_good_calls_do_not
# hint: freshness is a list of dicts with a str project and a bool adoptable; verification has a bool intact agreeing with its failures list; recovery has the lists damaged, remove and journal_append.
fresh, intact, clean = [{"project": "85", "adoptable": False}], {"intact": True, "failures": []}, {"damaged": [], "remove": [], "journal_append": []}
assert handoff_state(fresh, intact, clean)["adopt"] is None
assert handoff_state([{"project": "85", "adoptable": True}], intact, clean)["adopt"] == "85"
bad_calls = [(None, intact, clean), ((fresh[0],), intact, clean), ([{"project": "85"}], intact, clean),
             ([{"project": "85", "adoptable": 1}], intact, clean), ([{"project": 85, "adoptable": True}], intact, clean),
             (["85"], intact, clean), (fresh, None, clean), (fresh, {"intact": "yes", "failures": []}, clean),
             (fresh, {"intact": True, "failures": [{}]}, clean), (fresh, {"intact": False, "failures": []}, clean),
             (fresh, {"intact": True}, clean), (fresh, {"intact": True, "failures": ()}, clean), (fresh, intact, None),
             (fresh, intact, {"damaged": [], "remove": []}), (fresh, intact, dict(clean, remove=()))]
for number, arguments in enumerate(bad_calls):
    try:
        handoff_state(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=handoff_state points=2 name=agrees_with_reference_on_generated_states
# hint: any freshness, verification and recovery, valid or with one defect: the same state, or the same ValueError.
from tools.course.grader.clauses import each_of

_state_defects = ([("valid", n) for n in range(50)]
                  + [("freshness", kind) for kind in ("not_list", "no_project", "int_adoptable", "not_dict")]
                  + [("verification", kind) for kind in ("disagree_true", "disagree_false", "str_intact", "no_failures",
                                                         "none")]
                  + [("recovery", kind) for kind in ("missing", "tuple", "none")])


def _state_case(defect, rng):
    kind, value = defect
    freshness = [{"project": f"p{n}", "adoptable": rng.random() < 0.35, "current": True}
                 for n in range(rng.randint(0, 3))]
    failed = rng.random() < 0.3
    verification = {"checked": 3, "intact": not failed, "failures": [{"path": "x"}] if failed else []}
    recovery = {key: (["x"] if rng.random() < 0.2 else []) for key in ("damaged", "remove", "journal_append")}
    recovery["sealed"] = ["a"]
    if kind == "freshness":
        item = {"project": "q", "adoptable": True}
        if value == "not_list":
            freshness = tuple(freshness)
        else:
            freshness.insert(rng.randint(0, len(freshness)), {"no_project": {"adoptable": True},
                                                              "int_adoptable": dict(item, adoptable=1),
                                                              "not_dict": "q"}[value])
    elif kind == "verification":
        verification = {"disagree_true": {"intact": True, "failures": [{}]}, "disagree_false": {"intact": False, "failures": []},
                        "str_intact": {"intact": "True", "failures": []}, "no_failures": {"intact": True},
                        "none": None}[value]
    elif kind == "recovery":
        recovery = {"missing": {"damaged": [], "remove": []}, "tuple": dict(recovery, journal_append=()),
                    "none": None}[value]
    return freshness, verification, recovery


def _state_ok(*call):
    try:
        reference("handoff_state")(*call)
        return True
    except ValueError:
        return False


reference.agrees("handoff_state", each_of(_state_defects, _state_case, variants=2), cases=2 * len(_state_defects), clauses={
    "freshness that is a tuple": lambda fr, v, r: isinstance(fr, tuple),
    "an item without a project": lambda fr, v, r: isinstance(fr, list) and any(isinstance(i, dict) and "project" not in i for i in fr),
    "an int adoptable": lambda fr, v, r: isinstance(fr, list) and any(isinstance(i, dict) and i.get("adoptable") == 1 and i.get("adoptable") is not True for i in fr),
    "an item that is not a dict": lambda fr, v, r: isinstance(fr, list) and any(not isinstance(i, dict) for i in fr),
    "intact with failures": lambda fr, v, r: isinstance(v, dict) and v.get("intact") is True and v.get("failures"),
    "not intact without failures": lambda fr, v, r: isinstance(v, dict) and v.get("intact") is False and v.get("failures") == [],
    "a str intact": lambda fr, v, r: isinstance(v, dict) and isinstance(v.get("intact"), str),
    "no failures list": lambda fr, v, r: isinstance(v, dict) and "failures" not in v,
    "no verification": lambda fr, v, r: v is None,
    "a recovery without journal_append": lambda fr, v, r: isinstance(r, dict) and "journal_append" not in r,
    "a recovery list that is a tuple": lambda fr, v, r: isinstance(r, dict) and isinstance(r.get("journal_append"), tuple),
    "no recovery": lambda fr, v, r: r is None,
    "ready with a candidate": lambda *call: _state_ok(*call) and reference("handoff_state")(*call)["adopt"] is not None,
    "ready with nothing adoptable": lambda *call: _state_ok(*call) and reference("handoff_state")(*call)["state"] == "ready"
                                                  and reference("handoff_state")(*call)["adopt"] is None,
    "blocked": lambda *call: _state_ok(*call) and reference("handoff_state")(*call)["state"] == "blocked",
    "several adoptable": lambda *call: _state_ok(*call) and "several_adoptable" in reference("handoff_state")(*call)["reasons"],
    "a pending journal line only": lambda fr, v, r: _state_ok(fr, v, r) and r["journal_append"] and not r["remove"],
})
