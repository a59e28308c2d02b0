# %% hidden exercise=upstream_identity points=1 name=every_selected_key_is_compared_by_value_and_type
# hint: walk the selection's keys (sorted): a key the run lacks, another value or another type (True vs 1, 4 vs 4.0, a tuple vs a list, nested dicts) is a mismatch; the run's extra keys are ignored.
selected = {"rank": 4, "flag": True, "targets": ["q", "v"], "opts": {"a": 1}, "lr": 0.002, "data_sha256": "d"}
used = {"rank": 4, "flag": 1, "targets": ("q", "v"), "opts": {"a": 1.0}, "lr": 0.002, "data_sha256": "d", "extra": 7}
assert upstream_identity(selected, used)["mismatches"] == [
    {"key": "flag", "expected": True, "actual": 1},
    {"key": "opts", "expected": {"a": 1}, "actual": {"a": 1.0}},
    {"key": "targets", "expected": ["q", "v"], "actual": ("q", "v")},
]
same = dict(selected, extra="ignored")
assert upstream_identity(selected, same) == {"matches": True, "mismatches": []}

# %% hidden exercise=upstream_identity points=1 name=a_missing_key_is_a_mismatch_with_actual_none
# hint: a key of the selection the run does not hold is a mismatch whose actual is None (the run's dict is not modified).
selected = {"rank": 8, "data_sha256": "d", "alpha": 16.0}
result = upstream_identity(selected, {"data_sha256": "d"})
assert result == {"matches": False, "mismatches": [{"key": "alpha", "expected": 16.0, "actual": None},
                                                   {"key": "rank", "expected": 8, "actual": None}]}
held_none = upstream_identity({"x": None, "data_sha256": "d"}, {"x": None, "data_sha256": "d"})
assert held_none["matches"] is True

# %% hidden exercise=upstream_identity points=1 name=unordered_keys_compare_as_sets
# hint: a key named in unordered compares as a set when both values are lists of str (peft writes target modules in set order); otherwise, and for every other key, order and type still count.
selected = {"targets": ["q_proj", "v_proj"], "layers": [1, 2], "order": ["a", "b"], "data_sha256": "d"}
used = {"targets": ["v_proj", "q_proj"], "layers": [2, 1], "order": ["b", "a"], "data_sha256": "d"}
assert upstream_identity(selected, used, ["targets", "layers"])["mismatches"] == [
    {"key": "layers", "expected": [1, 2], "actual": [2, 1]}, {"key": "order", "expected": ["a", "b"], "actual": ["b", "a"]}]
assert upstream_identity(selected, used, ("targets", "layers", "order"))["mismatches"] == [
    {"key": "layers", "expected": [1, 2], "actual": [2, 1]}]
assert upstream_identity(selected, dict(used, targets=["q_proj"]), ["targets"])["mismatches"][1]["key"] == "order"
assert upstream_identity(selected, dict(used, targets=("q_proj", "v_proj")), ["targets"])["mismatches"][-1] == {
    "key": "targets", "expected": ["q_proj", "v_proj"], "actual": ("q_proj", "v_proj")}
assert upstream_identity(selected, dict(selected), [])["matches"] is True

# %% hidden exercise=upstream_identity points=1 name=wrong_identity_calls_raise_and_good_calls_do_not
# hint: both configurations are dicts with str keys and the selection must hold data_sha256; unordered is a list or tuple of str; a good call answers.
assert upstream_identity({"data_sha256": "d"}, {"data_sha256": "e"})["matches"] is False
assert upstream_identity({"data_sha256": "d"}, {"data_sha256": "d"}, ("targets",))["matches"] is True
bad_calls = [(None, {}), ({"data_sha256": "d"}, None), ({"rank": 4}, {"rank": 4}), ([("data_sha256", "d")], {}),
             ({"data_sha256": "d", 1: 2}, {}), ({"data_sha256": "d"}, {3: "x"}), ("data_sha256", {}),
             ({"data_sha256": "d"}, {}, "targets"), ({"data_sha256": "d"}, {}, None), ({"data_sha256": "d"}, {}, [1]),
             ({"data_sha256": "d"}, {}, {"targets"})]
for arguments in bad_calls:
    try:
        upstream_identity(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=upstream_identity points=2 name=agrees_with_reference_on_generated_configurations
# hint: any selection and configuration (values that differ in type, missing or extra keys), valid or with one defect: the same mismatches, or the same ValueError.
from hypothesis import strategies as st

values = st.sampled_from([4, 4.0, True, 1, "4", None, ["q", "v"], ("q", "v"), ["v", "q"], {"a": 1}, {"a": True}])

@st.composite
def configurations(draw):
    keys = draw(st.lists(st.sampled_from(["rank", "alpha", "targets", "lr", "steps"]), max_size=4, unique=True))
    selected = {key: draw(values) for key in keys}
    if draw(st.integers(0, 7)):
        selected["data_sha256"] = draw(st.sampled_from(["d1", "d2"]))
    used = {key: (value if draw(st.booleans()) else draw(values)) for key, value in selected.items()
            if draw(st.integers(0, 5))}
    if draw(st.booleans()):
        used["extra"] = draw(values)
    if draw(st.integers(0, 9)) == 0:
        used = draw(st.sampled_from([None, {1: "x"}, [("rank", 4)]]))
    if draw(st.integers(0, 2)) == 0:
        return selected, used
    unordered = draw(st.sampled_from([["targets"], ("targets", "rank"), [], ["steps"], ["targets"], ("targets",),
                                      "targets", [None], None]))
    return selected, used, unordered

@st.composite
def reordered(draw):
    """The same targets in another order, everything else equal."""
    selected = {"rank": draw(st.sampled_from([4, 8])), "targets": ["q", "v"], "data_sha256": "d1"}
    used = dict(selected, targets=draw(st.sampled_from([["v", "q"], ["q", "v"], ["q"], ("v", "q"), ["v", "q", "q"]])))
    return selected, used, draw(st.sampled_from([["targets"], [], ("targets",)]))

@st.composite
def nested(draw):
    """A nested dict equal to Python's == but not of one type inside (1 against True or 1.0)."""
    selected = {"opts": {"a": 1, "b": "x"}, "data_sha256": "d1"}
    used = dict(selected, opts={"a": draw(st.sampled_from([True, 1.0, 1])), "b": "x"})
    return (selected, used) if draw(st.booleans()) else (selected, used, draw(st.sampled_from([["opts"], []])))

from tools.course.grader.clauses import is_bool


def identity(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("upstream_identity")(*call)


def typed_twins(selected, used, unordered=()):
    """Keys whose values are equal to Python (4 == 4.0 == True... or a list and a tuple) but not of one type."""
    return [key for key in selected if key in used and type(selected[key]) is not type(used[key]) and (
        selected[key] == used[key] or (isinstance(selected[key], (list, tuple)) and isinstance(used[key], (list, tuple))
                                       and list(selected[key]) == list(used[key])))]

reference.agrees("upstream_identity", st.one_of(configurations(), configurations(), reordered(), nested()), cases=300,
                 clauses={
    "a value equal but of another type (4.0, True, a tuple)": lambda selected, used, unordered=(): identity(
        selected, used, unordered) and [key for key in typed_twins(selected, used) if key not in unordered],
    "a nested dict equal to Python but with a bool inside": lambda selected, used, unordered=(): identity(selected, used, unordered) and any(
        key in used and isinstance(selected[key], dict) and isinstance(used[key], dict) and selected[key] == used[key]
        and any(type(selected[key][k]) is not type(used[key][k]) for k in selected[key]) for key in selected),
    "a key missing from the used configuration": lambda selected, used, unordered=(): identity(selected, used, unordered) and any(
        key not in used for key in selected),
    "the data hash differs": lambda selected, used, unordered=(): any(
        m["key"] == "data_sha256" and "data_sha256" in used for m in identity(selected, used, unordered)["mismatches"]),
    "an extra key in the used configuration (ignored)": lambda selected, used, unordered=(): identity(selected, used, unordered) and any(
        key not in selected for key in used),
    "targets in another order, not unordered": lambda selected, used, unordered=(): identity(
        selected, used, unordered) and any(
        key in used and key not in unordered and isinstance(selected[key], list) and isinstance(used[key], list)
        and selected[key] != used[key] and sorted(selected[key]) == sorted(used[key]) for key in selected),
    "targets in another order, unordered": lambda selected, used, unordered=(): identity(
        selected, used, unordered)["matches"] and any(
        key in unordered and isinstance(used.get(key), list) and selected[key] != used[key] for key in selected),
    "an unordered key whose lists hold other items": lambda selected, used, unordered=(): any(
        m["key"] in unordered and isinstance(m["actual"], list) for m in identity(selected, used, unordered)["mismatches"]),
    "an unordered key whose used value is a tuple": lambda selected, used, unordered=(): any(
        m["key"] in unordered and isinstance(m["actual"], tuple) for m in identity(selected, used, unordered)["mismatches"]),
    "the same items with a duplicate, unordered": lambda selected, used, unordered=(): identity(selected, used, unordered)[
        "matches"] and any(key in unordered and isinstance(used.get(key), list) and len(used[key]) != len(selected[key])
                           for key in selected),
    "unordered that is not a list or tuple": lambda selected, used, unordered=(): isinstance(selected, dict)
        and "data_sha256" in selected and isinstance(used, dict) and all(isinstance(k, str) for k in used)
        and not isinstance(unordered, (list, tuple)),
    "unordered holding a non-str key": lambda selected, used, unordered=(): isinstance(selected, dict)
        and "data_sha256" in selected and isinstance(used, dict) and all(isinstance(k, str) for k in used)
        and isinstance(unordered, (list, tuple)) and any(not isinstance(k, str) for k in unordered),
    "everything matches": lambda *call: identity(*call)["matches"] and len(call[0]) > 1,
    "selected without data_sha256": lambda selected, used, unordered=(): "data_sha256" not in selected
        and isinstance(used, dict) and all(isinstance(key, str) for key in used),
    "used None": lambda selected, used, unordered=(): used is None,
    "used with a key that is not a str": lambda selected, used, unordered=(): isinstance(used, dict) and any(
        not isinstance(key, str) for key in used),
    "used a list": lambda selected, used, unordered=(): isinstance(used, list),
})

# %% hidden exercise=artifact_checks points=1 name=file_findings_in_path_order
# hint: missing then changed per recorded path in path order (a None counts as missing), then unrecorded found paths in path order; a found None that was never recorded is nothing.
def resume(first=3, resumed=(1.2, 1.0)):
    return {"reference_losses": [2.0, 1.5, 1.2, 1.0], "checkpoint_step": 2, "resumed_losses": list(resumed),
            "resumed_first_step": first}
def reload(a=0.5, b=0.5):
    return {"in_process": a, "reloaded": b}
files = {"recorded": {"b/x": "1", "a/y": "2", "c/z": "3"}, "found": {"a/y": "9", "c/z": None, "d/w": "4", "e/v": None, "0/u": "5"}}
checks = artifact_checks(files, resume(), reload())["checks"]
assert checks[0] == {"name": "files_intact", "passed": False,
                     "findings": ["changed:a/y", "missing:b/x", "missing:c/z", "unrecorded:0/u", "unrecorded:d/w"]}
assert checks[1]["passed"] is True and checks[2]["passed"] is True

# %% hidden exercise=artifact_checks points=1 name=a_restart_or_a_wrong_step_is_not_a_resume
# hint: the first resumed optimiser step must be checkpoint_step + 1: 1 is "restarted", any other wrong number "wrong_step"; then the length, else the curve within loss_tolerance.
def resume(first=3, resumed=(1.2, 1.0)):
    return {"reference_losses": [2.0, 1.5, 1.2, 1.0], "checkpoint_step": 2, "resumed_losses": list(resumed),
            "resumed_first_step": first}
def reload(a=0.5, b=0.5):
    return {"in_process": a, "reloaded": b}
good = {"recorded": {"f": "1"}, "found": {"f": "1"}}
assert artifact_checks(good, resume(first=1), reload())["checks"][1]["findings"] == ["restarted"]
assert artifact_checks(good, resume(first=4), reload())["checks"][1]["findings"] == ["wrong_step"]
assert artifact_checks(good, resume(resumed=(1.2,)), reload())["checks"][1]["findings"] == ["length"]
assert artifact_checks(good, resume(first=2, resumed=(1.2, 1.0, 0.9)), reload())["checks"][1]["findings"] == \
    ["wrong_step", "length"]
within = artifact_checks(good, resume(resumed=(1.2 + 1e-6, 1.0)), reload(), loss_tolerance=1e-6)
assert within["checks"][1]["passed"] is True
beyond = artifact_checks(good, resume(resumed=(1.2, 1.0 + 3e-6)), reload(), loss_tolerance=1e-6)
assert beyond["checks"][1]["findings"] == ["diverged"]

# %% hidden exercise=artifact_checks points=1 name=the_reload_tolerance_is_inclusive
# hint: |reloaded - in_process| <= eval_tolerance passes, a larger gap is ["differs"].
def resume(first=3, resumed=(1.2, 1.0)):
    return {"reference_losses": [2.0, 1.5, 1.2, 1.0], "checkpoint_step": 2, "resumed_losses": list(resumed),
            "resumed_first_step": first}
def reload(a=0.5, b=0.5):
    return {"in_process": a, "reloaded": b}
good = {"recorded": {"f": "1"}, "found": {"f": "1"}}
assert artifact_checks(good, resume(), reload(0.5, 0.75), eval_tolerance=0.25)["checks"][2] == \
    {"name": "reload_reproduces", "passed": True, "findings": []}
assert artifact_checks(good, resume(), reload(0.5, 0.25), eval_tolerance=0.2)["checks"][2] == \
    {"name": "reload_reproduces", "passed": False, "findings": ["differs"]}
assert artifact_checks(good, resume(), reload(0.5, 0.5), eval_tolerance=0)["passed"] is True

# %% hidden exercise=artifact_checks points=1 name=checks_not_run_are_none_and_never_pass
# hint: a resume without its losses or first step, or a reload without either value, is passed None with ["not_run"]; the whole result then does not pass; the other checks still run.
def resume(first=3, resumed=(1.2, 1.0)):
    return {"reference_losses": [2.0, 1.5, 1.2, 1.0], "checkpoint_step": 2, "resumed_losses": list(resumed),
            "resumed_first_step": first}
def reload(a=0.5, b=0.5):
    return {"in_process": a, "reloaded": b}
good = {"recorded": {"f": "1"}, "found": {"f": "2"}}
result = artifact_checks(good, dict(resume(), resumed_first_step=None), reload(None, 0.5))
assert result["checks"] == [{"name": "files_intact", "passed": False, "findings": ["changed:f"]},
                            {"name": "resume_continues", "passed": None, "findings": ["not_run"]},
                            {"name": "reload_reproduces", "passed": None, "findings": ["not_run"]}]
assert result["passed"] is False

# %% hidden exercise=artifact_checks points=1 name=wrong_artifact_calls_raise_and_good_calls_do_not
# hint: every argument's shape is checked: the file tables, the losses and steps (no bool), the checkpoint inside the losses, the reload values, the tolerances.
def resume(first=3, resumed=(1.2, 1.0)):
    return {"reference_losses": [2.0, 1.5, 1.2, 1.0], "checkpoint_step": 2, "resumed_losses": list(resumed),
            "resumed_first_step": first}
def reload(a=0.5, b=0.5):
    return {"in_process": a, "reloaded": b}
good = {"recorded": {"f": "1"}, "found": {"f": "1"}}
assert artifact_checks(good, resume(), reload())["passed"] is True
bad_calls = [
    ({"recorded": {}, "found": {}}, resume(), reload()), ({"recorded": {"f": "1"}}, resume(), reload()),
    ({"recorded": {"f": None}, "found": {}}, resume(), reload()), ({"recorded": {"f": "1"}, "found": {"f": 2}}, resume(), reload()),
    ({"recorded": {"": "1"}, "found": {}}, resume(), reload()), (None, resume(), reload()),
    (good, dict(resume(), checkpoint_step=4), reload()), (good, dict(resume(), checkpoint_step=0), reload()),
    (good, dict(resume(), checkpoint_step=True), reload()), (good, dict(resume(), reference_losses=[]), reload()),
    (good, dict(resume(), reference_losses=[1.0, float("nan"), 2.0]), reload()),
    (good, dict(resume(), resumed_losses=[True, 1.0]), reload()), (good, dict(resume(), resumed_first_step=3.0), reload()),
    (good, resume(), reload("0.5", 0.5)), (good, resume(), reload(0.5, float("inf"))), (good, None, reload()),
    (good, resume(), None), (good, resume(), reload(), -1e-6), (good, resume(), reload(), 1e-6, float("nan")),
    (good, resume(), reload(), True),
]
for arguments in bad_calls:
    try:
        artifact_checks(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=artifact_checks points=2 name=agrees_with_reference_on_generated_deliveries
# hint: any files, resumed runs and reloads, valid or with one defect: the same checks and findings, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def deliveries(draw):
    paths = ["a", "b", "c/d"]
    recorded = {path: draw(st.sampled_from(["1", "2"])) for path in draw(st.lists(st.sampled_from(paths), min_size=1,
                                                                                 unique=True))}
    found = {path: draw(st.sampled_from([None, "1", "2"])) for path in draw(st.lists(st.sampled_from(paths + ["e"]),
                                                                                unique=True))}
    reference_losses = draw(st.lists(st.sampled_from([1.0, 0.5, 0.25, 2.0]), min_size=2, max_size=5))
    k = draw(st.integers(1, len(reference_losses) - 1))
    tail = list(reference_losses[k:])
    resumed = draw(st.sampled_from([None, tail, tail[:-1], tail + [0.1], [v + 0.001 for v in tail]]))
    first = draw(st.sampled_from([None, k + 1, 1, k]))
    reload = {"in_process": draw(st.sampled_from([0.5, None])), "reloaded": draw(st.sampled_from([0.6, 0.5001, 0.5, None]))}
    arguments = [{"recorded": recorded, "found": found},
                 {"reference_losses": reference_losses, "checkpoint_step": k, "resumed_losses": resumed,
                  "resumed_first_step": first}, reload, draw(st.sampled_from([1e-6, 0.01])),
                 draw(st.sampled_from([1e-4, 0.2]))]
    return tuple(arguments)

@st.composite
def broken(draw):
    """A delivery with one argument replaced by a wrong value."""
    arguments = list(draw(deliveries()))
    arguments[draw(st.integers(0, 4))] = draw(st.sampled_from([None, -1, True, {"recorded": {}}]))
    return tuple(arguments)

@st.composite
def clean_deliveries(draw):
    """Every file intact, the resume at the checkpoint (or a step late) with losses equal or off by 0.001, the
    reload equal or off by 1e-5 or 1e-4; tolerances that accept or refuse those differences."""
    recorded = {path: draw(st.sampled_from(["1", "2"])) for path in draw(st.lists(st.sampled_from(["a", "b", "c/d"]),
                                                                                 min_size=1, unique=True))}
    losses = draw(st.lists(st.sampled_from([1.0, 0.5, 0.25, 2.0]), min_size=2, max_size=5))
    k = draw(st.integers(1, len(losses) - 1))
    resumed = draw(st.sampled_from([list(losses[k:]), [v + 0.001 for v in losses[k:]]]))
    return ({"recorded": recorded, "found": dict(recorded)},
            {"reference_losses": losses, "checkpoint_step": k, "resumed_losses": resumed,
             "resumed_first_step": draw(st.sampled_from([k + 1, k + 2]))},
            {"in_process": 0.5, "reloaded": draw(st.sampled_from([0.5001, 0.5, 0.50001]))},
            draw(st.sampled_from([1e-6, 0.01])), 1e-4)

from tools.course.grader.clauses import is_bool


def checked(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("artifact_checks")(*call)


def findings(*call):
    return [finding for check in checked(*call)["checks"] for finding in check["findings"]]


def finding_starts(prefix):
    return lambda *call: any(finding.startswith(prefix) for finding in findings(*call))


def replaced(position):
    """The argument at `position` is one of the generator's broken values."""
    return lambda *call: any(call[position] is bad or call[position] == bad and type(call[position]) is type(bad)
                             for bad in (None, -1, True, {"recorded": {}}))

reference.agrees("artifact_checks", st.one_of(deliveries(), clean_deliveries(), broken()), cases=250, clauses={
    "a missing file": finding_starts("missing:"),
    "a changed file": finding_starts("changed:"),
    "an unrecorded file": finding_starts("unrecorded:"),
    "an unrecorded path found as None (not a finding)": lambda files, *rest: checked(files, *rest) and any(
        path not in files["recorded"] and digest is None for path, digest in files["found"].items()),
    "a resume not run": lambda *call: checked(*call)["checks"][1]["passed"] is None,
    "a resume restarted at step 1": finding_starts("restarted"),
    "a resume at the wrong step": finding_starts("wrong_step"),
    "resumed losses of another length": finding_starts("length"),
    "resumed losses that diverge beyond the tolerance": finding_starts("diverged"),
    "resumed losses off by less than the tolerance": lambda files, resume, reload, loss_tol, eval_tol: checked(
        files, resume, reload, loss_tol, eval_tol)["checks"][1]["passed"] is True
        and list(resume["resumed_losses"]) != list(resume["reference_losses"][resume["checkpoint_step"]:]),
    "a reload not run": lambda *call: checked(*call)["checks"][2]["passed"] is None,
    "a reload that differs": finding_starts("differs"),
    "a reload difference at 1e-4 that rounding puts above it": lambda files, resume, reload, loss_tol, eval_tol: checked(
        files, resume, reload, loss_tol, eval_tol) and eval_tol == 1e-4 and reload["reloaded"] == 0.5001
        and reload["in_process"] == 0.5,
    "every check passes": lambda *call: checked(*call)["passed"],
    "files replaced by a wrong value": replaced(0),
    "resume replaced by a wrong value": replaced(1),
    "reload replaced by a wrong value (a wrong dict is a reload not run)": replaced(2),
    "loss_tolerance replaced by a wrong value": replaced(3),
    "eval_tolerance replaced by a wrong value": replaced(4),
})

# %% hidden exercise=delivery_state points=1 name=reasons_follow_the_fixed_order
# hint: mismatches in their order, then files_intact, resume_continues, reload_reproduces in that order whatever order the checks come in; each finding of a failed check, or "<name>:failed" when it has none; then "evaluation:<name>" for each failed gate in its order.
def check(name, passed, findings=()):
    return {"name": name, "passed": passed, "findings": list(findings)}
same = {"matches": True, "mismatches": []}
integrity = {"checks": [check("reload_reproduces", False, []), check("resume_continues", False, ["restarted", "diverged"]),
                        check("files_intact", False, ["missing:a", "changed:b"])]}
gates = [{"name": "task_gain", "passed": False}, {"name": "base_skill_kept", "passed": True},
         {"name": "format", "passed": False}]
state = delivery_state(same, integrity, gates)
assert state["state"] == "needs_rerun"
assert state["reasons"] == ["files_intact:missing:a", "files_intact:changed:b", "resume_continues:restarted",
                            "resume_continues:diverged", "reload_reproduces:failed", "evaluation:task_gain",
                            "evaluation:format"]

# %% hidden exercise=delivery_state points=1 name=blocked_wins_and_keeps_every_reason
# hint: any identity mismatch blocks the delivery, and the integrity and evaluation reasons are still listed after the mismatches; a check not run is "not_run:<name>".
def check(name, passed, findings=()):
    return {"name": name, "passed": passed, "findings": list(findings)}
identity = {"matches": False, "mismatches": [{"key": "rank", "expected": 4, "actual": 8}, {"key": "lr", "expected": 1, "actual": 2}]}
all_passed = {"checks": [check("files_intact", True), check("resume_continues", True), check("reload_reproduces", True)]}
good = [{"name": "task_gain", "passed": True}]
failed = [{"name": "task_gain", "passed": False}]
blocked = delivery_state(identity, all_passed, failed)
assert blocked == {"state": "blocked", "reasons": ["mismatch:rank", "mismatch:lr", "evaluation:task_gain"],
                   "next_action": NEXT_ACTIONS["blocked"]}
not_run = {"checks": [check("files_intact", True), check("resume_continues", None, ["not_run"]), check("reload_reproduces", True)]}
assert delivery_state(identity, not_run, good)["reasons"] == ["mismatch:rank", "mismatch:lr", "not_run:resume_continues"]
assert delivery_state({"matches": True, "mismatches": []}, not_run, good) == {
    "state": "needs_rerun", "reasons": ["not_run:resume_continues"], "next_action": NEXT_ACTIONS["needs_rerun"]}
assert delivery_state({"matches": True, "mismatches": []}, all_passed, good)["state"] == "delivered"

# %% hidden exercise=delivery_state points=1 name=a_failed_evaluation_rejects_only_complete_evidence
# hint: with the identity matching and every check passed, a failed evaluation gate is "rejected"; a check that failed or did not run makes it "needs_rerun" instead (the evidence comes first); every gate passed is "delivered".
def check(name, passed, findings=()):
    return {"name": name, "passed": passed, "findings": list(findings)}
same = {"matches": True, "mismatches": []}
all_passed = {"checks": [check("files_intact", True), check("resume_continues", True), check("reload_reproduces", True)]}
forgot = [{"name": "task_gain", "passed": True}, {"name": "base_skill_kept", "passed": False}]
assert delivery_state(same, all_passed, forgot) == {"state": "rejected", "reasons": ["evaluation:base_skill_kept"],
                                                    "next_action": NEXT_ACTIONS["rejected"]}
broken = {"checks": [check("files_intact", True), check("resume_continues", True), check("reload_reproduces", False, ["differs"])]}
assert delivery_state(same, broken, forgot)["state"] == "needs_rerun"
both = [{"name": "task_gain", "passed": True}, {"name": "base_skill_kept", "passed": True}]
assert delivery_state(same, all_passed, both)["state"] == "delivered"

# %% hidden exercise=delivery_state points=1 name=wrong_state_calls_raise_and_good_calls_do_not
# hint: identity must be consistent (matches exactly when there is no mismatch); integrity must hold each of the three checks once, each with a passed of True, False or None and a findings list; evaluation is a non-empty list of gates with a unique non-empty str name and a bool passed.
def check(name, passed, findings=()):
    return {"name": name, "passed": passed, "findings": list(findings)}
good_identity = {"matches": True, "mismatches": []}
all_passed = {"checks": [check("files_intact", True), check("resume_continues", True), check("reload_reproduces", True)]}
gates = [{"name": "task_gain", "passed": True}]
assert delivery_state(good_identity, all_passed, gates)["state"] == "delivered"
assert delivery_state(good_identity, all_passed, [{"name": "task_gain", "passed": False}])["state"] == "rejected"
bad_calls = [({"matches": False, "mismatches": []}, all_passed, gates),
             ({"matches": True, "mismatches": [{"key": "x"}]}, all_passed, gates),
             ({"matches": 1, "mismatches": []}, all_passed, gates), ({"matches": False, "mismatches": [{"k": "x"}]}, all_passed, gates),
             (None, all_passed, gates), (good_identity, None, gates), (good_identity, {"checks": all_passed["checks"][:2]}, gates),
             (good_identity, {"checks": all_passed["checks"] + [check("files_intact", True)]}, gates),
             (good_identity, {"checks": [check("files_intact", "yes"), check("resume_continues", True), check("reload_reproduces", True)]}, gates),
             (good_identity, {"checks": [check("files", True), check("resume_continues", True), check("reload_reproduces", True)]}, gates),
             (good_identity, {"checks": [{"name": "files_intact", "passed": True}, check("resume_continues", True),
                                         check("reload_reproduces", True)]}, gates),
             (good_identity, all_passed, []), (good_identity, all_passed, None), (good_identity, all_passed, ({"name": "g", "passed": 1},)),
             (good_identity, all_passed, [{"name": "", "passed": True}]), (good_identity, all_passed, [{"passed": True}]),
             (good_identity, all_passed, [{"name": "g", "passed": True}, {"name": "g", "passed": False}]),
             (good_identity, all_passed, [None]), (good_identity, all_passed, [{"name": 3, "passed": True}])]
for position, arguments in enumerate(bad_calls):
    try:
        delivery_state(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {position} was accepted")

# %% hidden exercise=delivery_state points=2 name=agrees_with_reference_on_generated_states
# hint: any identity, integrity and evaluation results, valid or with one defect: the same state, reasons and next action, or the same ValueError.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of

NAMES = ("files_intact", "resume_continues", "reload_reproduces")
scenarios = ([("drawn", n) for n in range(40)] + [(kind, 0) for kind in (
    "delivered", "rejected", "rerun_with_failed_gate", "rerun_not_run", "rerun_failed_without_findings", "blocked",
    "identity_none", "identity_inconsistent", "matches_not_bool", "missing_check", "duplicate_check", "eval_empty",
    "eval_none", "eval_passed_not_bool", "eval_named_twice", "eval_blank_name")])


def one_state(scenario, rng):
    kind, _ = scenario
    mismatches = [{"key": key} for key in rng.sample(["rank", "lr", "data_sha256"], rng.randint(0, 2))]
    checks = []
    for name in rng.sample(NAMES, 3):
        passed = rng.choice([True, True, False, None])
        findings = [] if passed else rng.sample(["x", "y", "not_run"], rng.randint(0, 2))
        checks.append({"name": name, "passed": passed, "findings": findings})
    evaluation = [{"name": name, "passed": rng.choice([True, True, False])}
                  for name in rng.sample(["task_gain", "base_skill_kept", "format"], rng.randint(1, 3))]
    if kind in ("delivered", "rejected", "rerun_with_failed_gate", "rerun_not_run", "rerun_failed_without_findings"):
        mismatches = []
        checks = [dict(check, passed=True, findings=[]) for check in checks]
        evaluation = [dict(gate, passed=kind == "delivered") for gate in evaluation]
        if kind == "rerun_with_failed_gate":
            checks[0] = dict(checks[0], passed=False, findings=["x"])
        elif kind == "rerun_not_run":
            checks[1] = dict(checks[1], passed=None, findings=["not_run"])
        elif kind == "rerun_failed_without_findings":
            checks[2] = dict(checks[2], passed=False, findings=[])
    elif kind == "blocked":
        mismatches = mismatches or [{"key": "rank"}]
    identity = {"matches": not mismatches, "mismatches": mismatches}
    if kind == "identity_none":
        identity = None
    elif kind == "identity_inconsistent":
        identity = {"matches": True, "mismatches": [{"key": "a"}]}
    elif kind == "matches_not_bool":
        identity = {"matches": "no", "mismatches": []}
    elif kind == "missing_check":
        checks = checks[:-1]
    elif kind == "duplicate_check":
        checks = checks + checks[:1]
    elif kind == "eval_empty":
        evaluation = []
    elif kind == "eval_none":
        evaluation = None
    elif kind == "eval_passed_not_bool":
        evaluation = [{"name": "g", "passed": "no"}]
    elif kind == "eval_named_twice":
        evaluation = evaluation + [dict(evaluation[0], passed=not evaluation[0]["passed"])]
    elif kind == "eval_blank_name":
        evaluation = [{"name": "", "passed": True}]
    return identity, {"checks": checks, "passed": False}, evaluation

def stated(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("delivery_state")(*call)

def valid_up_to_evaluation(identity, integrity):
    return (isinstance(identity, dict) and identity.get("matches") in (True, False)
            and identity["matches"] != bool(identity["mismatches"]) and len(integrity["checks"]) == 3)

reference.agrees("delivery_state", each_of(scenarios, one_state, variants=3), cases=3 * len(scenarios), clauses={
    "blocked by a mismatch": lambda *call: stated(*call)["state"] == "blocked",
    "blocked, with failed checks listed too": lambda *call: stated(*call)["state"] == "blocked" and any(
        not reason.startswith("mismatch:") for reason in stated(*call)["reasons"]),
    "needs_rerun for a check not run": lambda *call: stated(*call)["state"] == "needs_rerun" and any(
        reason.startswith("not_run:") for reason in stated(*call)["reasons"]),
    "needs_rerun for a failed check without findings": lambda *call: stated(*call)["state"] == "needs_rerun" and any(
        reason.endswith(":failed") for reason in stated(*call)["reasons"]),
    "needs_rerun although an evaluation gate failed": lambda *call: stated(*call)["state"] == "needs_rerun" and any(
        reason.startswith("evaluation:") for reason in stated(*call)["reasons"]),
    "rejected by a failed evaluation gate": lambda *call: stated(*call)["state"] == "rejected",
    "a failed check whose finding is not_run": lambda *call: any(
        reason.endswith(":not_run") for reason in stated(*call)["reasons"]),
    "delivered": lambda *call: stated(*call)["state"] == "delivered",
    "checks not in the usual order": lambda identity, integrity, evaluation: stated(identity, integrity, evaluation) and [
        check["name"] for check in integrity["checks"]] != ["files_intact", "resume_continues", "reload_reproduces"],
    "identity matches yet lists mismatches": lambda identity, integrity, evaluation: identity == {
        "matches": True, "mismatches": [{"key": "a"}]},
    "identity None": lambda identity, integrity, evaluation: identity is None,
    "matches not a bool": lambda identity, integrity, evaluation: isinstance(identity, dict) and identity.get("matches") == "no",
    "integrity missing a check": lambda identity, integrity, evaluation: isinstance(identity, dict) and identity.get(
        "matches") in (True, False) and identity["matches"] != bool(identity["mismatches"]) and len(integrity["checks"]) == 2,
    "integrity holding a check twice": lambda identity, integrity, evaluation: isinstance(identity, dict) and identity.get(
        "matches") in (True, False) and identity["matches"] != bool(identity["mismatches"]) and len(integrity["checks"]) == 4,
    "an evaluation gate with a blank name": lambda identity, integrity, evaluation: valid_up_to_evaluation(
        identity, integrity) and evaluation == [{"name": "", "passed": True}],
    "no evaluation gate": lambda identity, integrity, evaluation: valid_up_to_evaluation(identity, integrity)
        and evaluation == [],
    "evaluation None": lambda identity, integrity, evaluation: valid_up_to_evaluation(identity, integrity)
        and evaluation is None,
    "an evaluation passed that is not a bool": lambda identity, integrity, evaluation: valid_up_to_evaluation(
        identity, integrity) and evaluation == [{"name": "g", "passed": "no"}],
    "an evaluation gate named twice": lambda identity, integrity, evaluation: valid_up_to_evaluation(identity, integrity)
        and isinstance(evaluation, list) and len(evaluation) > 1 and len({g["name"] for g in evaluation}) < len(evaluation),
})
