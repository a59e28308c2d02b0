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
valid = validate_records(good + [{"id": "a", "output": " ", "score": 1}], schema, non_empty=("output",))
assert valid["valid"] == [0] and valid["invalid"] == [{"index": 1, "id": "a", "problems": [
    "empty:output", "type:score", "duplicate_id"]}], valid  # the valid call every case below breaks in one place
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
valid = audit_splits({"train": [good, dict(good, id="b", output="2")]})  # the valid call every case below breaks
assert valid["duplicate_groups"] == [{"split": "train", "key": ["add.", ""], "ids": ["a", "b"], "conflict": True}], valid
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

def dict_records(records):
    return [record for record in records if isinstance(record, dict)]


def problem_free(record, schema, non_empty):
    return isinstance(record, dict) and set(record) == set(schema) and all(
        isinstance(record[f], k) and not (f in non_empty and not record[f].strip()) for f, k in schema.items())


reference.agrees("validate_records", valid_calls(), cases=150, clauses={
    "records a tuple": lambda records, schema, non_empty: isinstance(records, tuple),
    "non_empty a tuple": lambda records, schema, non_empty: isinstance(non_empty, tuple),
    "a record that is not a dict": lambda records, schema, non_empty: any(not isinstance(r, dict) for r in records),
    "a record without a problem": lambda records, schema, non_empty: any(
        problem_free(r, schema, non_empty) for r in records),
    "a missing field": lambda records, schema, non_empty: any(set(schema) - set(r) for r in dict_records(records)),
    "a bool in an int field": lambda records, schema, non_empty: any(
        schema.get(f) is int and type(v) is bool for r in dict_records(records) for f, v in r.items()),
    "an int in a float field": lambda records, schema, non_empty: any(
        schema.get(f) is float and type(v) is int for r in dict_records(records) for f, v in r.items()),
    "None in a field": lambda records, schema, non_empty: any(
        v is None and f in schema for r in dict_records(records) for f, v in r.items()),
    "a non_empty field of only whitespace": lambda records, schema, non_empty: any(
        f in non_empty and isinstance(v, str) and v and not v.strip() for r in dict_records(records) for f, v in r.items()),
    "an unexpected key that is not a str": lambda records, schema, non_empty: any(
        not isinstance(k, str) for r in dict_records(records) for k in r),
    "unexpected keys whose str order is not their number order": lambda records, schema, non_empty: any(
        7 in r and 12 in r for r in dict_records(records)),
    "a repeated id": lambda records, schema, non_empty: any(
        sum(1 for r in dict_records(records) if r.get("id") == identity) > 1 for identity in
        {r.get("id") for r in dict_records(records) if isinstance(r.get("id"), str) and r.get("id").strip()}),
    "ids equal only after strip, case folding or NFKC": lambda records, schema, non_empty: len(
        {r.get("id") for r in dict_records(records) if r.get("id") in ("a", " a", "A", "a\t", "ａ")}) > 1,
    "a blank id": lambda records, schema, non_empty: any(
        isinstance(r.get("id"), str) and not r["id"].strip() for r in dict_records(records)),
    "schema fields not in alphabetical order": lambda records, schema, non_empty: list(schema) != sorted(schema),
})

# %% hidden exercise=validate_records points=2 name=agrees_with_reference_on_generated_wrong_calls
# hint: one wrong thing in the call (records not a list, a schema without id or with a blank or non-str name or a non-class type, non_empty not a list or naming a missing, non-str or unhashable field): the same ValueError.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of, is_blank, keys, not_a_str, values

defects = ([("valid", n) for n in range(20)] + [("records", bad) for bad in [None, {"a": {"id": "a"}}, "records", 3, {"id": "a"}]]
           + [("schema", bad) for bad in [None, {}, [("id", str)], {"output": str}, {"id": "str"}, {"id": (str, int)},
                                          {"id": str, "": str}, {"id": str, " ": str}, {"id": str, "\t\n": str},
                                          {"id": str, 3: str}, {"id": str, "output": None}, {"id": str, "n": 1}]]
           + [("non_empty", bad) for bad in ["id", None, {"id"}, 3, ("answer",), ("score",), (3,), (["id"],),
                                             (None,), ("id", "Output"), ("ｏutput",)]])

def one_defect(defect, rng):
    """A valid call, or one with exactly this defect in the call (never in the data)."""
    kind, bad = defect
    records = [{"id": rng.choice(["a", "b", " "]), "output": rng.choice(["1", " ", "x"]),
                **({"score": 0.5} if rng.random() < 0.5 else {})} for _ in range(rng.randint(0, 3))]
    arguments = {"records": records, "schema": {"id": str, "output": str, "score": float}, "non_empty": ("output",)}
    if kind != "valid":
        arguments[kind] = bad
    return arguments["records"], arguments["schema"], arguments["non_empty"]


def str_fields(schema):
    return [f for f, k in schema.items() if k is str] if isinstance(schema, dict) else []


reference.agrees("validate_records", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "records not a list or tuple": lambda records, schema, non_empty: not isinstance(records, (list, tuple)),
    "schema not a dict": lambda records, schema, non_empty: not isinstance(schema, dict),
    "an empty schema": lambda records, schema, non_empty: schema == {},
    "a schema without id": lambda records, schema, non_empty: isinstance(schema, dict) and schema and "id" not in schema,
    "a field name that is not a str": lambda records, schema, non_empty: any(not_a_str(f) for f in keys(schema)),
    "a blank field name": lambda records, schema, non_empty: any(is_blank(f) for f in keys(schema)),
    "an expected class that is a tuple of classes": lambda records, schema, non_empty: any(
        isinstance(k, tuple) for k in values(schema)),
    "an expected class that is not a class": lambda records, schema, non_empty: any(
        not isinstance(k, (type, tuple)) for k in values(schema)),
    "non_empty not a list or tuple": lambda records, schema, non_empty: not isinstance(non_empty, (list, tuple)),
    "non_empty naming a field the schema lacks": lambda records, schema, non_empty: isinstance(
        non_empty, (list, tuple)) and any(isinstance(f, str) and f not in keys(schema) for f in non_empty),
    "non_empty naming a field that is not a str field": lambda records, schema, non_empty: isinstance(
        non_empty, (list, tuple)) and any(f in keys(schema) and f not in str_fields(schema) for f in non_empty
                                          if isinstance(f, str)),
    "non_empty holding a non-str or unhashable item": lambda records, schema, non_empty: isinstance(
        non_empty, (list, tuple)) and any(not isinstance(f, str) for f in non_empty),
})

# %% hidden exercise=audit_splits points=2 name=agrees_with_reference_on_generated_valid_splits
# hint: any validated splits (full-width letters and digits, ligatures, ß, tabs and newlines, case variants, tuples, empty splits, names that sort by code point): the same audit.
from hypothesis import strategies as st

text = st.sampled_from(["Add.", "add.", "ADD.", "Add. ", " Add.", "Add.\t", "Add.\n", "ａｄｄ.", "Ａdd.", "ﬁnd", "find",
                        "FIND", "Straße", "STRASSE", "2 + 3", "2  +  3", "２ ＋ ３", "2\t+\n3", "2+3", "2-3", "", " ",
                        "2\r+\x0b3", "Add.\x0c", "2\u2028+ 3", "Café", "CAFÉ", "cafe\u0301", "𝐀dd.", "ℍ", "h"])
ids = st.sampled_from(["a", "b", "B", "c", "ａ", " a"])
record = st.one_of(
    st.fixed_dictionaries({"id": ids, "instruction": text, "input": text, "output": text},
                          optional={"source": st.just("web")}),
    st.fixed_dictionaries({"id": ids, "instruction": st.sampled_from(["Add.", "add.", "ＡＤＤ."]),
                           "input": st.sampled_from(["2 + 3", "2\t+ 3", "２ ＋ ３"]), "output": st.sampled_from(["5", "5 "])}))
records = st.one_of(st.lists(record, max_size=4), st.lists(record, max_size=3).map(tuple))
splits = st.dictionaries(st.sampled_from(["train", "test", "validation", "Train", "dev", "ｔｅｓｔ", ""]), records,
                         min_size=1, max_size=3)
import unicodedata


def texts_of(splits):
    return [record[field] for records in splits.values() for record in records
            for field in ("instruction", "input", "output")]


def normalised(text):
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def keys_by_split(splits):
    return {name: [(normalised(r["instruction"]), normalised(r["input"])) for r in records]
            for name, records in splits.items()}


reference.agrees("audit_splits", st.tuples(splits), cases=200, clauses={
    "whitespace that is not a space, tab or newline": lambda splits: any(
        character in text for text in texts_of(splits) for character in "\r\x0b\x0c\u2028"),
    "full-width letters or digits": lambda splits: any(
        unicodedata.east_asian_width(c) == "F" for text in texts_of(splits) for c in text),
    "a ligature": lambda splits: any("ﬁ" in text for text in texts_of(splits)),
    "ß, which casefold() folds and lower() keeps": lambda splits: any("ß" in text for text in texts_of(splits)),
    "an accented letter (NFKC composes it, NFKD would not)": lambda splits: any(
        unicodedata.normalize("NFKD", text) != unicodedata.normalize("NFKC", text) and not any(
            unicodedata.east_asian_width(c) == "F" or c in "ﬁ" for c in text) for text in texts_of(splits)),
    "a letter NFKC turns into a capital": lambda splits: any(
        c in text for text in texts_of(splits) for c in "𝐀ℍ"),
    "a split given as a tuple": lambda splits: any(isinstance(records, tuple) for records in splits.values()),
    "an empty split": lambda splits: any(len(records) == 0 for records in splits.values()),
    "a duplicate group with a conflict": lambda splits: any(
        len({normalised(r["output"]) for r, k in zip(records, keys_by_split(splits)[name])
             if keys_by_split(splits)[name].count(k) > 1}) > 1 for name, records in splits.items()),
    "a key in two splits": lambda splits: any(
        set(keys_by_split(splits)[a]) & set(keys_by_split(splits)[b]) for a in splits for b in splits if a < b),
    "split names whose code point order is not their case-folded order": lambda splits: sorted(splits) != sorted(
        splits, key=str.casefold),
    "an extra record key": lambda splits: any("source" in r for records in splits.values() for r in records),
})

# %% hidden exercise=audit_splits points=2 name=agrees_with_reference_on_generated_unvalidated_splits
# hint: one wrong thing anywhere (splits not a non-empty dict, a non-str split name, a split that is not a list, a record that is not a dict or lacks a str id, instruction, input or output): the same ValueError.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of, keys, values

fields = ["id", "instruction", "input", "output"]
defects = ([("valid", n) for n in range(20)] + [("splits", bad) for bad in [None, {}, [], "train", [("train", [])], 3]]
           + [("name", bad) for bad in [3, None, ("train",), b"train", 1.5]]
           + [("split", bad) for bad in [None, {"a": {}}, "records", 3, {"id": "a"}]]
           + [("record", bad) for bad in [None, "Add. -> 1", ["id", "a"], 3, ("a", "b")]]
           + [("missing", field) for field in fields]
           + [("value", (field, bad)) for field in fields for bad in [None, 3, b"x", ["a"], 1.0]])

def one_defect(defect, rng):
    """Validated splits, or splits with exactly this defect."""
    kind, bad = defect
    records = [{"id": f"r{n}", "instruction": "Add.", "input": rng.choice(["1 + 1", "１ ＋ １"]), "output": "2"}
               for n in range(rng.randint(1, 3))]
    splits = {"train": records, "test": [dict(records[0], id="t0")]}
    target = rng.choice(["train", "test"])
    if kind == "splits":
        return (bad,)
    if kind == "name":
        splits[bad] = []
    elif kind == "split":
        splits[target] = bad
    elif kind == "record":
        splits[target].insert(rng.randint(0, 1), bad)
    elif kind == "missing":
        del splits[target][0][bad]
    elif kind == "value":
        splits[target][0][bad[0]] = bad[1]
    return (splits,)


def records_of(splits):
    return [r for records in values(splits) if isinstance(records, (list, tuple)) for r in records]


reference.agrees("audit_splits", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "splits not a dict": lambda splits: not isinstance(splits, dict),
    "splits empty": lambda splits: splits == {},
    "a split name that is not a str": lambda splits: any(not isinstance(name, str) for name in keys(splits)),
    "a split that is not a list or tuple": lambda splits: any(
        not isinstance(records, (list, tuple)) for records in values(splits)),
    "a record that is not a dict": lambda splits: any(not isinstance(r, dict) for r in records_of(splits)),
    **{f"{field} missing": (lambda field: lambda splits: any(
        isinstance(r, dict) and field not in r for r in records_of(splits)))(field) for field in fields},
    **{f"{field} not a str": (lambda field: lambda splits: any(
        isinstance(r, dict) and field in r and not isinstance(r[field], str) for r in records_of(splits)))(field)
       for field in fields},
})

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
        schema_reports[name] = {"valid": list(range(valid)) if draw(st.booleans()) else tuple(range(valid)),
                                "invalid": rows if draw(st.booleans()) else tuple(rows)}
        records[name] = valid
    audit = {"splits": draw(st.permutations(names).map(lambda order: order if draw(st.booleans()) else tuple(order))),
             "records": records,
             "duplicate_groups": draw(st.lists(st.fixed_dictionaries({"conflict": st.booleans()},
                                                                     optional={"split": st.just("train")}), max_size=4)),
             "leaks": draw(st.lists(st.fixed_dictionaries({"kind": st.sampled_from(["exact", "normalised"])}),
                                    max_size=4))}
    if draw(st.booleans()):
        audit["duplicate_groups"], audit["leaks"] = tuple(audit["duplicate_groups"]), tuple(audit["leaks"])
    limit = draw(st.sampled_from([0, 0.0, 0.02, 0.05, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.999]))
    return schema_reports, audit, limit


@st.composite
def at_the_limit(draw):
    """A split whose invalid fraction is exactly the limit, beside a clean one."""
    invalid, total, limit = draw(st.sampled_from([(1, 20, 0.05), (1, 10, 0.1), (1, 4, 0.25), (1, 3, 1 / 3), (1, 2, 0.5),
                                                  (2, 10, 0.2)]))
    reports = {"train": {"valid": list(range(total - invalid)), "invalid": [{"index": total - 1}] * invalid},
               "test": {"valid": [0], "invalid": []}}
    audit = {"splits": ["test", "train"], "records": {"train": total - invalid, "test": 1}, "duplicate_groups": [],
             "leaks": []}
    return reports, audit, limit


def fractions(reports, audit, limit):
    return [len(r["invalid"]) / (len(r["valid"]) + len(r["invalid"])) for r in reports.values()
            if len(r["valid"]) + len(r["invalid"])]


reference.agrees("admission_verdict", st.one_of(valid_reports(), at_the_limit()), cases=150, clauses={
    "an empty split": lambda reports, audit, limit: any(not r["valid"] and not r["invalid"] for r in reports.values()),
    "an invalid fraction exactly at the limit": lambda *call: any(f == call[2] and f > 0 for f in fractions(*call)),
    "an invalid fraction above the limit": lambda *call: any(f > call[2] for f in fractions(*call)),
    "an invalid fraction within the limit": lambda *call: any(0 < f <= call[2] for f in fractions(*call)),
    "a limit of 0": lambda reports, audit, limit: limit == 0,
    "valid lists given as tuples": lambda reports, audit, limit: any(isinstance(r["valid"], tuple) for r in reports.values()),
    "invalid lists given as tuples": lambda reports, audit, limit: any(
        isinstance(r["invalid"], tuple) for r in reports.values()),
    "audit lists given as tuples": lambda reports, audit, limit: isinstance(audit["splits"], tuple) or isinstance(
        audit["leaks"], tuple),
    "audit splits in another order than the reports": lambda reports, audit, limit: list(audit["splits"]) != list(reports),
    "both conflicting and plain duplicate groups": lambda reports, audit, limit: len(
        {g["conflict"] for g in audit["duplicate_groups"]}) == 2,
    "both kinds of leak": lambda reports, audit, limit: len({leak["kind"] for leak in audit["leaks"]}) == 2,
    "reject and tune reasons together": lambda *call: any(f > call[2] for f in fractions(*call)) and any(
        not g["conflict"] for g in call[1]["duplicate_groups"]),
})

# %% hidden exercise=admission_verdict points=2 name=agrees_with_reference_on_generated_mismatched_reports
# hint: one wrong thing anywhere (a limit of 1, NaN or True; a report without its lists; splits named twice, missing or not str; a bool or float record count; a group without a bool conflict; a leak of another kind): the same ValueError.
from hypothesis import strategies as st

from tools.course.grader.clauses import below, each_of, is_bool, keys, not_a_number, not_finite, values

defects = ([("valid", n) for n in range(30)]
           + [("limit", bad) for bad in [1, 1.0, -0.01, float("nan"), float("inf"), True, False, None, "0.02"]]
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

def one_defect(defect, rng):
    """Matching reports, or ones with exactly this defect."""
    kind, bad = defect
    reports = {"train": {"valid": [0], "invalid": []}, "test": {"valid": [0, 1], "invalid": [{"index": 2}]}}
    audit = {"splits": ["test", "train"], "records": {"train": 1, "test": 2},
             "duplicate_groups": [{"conflict": False}], "leaks": [{"kind": "exact"}]}
    limit = rng.choice([0.02, 0.5])
    if kind == "limit":
        limit = bad
    elif kind == "schema_reports":
        reports = bad
    elif kind == "report":
        reports[rng.choice(["train", "test"])] = bad
    elif kind == "name":
        reports[bad] = {"valid": [], "invalid": []}
    elif kind == "audit":
        audit = bad
    elif kind == "audit_key":
        del audit[bad]
    elif kind == "count":
        audit["records"]["train"] = bad
    elif kind == "group":
        audit["duplicate_groups"].insert(rng.randint(0, 1), bad)
    elif kind == "leak":
        audit["leaks"].insert(rng.randint(0, 1), bad)
    elif kind != "valid":
        audit[kind] = bad
    return reports, audit, limit


def report_names(reports):
    return keys(reports)


def audit_entry(audit, key):
    return audit.get(key) if isinstance(audit, dict) else None


reference.agrees("admission_verdict", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a limit of 1 or more": lambda r, a, limit: not is_bool(limit) and isinstance(limit, (int, float)) and limit >= 1
        and not not_finite(limit),
    "a limit below 0": lambda r, a, limit: below(limit, 0),
    "a limit that is a bool": lambda r, a, limit: is_bool(limit),
    "a limit that is not finite": lambda r, a, limit: not_finite(limit),
    "a limit that is not a number": lambda r, a, limit: not_a_number(limit),
    "schema_reports not a non-empty dict": lambda r, a, limit: not isinstance(r, dict) or not r,
    "a split name that is not a str": lambda r, a, limit: any(not isinstance(n, str) for n in report_names(r)),
    "a report without its valid list": lambda r, a, limit: any(
        not isinstance(x, dict) or not isinstance(x.get("valid"), (list, tuple)) for x in values(r)),
    "a report without its invalid list": lambda r, a, limit: any(
        not isinstance(x, dict) or not isinstance(x.get("invalid"), (list, tuple)) for x in values(r)),
    "audit_report not a dict": lambda r, a, limit: not isinstance(a, dict),
    **{f"audit_report without {key}": (lambda key: lambda r, a, limit: isinstance(a, dict) and key not in a)(key)
       for key in ["splits", "records", "duplicate_groups", "leaks"]},
    "audit splits that name a split twice": lambda r, a, limit: isinstance(audit_entry(a, "splits"), list) and len(
        a["splits"]) > len(set(map(repr, a["splits"]))),
    "audit splits missing a split or naming another": lambda r, a, limit: isinstance(audit_entry(a, "splits"), list)
        and isinstance(r, dict) and set(map(repr, a["splits"])) != set(map(repr, r)),
    "audit splits not a list or tuple": lambda r, a, limit: isinstance(a, dict) and "splits" in a and not isinstance(
        a["splits"], (list, tuple)),
    "audit records with other keys": lambda r, a, limit: isinstance(audit_entry(a, "records"), dict) and isinstance(
        r, dict) and set(a["records"]) != set(r),
    "audit records not a dict": lambda r, a, limit: isinstance(a, dict) and "records" in a and not isinstance(
        a["records"], dict),
    "a record count that is a bool": lambda r, a, limit: any(is_bool(c) for c in values(audit_entry(a, "records"))),
    "a record count that is not an int": lambda r, a, limit: any(
        not isinstance(c, int) for c in values(audit_entry(a, "records"))),
    "a record count that differs from the valid records": lambda r, a, limit: isinstance(r, dict) and any(
        type(c) is int and isinstance(r.get(n), dict) and isinstance(r[n].get("valid"), list) and c != len(r[n]["valid"])
        for n, c in (audit_entry(a, "records") or {}).items() if isinstance(audit_entry(a, "records"), dict)),
    "a group without a bool conflict": lambda r, a, limit: any(
        not isinstance(g, dict) or not is_bool(g.get("conflict")) for g in values(audit_entry(a, "duplicate_groups"))),
    "a leak of another kind": lambda r, a, limit: any(
        not isinstance(x, dict) or x.get("kind") not in ("exact", "normalised") for x in values(audit_entry(a, "leaks"))),
})
