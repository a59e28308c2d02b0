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
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("a wrong call was accepted")
assert admission_verdict(schema_reports, audit, max_invalid_fraction=0)["verdict"] == "accept"
