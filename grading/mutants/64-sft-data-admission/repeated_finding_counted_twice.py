# mutant: repeated_finding_counted_twice
# exercise: merge_blockers
# mistake: counts every finding as given (no set of distinct samples), so a repeated finding or a sample with two checks counts twice.
def merge_blockers(findings, split_sizes, frozen=(), max_drop_fraction=0.1, min_records=1):
    levels = {"conflict": "reject", "contract": "tune", "verifier": "tune", "over_length": "tune",
              "duplicate": "tune", "leakage": "tune"}
    if not isinstance(split_sizes, dict) or not split_sizes or not isinstance(findings, (list, tuple)):
        raise ValueError("bad call")
    for value in split_sizes.values():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("bad size")
    if isinstance(max_drop_fraction, bool) or not 0 <= max_drop_fraction < 1:
        raise ValueError("bad fraction")
    if isinstance(min_records, bool) or not isinstance(min_records, int) or min_records < 0:
        raise ValueError("bad minimum")
    if not isinstance(frozen, (list, tuple)) or any(f not in split_sizes for f in frozen):
        raise ValueError("bad frozen")
    table = {}
    for item in findings:
        if not isinstance(item, dict) or item.get("check") not in levels or item.get("split") not in split_sizes \
                or not isinstance(item.get("sample_id"), str):
            raise ValueError("bad finding")
        table.setdefault((item["split"], item["check"]), []).append(item["sample_id"])
    out = []
    for (split, check), ids in table.items():
        out.append({"level": "reject" if split in frozen else levels[check],
                    "check": "frozen_split" if split in frozen else check, "split": split, "count": len(ids),
                    "sample_ids": sorted(ids)})
    for split, size in split_sizes.items():
        if split in frozen:
            continue
        dropped = sum(len(ids) for (s, c), ids in table.items() if s == split and levels[c] == "tune")
        if size and dropped / size > max_drop_fraction:
            out.append({"level": "reject", "check": "too_many_blocked", "split": split, "count": dropped, "sample_ids": []})
    rank = ["frozen_split", "conflict", "too_many_blocked", "too_few_left", "contract", "verifier", "over_length",
            "duplicate", "leakage"]
    out.sort(key=lambda b: (b["level"] != "reject", rank.index(b["check"]), b["split"]))
    verdict = "reject" if any(b["level"] == "reject" for b in out) else "tune" if out else "accept"
    repair = {}
    if verdict == "tune":
        for b in out:
            repair.setdefault(b["split"], []).extend(b["sample_ids"])
        repair = {k: sorted(v) for k, v in repair.items()}
    return {"verdict": verdict, "blockers": out, "repair": repair}
