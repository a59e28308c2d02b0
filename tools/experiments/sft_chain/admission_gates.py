"""Project 64's three gates, as the admission stage runs them (the notebook's TODOs teach the same).

- `merge_blockers`: every finding of every check, on every sample and split, merged into one verdict;
  no check hides another (a reject does not stop the count of tune blockers, a sample with two
  findings is one blocked sample).
- `find_leaks`: cross-split leakage on normalised content, against every split of higher priority
  (the frozen evaluation split first); the lower split's copy is the leak.
- `admission_transition`: the state of a data line after one more admission: accept hands off, tune
  repairs under a new version, reject (or too many repairs) returns the delivery to its owner.

The contracts are the docstrings of the notebook's exercises; `tests/chapters/test_project_64.py`
holds the notebook's reference to these functions.
"""

from __future__ import annotations

import math
import unicodedata

REJECT_CHECKS = ("frozen_split", "conflict", "too_many_blocked", "too_few_left")
TUNE_CHECKS = ("contract", "verifier", "over_length", "duplicate", "leakage")
SAMPLE_CHECKS = ("contract", "verifier", "over_length", "duplicate", "leakage", "conflict")
"""The checks a finding may name (frozen_split, too_many_blocked and too_few_left are derived)."""
NEXT_ACTIONS = {"accept": "hand_off", "tune": "repair_and_readmit", "reject": "return_to_owner"}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def merge_blockers(findings, split_sizes, frozen=(), max_drop_fraction=0.1, min_records=1):
    """One verdict from every finding (see the notebook's TODO 1 for the full contract)."""
    if not isinstance(split_sizes, dict) or not split_sizes:
        raise ValueError("split_sizes must be a non-empty dict {split: number of records}")
    for name, size in split_sizes.items():
        if not isinstance(name, str) or not _is_int(size) or size < 0:
            raise ValueError(f"split_sizes entry {name!r}: {size!r} must map a str to an int >= 0")
    if not isinstance(frozen, (list, tuple)) or any(name not in split_sizes for name in frozen):
        raise ValueError("frozen must be a list or tuple of split names of split_sizes")
    if (isinstance(max_drop_fraction, bool) or not isinstance(max_drop_fraction, (int, float))
            or not math.isfinite(max_drop_fraction) or not 0 <= max_drop_fraction < 1):
        raise ValueError(f"max_drop_fraction must be a number in [0, 1), got {max_drop_fraction!r}")
    if not _is_int(min_records) or min_records < 0:
        raise ValueError(f"min_records must be an int >= 0, got {min_records!r}")
    if not isinstance(findings, (list, tuple)):
        raise ValueError("findings must be a list or tuple of dicts")
    found = set()  # (check, split, sample id), each once
    for finding in findings:
        if (not isinstance(finding, dict) or finding.get("check") not in SAMPLE_CHECKS
                or finding.get("split") not in split_sizes or not isinstance(finding.get("sample_id"), str)):
            raise ValueError(f"finding {finding!r} needs a known check, a split of split_sizes and a str sample_id")
        found.add((finding["check"], finding["split"], finding["sample_id"]))
    for name, size in split_sizes.items():
        if len({sample for _, split, sample in found if split == name}) > size:
            raise ValueError(f"the findings name more samples of {name!r} than its {size} records")

    blockers = []

    def add(level, check, split, count, ids=()):
        blockers.append({"level": level, "check": check, "split": split, "count": count, "sample_ids": sorted(ids)})

    repair = {}
    for name in sorted(split_sizes):
        ids_of = {check: {sample for c, split, sample in found if c == check and split == name}
                  for check in SAMPLE_CHECKS}
        every = set().union(*ids_of.values())
        if name in frozen:
            if every:
                add("reject", "frozen_split", name, len(every), every)
            continue
        if ids_of["conflict"]:
            add("reject", "conflict", name, len(ids_of["conflict"]), ids_of["conflict"])
        blocked = set().union(*(ids_of[check] for check in TUNE_CHECKS))
        size = split_sizes[name]
        if size and len(blocked) / size > max_drop_fraction:
            add("reject", "too_many_blocked", name, len(blocked))
        if size - len(every) < min_records:
            add("reject", "too_few_left", name, min_records - (size - len(every)))
        for check in TUNE_CHECKS:
            if ids_of[check]:
                add("tune", check, name, len(ids_of[check]), ids_of[check])
        if blocked:
            repair[name] = sorted(blocked)
    order = {check: index for index, check in enumerate(REJECT_CHECKS + TUNE_CHECKS)}
    blockers.sort(key=lambda item: (item["level"] != "reject", order[item["check"]], item["split"]))
    levels = {item["level"] for item in blockers}
    verdict = "reject" if "reject" in levels else "tune" if levels else "accept"
    return {"verdict": verdict, "blockers": blockers, "repair": repair if verdict == "tune" else {}}


def normalised_content(record) -> str:
    """instruction and input together, NFKC, casefold, whitespace collapsed (the leakage key)."""
    return " ".join(unicodedata.normalize("NFKC", f"{record['instruction']} {record['input']}").casefold().split())


def find_leaks(splits, priority):
    """Leaks of every split into every split of higher priority (see the notebook's TODO 2)."""
    if not isinstance(splits, dict) or not splits:
        raise ValueError("splits must be a non-empty dict {split: records}")
    if (not isinstance(priority, (list, tuple)) or any(not isinstance(name, str) for name in priority)
            or sorted(priority) != sorted(splits) or len(set(priority)) != len(priority)):
        raise ValueError(f"priority must name every split exactly once, got {priority!r}")
    contents = {}
    for name in priority:
        records = splits[name]
        if not isinstance(records, (list, tuple)):
            raise ValueError(f"split {name!r} must be a list of records")
        contents[name] = {}
        for record in records:
            if not isinstance(record, dict) or any(not isinstance(record.get(field), str)
                                                   for field in ("id", "instruction", "input")):
                raise ValueError(f"split {name!r}: every record needs str id, instruction and input")
            contents[name].setdefault(normalised_content(record), []).append(record["id"])
    leaked, overlap = {}, []
    for position, lower in enumerate(priority):
        higher_keys = set().union(*(contents[higher] for higher in priority[:position])) if position else set()
        leaked[lower] = sorted(record_id for key, ids in contents[lower].items() if key in higher_keys
                               for record_id in ids)
        for higher in priority[:position]:
            overlap.append({"higher": higher, "lower": lower, "shared": len(set(contents[higher]) & set(contents[lower]))})
    return {"leaked": leaked, "overlap": overlap}


def admission_transition(history, admission, max_repairs=2):
    """The line's state after `admission` (see the notebook's TODO 3)."""
    def check_entry(entry, where):
        if (not isinstance(entry, dict) or not isinstance(entry.get("version"), str) or not entry["version"]
                or not isinstance(entry.get("content_sha256"), str) or not entry["content_sha256"]
                or not (entry.get("parent") is None or isinstance(entry.get("parent"), str))
                or entry.get("verdict") not in NEXT_ACTIONS):
            raise ValueError(f"{where} needs a str version and content_sha256, a parent (str or None) and a verdict "
                             f"of {tuple(NEXT_ACTIONS)}")

    if not isinstance(history, (list, tuple)):
        raise ValueError("history must be a list of earlier admissions")
    for index, entry in enumerate(history):
        check_entry(entry, f"history[{index}]")
    check_entry(admission, "admission")
    if not _is_int(max_repairs) or max_repairs < 0:
        raise ValueError(f"max_repairs must be an int >= 0, got {max_repairs!r}")
    if not history:
        if admission["parent"] is not None:
            raise ValueError("the first admission of a line has no parent")
    else:
        last = history[-1]
        if admission["parent"] != last["version"]:
            raise ValueError(f"admission {admission['version']!r} must name the last version {last['version']!r} "
                             "as its parent")
        if last["verdict"] == "reject":
            raise ValueError(f"version {last['version']!r} was rejected: a reject is final, return it to its owner")
        if last["verdict"] == "accept":
            raise ValueError(f"version {last['version']!r} was accepted: it is final, a new delivery starts a new line")
    if any(entry["version"] == admission["version"] for entry in history):
        raise ValueError(f"version {admission['version']!r} was admitted before")
    if any(entry["content_sha256"] == admission["content_sha256"] for entry in history):
        raise ValueError("the content did not change: a repair must make a new version with new content")
    state, reason = admission["verdict"], "verdict"
    if state == "tune" and len(history) >= max_repairs:
        state, reason = "reject", "repair_limit"
    return {"state": state, "reason": reason, "round": len(history) + 1, "next_action": NEXT_ACTIONS[state],
            "history": [dict(entry) for entry in history] + [dict(admission)]}
