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
from tools.course.grader.clauses import below, each_of, is_bool, not_a_number, not_finite, values

checks = ["contract", "verifier", "over_length", "duplicate", "leakage", "conflict"]
splits = ["train", "validation", "eval"]
bad_findings = ["unknown check", "unknown split", "sample_id None", "a tuple", "None"]
defects = ([("valid", n) for n in range(60)] + [("lenient", n) for n in range(20)]
           + [("size", bad) for bad in [-1, True, 1.0, None, "3"]]
           + [("frozen", bad) for bad in [("test",), "train", None, {"train"}]]
           + [("fraction", bad) for bad in [1, 1.0, -0.01, float("nan"), float("inf"), True, None, "0.1"]]
           + [("minimum", bad) for bad in [-1, 1.5, True, None, "1"]]
           + [("finding", bad) for bad in bad_findings]
           + [("findings", bad) for bad in [None, "x", {"check": "duplicate"}, 3]]
           + [("sizes", bad) for bad in [{}, None, [("train", 3)], {1: 2}]])

def valid_call(rng):
    sizes = {name: rng.randint(0, 6) for name in rng.sample(splits, rng.randint(1, 3))}
    findings = [{"check": rng.choice(checks), "split": name, "sample_id": f"{name[0]}{rng.randint(0, max(size - 1, 0))}"}
                for name, size in sizes.items() for _ in range(rng.randint(0, 2 * size))]
    frozen = rng.sample(sorted(sizes), rng.randint(0, 1))
    fraction = rng.choice([0, 0.0, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.9])
    return findings, sizes, tuple(frozen) if rng.random() < 0.5 else frozen, fraction, rng.randint(0, 4)

def one_defect(defect, rng):
    """A valid call, a lenient one (wide drop limit, nothing frozen, no conflict: mostly tune), or one defect."""
    kind, bad = defect
    findings, sizes, frozen, fraction, minimum = valid_call(rng)
    if kind == "lenient":
        return [f for f in findings if f["check"] != "conflict"], sizes, (), 0.9, 0
    if kind == "size":
        sizes[rng.choice(sorted(sizes))] = bad
    elif kind == "frozen":
        frozen = bad
    elif kind == "fraction":
        fraction = bad
    elif kind == "minimum":
        minimum = bad
    elif kind == "finding":
        name = sorted(sizes)[0]
        findings = findings + [{"unknown check": {"check": "typo", "split": name, "sample_id": "x"},
                                "unknown split": {"check": "duplicate", "split": "test", "sample_id": "x"},
                                "sample_id None": {"check": "duplicate", "split": name, "sample_id": None},
                                "a tuple": ("duplicate", name, "x"), "None": None}[bad]]
    elif kind == "findings":
        findings = bad
    elif kind == "sizes":
        sizes = bad
    return findings, sizes, frozen, fraction, minimum



def merged(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("merge_blockers")(*call)


def blocker_checks(*call):
    return [blocker["check"] for blocker in merged(*call)["blockers"]]


def hits_per_sample(findings):
    seen = {}
    for finding in findings:
        seen.setdefault((finding["split"], finding["sample_id"]), set()).add(finding["check"])
    return seen


def share_at_limit(findings, sizes, frozen, fraction, minimum):
    merged(findings, sizes, frozen, fraction, minimum)
    blocked = {}
    for finding in findings:
        if finding["check"] != "conflict":
            blocked.setdefault(finding["split"], set()).add(finding["sample_id"])
    return any(sizes[name] and name not in frozen and len(ids) / sizes[name] == fraction for name, ids in blocked.items())

reference.agrees("merge_blockers", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a finding in a frozen split (reject)": lambda *call: "frozen_split" in blocker_checks(*call),
    "a conflict beside tune-level blockers": lambda *call: "conflict" in blocker_checks(*call) and any(
        check in blocker_checks(*call) for check in ("contract", "verifier", "over_length", "duplicate", "leakage")),
    "a blocked share above max_drop_fraction": lambda *call: "too_many_blocked" in blocker_checks(*call),
    "a blocked share exactly at max_drop_fraction": share_at_limit,
    "too few records left": lambda *call: "too_few_left" in blocker_checks(*call),
    "a tune verdict with a repair plan": lambda *call: merged(*call)["verdict"] == "tune",
    "an accept verdict": lambda *call: merged(*call)["verdict"] == "accept",
    "a sample hit by two checks": lambda *call: merged(*call) and any(
        len(found) > 1 for found in hits_per_sample(call[0]).values()),
    "the same finding given twice": lambda *call: merged(*call) and len(
        {tuple(sorted(f.items())) for f in call[0]}) < len(call[0]),
    "an empty split": lambda *call: merged(*call) and 0 in call[1].values(),
    "frozen given as a tuple": lambda *call: merged(*call) and isinstance(call[2], tuple) and len(call[2]) > 0,
    "max_drop_fraction given as the int 0": lambda *call: merged(*call) and type(call[3]) is int,
    "a split size below 0": lambda findings, sizes, *rest: any(below(v, 0) for v in values(sizes)),
    "a split size that is a bool": lambda findings, sizes, *rest: any(is_bool(v) for v in values(sizes)),
    "a split size that is a float": lambda findings, sizes, *rest: any(isinstance(v, float) for v in values(sizes)),
    "a split size that is not a number": lambda findings, sizes, *rest: any(not_a_number(v) for v in values(sizes)),
    "split_sizes empty": lambda findings, sizes, *rest: sizes == {},
    "split_sizes not a dict": lambda findings, sizes, *rest: not isinstance(sizes, dict),
    "a split name that is not a str": lambda findings, sizes, *rest: isinstance(sizes, dict) and any(
        not isinstance(name, str) for name in sizes),
    "frozen names a split not in split_sizes": lambda findings, sizes, frozen, *rest: isinstance(frozen, (list, tuple))
        and any(name not in sizes for name in frozen),
    "frozen not a list or tuple": lambda findings, sizes, frozen, *rest: not isinstance(frozen, (list, tuple)),
    "max_drop_fraction 1 or more": lambda findings, sizes, frozen, fraction, minimum: not is_bool(fraction)
        and isinstance(fraction, (int, float)) and fraction >= 1,
    "max_drop_fraction below 0": lambda findings, sizes, frozen, fraction, minimum: below(fraction, 0),
    "max_drop_fraction not finite": lambda findings, sizes, frozen, fraction, minimum: not_finite(fraction),
    "max_drop_fraction a bool": lambda findings, sizes, frozen, fraction, minimum: is_bool(fraction),
    "max_drop_fraction not a number": lambda findings, sizes, frozen, fraction, minimum: not_a_number(fraction),
    "min_records below 0": lambda *call: below(call[4], 0),
    "min_records a float": lambda *call: isinstance(call[4], float),
    "min_records a bool": lambda *call: is_bool(call[4]),
    "min_records not a number": lambda *call: not_a_number(call[4]),
    "a finding with an unknown check": lambda findings, *rest: any(
        isinstance(f, dict) and f.get("check") not in checks for f in values(findings)),
    "a finding naming a split not in split_sizes": lambda findings, *rest: any(
        isinstance(f, dict) and f.get("split") == "test" for f in values(findings)),
    "a finding whose sample_id is not a str": lambda findings, *rest: any(
        isinstance(f, dict) and not isinstance(f.get("sample_id"), str) for f in values(findings)),
    "a finding that is not a dict": lambda findings, *rest: any(not isinstance(f, dict) for f in values(findings)),
    "findings not a list or tuple": lambda findings, *rest: not isinstance(findings, (list, tuple)),
})

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

import unicodedata

from tools.course.grader.clauses import values


def leaks(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("find_leaks")(*call)


def keyed(splits, key):
    return {name: [key(f"{r['instruction']} {r['input']}") for r in records] for name, records in splits.items()}


def leak_only_with(splits, priority, weaker, full):
    """A lower record that the full normalisation links to a higher one and the weaker one does not."""
    leaks(splits, priority)
    strong, weak = keyed(splits, full), keyed(splits, weaker)
    for position, lower in enumerate(priority):
        for index, key in enumerate(strong[lower]):
            above = [(name, i) for name in priority[:position] for i, k in enumerate(strong[name]) if k == key]
            if above and all(weak[name][i] != weak[lower][index] for name, i in above):
                return True
    return False


def full(text):
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

reference.agrees("find_leaks", st.one_of(valid_splits(), invalid_splits()), cases=300, clauses={
    "a leak only NFKC finds (full-width, ligature)": lambda splits, priority: leak_only_with(
        splits, priority, lambda t: " ".join(t.casefold().split()), full),
    "a leak only full case folding finds (ß, SS)": lambda splits, priority: leak_only_with(
        splits, priority, lambda t: " ".join(unicodedata.normalize("NFKC", t).lower().split()), full),
    "a leak only collapsing whitespace finds": lambda splits, priority: leak_only_with(
        splits, priority, lambda t: unicodedata.normalize("NFKC", t).casefold(), full),
    "a leak where instruction and input split the text differently": lambda splits, priority: leaks(splits, priority)
        and any(full(a["instruction"]) != full(b["instruction"]) and full(f"{a['instruction']} {a['input']}")
                == full(f"{b['instruction']} {b['input']}") for x in priority for y in priority if x != y
                for a in splits[x] for b in splits[y]),
    "a leak into the third split or lower": lambda splits, priority: any(
        leaks(splits, priority)["leaked"][name] for name in list(priority)[2:]),
    "a duplicate inside one split (not a leak)": lambda splits, priority: leaks(splits, priority) and any(
        len(set(keys)) < len(keys) for keys in keyed(splits, full).values()),
    "a split with no records": lambda splits, priority: leaks(splits, priority) and any(
        len(records) == 0 for records in splits.values()),
    "a single split": lambda splits, priority: leaks(splits, priority) and len(splits) == 1,
    "split names that differ only in case": lambda splits, priority: leaks(splits, priority) and {"train", "Train"} <= set(splits),
    "records given as a tuple": lambda splits, priority: leaks(splits, priority) and any(
        isinstance(records, tuple) and records for records in splits.values()),
    "priority given as a tuple": lambda splits, priority: leaks(splits, priority) and isinstance(priority, tuple),
    "priority missing a split": lambda splits, priority: isinstance(priority, list) and set(priority) < set(splits),
    "priority naming a split not in splits": lambda splits, priority: isinstance(priority, list) and "extra" in priority,
    "priority naming a split twice": lambda splits, priority: isinstance(priority, list) and set(priority) == set(splits)
        and len(priority) > len(set(priority)),
    "priority a str": lambda splits, priority: isinstance(priority, str),
    "priority None": lambda splits, priority: priority is None,
    "a record that is not a dict": lambda splits, priority: any(
        not isinstance(r, dict) for records in values(splits) if isinstance(records, (list, tuple)) for r in records),
    "a record missing a field": lambda splits, priority: any(
        isinstance(r, dict) and not {"id", "instruction", "input"} <= set(r) for records in values(splits)
        if isinstance(records, (list, tuple)) for r in records),
    "a record whose instruction is not a str": lambda splits, priority: any(
        isinstance(r, dict) and "input" in r and not isinstance(r.get("instruction"), str) for records in values(splits)
        if isinstance(records, (list, tuple)) for r in records),
    "a record whose id is not a str": lambda splits, priority: any(
        isinstance(r, dict) and not isinstance(r.get("id"), str) and "input" in r for records in values(splits)
        if isinstance(records, (list, tuple)) for r in records),
    "a split that is not a list of records": lambda splits, priority: any(
        not isinstance(records, (list, tuple)) for records in values(splits)),
})

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

from tools.course.grader.clauses import is_bool


def moved(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("admission_transition")(*call)


def refusal(*call):
    """The stage's error message ('' when it accepts the call): the first rule the call breaks (the stage
    checks in the reference's order and names each rule apart)."""
    from tools.experiments.sft_chain.admission_gates import admission_transition as staged

    try:
        staged(*call)
    except ValueError as error:
        return str(error)
    return ""

reference.agrees("admission_transition", line_calls(), cases=200, clauses={
    "a first admission": lambda *call: moved(*call)["round"] == 1,
    "a tune within the repair limit": lambda *call: moved(*call)["state"] == "tune",
    "a tune turned reject at the repair limit": lambda *call: moved(*call)["reason"] == "repair_limit",
    "an accept after repairs": lambda *call: moved(*call)["state"] == "accept" and len(call[0]) > 0,
    "a reject verdict": lambda *call: moved(*call)["state"] == "reject" and moved(*call)["reason"] == "verdict",
    "history given as a tuple": lambda *call: moved(*call) and isinstance(call[0], tuple) and len(call[0]) > 0,
    "max_repairs 0": lambda *call: moved(*call) and call[2] == 0 and not is_bool(call[2]),
    "an admission after an accepted version": lambda *call: "was accepted" in refusal(*call),
    "an admission after a rejected version": lambda *call: "was rejected" in refusal(*call),
    "a parent that is not the last version": lambda *call: "as its parent" in refusal(*call),
    "a first admission with a parent": lambda *call: "has no parent" in refusal(*call),
    "a version admitted before": lambda *call: "was admitted before" in refusal(*call),
    "content that did not change": lambda *call: "content did not change" in refusal(*call),
    "an admission with an unknown verdict": lambda history, admission, limit: isinstance(admission, dict)
        and "content_sha256" in admission and admission.get("verdict") not in ("accept", "tune", "reject"),
    "an admission missing its fields": lambda history, admission, limit: isinstance(admission, dict)
        and "content_sha256" not in admission,
    "an admission that is not a dict": lambda history, admission, limit: not isinstance(admission, dict),
    "max_repairs below 0": lambda *call: "max_repairs" in refusal(*call) and not is_bool(call[2]),
    "max_repairs a bool": lambda *call: "max_repairs" in refusal(*call) and is_bool(call[2]),
})
