# %% hidden exercise=merge_blockers points=1 name=tune_blockers_survive_a_reject
# hint: a reject-level finding decides the verdict, but every tune-level blocker is still listed (it is part of what goes back to the data owner).
def finding(check, split, sample):
    return {"check": check, "split": split, "sample_id": sample}
findings = [finding("leakage", "train", "t9"), finding("conflict", "train", "t1"), finding("contract", "train", "t2"),
            finding("verifier", "validation", "v1"), finding("over_length", "train", "t3"), finding("conflict", "train", "t4")]
result = merge_blockers(findings, {"train": 40, "validation": 10}, min_records=1)
assert result["verdict"] == "reject" and result["repair"] == {}
assert [(b["level"], b["check"], b["split"], b["count"], b["sample_ids"]) for b in result["blockers"]] == [
    ("reject", "conflict", "train", 2, ["t1", "t4"]),
    ("tune", "contract", "train", 1, ["t2"]),
    ("tune", "verifier", "validation", 1, ["v1"]),
    ("tune", "over_length", "train", 1, ["t3"]),
    ("tune", "leakage", "train", 1, ["t9"]),
]

# %% hidden exercise=merge_blockers points=1 name=a_sample_counts_once_however_many_checks_hit_it
# hint: blocked and left are numbers of distinct samples: a sample hit by three checks, or the same finding given twice, is one sample.
def finding(check, split, sample):
    return {"check": check, "split": split, "sample_id": sample}
findings = [finding("contract", "train", "a"), finding("over_length", "train", "a"), finding("leakage", "train", "a"),
            finding("duplicate", "train", "b"), finding("duplicate", "train", "b")]
result = merge_blockers(findings, {"train": 20}, max_drop_fraction=0.1, min_records=18)
assert result["verdict"] == "tune"
assert [(b["check"], b["count"]) for b in result["blockers"]] == [
    ("contract", 1), ("over_length", 1), ("duplicate", 1), ("leakage", 1)]
assert result["repair"] == {"train": ["a", "b"]}
tight = merge_blockers(findings, {"train": 20}, max_drop_fraction=0.1, min_records=19)
assert [(b["check"], b["count"], b["sample_ids"]) for b in tight["blockers"]][:1] == [("too_few_left", 1, [])]

# %% hidden exercise=merge_blockers points=1 name=drop_fraction_boundary_and_empty_splits
# hint: blocked / size equal to max_drop_fraction is allowed, above it is a reject; a split without records is never too_many_blocked, but it can be too_few_left.
def finding(check, split, sample):
    return {"check": check, "split": split, "sample_id": sample}
findings = [finding("verifier", "train", f"t{n}") for n in range(3)]
at_limit = merge_blockers(findings, {"train": 30}, max_drop_fraction=0.1, min_records=0)
assert at_limit["verdict"] == "tune" and [b["check"] for b in at_limit["blockers"]] == ["verifier"]
above = merge_blockers(findings, {"train": 29}, max_drop_fraction=0.1, min_records=0)
assert above["verdict"] == "reject"
assert above["blockers"][0] == {"level": "reject", "check": "too_many_blocked", "split": "train", "count": 3,
                                "sample_ids": []}
empty = merge_blockers([], {"train": 0, "test": 5}, max_drop_fraction=0.0, min_records=2)
assert empty["blockers"] == [{"level": "reject", "check": "too_few_left", "split": "train", "count": 2, "sample_ids": []}]
assert merge_blockers([], {"train": 0}, min_records=0) == {"verdict": "accept", "blockers": [], "repair": {}}

# %% hidden exercise=merge_blockers points=1 name=a_frozen_split_is_never_repaired
# hint: any finding on a frozen split, whatever its check, is one frozen_split reject; a frozen split never enters the repair plan or the drop and size rules.
def finding(check, split, sample):
    return {"check": check, "split": split, "sample_id": sample}
findings = [finding("duplicate", "eval", "e2"), finding("conflict", "eval", "e1"), finding("leakage", "eval", "e2"),
            finding("leakage", "train", "t1")]
result = merge_blockers(findings, {"eval": 2, "train": 50}, frozen=["eval"], max_drop_fraction=0.0, min_records=5)
assert result["blockers"] == [
    {"level": "reject", "check": "frozen_split", "split": "eval", "count": 2, "sample_ids": ["e1", "e2"]},
    {"level": "reject", "check": "too_many_blocked", "split": "train", "count": 1, "sample_ids": []},
    {"level": "tune", "check": "leakage", "split": "train", "count": 1, "sample_ids": ["t1"]},
]
clean = merge_blockers([finding("leakage", "train", "t1")], {"eval": 2, "train": 50}, frozen=("eval",), min_records=5)
assert clean["verdict"] == "tune" and clean["repair"] == {"train": ["t1"]}

# %% hidden exercise=merge_blockers points=1 name=wrong_merge_calls_raise_and_good_calls_do_not
# hint: every argument is checked (types, ranges, bools, unknown checks or splits, more samples than the split holds); the matching good call still answers.
def finding(check, split, sample):
    return {"check": check, "split": split, "sample_id": sample}
sizes = {"train": 2}
good = [finding("duplicate", "train", "t1")]
assert merge_blockers(good, sizes, max_drop_fraction=0.5)["verdict"] == "tune"
bad_calls = [
    (good, {"train": True}, (), 0.1, 1), (good, {"train": -1}, (), 0.1, 1), (good, {}, (), 0.1, 1),
    (good, [("train", 2)], (), 0.1, 1), (good, {3: 2}, (), 0.1, 1), (good, sizes, ("test",), 0.1, 1),
    (good, sizes, "train", 0.1, 1), (good, sizes, (), 1.0, 1), (good, sizes, (), float("nan"), 1),
    (good, sizes, (), True, 1), (good, sizes, (), -0.1, 1), (good, sizes, (), 0.1, -1), (good, sizes, (), 0.1, 1.0),
    (good, sizes, (), 0.1, True), ("findings", sizes, (), 0.1, 1), ([finding("Duplicate", "train", "t1")], sizes, (), 0.1, 1),
    ([finding("duplicate", "test", "t1")], sizes, (), 0.1, 1), ([finding("duplicate", "train", 7)], sizes, (), 0.1, 1),
    ([["duplicate", "train", "t1"]], sizes, (), 0.1, 1),
    ([finding("leakage", "train", name) for name in ("a", "b", "c")], sizes, (), 0.5, 0),
]
for arguments in bad_calls:
    try:
        merge_blockers(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=merge_blockers points=2 name=agrees_with_reference_on_generated_findings
# hint: any findings, sizes, frozen splits and limits, valid or with one defect: the same verdict, blockers and repair plan, or the same ValueError.
from hypothesis import strategies as st

checks = ["contract", "verifier", "over_length", "duplicate", "leakage", "conflict"]
splits = ["train", "validation", "eval"]

@st.composite
def valid_call(draw):
    sizes = {name: draw(st.integers(0, 6)) for name in draw(st.lists(st.sampled_from(splits), min_size=1, max_size=3,
                                                                     unique=True))}
    findings = []
    for name, size in sizes.items():
        for _ in range(draw(st.integers(0, 2 * size))):
            findings.append({"check": draw(st.sampled_from(checks)), "split": name,
                             "sample_id": f"{name[0]}{draw(st.integers(0, max(size - 1, 0)))}"})
    frozen = draw(st.lists(st.sampled_from(sorted(sizes)), max_size=1, unique=True))
    fraction = draw(st.sampled_from([0, 0.0, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.9]))
    return (findings, sizes, tuple(frozen) if draw(st.booleans()) else frozen, fraction, draw(st.integers(0, 4)))

@st.composite
def invalid_call(draw):
    findings, sizes, frozen, fraction, minimum = draw(valid_call())
    kind = draw(st.sampled_from(["size", "frozen", "fraction", "minimum", "finding", "findings", "sizes"]))
    if kind == "size":
        sizes[draw(st.sampled_from(sorted(sizes)))] = draw(st.sampled_from([-1, True, 1.0, None, "3"]))
    elif kind == "frozen":
        frozen = draw(st.sampled_from([("test",), "train", None, {"train"}]))
    elif kind == "fraction":
        fraction = draw(st.sampled_from([1, 1.0, -0.01, float("nan"), float("inf"), True, None, "0.1"]))
    elif kind == "minimum":
        minimum = draw(st.sampled_from([-1, 1.5, True, None, "1"]))
    elif kind == "finding":
        name = sorted(sizes)[0]
        findings = findings + [draw(st.sampled_from([{"check": "typo", "split": name, "sample_id": "x"},
                                                     {"check": "duplicate", "split": "test", "sample_id": "x"},
                                                     {"check": "duplicate", "split": name, "sample_id": None},
                                                     ("duplicate", name, "x"), None]))]
    elif kind == "findings":
        findings = draw(st.sampled_from([None, "x", {"check": "duplicate"}, 3]))
    else:
        sizes = draw(st.sampled_from([{}, None, [("train", 3)], {1: 2}]))
    return findings, sizes, frozen, fraction, minimum

reference.agrees("merge_blockers", st.one_of(valid_call(), valid_call(), invalid_call()), cases=200)

# %% hidden exercise=find_leaks points=1 name=casefold_nfkc_and_whitespace_all_apply
# hint: the full normalisation: compatibility forms and ligatures (NFKC), full case folding (ß matches SS), and every run of spaces, tabs or newlines as one space.
def rec(record_id, instruction, input_text=""):
    return {"id": record_id, "instruction": instruction, "input": input_text}
splits = {"eval": [rec("e1", "Spell STRASSE backwards."), rec("e2", "ﬁnd 12 - 3.")],
          "train": [rec("t1", "spell straße backwards."), rec("t2", "find\t１２ -\n3."), rec("t3", "Find 12-3.")]}
report = find_leaks(splits, ("eval", "train"))
assert report["leaked"] == {"eval": [], "train": ["t1", "t2"]}
assert report["overlap"] == [{"higher": "eval", "lower": "train", "shared": 2}]

# %% hidden exercise=find_leaks points=1 name=instruction_and_input_are_one_content
# hint: where the problem stands does not matter: the instruction and the input are joined with one space before normalising.
def rec(record_id, instruction, input_text=""):
    return {"id": record_id, "instruction": instruction, "input": input_text}
splits = {"eval": [rec("e1", "Compute", "40 - 17.")],
          "val": [rec("v1", "Compute 40 - 17.", "")],
          "train": [rec("t1", "Compute 40", "- 17."), rec("t2", "Compute 40 - 17", "."), rec("t3", "", "compute 40 - 17.")]}
report = find_leaks(splits, ["eval", "val", "train"])
assert report["leaked"] == {"eval": [], "val": ["v1"], "train": ["t1", "t3"]}

# %% hidden exercise=find_leaks points=1 name=every_higher_split_is_checked
# hint: a record leaks when any split above it holds its content, not only the first one; each pair's overlap counts the distinct contents both hold.
def rec(record_id, instruction, input_text=""):
    return {"id": record_id, "instruction": instruction, "input": input_text}
splits = {"a": [rec("a1", "one")], "b": [rec("b1", "two"), rec("b2", "TWO ")], "c": [rec("c1", "three")],
          "d": [rec("d1", "two"), rec("d2", "three"), rec("d3", "one"), rec("d4", "Two"), rec("d5", "four")]}
report = find_leaks(splits, ["a", "b", "c", "d"])
assert report["leaked"] == {"a": [], "b": [], "c": [], "d": ["d1", "d2", "d3", "d4"]}
assert report["overlap"] == [{"higher": "a", "lower": "b", "shared": 0}, {"higher": "a", "lower": "c", "shared": 0},
                             {"higher": "b", "lower": "c", "shared": 0}, {"higher": "a", "lower": "d", "shared": 1},
                             {"higher": "b", "lower": "d", "shared": 1}, {"higher": "c", "lower": "d", "shared": 1}]

# %% hidden exercise=find_leaks points=1 name=only_the_lower_copy_leaks_and_duplicates_are_not_leaks
# hint: the higher split keeps its problem; records that share content inside one split are duplicates, not leaks; ids are sorted as str.
def rec(record_id, instruction, input_text=""):
    return {"id": record_id, "instruction": instruction, "input": input_text}
splits = {"train": [rec("t10", "x"), rec("t9", "x"), rec("t1", "y")], "eval": [rec("e1", "x"), rec("e0", "x")]}
report = find_leaks(splits, ["eval", "train"])
assert report["leaked"] == {"eval": [], "train": ["t10", "t9"]}
flipped = find_leaks(splits, ["train", "eval"])
assert flipped["leaked"] == {"train": [], "eval": ["e0", "e1"]}
assert find_leaks({"only": [rec("o1", "z"), rec("o2", "z")]}, ["only"]) == {"leaked": {"only": []}, "overlap": []}

# %% hidden exercise=find_leaks points=1 name=wrong_leak_calls_raise_and_good_calls_do_not
# hint: the call is checked before any comparison: the dict, the priority (every split exactly once), every split's list and every record's str fields.
def rec(record_id, instruction, input_text=""):
    return {"id": record_id, "instruction": instruction, "input": input_text}
good = {"eval": [rec("e1", "x")], "train": [rec("t1", "x", "")]}
assert find_leaks(good, ["eval", "train"])["leaked"]["train"] == ["t1"]
bad_calls = [(good, ["eval"]), (good, ["eval", "train", "train"]), (good, ["eval", "train", "test"]), (good, "eval"),
             (good, None), ({}, []), ([("eval", [])], ["eval"]), ({"eval": "x"}, ["eval"]),
             ({"eval": [{"id": "e1", "instruction": "x"}]}, ["eval"]), ({"eval": [{"id": 1, "instruction": "x", "input": ""}]}, ["eval"]),
             ({"eval": [None]}, ["eval"]), ({"eval": [rec("e1", None)]}, ["eval"]), (good, [1, 2])]
for arguments in bad_calls:
    try:
        find_leaks(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=find_leaks points=2 name=agrees_with_reference_on_generated_splits
# hint: any splits and priorities, valid or with one defect (texts that differ in case, width, spacing or field): the same leaks and overlaps, or the same ValueError.
from hypothesis import strategies as st

texts = st.sampled_from(["Compute 4 - 2.", "compute ４ － ２.", "COMPUTE  4 -\t2.", "Compute", "4 - 2.", "Straße",
                         "STRASSE", "ﬁne", "fine", "", " ", "a b", "ab"])

@st.composite
def valid_splits(draw):
    names = draw(st.lists(st.sampled_from(["eval", "val", "train", "Train"]), min_size=1, max_size=4, unique=True))
    splits = {}
    for name in names:
        records = [{"id": f"{name}{n}", "instruction": draw(texts), "input": draw(texts), "output": "o"}
                   for n in range(draw(st.integers(0, 4)))]
        splits[name] = records if draw(st.booleans()) else tuple(records)
    priority = draw(st.permutations(names))
    return splits, list(priority) if draw(st.booleans()) else tuple(priority)

@st.composite
def invalid_splits(draw):
    splits, priority = draw(valid_splits())
    kind = draw(st.sampled_from(["priority", "record", "split"]))
    if kind == "priority":
        priority = draw(st.sampled_from([list(priority)[:-1], list(priority) + ["extra"], list(priority) + list(priority)[:1],
                                         "eval", None]))
    elif kind == "record":
        name = list(splits)[0]
        splits[name] = list(splits[name]) + [draw(st.sampled_from([None, {"id": "x"}, {"id": "x", "instruction": 1, "input": ""},
                                                                    {"id": 2, "instruction": "a", "input": "b"}]))]
    else:
        splits[list(splits)[0]] = draw(st.sampled_from(["records", None, {"id": "x"}]))
    return splits, priority

reference.agrees("find_leaks", st.one_of(valid_splits(), valid_splits(), invalid_splits()), cases=200)

# %% hidden exercise=admission_transition points=1 name=accept_and_reject_are_final
# hint: after an accepted or a rejected admission nothing may follow, whatever the next admission says.
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
accepted = admission_transition([], adm("v1", "a1", None, "accept"))
assert (accepted["state"], accepted["next_action"], accepted["round"]) == ("accept", "hand_off", 1)
rejected = admission_transition([], adm("v1", "a1", None, "reject"))
assert (rejected["state"], rejected["reason"], rejected["next_action"]) == ("reject", "verdict", "return_to_owner")
for history in (accepted["history"], rejected["history"]):
    for verdict in ("accept", "tune", "reject"):
        try:
            admission_transition(history, adm("v2", "b2", "v1", verdict))
        except ValueError:
            continue
        raise AssertionError("an admission after a final one was accepted")

# %% hidden exercise=admission_transition points=1 name=repair_limit_counts_the_earlier_admissions
# hint: with max_repairs repairs already made (len(history) >= max_repairs), a tune verdict becomes a reject for repair_limit; an accept or a reject is unchanged.
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
h1 = admission_transition([], adm("v1", "s1", None, "tune"), max_repairs=2)["history"]
second = admission_transition(h1, adm("v2", "s2", "v1", "tune"), max_repairs=2)
assert (second["state"], second["reason"], second["round"]) == ("tune", "verdict", 2)
third = admission_transition(second["history"], adm("v3", "s3", "v2", "tune"), max_repairs=2)
assert (third["state"], third["reason"], third["next_action"], third["round"]) == ("reject", "repair_limit", "return_to_owner", 3)
late_accept = admission_transition(second["history"], adm("v3", "s3", "v2", "accept"), max_repairs=2)
assert (late_accept["state"], late_accept["reason"]) == ("accept", "verdict")
never = admission_transition([], adm("v1", "s1", None, "tune"), max_repairs=0)
assert (never["state"], never["reason"]) == ("reject", "repair_limit")

# %% hidden exercise=admission_transition points=1 name=a_repair_is_a_new_version_with_new_content
# hint: a version name or a content hash seen before in the line is refused, even when the parent is right; the history returned holds every admission in order.
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
h1 = admission_transition([], adm("v1", "s1", None, "tune"))["history"]
good = admission_transition(h1, adm("v2", "s2", "v1", "accept"))
assert [entry["version"] for entry in good["history"]] == ["v1", "v2"] and good["history"][0] == adm("v1", "s1", None, "tune")
for bad in (adm("v2", "s1", "v1", "accept"), adm("v1", "s2", "v1", "accept")):
    try:
        admission_transition(h1, bad)
    except ValueError:
        continue
    raise AssertionError(f"a repair without a new version or new content was accepted: {bad}")

# %% hidden exercise=admission_transition points=1 name=parents_chain_the_versions
# hint: the first admission has no parent; every later one names the last admission's version (not an older one, not None).
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
assert admission_transition([], adm("v1", "s1", None, "tune"))["state"] == "tune"
h2 = admission_transition(admission_transition([], adm("v1", "s1", None, "tune"))["history"],
                          adm("v2", "s2", "v1", "tune"))["history"]
assert admission_transition(h2, adm("v3", "s3", "v2", "accept"), max_repairs=3)["round"] == 3
for history, bad in (([], adm("v1", "s1", "v0", "tune")), (h2, adm("v3", "s3", "v1", "accept")),
                     (h2, adm("v3", "s3", None, "accept"))):
    try:
        admission_transition(history, bad, max_repairs=3)
    except ValueError:
        continue
    raise AssertionError(f"a wrong parent was accepted: {bad}")

# %% hidden exercise=admission_transition points=1 name=wrong_shapes_raise_and_good_calls_do_not
# hint: a malformed admission (in history or new), history that is not a list or tuple, or max_repairs that is not an int >= 0 raises ValueError; the good call answers.
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
good = adm("v1", "s1", None, "tune")
assert admission_transition((), good, 1)["next_action"] == "repair_and_readmit"
bad_calls = [(None, good, 1), ("v1", good, 1), ([], dict(good, verdict="Accept"), 1), ([], dict(good, version=""), 1),
             ([], dict(good, content_sha256=3), 1), ([], dict(good, parent=1), 1), ([], {"version": "v1"}, 1),
             ([], good, -1), ([], good, True), ([], good, 1.0), ([None], dict(good, parent="v0"), 1), ([], None, 1)]
for arguments in bad_calls:
    try:
        admission_transition(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=admission_transition points=2 name=agrees_with_reference_on_generated_lines
# hint: any line history and next admission, legal or not, with any repair limit: the same state, reason, round, action and history, or the same ValueError.
def adm(version, sha, parent, verdict):
    return {"version": version, "content_sha256": sha, "parent": parent, "verdict": verdict}
from hypothesis import strategies as st

@st.composite
def line_calls(draw):
    length = draw(st.integers(0, 4))
    history = []
    for n in range(length):
        verdict = "tune" if n < length - 1 else draw(st.sampled_from(["tune", "tune", "accept", "reject"]))
        history.append(adm(f"v{n + 1}", f"s{n + 1}", f"v{n}" if n else None, verdict))
    version = draw(st.sampled_from([f"v{length + 1}", f"v{max(length, 1)}", "v9"]))
    sha = draw(st.sampled_from([f"s{length + 1}", f"s{max(length, 1)}", "s9"]))
    parent = draw(st.sampled_from([f"v{length}" if length else None, None, "v0", f"v{length}"]))
    admission = adm(version, sha, parent, draw(st.sampled_from(["accept", "tune", "reject"])))
    if draw(st.integers(0, 9)) == 0:
        admission = draw(st.sampled_from([None, dict(admission, verdict="ok"), {"version": version}]))
    limit = draw(st.sampled_from([0, 1, 2, 3, 5, -1, True]))
    return (history if draw(st.booleans()) else tuple(history)), admission, limit

reference.agrees("admission_transition", line_calls(), cases=200)
