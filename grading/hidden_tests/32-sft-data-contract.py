# %% hidden exercise=validate_records points=1 name=whitespace_is_empty_only_where_required
# hint: a value made only of whitespace is empty, but only fields listed in non_empty must have content.
schema = {"id": str, "instruction": str, "input": str, "output": str}
records = [
    {"id": "r1", "instruction": "\t\n", "input": "   ", "output": ""},
    {"id": "r2", "instruction": "Say hi.", "input": "   ", "output": " hi "},
]
report = validate_records(records, schema, non_empty=("instruction", "output"))
assert report["valid"] == [1]
assert report["invalid"] == [{"index": 0, "id": "r1", "problems": ["empty:instruction", "empty:output"]}]
assert report["counts"]["empty"] == 2
lenient = validate_records(records, schema)
assert lenient["valid"] == [0, 1] and lenient["invalid"] == []

# %% hidden exercise=validate_records points=1 name=problem_order_follows_the_schema
# hint: one problem at most per schema field, in the schema's own order, then the extra keys sorted by name.
schema = {"output": str, "id": str, "instruction": str}
records = [{"zeta": 1, "output": "4", "instruction": 7, "alpha": None},
           {"id": "k", "instruction": "Add.", "output": None, "extra": "x"}]
report = validate_records(records, schema, non_empty=["output"])
assert report["invalid"] == [
    {"index": 0, "id": None, "problems": ["missing:id", "type:instruction", "unexpected:alpha", "unexpected:zeta"]},
    {"index": 1, "id": "k", "problems": ["type:output", "unexpected:extra"]},
]
assert report["counts"] == {"not_a_mapping": 0, "missing": 1, "type": 2, "empty": 0, "unexpected": 3, "duplicate_id": 0}
number_schema = {"id": str, "score": float}
typed = validate_records([{"id": "s", "score": 1}, {"id": "t", "score": 1.0}], number_schema)
assert typed["invalid"] == [{"index": 0, "id": "s", "problems": ["type:score"]}] and typed["valid"] == [1]

# %% hidden exercise=validate_records points=1 name=only_later_holders_of_an_id_are_duplicates
# hint: the first record holding an id keeps it, even if that record is invalid for another reason; ids are compared exactly, and a blank id is no id.
schema = {"id": str, "text": str}
records = [
    {"id": "x", "text": 5},
    {"id": "x", "text": "b"},
    {"id": "X", "text": "c"},
    {"id": "x", "text": "d"},
    {"id": "  ", "text": "e"},
    {"id": "  ", "text": "f"},
]
report = validate_records(records, schema, non_empty=("id",))
assert report["valid"] == [2]
assert report["invalid"] == [
    {"index": 0, "id": "x", "problems": ["type:text"]},
    {"index": 1, "id": "x", "problems": ["duplicate_id"]},
    {"index": 3, "id": "x", "problems": ["duplicate_id"]},
    {"index": 4, "id": None, "problems": ["empty:id"]},
    {"index": 5, "id": None, "problems": ["empty:id"]},
]
assert report["counts"]["duplicate_id"] == 2

# %% hidden exercise=validate_records points=1 name=non_records_and_empty_input
# hint: something that is not a dict gets a single problem of its own; an empty list is a valid (empty) input with every count at zero.
schema = {"id": str, "output": str}
report = validate_records([None, ["id", "a"], {"id": "a", "output": "1"}], schema, non_empty=("output",))
assert report["valid"] == [2]
assert report["invalid"] == [{"index": 0, "id": None, "problems": ["not_a_mapping"]},
                             {"index": 1, "id": None, "problems": ["not_a_mapping"]}]
assert report["counts"] == {"not_a_mapping": 2, "missing": 0, "type": 0, "empty": 0, "unexpected": 0, "duplicate_id": 0}
empty = validate_records([], schema)
assert empty == {"valid": [], "invalid": [], "counts": {"not_a_mapping": 0, "missing": 0, "type": 0, "empty": 0,
                                                        "unexpected": 0, "duplicate_id": 0}}
assert validate_records((), schema)["valid"] == []

# %% hidden exercise=validate_records points=1 name=wrong_contract_calls_raise
# hint: a wrong records container, a wrong contract or a wrong non_empty argument is a mistake of the caller, not of the data.
schema = {"id": str, "output": str, "score": float}
good = [{"id": "a", "output": "1", "score": 0.5}]
bad_calls = [
    lambda: validate_records({"a": good[0]}, schema),
    lambda: validate_records("records", schema),
    lambda: validate_records(good, {}),
    lambda: validate_records(good, [("id", str)]),
    lambda: validate_records(good, {"id": "str", "output": str}),
    lambda: validate_records(good, {"id": str, "": str}),
    lambda: validate_records(good, {"output": str}),
    lambda: validate_records(good, schema, non_empty=("answer",)),
    lambda: validate_records(good, schema, non_empty=("score",)),
    lambda: validate_records(good, schema, non_empty="id"),
    lambda: validate_records(good, schema, non_empty=(["id"],)),
    lambda: validate_records(good, schema, non_empty=(3,)),
    lambda: validate_records(good, {"id": str, " \t": str}),
    lambda: validate_records(good, {"id": (str, int)}),
    lambda: validate_records(good, {"id": str, 3: str}),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("a wrong call was accepted")

# %% hidden exercise=audit_splits points=1 name=nfkc_and_casefold_merge_variants
# hint: apply the full normalisation of the docstring: compatibility forms, case folding (not just lower case), and whitespace.
splits = {
    "train": [{"id": "t1", "instruction": "Spell the word.", "input": "Straße", "output": "s-t-r-a-s-s-e"},
              {"id": "t2", "instruction": "ﬁnd the sum.", "input": "１２ ＋ ３０", "output": "42"}],
    "validation": [{"id": "v1", "instruction": "SPELL THE WORD.", "input": "STRASSE", "output": "s-t-r-a-s-s-e"},
                   {"id": "v2", "instruction": "Find the sum.", "input": "12 + 30", "output": "42"}],
}
report = audit_splits(splits)
assert report["duplicate_groups"] == []
assert report["leaks"] == [
    {"splits": ["train", "validation"], "key": ["find the sum.", "12 + 30"],
     "ids": {"train": ["t2"], "validation": ["v2"]}, "kind": "normalised"},
    {"splits": ["train", "validation"], "key": ["spell the word.", "strasse"],
     "ids": {"train": ["t1"], "validation": ["v1"]}, "kind": "normalised"},
]

# %% hidden exercise=audit_splits points=1 name=every_pair_of_splits_is_checked
# hint: compare every pair of splits, not only pairs with the training split, and order pairs and keys as the docstring says.
def rec(record_id, instruction, input_text, output="x"):
    return {"id": record_id, "instruction": instruction, "input": input_text, "output": output}
splits = {
    "validation": [rec("v1", "Name it.", "cat"), rec("v2", "Name it.", "dog")],
    "train": [rec("t1", "Name it.", "dog"), rec("t2", "Name it.", "owl")],
    "test": [rec("s1", "Name it.", "cat "), rec("s2", "name it.", "owl"), rec("s3", "Name it.", "dog")],
}
report = audit_splits(splits)
assert report["splits"] == ["test", "train", "validation"]
assert [(leak["splits"], leak["key"], leak["kind"]) for leak in report["leaks"]] == [
    (["test", "train"], ["name it.", "dog"], "exact"),
    (["test", "train"], ["name it.", "owl"], "normalised"),
    (["test", "validation"], ["name it.", "cat"], "normalised"),
    (["test", "validation"], ["name it.", "dog"], "exact"),
    (["train", "validation"], ["name it.", "dog"], "exact"),
]
assert report["leaks"][2]["ids"] == {"test": ["s1"], "validation": ["v1"]}

# %% hidden exercise=audit_splits points=1 name=conflicts_compare_normalised_answers
# hint: answers are compared after the same normalisation as the inputs; punctuation is kept, so it can still make answers differ.
def rec(record_id, output):
    return {"id": record_id, "instruction": "Name the capital.", "input": "France", "output": output}
same = audit_splits({"train": [rec("b", "Paris"), rec("a", "  PARIS "), rec("c", "paris")]})
assert same["duplicate_groups"] == [{"split": "train", "key": ["name the capital.", "france"],
                                     "ids": ["a", "b", "c"], "conflict": False}]
differ = audit_splits({"train": [rec("a", "Paris"), rec("b", "Paris.")]})
assert differ["duplicate_groups"][0]["conflict"] is True
assert same["leaks"] == [] and same["records"] == {"train": 3}

# %% hidden exercise=audit_splits points=1 name=task_input_is_a_pair_and_punctuation_is_kept
# hint: the key is the pair (instruction, input), not one joined string, and normalisation does not remove punctuation.
splits = {
    "train": [{"id": "a", "instruction": "Add 2", "input": "3", "output": "5"},
              {"id": "b", "instruction": "Add", "input": "2 3", "output": "5"},
              {"id": "c", "instruction": "Add", "input": "2-3", "output": "-1"}],
    "test": [{"id": "d", "instruction": "Add 2 3", "input": "", "output": "5"}],
}
report = audit_splits(splits)
assert report["duplicate_groups"] == []
assert report["leaks"] == []

# %% hidden exercise=audit_splits points=1 name=exact_when_any_raw_pair_matches
# hint: a leak is exact as soon as one record on each side shares the raw instruction and input; the ids list every record with the key on each side.
splits = {
    "train": [{"id": "t2", "instruction": "Add.", "input": "1 + 1", "output": "2"},
              {"id": "t1", "instruction": "ADD.", "input": "1  + 1", "output": "2"}],
    "dev": [{"id": "d1", "instruction": "add.", "input": "1 + 1", "output": "2"},
            {"id": "d2", "instruction": "Add.", "input": "1 + 1", "output": "2"}],
    "empty": [],
}
report = audit_splits(splits)
assert report["records"] == {"train": 2, "dev": 2, "empty": 0}
assert report["leaks"] == [{"splits": ["dev", "train"], "key": ["add.", "1 + 1"],
                            "ids": {"dev": ["d1", "d2"], "train": ["t1", "t2"]}, "kind": "exact"}]
assert [group["split"] for group in report["duplicate_groups"]] == ["dev", "train"]

# %% hidden exercise=audit_splits points=1 name=unvalidated_records_raise
# hint: the audit works only on records that passed the contract; anything else is a wrong call.
good = {"id": "a", "instruction": "Add.", "input": "", "output": "1"}
bad_calls = [
    lambda: audit_splits({}),
    lambda: audit_splits([("train", [good])]),
    lambda: audit_splits({"train": {"a": good}}),
    lambda: audit_splits({1: [good]}),
    lambda: audit_splits({"train": [good, "Add. -> 1"]}),
    lambda: audit_splits({"train": [{"id": "b", "instruction": "Add.", "output": "1"}]}),
    lambda: audit_splits({"train": [dict(good, output=None)]}),
    lambda: audit_splits({"train": [dict(good, id=3)]}),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("a wrong call was accepted")

# %% hidden exercise=admission_verdict points=1 name=empty_split_rejects
# hint: a split without any raw record cannot be used at all; its invalid fraction is not a number.
schema_reports = {"train": {"valid": [0, 1, 2], "invalid": []}, "test": {"valid": [], "invalid": []}}
audit = {"splits": ["test", "train"], "records": {"train": 3, "test": 0}, "duplicate_groups": [], "leaks": []}
report = admission_verdict(schema_reports, audit)
assert report["invalid_fractions"] == {"train": 0.0, "test": None}
assert report["verdict"] == "reject"
assert report["reasons"] == [{"level": "reject", "code": "empty_split", "count": 1}]
all_invalid = {"train": {"valid": [0, 1, 2], "invalid": []},
               "test": {"valid": [], "invalid": [{"index": 0, "id": None, "problems": ["not_a_mapping"]}]}}
report = admission_verdict(all_invalid, audit)
assert report["invalid_fractions"]["test"] == 1.0
assert report["reasons"] == [{"level": "reject", "code": "schema_violations", "count": 1}]

# %% hidden exercise=admission_verdict points=1 name=limit_splits_invalid_records_by_level
# hint: decide per split whether its invalid share is above the limit (reject) or within it (tune), and count invalid records, not splits.
def bad(n):
    return [{"index": i, "id": None, "problems": ["missing:output"]} for i in range(n)]
schema_reports = {"train": {"valid": list(range(17)), "invalid": bad(3)},
                  "test": {"valid": list(range(39)), "invalid": bad(1)},
                  "dev": {"valid": list(range(19)), "invalid": bad(1)}}
audit = {"splits": ["dev", "test", "train"], "records": {"train": 17, "test": 39, "dev": 19},
         "duplicate_groups": [], "leaks": []}
report = admission_verdict(schema_reports, audit, max_invalid_fraction=0.05)
assert report["invalid_fractions"] == {"train": 0.15, "test": 0.025, "dev": 0.05}
assert report["verdict"] == "reject"
assert report["reasons"] == [{"level": "reject", "code": "schema_violations", "count": 3},
                             {"level": "tune", "code": "invalid_records", "count": 2}]
strict = admission_verdict(schema_reports, audit, max_invalid_fraction=0)
assert strict["reasons"] == [{"level": "reject", "code": "schema_violations", "count": 5}]

# %% hidden exercise=admission_verdict points=1 name=tune_only_and_group_counts
# hint: a duplicate group without a conflict only needs de-duplication; count groups, and keep conflicts apart.
schema_reports = {"train": {"valid": list(range(30)), "invalid": []}}
groups = [{"split": "train", "key": ["a", ""], "ids": ["1", "2"], "conflict": False},
          {"split": "train", "key": ["b", ""], "ids": ["3", "4", "5"], "conflict": False}]
audit = {"splits": ["train"], "records": {"train": 30}, "duplicate_groups": groups, "leaks": []}
report = admission_verdict(schema_reports, audit)
assert report["verdict"] == "tune"
assert report["reasons"] == [{"level": "tune", "code": "duplicate_inputs", "count": 2}]
with_conflict = dict(audit, duplicate_groups=groups + [{"split": "train", "key": ["c", ""], "ids": ["6", "7"], "conflict": True}])
report = admission_verdict(schema_reports, with_conflict)
assert report["verdict"] == "reject"
assert report["reasons"] == [{"level": "reject", "code": "label_conflicts", "count": 1},
                             {"level": "tune", "code": "duplicate_inputs", "count": 2}]

# %% hidden exercise=admission_verdict points=1 name=normalised_leaks_block_like_exact_ones
# hint: a leak that only normalisation reveals contaminates the evaluation as much as a verbatim copy.
schema_reports = {"train": {"valid": list(range(8)), "invalid": []}, "test": {"valid": list(range(4)), "invalid": []}}
leaks = [{"splits": ["test", "train"], "key": ["k", str(i)], "ids": {"test": ["s"], "train": ["t"]}, "kind": "normalised"}
         for i in range(2)]
audit = {"splits": ["test", "train"], "records": {"train": 8, "test": 4}, "duplicate_groups": [], "leaks": leaks}
report = admission_verdict(schema_reports, audit)
assert report["verdict"] == "reject"
assert report["reasons"] == [{"level": "reject", "code": "normalised_leakage", "count": 2}]

# %% hidden exercise=admission_verdict points=1 name=mismatched_reports_and_limits_raise
# hint: check the limit and that both reports describe the same splits and the same valid records before deciding.
schema_reports = {"train": {"valid": [0, 1], "invalid": []}, "test": {"valid": [0], "invalid": []}}
audit = {"splits": ["test", "train"], "records": {"train": 2, "test": 1}, "duplicate_groups": [], "leaks": []}
bad_calls = [
    lambda: admission_verdict(schema_reports, audit, max_invalid_fraction=1),
    lambda: admission_verdict(schema_reports, audit, max_invalid_fraction=-0.01),
    lambda: admission_verdict(schema_reports, audit, max_invalid_fraction=float("nan")),
    lambda: admission_verdict(schema_reports, audit, max_invalid_fraction=False),
    lambda: admission_verdict(schema_reports, dict(audit, splits=["train"], records={"train": 2})),
    lambda: admission_verdict(schema_reports, dict(audit, splits=["dev", "test", "train"])),
    lambda: admission_verdict(schema_reports, dict(audit, records={"train": 2, "test": 2})),
    lambda: admission_verdict({"train": {"valid": [0, 1]}, "test": {"valid": [0], "invalid": []}}, audit),
    lambda: admission_verdict([("train", {"valid": [0, 1], "invalid": []})], audit),
    lambda: admission_verdict(schema_reports, {"splits": ["test", "train"], "records": {"train": 2, "test": 1}}),
    lambda: admission_verdict({}, {"splits": [], "records": {}, "duplicate_groups": [], "leaks": []}),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("a wrong call was accepted")
assert admission_verdict(schema_reports, audit, max_invalid_fraction=0)["verdict"] == "accept"

# %% hidden exercise=validate_records points=1 name=isinstance_decides_types_and_keys_show_as_str
# hint: a type problem is exactly `not isinstance(value, expected)` (True passes an int field, an int fails a float field); an unexpected key is written and sorted as str(key).
schema = {"id": str, "n": int, "score": float}
records = [{"id": "a", "n": True, "score": 0.5},
           {"id": "b", "n": 1.0, "score": 2},
           {"id": "c", "n": 3, "score": 1.5, 10: "x", ("k", 1): "y", "Extra": None, 2: "z"}]
report = validate_records(records, schema)
assert report["valid"] == [0]
assert report["invalid"] == [
    {"index": 1, "id": "b", "problems": ["type:n", "type:score"]},
    {"index": 2, "id": "c", "problems": ["unexpected:('k', 1)", "unexpected:10", "unexpected:2", "unexpected:Extra"]},
]
assert report["counts"]["type"] == 2 and report["counts"]["unexpected"] == 4

# %% hidden exercise=validate_records points=1 name=ids_compare_exactly_and_tabs_are_no_content
# hint: ids are compared as they are (no stripping, no case folding), and a value made of tabs and newlines is empty where content is required.
schema = {"id": str, "output": str}
records = [{"id": "a", "output": "1"}, {"id": " a", "output": "2"}, {"id": "A", "output": "3"},
           {"id": "ａ", "output": "4"}, {"id": "a", "output": "\t\n"}, {"id": "d", "output": "\u3000"}]
report = validate_records(tuple(records), schema, non_empty=["output"])
assert report["valid"] == [0, 1, 2, 3]
assert report["invalid"] == [{"index": 4, "id": "a", "problems": ["empty:output", "duplicate_id"]},
                             {"index": 5, "id": "d", "problems": ["empty:output"]}]

# %% hidden exercise=audit_splits points=1 name=tuples_extra_keys_and_code_point_order
# hint: splits may hold tuples, extra record keys are ignored, and split names and ids sort as plain str (upper case before lower case).
def rec(record_id, instruction, input_text, **extra):
    return {"id": record_id, "instruction": instruction, "input": input_text, "output": "x", **extra}
splits = {"dev": (rec("b2", "Tab\tseparated", "x\ny"), rec("B1", "tab separated", "X Y", source="web")),
          "Train": [rec("a", "Tab separated", "x y")]}
report = audit_splits(splits)
assert report["splits"] == ["Train", "dev"]
assert report["records"] == {"dev": 2, "Train": 1}
assert report["duplicate_groups"] == [{"split": "dev", "key": ["tab separated", "x y"], "ids": ["B1", "b2"],
                                       "conflict": False}]
assert report["leaks"] == [{"splits": ["Train", "dev"], "key": ["tab separated", "x y"],
                            "ids": {"Train": ["a"], "dev": ["B1", "b2"]}, "kind": "normalised"}]

# %% hidden exercise=admission_verdict points=1 name=malformed_audit_entries_raise
# hint: every group needs a bool conflict, every leak a kind of exact or normalised, every split name a str, and the audit's record counts must be ints (a bool is not a count).
schema_reports = {"train": {"valid": [0], "invalid": []}, "test": {"valid": (0, 1), "invalid": ()}}
audit = {"splits": ("test", "train"), "records": {"train": 1, "test": 2}, "duplicate_groups": [], "leaks": []}
assert admission_verdict(schema_reports, audit)["verdict"] == "accept"
bad_calls = [
    lambda: admission_verdict(schema_reports, dict(audit, duplicate_groups=[{"ids": ["a", "b"]}])),
    lambda: admission_verdict(schema_reports, dict(audit, duplicate_groups=[{"conflict": 1}])),
    lambda: admission_verdict(schema_reports, dict(audit, duplicate_groups=["a"])),
    lambda: admission_verdict(schema_reports, dict(audit, leaks=[{"kind": "Exact"}])),
    lambda: admission_verdict(schema_reports, dict(audit, leaks=[{}])),
    lambda: admission_verdict(schema_reports, dict(audit, records={"train": True, "test": 2})),
    lambda: admission_verdict(schema_reports, dict(audit, records={"train": 1.0, "test": 2})),
    lambda: admission_verdict(schema_reports, dict(audit, splits=["test", "train", "train"])),
    lambda: admission_verdict(schema_reports, dict(audit, records={"train": 1, "test": 2, "dev": 0})),
    lambda: admission_verdict({**schema_reports, 3: {"valid": [], "invalid": []}}, audit),
    lambda: admission_verdict(schema_reports, dict(audit, leaks="exact")),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("a malformed report was accepted")


# %% hidden exercise=validate_records points=2 name=agrees_with_reference_on_generated_valid_records
# hint: any records under any valid contract (fields in any order, bools in int fields, ints in float fields, blank or tabbed text, ids that differ in case or width, keys that are not str): the same report.
from hypothesis import strategies as st

texts = ["", " ", "\t\n", "a", " a ", "ｆｕｌｌ", "ﬁ", "x\ny", "\u3000"]
by_class = {str: st.sampled_from(texts), int: st.one_of(st.integers(-1, 2), st.booleans(), st.just(1.0)),
            float: st.one_of(st.sampled_from([0.5, float("nan"), -0.0]), st.integers(0, 1))}
anything = st.one_of(st.sampled_from(texts), st.integers(0, 2), st.none(), st.just(["a"]))

@st.composite
def damaged(draw, record):
    record = dict(draw(record))
    for field in draw(st.lists(st.sampled_from(list(record)), max_size=1)):
        if draw(st.booleans()):
            del record[field]
        else:
            record[field] = draw(anything)
    return record

@st.composite
def valid_calls(draw):
    fields = draw(st.lists(st.sampled_from(["instruction", "input", "output", "score", "n", "Output", "ｏutput"]),
                           max_size=3, unique=True))
    classes = {"id": str, **{field: draw(st.sampled_from([str, str, int, float])) for field in fields}}
    schema = {field: classes[field] for field in draw(st.permutations(list(classes)))}
    non_empty = draw(st.lists(st.sampled_from([field for field, kind in schema.items() if kind is str]), unique=True))
    ids = st.one_of(st.sampled_from(["a", " a", "A", "a\t", "ａ"]), st.sampled_from(["b", "", "  ", "\t"]),
                    st.integers(0, 1), st.none())
    record = st.fixed_dictionaries({**{field: by_class[kind] for field, kind in schema.items()}, "id": ids},
                                   optional={"ouput": anything, "ID": anything, 7: anything, 12: anything,
                                             ("x", 1): anything})
    records = draw(st.lists(st.one_of(record, damaged(record), st.sampled_from([None, "Add. 1 + 1 -> 2", ["id"]])),
                            max_size=5))
    return (records if draw(st.booleans()) else tuple(records), schema,
            non_empty if draw(st.booleans()) else tuple(non_empty))

reference.agrees("validate_records", valid_calls(), cases=120)

# %% hidden exercise=validate_records points=2 name=agrees_with_reference_on_generated_wrong_calls
# hint: one wrong thing in the call (records not a list, a schema without id or with a blank or non-str name or a non-class type, non_empty not a list or naming a missing, non-str or unhashable field): the same ValueError.
from hypothesis import strategies as st

defects = ([("records", bad) for bad in [None, {"a": {"id": "a"}}, "records", 3, {"id": "a"}]]
           + [("schema", bad) for bad in [None, {}, [("id", str)], {"output": str}, {"id": "str"}, {"id": (str, int)},
                                          {"id": str, "": str}, {"id": str, " ": str}, {"id": str, "\t\n": str},
                                          {"id": str, 3: str}, {"id": str, "output": None}, {"id": str, "n": 1}]]
           + [("non_empty", bad) for bad in ["id", None, {"id"}, 3, ("answer",), ("score",), (3,), (["id"],),
                                             (None,), ("id", "Output"), ("ｏutput",)]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    records = draw(st.lists(st.fixed_dictionaries({"id": st.sampled_from(["a", "b", " "]),
                                                   "output": st.sampled_from(["1", " ", "x"])},
                                                  optional={"score": st.just(0.5)}), max_size=3))
    arguments = {"records": records, "schema": {"id": str, "output": str, "score": float}, "non_empty": ("output",)}
    arguments[kind] = bad
    return arguments["records"], arguments["schema"], arguments["non_empty"]

reference.agrees("validate_records", one_defect(), cases=100)

# %% hidden exercise=audit_splits points=2 name=agrees_with_reference_on_generated_valid_splits
# hint: any validated splits (full-width letters and digits, ligatures, ß, tabs and newlines, case variants, tuples, empty splits, names that sort by code point): the same audit.
from hypothesis import strategies as st

text = st.sampled_from(["Add.", "add.", "ADD.", "Add. ", " Add.", "Add.\t", "Add.\n", "ａｄｄ.", "Ａdd.", "ﬁnd", "find",
                        "FIND", "Straße", "STRASSE", "2 + 3", "2  +  3", "２ ＋ ３", "2\t+\n3", "2+3", "2-3", "", " "])
ids = st.sampled_from(["a", "b", "B", "c", "ａ", " a"])
record = st.one_of(
    st.fixed_dictionaries({"id": ids, "instruction": text, "input": text, "output": text},
                          optional={"source": st.just("web")}),
    st.fixed_dictionaries({"id": ids, "instruction": st.sampled_from(["Add.", "add.", "ＡＤＤ."]),
                           "input": st.sampled_from(["2 + 3", "2\t+ 3", "２ ＋ ３"]), "output": st.sampled_from(["5", "5 "])}))
records = st.one_of(st.lists(record, max_size=4), st.lists(record, max_size=3).map(tuple))
splits = st.dictionaries(st.sampled_from(["train", "test", "validation", "Train", "dev", "ｔｅｓｔ", ""]), records,
                         min_size=1, max_size=3)
reference.agrees("audit_splits", st.tuples(splits), cases=150)

# %% hidden exercise=audit_splits points=2 name=agrees_with_reference_on_generated_unvalidated_splits
# hint: one wrong thing anywhere (splits not a non-empty dict, a non-str split name, a split that is not a list, a record that is not a dict or lacks a str id, instruction, input or output): the same ValueError.
from hypothesis import strategies as st

fields = ["id", "instruction", "input", "output"]
defects = ([("splits", bad) for bad in [None, {}, [], "train", [("train", [])], 3]]
           + [("name", bad) for bad in [3, None, ("train",), b"train", 1.5]]
           + [("split", bad) for bad in [None, {"a": {}}, "records", 3, {"id": "a"}]]
           + [("record", bad) for bad in [None, "Add. -> 1", ["id", "a"], 3, ("a", "b")]]
           + [("missing", field) for field in fields]
           + [("value", (field, bad)) for field in fields for bad in [None, 3, b"x", ["a"], 1.0]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    records = [{"id": f"r{n}", "instruction": "Add.", "input": draw(st.sampled_from(["1 + 1", "１ ＋ １"])),
                "output": "2"} for n in range(draw(st.integers(1, 3)))]
    splits = {"train": records, "test": [dict(records[0], id="t0")]}
    target = draw(st.sampled_from(["train", "test"]))
    if kind == "splits":
        return (bad,)
    if kind == "name":
        splits[bad] = []
    elif kind == "split":
        splits[target] = bad
    elif kind == "record":
        splits[target].insert(draw(st.integers(0, 1)), bad)
    elif kind == "missing":
        del splits[target][0][bad]
    else:
        splits[target][0][bad[0]] = bad[1]
    return (splits,)

reference.agrees("audit_splits", one_defect(), cases=100)

# %% hidden exercise=admission_verdict points=2 name=agrees_with_reference_on_generated_valid_reports
# hint: any matching reports (splits in any order or as tuples, empty splits, shares exactly at the limit, a limit of 0): the same verdict with the same counts and float fractions.
from hypothesis import strategies as st

@st.composite
def valid_reports(draw):
    names = draw(st.lists(st.sampled_from(["train", "test", "dev", "Train", "ｔｅｓｔ"]), min_size=1, max_size=3,
                          unique=True))
    schema_reports, records = {}, {}
    for name in names:
        valid, invalid = draw(st.integers(0, 24)), draw(st.sampled_from([0, 0, 1, 2, 5]))
        rows = [{"index": index, "id": None, "problems": ["missing:output"]} for index in range(invalid)]
        schema_reports[name] = {"valid": list(range(valid)), "invalid": rows if draw(st.booleans()) else tuple(rows)}
        records[name] = valid
    audit = {"splits": draw(st.permutations(names)), "records": records,
             "duplicate_groups": draw(st.lists(st.fixed_dictionaries({"conflict": st.booleans()},
                                                                     optional={"split": st.just("train")}), max_size=4)),
             "leaks": draw(st.lists(st.fixed_dictionaries({"kind": st.sampled_from(["exact", "normalised"])}),
                                    max_size=4))}
    limit = draw(st.sampled_from([0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.999]))
    return schema_reports, audit, limit

reference.agrees("admission_verdict", valid_reports(), cases=150)

# %% hidden exercise=admission_verdict points=2 name=agrees_with_reference_on_generated_mismatched_reports
# hint: one wrong thing anywhere (a limit of 1, NaN or True; a report without its lists; splits named twice, missing or not str; a bool or float record count; a group without a bool conflict; a leak of another kind): the same ValueError.
from hypothesis import strategies as st

defects = ([("limit", bad) for bad in [1, 1.0, -0.01, float("nan"), float("inf"), True, False, None, "0.02"]]
           + [("schema_reports", bad) for bad in [None, {}, [("train", {})], "train"]]
           + [("report", bad) for bad in [None, [], {"valid": [0]}, {"invalid": []}, {"valid": 1, "invalid": []},
                                          {"valid": [0], "invalid": None}, {"valid": "0", "invalid": []}]]
           + [("name", bad) for bad in [3, None, ("dev",)]]
           + [("audit", bad) for bad in [None, [], "audit"]]
           + [("audit_key", bad) for bad in ["splits", "records", "duplicate_groups", "leaks"]]
           + [("splits", bad) for bad in [["train"], ["test", "train", "train"], ["test", "train", "dev"], "test,train",
                                          ["test", "Train"], [3, "train"], None]]
           + [("records", bad) for bad in [{"train": 1}, {"train": 1, "test": 2, "dev": 0}, None, [1, 2]]]
           + [("count", bad) for bad in [True, 1.0, "1", None, 2, 0]]
           + [("group", bad) for bad in [{}, {"conflict": 1}, {"conflict": None}, "group", None]]
           + [("leak", bad) for bad in [{}, {"kind": "Exact"}, {"kind": None}, {"kind": "normalized"}, "exact"]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    reports = {"train": {"valid": [0], "invalid": []}, "test": {"valid": [0, 1], "invalid": [{"index": 2}]}}
    audit = {"splits": ["test", "train"], "records": {"train": 1, "test": 2},
             "duplicate_groups": [{"conflict": False}], "leaks": [{"kind": "exact"}]}
    limit = draw(st.sampled_from([0.02, 0.5]))
    if kind == "limit":
        limit = bad
    elif kind == "schema_reports":
        reports = bad
    elif kind == "report":
        reports[draw(st.sampled_from(["train", "test"]))] = bad
    elif kind == "name":
        reports[bad] = {"valid": [], "invalid": []}
    elif kind == "audit":
        audit = bad
    elif kind == "audit_key":
        del audit[bad]
    elif kind == "count":
        audit["records"]["train"] = bad
    elif kind == "group":
        audit["duplicate_groups"].insert(draw(st.integers(0, 1)), bad)
    elif kind == "leak":
        audit["leaks"].insert(draw(st.integers(0, 1)), bad)
    else:
        audit[kind] = bad
    return reports, audit, limit

reference.agrees("admission_verdict", one_defect(), cases=120)
