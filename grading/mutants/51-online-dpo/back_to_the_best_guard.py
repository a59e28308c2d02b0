# mutant: back_to_the_best_guard
# exercise: guard_rollback
# mistake: a learner's rollback that returns to the good version with the highest guard ever seen instead of the one that was serving, and compares with that best guard.
import re


def _is_digest(value):
    return isinstance(value, str) and len(value) == 64 and re.fullmatch("[0-9a-f]+", value) is not None


def _walk(log):
    if not isinstance(log, (list, tuple)) or not log:
        raise ValueError("empty log")
    current, seen = None, []
    for index, item in enumerate(log):
        if not isinstance(item, dict) or sorted(item) != ["guard", "parent", "state", "version"]:
            raise ValueError("bad entry")
        if not _is_digest(item["version"]) or item["version"] in seen or item["state"] not in ("good", "regressed") \
                or type(item["guard"]) not in (int, float) or item["guard"] != item["guard"] or abs(item["guard"]) == float("inf"):
            raise ValueError("bad fields")
        if (index == 0 and (item["parent"] is not None or item["state"] != "good")) or (index and item["parent"] != current):
            raise ValueError("broken chain")
        seen.append(item["version"])
        current = item["version"] if item["state"] == "good" else current
    return current, seen


def _check_candidate(candidate, current, seen, guard, max_drop):
    if not isinstance(candidate, dict) or sorted(candidate) != ["parent", "version"] or not _is_digest(candidate["version"]) \
            or candidate["version"] in seen or candidate["parent"] != current:
        raise ValueError("bad candidate")
    for value in (guard, max_drop):
        if type(value) not in (int, float) or value != value or abs(value) == float("inf"):
            raise ValueError("bad number")
    if max_drop < 0:
        raise ValueError("negative tolerance")


def guard_rollback(log, candidate, guard, max_drop):
    current, seen = _walk(log)
    _check_candidate(candidate, current, seen, guard, max_drop)
    best = max((item for item in log if item["state"] == "good"), key=lambda item: item["guard"])
    bad = guard < best["guard"] - max_drop
    return dict(log=[*map(dict, log), dict(candidate, guard=guard, state="regressed" if bad else "good")],
                serving=best["version"] if bad else candidate["version"], rolled_back=bad,
                drop=float(best["guard"] - guard))
