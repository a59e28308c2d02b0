# mutant: first_problem_per_pair
# exercise: validate_preference_pairs
# mistake: a learner's validator that gives each pair one status (the first problem found) and compares lower-cased text without NFKC.
def _well_formed(pairs):
    if not isinstance(pairs, (list, tuple)):
        raise ValueError("need a list")
    names = [item.get("id") if isinstance(item, dict) else None for item in pairs]
    if any(not isinstance(name, str) or not name.strip() for name in names) or len(set(names)) != len(names):
        raise ValueError("bad ids")
    for item in pairs:
        if set(item) != {"id", "chosen", "rejected", "tie"} or not isinstance(item["tie"], bool):
            raise ValueError("bad pair")
        for side in (item["chosen"], item["rejected"]):
            if not isinstance(side, dict) or set(side) != {"prompt", "response"} \
                    or not all(isinstance(text, str) for text in side.values()):
                raise ValueError("bad answer")


def _status(fingerprint, tie, seen):
    checks = [("prompt_mismatch", fingerprint[0] != fingerprint[1]), ("empty_chosen", not fingerprint[2]),
              ("empty_rejected", not fingerprint[3]), ("same_response", fingerprint[2] == fingerprint[3]),
              ("duplicate", fingerprint in seen), ("tie", tie)]
    return next((code for code, failed in checks if failed), None)


def validate_preference_pairs(pairs):
    _well_formed(pairs)
    seen, report = {}, {"issues": {}, "duplicate_of": {}, "kept": []}
    for item in pairs:
        fingerprint = tuple(text.strip().lower() for text in (item["chosen"]["prompt"], item["rejected"]["prompt"],
                                                              item["chosen"]["response"], item["rejected"]["response"]))
        problem = _status(fingerprint, item["tie"], seen)
        if problem == "duplicate":
            report["duplicate_of"][item["id"]] = seen[fingerprint]
        seen.setdefault(fingerprint, item["id"])
        report["issues"][item["id"]] = [problem] if problem else []
        if problem is None:
            report["kept"].append({"id": item["id"], "prompt": item["chosen"]["prompt"],
                                   "chosen": item["chosen"]["response"], "rejected": item["rejected"]["response"]})
    every = ["prompt_mismatch", "empty_chosen", "empty_rejected", "same_response", "duplicate", "tie"]
    report["counts"] = {code: sum(code in found for found in report["issues"].values()) for code in every}
    return report
