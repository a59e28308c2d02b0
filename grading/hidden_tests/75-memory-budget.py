# %% hidden exercise=choose_under_budget points=1 name=a_budget_equal_to_a_footprint_fits
# hint: a candidate fits when its memory_mb is at most the budget: equal is enough.
table = [{"name": "baseline", "memory_mb": 9000, "memory_spread_mb": 0, "samples_per_s": 10.0},
         {"name": "checkpoint", "memory_mb": 6000.5, "memory_spread_mb": 1.0, "samples_per_s": 7.5}]
exact = choose_under_budget(table, 6000.5)
assert exact["fits"] == ["checkpoint"] and exact["choice"] == "checkpoint" and exact["headroom_mb"] == 0.0, exact
assert choose_under_budget(table, 9000)["choice"] == "baseline"
below = choose_under_budget(table, 6000.4999)
assert below["fits"] == [] and below["choice"] is None, below

# %% hidden exercise=choose_under_budget points=1 name=the_floor_is_inclusive_and_relative_to_the_baseline
# hint: the throughput ratio divides by the baseline's samples_per_s (not by the fastest candidate's), and a ratio equal to the floor is kept.
table = [{"name": "offload", "memory_mb": 100.0, "memory_spread_mb": 0.0, "samples_per_s": 12.0},
         {"name": "baseline", "memory_mb": 300.0, "memory_spread_mb": 0.0, "samples_per_s": 8.0},
         {"name": "hybrid", "memory_mb": 50.0, "memory_spread_mb": 0.0, "samples_per_s": 6.0}]
fast = choose_under_budget(table, 400.0, 0.75)
assert fast["choice"] == "offload" and math.isclose(fast["throughput_ratio"], 1.5), fast
assert math.isclose(fast["throughput_cost"], -0.5), "a strategy faster than the baseline has a negative cost"
edge = choose_under_budget(table, 60.0, 0.75)
assert edge["admissible"] == ["hybrid"] and edge["choice"] == "hybrid" and math.isclose(edge["throughput_ratio"], 0.75), edge
above = choose_under_budget(table, 60.0, 0.76)
assert above["fits"] == ["hybrid"] and above["admissible"] == [] and above["choice"] is None, above

# %% hidden exercise=choose_under_budget points=1 name=ties_go_to_less_memory_then_to_the_list_order
# hint: equal throughput: the candidate with less memory wins; equal throughput and memory: the one earlier in the list.
table = [{"name": "baseline", "memory_mb": 900.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0},
         {"name": "late", "memory_mb": 400.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0},
         {"name": "early", "memory_mb": 300.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0},
         {"name": "twin", "memory_mb": 300.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0}]
chosen = choose_under_budget(table, 1000.0)
assert chosen["choice"] == "early" and chosen["fits"] == ["baseline", "late", "early", "twin"], chosen
assert chosen["headroom_mb"] == 700.0 and chosen["throughput_cost"] == 0.0, chosen

# %% hidden exercise=choose_under_budget points=1 name=without_a_choice_every_choice_field_is_none
# hint: when nothing is admissible, choice, throughput_ratio, throughput_cost and headroom_mb are all None, and budget_mb is still a float.
table = [{"name": "baseline", "memory_mb": 80, "memory_spread_mb": 2, "samples_per_s": 4}]
none_fit = choose_under_budget(table, 79)
assert none_fit == {"budget_mb": 79.0, "fits": [], "admissible": [], "choice": None, "throughput_ratio": None,
                    "throughput_cost": None, "headroom_mb": None}, none_fit
assert type(none_fit["budget_mb"]) is float
fits = choose_under_budget(table, 80)
assert fits["choice"] == "baseline" and fits["throughput_ratio"] == 1.0 and type(fits["headroom_mb"]) is float, fits

# %% hidden exercise=choose_under_budget points=1 name=refuses_bad_tables_and_numbers
# hint: check every candidate (a dict; a distinct non-empty name; exactly one baseline; memory and spread finite >= 0; throughput finite > 0; no bools) and both numbers.
base = {"name": "baseline", "memory_mb": 10.0, "memory_spread_mb": 0.0, "samples_per_s": 2.0}
other = {"name": "checkpoint", "memory_mb": 6.0, "memory_spread_mb": 0.5, "samples_per_s": 1.5}
valid = choose_under_budget([base, other], 8.0, 0.5)  # the valid call every case below breaks in one place
assert valid["choice"] == "checkpoint" and math.isclose(valid["throughput_ratio"], 0.75), valid
bad_calls = [([], 8.0, 0.5), ((base, other), 8.0, 0.5), ([base, "checkpoint"], 8.0, 0.5), ([other], 8.0, 0.5),
             ([base, dict(base)], 8.0, 0.5), ([base, {**other, "name": ""}], 8.0, 0.5), ([base, {**other, "name": 3}], 8.0, 0.5),
             ([base, {k: v for k, v in other.items() if k != "name"}], 8.0, 0.5),
             ([base, {**other, "memory_mb": -1.0}], 8.0, 0.5), ([base, {**other, "memory_mb": float("nan")}], 8.0, 0.5),
             ([base, {**other, "memory_mb": True}], 8.0, 0.5), ([base, {**other, "memory_mb": "6"}], 8.0, 0.5),
             ([base, {**other, "memory_spread_mb": -0.5}], 8.0, 0.5), ([base, {**other, "memory_spread_mb": float("inf")}], 8.0, 0.5),
             ([base, {k: v for k, v in other.items() if k != "memory_spread_mb"}], 8.0, 0.5),
             ([base, {**other, "samples_per_s": 0.0}], 8.0, 0.5), ([base, {**other, "samples_per_s": -1.5}], 8.0, 0.5),
             ([base, {**other, "samples_per_s": False}], 8.0, 0.5), ([{**base, "samples_per_s": float("nan")}, other], 8.0, 0.5),
             ([base, other], -1.0, 0.5), ([base, other], float("inf"), 0.5), ([base, other], True, 0.5), ([base, other], None, 0.5),
             ([base, other], 8.0, 1.5), ([base, other], 8.0, -0.1), ([base, other], 8.0, float("nan")), ([base, other], 8.0, True)]
for position, call in enumerate(bad_calls):
    try:
        choose_under_budget(*call)
    except ValueError:
        continue
    raise AssertionError(f"bad call {position} must raise ValueError")

# %% hidden exercise=choose_under_budget points=2 name=agrees_with_reference_on_generated_tables
# hint: any table, budget and floor, valid or not: the same choice record or the same ValueError as the contract says; the table must not change.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_NAMES = ["baseline", "checkpoint", "offload", "hybrid", "compressed"]
_FIELD_DEFECTS = [("memory_mb", -1.0), ("memory_mb", float("nan")), ("memory_mb", float("inf")), ("memory_mb", True),
                  ("memory_mb", None), ("memory_spread_mb", -0.25), ("memory_spread_mb", float("nan")),
                  ("memory_spread_mb", False), ("samples_per_s", 0), ("samples_per_s", -3.0), ("samples_per_s", float("inf")),
                  ("samples_per_s", True), ("samples_per_s", "fast")]
_cases = ([("valid", n) for n in range(40)] + [("field", defect) for defect in _FIELD_DEFECTS]
          + [("budget", value) for value in (-0.5, float("nan"), float("inf"), True, None)]
          + [("floor", value) for value in (-0.01, 1.01, float("nan"), True)]
          + [("table", defect) for defect in ("empty", "tuple", "no_baseline", "two_baselines", "duplicate", "blank_name",
                                              "not_a_dict")]
          + [("edge", kind) for kind in ("budget_on_footprint", "floor_on_ratio", "tie", "zero_memory") for _ in range(3)])


def _table(rng):
    names = ["baseline"] + rng.sample(_NAMES[1:], rng.randint(0, 4))
    rng.shuffle(names)
    return [{"name": name, "memory_mb": rng.choice([float(rng.randint(0, 64)), rng.uniform(0, 64)]),
             "memory_spread_mb": rng.choice([0.0, rng.uniform(0, 2)]),
             "samples_per_s": rng.choice([float(rng.randint(1, 12)), rng.uniform(0.5, 12)])} for name in names]


def _choose_case(case, rng):
    kind, value = case
    table, budget, floor = _table(rng), rng.uniform(0, 70), rng.choice([0.0, 0.5, rng.uniform(0, 1)])
    position = rng.randrange(len(table))
    if kind == "field":
        table[position][value[0]] = value[1]
    elif kind == "budget":
        budget = value
    elif kind == "floor":
        floor = value
    elif kind == "table":
        if value == "empty":
            table = []
        elif value == "tuple":
            table = tuple(table)
        elif value == "no_baseline":
            table = [row for row in table if row["name"] != "baseline"] or [{**table[0], "name": "checkpoint"}]
        elif value == "two_baselines":
            table.append({**table[position], "name": "baseline"})
        elif value == "duplicate":
            table.append(dict(table[position]))
        elif value == "blank_name":
            table.append({**table[position], "name": ""})
        elif value == "not_a_dict":
            table.insert(position, "hybrid")
    elif value == "budget_on_footprint":
        budget = table[position]["memory_mb"]
    elif value == "floor_on_ratio":
        base = next(row for row in table if row["name"] == "baseline")
        base["samples_per_s"] = 8.0
        table[position]["samples_per_s"] = 6.0
        floor, budget = 0.75, 70.0
    elif value == "tie":
        twin = {**table[position], "name": "twin"}
        table.insert(rng.randint(0, len(table)), twin)
        budget = 70.0
    elif value == "zero_memory":
        table[position]["memory_mb"] = 0
    return table, budget, floor


def _table_ok(table):
    try:
        reference("choose_under_budget")([dict(row) for row in table], 1.0, 0.0)
        return True
    except Exception:
        return False


def _numbers_ok(budget, floor):
    return (not is_bool(budget) and isinstance(budget, (int, float)) and math.isfinite(budget) and budget >= 0
            and not is_bool(floor) and isinstance(floor, (int, float)) and math.isfinite(floor) and 0 <= floor <= 1)


def _rows(table):
    return [row for row in table if isinstance(row, dict)] if isinstance(table, (list, tuple)) else []


reference.agrees("choose_under_budget", each_of(_cases, _choose_case, variants=2), cases=2 * len(_cases), clauses={
    "a memory_mb that is not finite": lambda table, budget, floor: any(not_finite(row.get("memory_mb")) for row in _rows(table)),
    "a negative memory_mb": lambda table, budget, floor: any(isinstance(row.get("memory_mb"), float)
                                                             and row["memory_mb"] < 0 for row in _rows(table)),
    "a bool memory_mb": lambda table, budget, floor: any(is_bool(row.get("memory_mb")) for row in _rows(table)),
    "a spread that is not finite": lambda table, budget, floor: any(not_finite(row.get("memory_spread_mb")) for row in _rows(table)),
    "a negative spread": lambda table, budget, floor: any(isinstance(row.get("memory_spread_mb"), float)
                                                          and row["memory_spread_mb"] < 0 for row in _rows(table)),
    "a bool spread": lambda table, budget, floor: any(is_bool(row.get("memory_spread_mb")) for row in _rows(table)),
    "a zero throughput": lambda table, budget, floor: any(row.get("samples_per_s") == 0 and not is_bool(row.get("samples_per_s"))
                                                          for row in _rows(table)),
    "a negative throughput": lambda table, budget, floor: any(isinstance(row.get("samples_per_s"), float)
                                                              and row["samples_per_s"] < 0 for row in _rows(table)),
    "an infinite throughput": lambda table, budget, floor: any(not_finite(row.get("samples_per_s")) for row in _rows(table)),
    "a bool throughput": lambda table, budget, floor: any(is_bool(row.get("samples_per_s")) for row in _rows(table)),
    "a throughput that is a str": lambda table, budget, floor: any(isinstance(row.get("samples_per_s"), str) for row in _rows(table)),
    "a bad budget": lambda table, budget, floor: _table_ok(table) and not (not is_bool(budget) and isinstance(budget, (int, float))
                                                                           and math.isfinite(budget) and budget >= 0),
    "a bool budget": lambda table, budget, floor: _table_ok(table) and is_bool(budget),
    "a floor outside [0, 1]": lambda table, budget, floor: _table_ok(table) and isinstance(floor, float)
    and math.isfinite(floor) and not 0 <= floor <= 1,
    "a bool floor": lambda table, budget, floor: _table_ok(table) and is_bool(floor),
    "a NaN floor": lambda table, budget, floor: _table_ok(table) and isinstance(floor, float) and math.isnan(floor),
    "an empty table": lambda table, budget, floor: table == [],
    "a table that is a tuple": lambda table, budget, floor: isinstance(table, tuple),
    "no baseline": lambda table, budget, floor: bool(_rows(table)) and all(row.get("name") != "baseline" for row in _rows(table)),
    "two baselines": lambda table, budget, floor: sum(row.get("name") == "baseline" for row in _rows(table)) == 2,
    "a repeated name": lambda table, budget, floor: len({row.get("name") for row in _rows(table)}) < len(_rows(table)),
    "an empty name": lambda table, budget, floor: any(row.get("name") == "" for row in _rows(table)),
    "a candidate that is not a dict": lambda table, budget, floor: isinstance(table, list) and any(not isinstance(r, dict) for r in table),
    "a budget exactly on a footprint (valid)": lambda table, budget, floor: _table_ok(table) and _numbers_ok(budget, floor)
    and any(row["memory_mb"] == budget for row in table),
    "a ratio exactly on the floor (valid)": lambda table, budget, floor: _table_ok(table) and _numbers_ok(budget, floor)
    and floor > 0 and any(row["samples_per_s"] / next(r for r in table if r["name"] == "baseline")["samples_per_s"] == floor
                          for row in table),
    "tied throughput (valid)": lambda table, budget, floor: _table_ok(table) and _numbers_ok(budget, floor)
    and len({row["samples_per_s"] for row in table}) < len(table),
    "a zero footprint (valid)": lambda table, budget, floor: _table_ok(table) and _numbers_ok(budget, floor)
    and any(row["memory_mb"] == 0 for row in table),
    "nothing admissible (valid)": lambda table, budget, floor: _table_ok(table) and _numbers_ok(budget, floor)
    and reference("choose_under_budget")([dict(r) for r in table], budget, floor)["choice"] is None,
})

# %% hidden exercise=budget_sweep points=1 name=dominated_strategies_are_never_chosen
# hint: visiting the candidates by memory, keep one only when it is strictly faster than every one kept before; never_chosen lists the others in list order.
table = [{"name": "offload", "memory_mb": 7900.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0},
         {"name": "baseline", "memory_mb": 10400.0, "memory_spread_mb": 0.0, "samples_per_s": 8.0},
         {"name": "checkpoint", "memory_mb": 7600.0, "memory_spread_mb": 0.0, "samples_per_s": 6.4},
         {"name": "slowpoke", "memory_mb": 9000.0, "memory_spread_mb": 0.0, "samples_per_s": 6.4}]
sweep = budget_sweep(table)
assert [(s["from_mb"], s["to_mb"], s["choice"]) for s in sweep["segments"]] == [
    (0.0, 7600.0, None), (7600.0, 10400.0, "checkpoint"), (10400.0, None, "baseline")], sweep["segments"]
assert sweep["never_chosen"] == ["offload", "slowpoke"] and sweep["flip_points_mb"] == [7600.0, 10400.0], sweep
only_baseline = budget_sweep(table, 0.9)
assert only_baseline["segments"] == [{"from_mb": 0.0, "to_mb": 10400.0, "choice": None},
                                     {"from_mb": 10400.0, "to_mb": None, "choice": "baseline"}], only_baseline

# %% hidden exercise=budget_sweep points=1 name=a_zero_footprint_leaves_no_empty_segment
# hint: the "nothing fits" segment exists only when the smallest kept footprint is above 0; every number is a float.
table = [{"name": "baseline", "memory_mb": 3, "memory_spread_mb": 0, "samples_per_s": 9},
         {"name": "offload", "memory_mb": 0, "memory_spread_mb": 0, "samples_per_s": 4}]
sweep = budget_sweep(table)
assert sweep["segments"] == [{"from_mb": 0.0, "to_mb": 3.0, "choice": "offload"},
                             {"from_mb": 3.0, "to_mb": None, "choice": "baseline"}], sweep["segments"]
assert all(type(s["from_mb"]) is float for s in sweep["segments"]) and sweep["flip_points_mb"] == [3.0], sweep
assert sweep["never_chosen"] == []

# %% hidden exercise=budget_sweep points=1 name=the_floor_removes_slow_candidates_from_the_frontier
# hint: a candidate below the throughput floor never starts a segment, even when it is the smallest; the baseline (ratio 1) always can.
table = [{"name": "baseline", "memory_mb": 50.0, "memory_spread_mb": 0.0, "samples_per_s": 10.0},
         {"name": "hybrid", "memory_mb": 10.0, "memory_spread_mb": 0.0, "samples_per_s": 6.0},
         {"name": "checkpoint", "memory_mb": 30.0, "memory_spread_mb": 0.0, "samples_per_s": 7.0}]
loose, strict = budget_sweep(table, 0.6), budget_sweep(table, 0.65)
assert [s["choice"] for s in loose["segments"]] == [None, "hybrid", "checkpoint", "baseline"], loose
assert [(s["from_mb"], s["choice"]) for s in strict["segments"]] == [(0.0, None), (30.0, "checkpoint"), (50.0, "baseline")], strict
assert strict["never_chosen"] == ["hybrid"] and strict["segments"][0]["to_mb"] == 30.0

# %% hidden exercise=budget_sweep points=1 name=equal_footprints_keep_only_the_faster
# hint: among candidates of equal memory only the fastest can be kept (the others are not strictly faster); a candidate faster than the baseline ends the staircase.
table = [{"name": "baseline", "memory_mb": 20.0, "memory_spread_mb": 0.0, "samples_per_s": 5.0},
         {"name": "offload", "memory_mb": 12.0, "memory_spread_mb": 0.0, "samples_per_s": 5.5},
         {"name": "hybrid", "memory_mb": 12.0, "memory_spread_mb": 0.0, "samples_per_s": 3.0},
         {"name": "twin", "memory_mb": 12.0, "memory_spread_mb": 0.0, "samples_per_s": 5.5}]
sweep = budget_sweep(table)
assert sweep["segments"] == [{"from_mb": 0.0, "to_mb": 12.0, "choice": None},
                             {"from_mb": 12.0, "to_mb": None, "choice": "offload"}], sweep["segments"]
assert sweep["never_chosen"] == ["baseline", "hybrid", "twin"], sweep

# %% hidden exercise=budget_sweep points=1 name=refuses_what_choose_under_budget_refuses
# hint: the table and the floor are checked exactly as in TODO 1.
base = {"name": "baseline", "memory_mb": 10.0, "memory_spread_mb": 0.0, "samples_per_s": 2.0}
other = {"name": "checkpoint", "memory_mb": 6.0, "memory_spread_mb": 0.5, "samples_per_s": 1.5}
valid = budget_sweep([base, other], 0.5)
assert [s["choice"] for s in valid["segments"]] == [None, "checkpoint", "baseline"], valid
for position, call in enumerate([([], 0.5), ([other], 0.5), ([base, dict(base)], 0.5), ([base, {**other, "memory_mb": -6.0}], 0.5),
                                 ([base, {**other, "samples_per_s": 0}], 0.5), ([base, {**other, "memory_spread_mb": True}], 0.5),
                                 ([base, other], 1.2), ([base, other], float("nan")), ([base, other], True), ((base, other), 0.5)]):
    try:
        budget_sweep(*call)
    except ValueError:
        continue
    raise AssertionError(f"bad call {position} must raise ValueError")

# %% hidden exercise=budget_sweep points=2 name=agrees_with_reference_on_generated_sweeps
# hint: any table and floor, valid or not: the same segments, flip points and never-chosen list, or the same ValueError; the table must not change.
from tools.course.grader.clauses import each_of, is_bool

_cases = ([("valid", n) for n in range(40)] + [("field", defect) for defect in _FIELD_DEFECTS]
          + [("floor", value) for value in (-0.01, 1.01, float("nan"), True)]
          + [("table", defect) for defect in ("empty", "tuple", "no_baseline", "two_baselines", "duplicate", "blank_name",
                                              "not_a_dict")]
          + [("edge", kind) for kind in ("floor_on_ratio", "tie", "zero_memory", "faster_than_baseline") for _ in range(3)])


def _sweep_case(case, rng):
    if case[1] == "faster_than_baseline":
        table = _table(rng)
        table.append({"name": "turbo", "memory_mb": rng.uniform(0, 64), "memory_spread_mb": 0.0, "samples_per_s": 50.0})
        return table, rng.choice([0.0, 0.5])
    table, _, floor = _choose_case(case, rng)
    return table, floor


def _staircase(table, floor):
    return reference("budget_sweep")([dict(row) for row in table], floor)


reference.agrees("budget_sweep", each_of(_cases, _sweep_case, variants=2), cases=2 * len(_cases), clauses={
    "a memory_mb that is not finite": lambda table, floor: any(not_finite(row.get("memory_mb")) for row in _rows(table)),
    "a bool memory_mb": lambda table, floor: any(is_bool(row.get("memory_mb")) for row in _rows(table)),
    "a bad spread": lambda table, floor: any(row.get("memory_spread_mb") is not None and (is_bool(row["memory_spread_mb"])
                                             or not_finite(row["memory_spread_mb"]) or row["memory_spread_mb"] < 0)
                                             for row in _rows(table)),
    "a bad throughput": lambda table, floor: any(is_bool(row.get("samples_per_s")) or isinstance(row.get("samples_per_s"), str)
                                                 or (isinstance(row.get("samples_per_s"), (int, float))
                                                     and not 0 < row["samples_per_s"] < float("inf")) for row in _rows(table)),
    "a floor outside [0, 1]": lambda table, floor: _table_ok(table) and isinstance(floor, float) and math.isfinite(floor)
    and not 0 <= floor <= 1,
    "a bool floor": lambda table, floor: _table_ok(table) and is_bool(floor),
    "a NaN floor": lambda table, floor: _table_ok(table) and isinstance(floor, float) and math.isnan(floor),
    "an empty table": lambda table, floor: table == [],
    "a table that is a tuple": lambda table, floor: isinstance(table, tuple),
    "no baseline": lambda table, floor: bool(_rows(table)) and all(row.get("name") != "baseline" for row in _rows(table)),
    "a repeated name": lambda table, floor: len({row.get("name") for row in _rows(table)}) < len(_rows(table)),
    "a candidate that is not a dict": lambda table, floor: isinstance(table, list) and any(not isinstance(r, dict) for r in table),
    "a dominated candidate (valid)": lambda table, floor: _table_ok(table) and _numbers_ok(0.0, floor)
    and bool(_staircase(table, floor)["never_chosen"]),
    "a zero footprint on the frontier (valid)": lambda table, floor: _table_ok(table) and _numbers_ok(0.0, floor)
    and _staircase(table, floor)["segments"][0]["choice"] is not None,
    "a candidate faster than the baseline (valid)": lambda table, floor: _table_ok(table) and _numbers_ok(0.0, floor)
    and _staircase(table, floor)["segments"][-1]["choice"] != "baseline",
    "equal footprints (valid)": lambda table, floor: _table_ok(table) and _numbers_ok(0.0, floor)
    and len({row["memory_mb"] for row in table}) < len(table),
    "a ratio exactly on the floor (valid)": lambda table, floor: _table_ok(table) and _numbers_ok(0.0, floor) and floor > 0
    and any(row["samples_per_s"] / next(r for r in table if r["name"] == "baseline")["samples_per_s"] == floor for row in table),
})

# %% hidden exercise=final_strategy_choice points=1 name=a_target_on_a_flip_point_belongs_to_the_segment_it_starts
# hint: a segment holds from_mb <= target < to_mb: at exactly a flip point the new (faster) strategy already fits, with zero headroom.
segments = [{"from_mb": 0.0, "to_mb": 40.0, "choice": None}, {"from_mb": 40.0, "to_mb": 70.0, "choice": "hybrid"},
            {"from_mb": 70.0, "to_mb": None, "choice": "baseline"}]
spreads = {"hybrid": 0.0, "baseline": 0.0}
at_flip = final_strategy_choice(segments, 70.0, spreads)
assert at_flip["choice"] == "baseline" and at_flip["headroom_mb"] == 0.0 and at_flip["flip_below_mb"] == 70.0, at_flip
assert at_flip["decision"] == "tune", "zero headroom is never more than a spread of 0"
inside = final_strategy_choice(segments, 69.5, spreads)
assert inside["choice"] == "hybrid" and inside["flip_above_mb"] == 70.0 and inside["decision"] == "adopt", inside

# %% hidden exercise=final_strategy_choice points=1 name=headroom_equal_to_the_spread_is_tune
# hint: the decision is tune when headroom_mb <= spread_mb, equality included: the choice then fits only within the measurement's spread.
segments = [{"from_mb": 0.0, "to_mb": 100.0, "choice": None}, {"from_mb": 100.0, "to_mb": None, "choice": "checkpoint"}]
equal = final_strategy_choice(segments, 112.5, {"checkpoint": 12.5})
assert equal["decision"] == "tune" and equal["headroom_mb"] == 12.5 and equal["spread_mb"] == 12.5, equal
assert equal["next_action"] == "remeasure_or_leave_more_headroom"
more = final_strategy_choice(segments, 112.75, {"checkpoint": 12.5, "baseline": 1})
assert more["decision"] == "adopt" and more["next_action"] == "train_with_the_chosen_strategy", more

# %% hidden exercise=final_strategy_choice points=1 name=decisions_are_checked_in_order
# hint: no_fit first, then tune (a baseline within its spread is tune too), then keep_baseline, then adopt; each with its own next_action.
segments = [{"from_mb": 0.0, "to_mb": 10.0, "choice": None}, {"from_mb": 10.0, "to_mb": 30.0, "choice": "offload"},
            {"from_mb": 30.0, "to_mb": None, "choice": "baseline"}]
spreads = {"offload": 1.0, "baseline": 4.0}
assert final_strategy_choice(segments, 5.0, spreads) == {
    "decision": "no_fit", "choice": None, "headroom_mb": None, "spread_mb": None, "flip_below_mb": None,
    "flip_above_mb": 10.0, "next_action": "compress_the_static_state_or_shrink_the_workload"}
assert final_strategy_choice(segments, 33.0, spreads)["decision"] == "tune"
keep = final_strategy_choice(segments, 40.0, spreads)
assert keep["decision"] == "keep_baseline" and keep["next_action"] == "train_without_a_memory_strategy", keep
assert final_strategy_choice(segments, 20.0, spreads)["decision"] == "adopt"

# %% hidden exercise=final_strategy_choice points=1 name=the_last_segment_has_no_upper_flip
# hint: a target beyond every flip point lies in the last segment: its to_mb is None, and so is flip_above_mb.
segments = [{"from_mb": 0, "to_mb": 2, "choice": "offload"}, {"from_mb": 2, "to_mb": None, "choice": "baseline"}]
far = final_strategy_choice(segments, 1e9, {"offload": 0, "baseline": 0})
assert far["flip_above_mb"] is None and far["flip_below_mb"] == 2 and far["decision"] == "keep_baseline", far
near = final_strategy_choice(segments, 0.5, {"offload": 0.25, "baseline": 0})
assert near["choice"] == "offload" and near["flip_below_mb"] == 0 and near["flip_above_mb"] == 2 and near["decision"] == "adopt"

# %% hidden exercise=final_strategy_choice points=1 name=refuses_broken_staircases_and_spreads
# hint: check the whole staircase (starts at 0, each end is the next start and above its own start, only the last ends at None), the target, every spread, and that the choice has a spread.
good = [{"from_mb": 0.0, "to_mb": 5.0, "choice": None}, {"from_mb": 5.0, "to_mb": None, "choice": "hybrid"}]
valid = final_strategy_choice(good, 9.0, {"hybrid": 1.0})  # the valid call every case below breaks in one place
assert valid["decision"] == "adopt" and valid["headroom_mb"] == 4.0, valid
bad_calls = [
    ([], 9.0, {"hybrid": 1.0}), (tuple(good), 9.0, {"hybrid": 1.0}), ([good[1]], 9.0, {"hybrid": 1.0}),
    ([{**good[0], "to_mb": 4.0}, good[1]], 9.0, {"hybrid": 1.0}), ([{**good[0], "to_mb": None}, good[1]], 9.0, {"hybrid": 1.0}),
    ([good[0], {**good[1], "to_mb": 12.0}], 9.0, {"hybrid": 1.0}), ([{**good[0], "from_mb": True}, good[1]], 9.0, {"hybrid": 1.0}),
    ([{**good[0], "to_mb": 0.0}, {**good[1], "from_mb": 0.0}], 9.0, {"hybrid": 1.0}),
    ([good[0], {**good[1], "choice": ""}], 9.0, {"hybrid": 1.0}), ([good[0], {**good[1], "choice": 3}], 9.0, {"hybrid": 1.0}),
    ([good[0], "segment"], 9.0, {"hybrid": 1.0}), ([{**good[0], "from_mb": float("nan")}, good[1]], 9.0, {"hybrid": 1.0}),
    (good, -1.0, {"hybrid": 1.0}), (good, float("inf"), {"hybrid": 1.0}), (good, True, {"hybrid": 1.0}),
    (good, 9.0, [("hybrid", 1.0)]), (good, 9.0, {"hybrid": -1.0}), (good, 9.0, {"hybrid": float("nan")}),
    (good, 9.0, {"hybrid": True}), (good, 9.0, {"hybrid": 1.0, "baseline": -2.0}), (good, 9.0, {"baseline": 1.0}),
]
for position, call in enumerate(bad_calls):
    try:
        final_strategy_choice(*call)
    except ValueError:
        continue
    raise AssertionError(f"bad call {position} must raise ValueError")

# %% hidden exercise=final_strategy_choice points=2 name=agrees_with_reference_on_generated_staircases
# hint: any staircase, target and spreads, valid or not: the same decision record or the same ValueError as the contract says; nothing passed in may change.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_SEGMENT_DEFECTS = ["gap", "overlap", "first_not_zero", "last_bounded", "middle_open", "bool_from", "nan_from", "inf_to",
                    "empty_choice", "int_choice", "not_a_dict", "empty", "tuple", "backwards"]
_cases = ([("valid", n) for n in range(40)] + [("segments", defect) for defect in _SEGMENT_DEFECTS]
          + [("target", value) for value in (-1.0, float("nan"), float("inf"), True, None)]
          + [("spreads", defect) for defect in ("not_a_dict", "negative", "nan", "bool", "missing_choice", "bad_unused")]
          + [("edge", kind) for kind in ("on_flip", "headroom_equals_spread", "beyond_last", "in_first") for _ in range(3)])


def _staircase_case(case, rng):
    kind, value = case
    table = _table(rng)
    segments = reference("budget_sweep")([dict(row) for row in table], rng.choice([0.0, 0.5]))["segments"]
    spreads = {row["name"]: row["memory_spread_mb"] for row in table}
    target = rng.uniform(0, 80)
    chosen = [s for s in segments if s["choice"] is not None]
    if kind == "segments":
        if value == "gap" and len(segments) > 1:
            segments[0]["to_mb"] = segments[1]["from_mb"] / 2 if segments[1]["from_mb"] else 0.5
        elif value == "overlap" and len(segments) > 1:
            segments[0]["to_mb"] = segments[1]["from_mb"] + 1.0
        elif value == "first_not_zero":
            segments[0]["from_mb"] = 0.25 if segments[0]["to_mb"] is None or segments[0]["to_mb"] > 0.25 else segments[0]["from_mb"] + 0.1
        elif value == "last_bounded":
            segments[-1]["to_mb"] = segments[-1]["from_mb"] + 5.0
        elif value == "middle_open" and len(segments) > 1:
            segments[0]["to_mb"] = None
        elif value == "bool_from":
            segments[0]["from_mb"] = False
        elif value == "nan_from":
            segments[-1]["from_mb"] = float("nan")
        elif value == "inf_to" and len(segments) > 1:
            segments[0]["to_mb"] = float("inf")
        elif value == "empty_choice":
            segments[-1]["choice"] = ""
        elif value == "int_choice":
            segments[-1]["choice"] = 7
        elif value == "not_a_dict":
            segments[-1] = "segment"
        elif value == "empty":
            segments = []
        elif value == "tuple":
            segments = tuple(segments)
        elif value == "backwards" and len(segments) > 1:
            segments[0]["to_mb"] = -1.0
            segments[1]["from_mb"] = -1.0
        else:
            segments[-1]["to_mb"] = 1.0
    elif kind == "target":
        target = value
    elif kind == "spreads":
        if value == "not_a_dict":
            spreads = list(spreads.items())
        elif value == "negative":
            spreads[rng.choice(sorted(spreads))] = -0.5
        elif value == "nan":
            spreads[rng.choice(sorted(spreads))] = float("nan")
        elif value == "bool":
            spreads[rng.choice(sorted(spreads))] = True
        elif value == "missing_choice":
            spreads = {}
        elif value == "bad_unused":
            spreads["never_named"] = -3.0
    elif value == "on_flip" and chosen:
        target = rng.choice(chosen)["from_mb"]
    elif value == "headroom_equals_spread" and chosen:
        segment = rng.choice(chosen)
        spreads[segment["choice"]] = 0.5
        target = segment["from_mb"] + 0.5
    elif value == "beyond_last":
        target = segments[-1]["from_mb"] + 1000.0
    elif value == "in_first":
        target = 0.0
    return segments, target, spreads


def _staircase_ok(segments):
    try:
        reference("final_strategy_choice")([dict(s) for s in segments], 1e12,
                                           {s["choice"]: 0.0 for s in segments if s.get("choice")})
        return True
    except Exception:
        return False


def _target_ok(target):
    return not is_bool(target) and isinstance(target, (int, float)) and math.isfinite(target) and target >= 0


def _valid(segments, target, spreads):
    try:
        reference("final_strategy_choice")([dict(s) for s in segments], target, dict(spreads))
        return True
    except Exception:
        return False


def _decision(segments, target, spreads):
    return reference("final_strategy_choice")([dict(s) for s in segments], target, dict(spreads))


reference.agrees("final_strategy_choice", each_of(_cases, _staircase_case, variants=2), cases=2 * len(_cases), clauses={
    "a gap or overlap between segments": lambda segments, target, spreads: isinstance(segments, list)
    and all(isinstance(s, dict) for s in segments) and any(a.get("to_mb") is not None and not is_bool(b.get("from_mb"))
                                                         and a["to_mb"] != b.get("from_mb") for a, b in zip(segments, segments[1:])),
    "a first segment not at 0": lambda segments, target, spreads: isinstance(segments, list) and bool(segments)
    and isinstance(segments[0], dict) and isinstance(segments[0].get("from_mb"), float) and segments[0]["from_mb"] > 0,
    "a bounded last segment": lambda segments, target, spreads: isinstance(segments, list) and bool(segments)
    and isinstance(segments[-1], dict) and segments[-1].get("to_mb") is not None,
    "an open segment before the last": lambda segments, target, spreads: isinstance(segments, list)
    and any(isinstance(s, dict) and s.get("to_mb") is None for s in segments[:-1]),
    "a bool bound": lambda segments, target, spreads: isinstance(segments, list)
    and any(isinstance(s, dict) and is_bool(s.get("from_mb")) for s in segments),
    "a non-finite bound": lambda segments, target, spreads: isinstance(segments, list)
    and any(isinstance(s, dict) and (not_finite(s.get("from_mb")) or not_finite(s.get("to_mb"))) for s in segments),
    "a negative bound": lambda segments, target, spreads: isinstance(segments, list)
    and any(isinstance(s, dict) and isinstance(s.get("to_mb"), float) and s["to_mb"] < 0 for s in segments),
    "a bad choice": lambda segments, target, spreads: isinstance(segments, list)
    and any(isinstance(s, dict) and s.get("choice") is not None and (not isinstance(s["choice"], str) or not s["choice"])
            for s in segments),
    "a segment that is not a dict": lambda segments, target, spreads: isinstance(segments, list)
    and any(not isinstance(s, dict) for s in segments),
    "no segment": lambda segments, target, spreads: segments == [],
    "segments as a tuple": lambda segments, target, spreads: isinstance(segments, tuple),
    "a bad target": lambda segments, target, spreads: _staircase_ok(segments) and not _target_ok(target),
    "spreads that are not a dict": lambda segments, target, spreads: _staircase_ok(segments) and _target_ok(target)
    and not isinstance(spreads, dict),
    "a bad spread": lambda segments, target, spreads: _staircase_ok(segments) and _target_ok(target) and isinstance(spreads, dict)
    and any(is_bool(v) or not_finite(v) or (isinstance(v, (int, float)) and v < 0) for v in spreads.values()),
    "the choice has no spread": lambda segments, target, spreads: _staircase_ok(segments) and _target_ok(target)
    and spreads == {} and _decision(segments, 1e12, {s["choice"]: 0.0 for s in segments if s.get("choice")})["choice"] is not None,
    "a target exactly on a flip point (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and any(s["from_mb"] == target and s["from_mb"] > 0 for s in segments),
    "headroom equal to the spread (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and _decision(segments, target, spreads)["choice"] is not None
    and _decision(segments, target, spreads)["headroom_mb"] == _decision(segments, target, spreads)["spread_mb"],
    "a target in the last segment (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and target >= segments[-1]["from_mb"],
    "no_fit (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and _decision(segments, target, spreads)["decision"] == "no_fit",
    "adopt (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and _decision(segments, target, spreads)["decision"] == "adopt",
    "keep_baseline (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and _decision(segments, target, spreads)["decision"] == "keep_baseline",
    "tune (valid)": lambda segments, target, spreads: _valid(segments, target, spreads)
    and _decision(segments, target, spreads)["decision"] == "tune",
})
