"""Project 63's three gates, as the selection stage runs them (the notebook's TODOs teach the same).

- `comparable_candidates`: one variable changed at a time: every run shares the baseline settings
  (same data hash, steps, learning rate, ...) and every candidate holds exactly the shared seeds; a
  candidate that differs in anything else is excluded with its reasons.
- `gate_candidates`: hard gates per candidate, each against evidence paired by seed: it learned the
  task (the interval of its gain over the no-adapter base lies above 0), it kept the base's skill
  (its mean change on the base's own suite is within the tolerance), it is not worse than the best
  admissible candidate by more than the margin (the interval of the paired difference lies above
  -margin), and its memory is within the budget (not measured is not a pass).
- `choose_candidate`: the cheapest feasible candidate, ties broken by higher quality then the smaller
  value; accept / tune (something ran but nothing is feasible) / reject (nothing usable).
"""

from __future__ import annotations

import math

STATUSES = ("ok", "oom", "failed")
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Two-sided 95 % critical values of Student's t by degrees of freedom (the notebook gives the same table)."""


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


def _interval(differences, t_critical):
    """(mean, lower end of the two-sided interval) of paired differences; Student's t with n - 1 degrees
    of freedom from `t_critical`."""
    n = len(differences)
    mean = sum(differences) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (n - 1))
    return mean, mean - t_critical[n - 1] * sd / math.sqrt(n)


def gate_candidates(results, base, memory_budget, margin, regression_tolerance, t_critical):
    """Task gain, kept skill, equivalence and memory gates per candidate (see the notebook's TODO 2)."""
    if not _is_int(memory_budget) or memory_budget < 0:
        raise ValueError(f"memory_budget must be an int >= 0 (bytes), got {memory_budget!r}")
    for name, number in (("margin", margin), ("regression_tolerance", regression_tolerance)):
        if not _finite(number) or number < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {number!r}")
    if (not isinstance(base, dict) or not _finite(base.get("quality")) or not _finite(base.get("regression"))):
        raise ValueError("base must be a dict with a finite 'quality' and 'regression'")
    if (not isinstance(t_critical, dict) or any(not _is_int(df) or df < 1 for df in t_critical)
            or any(not _finite(value) or value <= 0 for value in t_critical.values())):
        raise ValueError("t_critical must be a dict {degrees of freedom (int >= 1): critical value (> 0)}")
    if not isinstance(results, dict) or not results:
        raise ValueError("results must be a non-empty dict {value: per-seed results}")
    seed_sets = set()
    for value, runs in results.items():
        if not isinstance(runs, (list, tuple)) or not runs:
            raise ValueError(f"candidate {value!r} needs a non-empty list of per-seed results")
        for run in runs:
            if (not isinstance(run, dict) or run.get("status") not in STATUSES or not _is_int(run.get("seed"))
                    or any(not (run.get(key) is None or _finite(run.get(key))) for key in ("quality", "regression"))
                    or not (run.get("memory_bytes") is None or (_is_int(run.get("memory_bytes"))
                                                               and run["memory_bytes"] >= 0))):
                raise ValueError(f"candidate {value!r}: malformed result {run!r}")
        seeds = [run["seed"] for run in runs]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"candidate {value!r} runs a seed twice")
        seed_sets.add(frozenset(seeds))
    if len(seed_sets) != 1:
        raise ValueError("every candidate must hold the same seeds (check comparability first)")
    if len(next(iter(seed_sets))) < 2 or len(next(iter(seed_sets))) - 1 not in t_critical:
        raise ValueError("an interval needs at least two seeds and the critical value of their degrees of freedom")
    table = {}
    for value, runs in results.items():
        by_seed = {run["seed"]: run for run in runs}
        complete = all(run["status"] == "ok" and run["quality"] is not None and run["regression"] is not None
                       for run in runs)
        row = {"complete": complete, "mean_quality": None, "gain_mean": None, "gain_lower": None,
               "regression_change": None, "by_seed": by_seed, "statuses": [run["status"] for run in runs]}
        if complete:
            row["mean_quality"] = sum(run["quality"] for run in runs) / len(runs)
            row["gain_mean"], row["gain_lower"] = _interval([run["quality"] - base["quality"] for run in runs],
                                                            t_critical)
            row["regression_change"] = sum(run["regression"] - base["regression"] for run in runs) / len(runs)
        memories = [run["memory_bytes"] for run in runs]
        row["peak_memory_bytes"] = max(memories) if all(m is not None for m in memories) else None
        row["learned"] = complete and row["gain_lower"] > 0
        row["kept_skill"] = complete and row["regression_change"] >= -regression_tolerance
        table[value] = row
    admissible = [value for value, row in table.items() if row["learned"] and row["kept_skill"]]
    best = min(admissible, key=lambda value: (-table[value]["mean_quality"], value)) if admissible else None
    gated = {}
    for value, row in table.items():
        versus_mean = versus_lower = None
        if row["complete"] and best is not None:
            versus_mean, versus_lower = _interval(
                [row["by_seed"][seed]["quality"] - table[best]["by_seed"][seed]["quality"] for seed in row["by_seed"]],
                t_critical)
        equivalent = versus_lower is not None and versus_lower >= -margin
        memory_passed = (row["peak_memory_bytes"] is not None and row["peak_memory_bytes"] <= memory_budget
                         and "oom" not in row["statuses"])
        reasons = []
        if "failed" in row["statuses"]:
            reasons.append("run_failed")
        if "oom" in row["statuses"]:
            reasons.append("oom")
        if not reasons and not row["complete"]:
            reasons.append("measure_missing")
        if row["complete"] and not row["learned"]:
            reasons.append("no_task_gain")
        if row["complete"] and not row["kept_skill"]:
            reasons.append("forgot_base_skill")
        if row["complete"] and not equivalent:
            reasons.append("below_margin")
        if row["peak_memory_bytes"] is None:
            reasons.append("memory_not_measured")
        elif row["peak_memory_bytes"] > memory_budget:
            reasons.append("over_budget")
        gated[value] = {"complete": row["complete"], "mean_quality": row["mean_quality"],
                        "gain_mean": row["gain_mean"], "gain_lower": row["gain_lower"],
                        "regression_change": row["regression_change"], "versus_best_mean": versus_mean,
                        "versus_best_lower": versus_lower, "peak_memory_bytes": row["peak_memory_bytes"],
                        "learned": row["learned"], "kept_skill": row["kept_skill"], "equivalent": equivalent,
                        "memory_passed": memory_passed,
                        "feasible": row["learned"] and row["kept_skill"] and equivalent and memory_passed,
                        "reasons": reasons}
    return {"best": best, "best_mean": None if best is None else table[best]["mean_quality"], "candidates": gated}


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
