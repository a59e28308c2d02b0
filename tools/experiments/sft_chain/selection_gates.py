"""Project 63's three gates, as the selection stage runs them (the notebook's TODOs teach the same).

- `comparable_candidates`: one variable changed at a time: every run shares the baseline settings
  (same data hash, steps, learning rate, ...) and every candidate holds exactly the shared seeds; a
  candidate that differs in anything else is excluded with its reasons.
- `gate_candidates`: hard gates per candidate: quality inside an equivalence band around the best
  mean (its width from the seed spread), memory within the budget (not measured is not a pass).
- `choose_candidate`: the cheapest feasible candidate, ties broken by higher quality then the smaller
  value; accept / tune (something ran but nothing is feasible) / reject (nothing usable).
"""

from __future__ import annotations

import math

STATUSES = ("ok", "oom", "failed")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same(first, second) -> bool:
    """Equal values of the same type, list by list and dict by dict (True is not 1, 8 is not 8.0)."""
    if type(first) is not type(second):
        return False
    if isinstance(first, list):
        return len(first) == len(second) and all(_same(a, b) for a, b in zip(first, second))
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(_same(first[key], second[key]) for key in first)
    return first == second


def comparable_candidates(runs, variable, baseline, seeds):
    """Which values of `variable` can be compared (see the notebook's TODO 1 for the full contract)."""
    if not isinstance(variable, str) or not variable or variable == "seed":
        raise ValueError(f"variable must be a setting name other than 'seed', got {variable!r}")
    if not isinstance(baseline, dict) or variable in baseline or "seed" in baseline:
        raise ValueError("baseline must be a dict of the shared settings, without the variable and 'seed'")
    if (not isinstance(seeds, (list, tuple)) or not seeds or not all(_is_int(seed) for seed in seeds)
            or len(set(seeds)) != len(seeds)):
        raise ValueError(f"seeds must be a non-empty list of distinct ints, got {seeds!r}")
    if not isinstance(runs, (list, tuple)):
        raise ValueError("runs must be a list of dicts")
    names, groups = set(), {}
    for run in runs:
        if (not isinstance(run, dict) or not isinstance(run.get("name"), str) or not isinstance(run.get("config"), dict)
                or variable not in run["config"] or not _is_int(run["config"].get("seed"))):
            raise ValueError(f"run {run!r} needs a str name and a config with {variable!r} and an int 'seed'")
        if run["name"] in names:
            raise ValueError(f"run name {run['name']!r} is used twice")
        names.add(run["name"])
        value = run["config"][variable]
        if not (_is_int(value) or isinstance(value, str)):
            raise ValueError(f"the value of {variable!r} must be an int or a str, got {value!r}")
        groups.setdefault(value, []).append(run)
    if len({type(value) for value in groups}) > 1:
        raise ValueError(f"the values of {variable!r} mix ints and strs")
    comparable, excluded = [], []
    for value in sorted(groups):
        reasons = set()
        for run in groups[value]:
            config = run["config"]
            for key, expected in baseline.items():
                if key not in config or not _same(config[key], expected):
                    reasons.add(f"differs:{key}")
            for key in config:
                if key not in baseline and key not in (variable, "seed"):
                    reasons.add(f"extra:{key}")
        held = [run["config"]["seed"] for run in groups[value]]
        if sorted(held) != sorted(seeds):
            reasons.add("seeds")
        if reasons:
            excluded.append({"value": value, "reasons": sorted(reasons)})
        else:
            comparable.append(value)
    return {"comparable": comparable, "excluded": excluded,
            "runs": {value: sorted(run["name"] for run in groups[value]) for value in sorted(groups)}}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def gate_candidates(results, memory_budget, band_floor, spread_factor=2.0):
    """Quality and memory gates per candidate (see the notebook's TODO 2)."""
    if not _is_int(memory_budget) or memory_budget < 0:
        raise ValueError(f"memory_budget must be an int >= 0 (bytes), got {memory_budget!r}")
    for name, number in (("band_floor", band_floor), ("spread_factor", spread_factor)):
        if not _finite(number) or number < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {number!r}")
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {value: per-seed results}")
    for value, runs in results.items():
        if not isinstance(runs, (list, tuple)) or not runs:
            raise ValueError(f"candidate {value!r} needs a non-empty list of per-seed results")
        for run in runs:
            if (not isinstance(run, dict) or run.get("status") not in STATUSES or not _is_int(run.get("seed"))
                    or not (run.get("quality") is None or _finite(run.get("quality")))
                    or not (run.get("memory_bytes") is None or (_is_int(run.get("memory_bytes"))
                                                               and run["memory_bytes"] >= 0))):
                raise ValueError(f"candidate {value!r}: malformed result {run!r}")
    table = {}
    for value, runs in results.items():
        qualities = [run["quality"] for run in runs]
        complete = all(run["status"] == "ok" for run in runs) and all(q is not None for q in qualities)
        mean = std = None
        if complete:
            mean = sum(qualities) / len(qualities)
            std = (math.sqrt(sum((q - mean) ** 2 for q in qualities) / (len(qualities) - 1))
                   if len(qualities) > 1 else 0.0)
        memories = [run["memory_bytes"] for run in runs]
        peak = max(memories) if all(m is not None for m in memories) else None
        table[value] = {"complete": complete, "mean_quality": mean, "std_quality": std, "peak_memory_bytes": peak,
                        "statuses": [run["status"] for run in runs]}
    complete = [row for row in table.values() if row["complete"]]
    best = max(row["mean_quality"] for row in complete) if complete else None
    band = max(band_floor, spread_factor * max(row["std_quality"] for row in complete)) if complete else None
    gated = {}
    for value, row in table.items():
        reasons = []
        if "failed" in row["statuses"]:
            reasons.append("run_failed")
        if "oom" in row["statuses"]:
            reasons.append("oom")
        if not reasons and not row["complete"]:
            reasons.append("quality_missing")
        quality_passed = row["complete"] and row["mean_quality"] >= best - band
        if row["complete"] and not quality_passed:
            reasons.append("below_band")
        memory_passed = (row["peak_memory_bytes"] is not None and row["peak_memory_bytes"] <= memory_budget
                         and "oom" not in row["statuses"])
        if row["peak_memory_bytes"] is None:
            reasons.append("memory_not_measured")
        elif row["peak_memory_bytes"] > memory_budget:
            reasons.append("over_budget")
        gated[value] = {"mean_quality": row["mean_quality"], "std_quality": row["std_quality"],
                        "peak_memory_bytes": row["peak_memory_bytes"], "complete": row["complete"],
                        "quality_passed": quality_passed, "memory_passed": memory_passed,
                        "feasible": quality_passed and memory_passed, "reasons": reasons}
    return {"best_mean": best, "band": band, "candidates": gated}


def choose_candidate(gated):
    """The cheapest feasible candidate and the decision (see the notebook's TODO 3)."""
    if not isinstance(gated, dict) or not isinstance(gated.get("candidates"), dict) or not gated["candidates"]:
        raise ValueError("gated must be a gate_candidates result with a non-empty 'candidates' dict")
    for value, row in gated["candidates"].items():
        if (not isinstance(row, dict) or not isinstance(row.get("feasible"), bool)
                or not isinstance(row.get("complete"), bool)
                or (row["feasible"] and (not _is_int(row.get("peak_memory_bytes"))
                                         or not _finite(row.get("mean_quality"))))):
            raise ValueError(f"candidate {value!r}: needs bool feasible and complete, and a feasible one an int "
                             "peak_memory_bytes and a finite mean_quality")
    feasible = [value for value, row in gated["candidates"].items() if row["feasible"]]
    rows = gated["candidates"]
    ranking = sorted(feasible, key=lambda value: (rows[value]["peak_memory_bytes"], -rows[value]["mean_quality"], value))
    if ranking:
        return {"decision": "accept", "chosen": ranking[0], "ranking": ranking, "reason": "cheapest_feasible"}
    if any(row["complete"] for row in rows.values()):
        return {"decision": "tune", "chosen": None, "ranking": [], "reason": "no_feasible_candidate"}
    return {"decision": "reject", "chosen": None, "ranking": [], "reason": "no_complete_candidate"}
