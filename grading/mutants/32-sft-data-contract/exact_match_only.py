# mutant: exact_match_only
# exercise: audit_splits
# mistake: compares raw text, so copies that differ in case, spacing or full-width digits are missed.
import math
import unicodedata


def audit_splits(splits):
    def normalise(text):
        return text

    if not isinstance(splits, dict) or not splits:
        raise ValueError("splits must be a non-empty dict of split name -> records")
    for name, records in splits.items():
        if not isinstance(name, str):
            raise ValueError(f"split name {name!r} must be a str")
        if not isinstance(records, (list, tuple)):
            raise ValueError(f"split {name!r} must be a list of records")
        for index, record in enumerate(records):
            if not isinstance(record, dict) or any(
                    not isinstance(record.get(field), str) for field in ("id", "instruction", "input", "output")):
                raise ValueError(f"split {name!r} record {index}: needs str id, instruction, input and output "
                                 "(run validate_records first)")

    groups = {}  # split -> key -> list of records
    raw_pairs = {}  # split -> key -> set of raw (instruction, input)
    for name, records in splits.items():
        groups[name], raw_pairs[name] = {}, {}
        for record in records:
            key = (normalise(record["instruction"]), normalise(record["input"]))
            groups[name].setdefault(key, []).append(record)
            raw_pairs[name].setdefault(key, set()).add((record["instruction"], record["input"]))

    duplicate_groups = []
    for name in sorted(groups):
        for key in sorted(groups[name]):
            members = groups[name][key]
            if len(members) > 1:
                answers = {normalise(record["output"]) for record in members}
                duplicate_groups.append({"split": name, "key": list(key),
                                         "ids": sorted(record["id"] for record in members),
                                         "conflict": len(answers) > 1})

    leaks = []
    names = sorted(splits)
    for position, first in enumerate(names):
        for second in names[position + 1:]:
            for key in sorted(set(groups[first]) & set(groups[second])):
                exact = bool(raw_pairs[first][key] & raw_pairs[second][key])
                leaks.append({"splits": [first, second], "key": list(key),
                              "ids": {first: sorted(record["id"] for record in groups[first][key]),
                                      second: sorted(record["id"] for record in groups[second][key])},
                              "kind": "exact" if exact else "normalised"})
    return {"splits": names, "records": {name: len(records) for name, records in splits.items()},
            "duplicate_groups": duplicate_groups, "leaks": leaks}
