# %% hidden exercise=pipeline_capacity points=1 name=items_per_work_unit_convert_every_stage
# hint: divide each raw rate by how many of the stage's own items one work unit makes; a learner that updates once per K work units makes 1/K update per work unit.
result = pipeline_capacity({"rollout": 120, "reference": 200, "reward": 72, "learner": 0.25}, 16,
                           {"rollout": 8, "reference": 8, "reward": 4, "learner": 1 / 128})
assert result["effective_rates"] == {"rollout": 15.0, "reference": 25.0, "reward": 18.0, "learner": 32.0}
assert result["capacity"] == 15.0 and result["bottlenecks"] == ["rollout"]
assert result["queue_margins"] == {"rollout": -1.0, "reference": 9.0, "reward": 2.0, "learner": 16.0}

# %% hidden exercise=pipeline_capacity points=1 name=downstream_stage_sees_only_what_upstream_passes
# hint: a stage's queue grows by what actually reaches it and it cannot finish; a saturated stage caps what every later stage receives, so the growths add up to arrivals minus capacity.
result = pipeline_capacity({"gen": 18, "ref": 15, "score": 16, "train": 12}, 20,
                           {"gen": 1, "ref": 1, "score": 1, "train": 1})
assert result["inflow_rates"] == {"gen": 20.0, "ref": 18.0, "score": 15.0, "train": 15.0}
assert result["queue_growth"] == {"gen": 2.0, "ref": 3.0, "score": 0.0, "train": 3.0}
assert result["unstable_stages"] == ["gen", "ref", "train"] and result["queue_stable"] is False
assert sum(result["queue_growth"].values()) == 20 - result["capacity"]
assert result["queue_margins"]["score"] == -4.0, "short of the arrivals, yet not growing: it only receives 15"

# %% hidden exercise=pipeline_capacity points=1 name=pipeline_order_is_the_key_order_of_stage_rates
# hint: the key order of stage_rates is the pipeline (not the alphabet, not the order of items_per_work_unit), and every dict and list of the report follows it.
items = {"a": 1, "b": 1, "c": 1}
forward = pipeline_capacity({"c": 10, "b": 30, "a": 20}, 25, items)
assert list(forward["inflow_rates"]) == ["c", "b", "a"] and list(forward["queue_growth"]) == ["c", "b", "a"]
assert forward["inflow_rates"] == {"c": 25.0, "b": 10.0, "a": 10.0}
assert forward["unstable_stages"] == ["c"]
backward = pipeline_capacity({"a": 20, "b": 30, "c": 10}, 25, items)
assert backward["inflow_rates"] == {"a": 25.0, "b": 20.0, "c": 20.0}
assert backward["queue_growth"] == {"a": 5.0, "b": 0.0, "c": 10.0}
assert backward["unstable_stages"] == ["a", "c"]
tied = pipeline_capacity({"z": 4, "m": 2, "a": 4}, 1, {"a": 2, "m": 1, "z": 2})
assert tied["bottlenecks"] == ["z", "m", "a"]
assert list(tied["effective_rates"]) == ["z", "m", "a"] and list(tied["queue_margins"]) == ["z", "m", "a"]

# %% hidden exercise=pipeline_capacity points=1 name=rounding_ties_are_bottlenecks_and_keep_up
# hint: rates that differ only by floating-point rounding are equal: all are bottlenecks, and a stage within rounding of what reaches it keeps up (growth 0.0).
result = pipeline_capacity({"gen": 0.3, "score": 0.1, "update": 0.1}, 0.1, {"gen": 3, "score": 1, "update": 1})
assert result["bottlenecks"] == ["gen", "score", "update"]
assert result["queue_growth"] == {"gen": 0.0, "score": 0.0, "update": 0.0}
assert result["unstable_stages"] == [] and result["queue_stable"] is True
swapped = pipeline_capacity({"score": 0.1, "gen": 0.3}, 0.1, {"gen": 3, "score": 1})
assert swapped["queue_growth"] == {"score": 0.0, "gen": 0.0} and swapped["queue_stable"] is True

# %% hidden exercise=pipeline_capacity points=1 name=time_shared_stages_are_all_bottlenecks
# hint: roles that take turns on one pool, each with a time share proportional to 1/R, all run at 1 / sum(1/R) up to rounding: every one of them is a bottleneck, and none of them builds a queue below that rate.
alone = {"rollout": 256.0, "reference": 1024.0, "reward": 512.0, "learner": 2.0}  # items/s with the pool alone
per_unit = {"rollout": 4, "reference": 4, "reward": 4, "learner": 1 / 64}
seconds = {stage: per_unit[stage] / alone[stage] for stage in alone}
cycle = sum(seconds.values())
shared = {stage: seconds[stage] / cycle * alone[stage] for stage in alone}
result = pipeline_capacity(shared, 1 / cycle, per_unit)
assert result["bottlenecks"] == ["rollout", "reference", "reward", "learner"]
assert math.isclose(result["capacity"], 256 / 9, rel_tol=1e-9)
assert result["queue_stable"] is True and result["unstable_stages"] == []

# %% hidden exercise=pipeline_capacity points=1 name=zero_arrival_and_exact_keep_up_are_stable
# hint: an arrival rate of zero is valid; a stage whose rate equals what reaches it keeps up; margins are reported for every stage even when nothing grows.
idle = pipeline_capacity({"rollout": 8, "learner": 2}, 0, {"rollout": 4, "learner": 1})
assert idle["queue_margins"] == {"rollout": 2.0, "learner": 2.0}
assert idle["inflow_rates"] == {"rollout": 0.0, "learner": 0.0}
assert idle["queue_stable"] is True and idle["bottlenecks"] == ["rollout", "learner"]
exact = pipeline_capacity({"rollout": 96, "learner": 0.375}, 24, {"rollout": 4, "learner": 1 / 64})
assert exact["queue_growth"] == {"rollout": 0.0, "learner": 0.0} and exact["unstable_stages"] == []

# %% hidden exercise=pipeline_capacity points=1 name=every_rate_is_a_float
# hint: every rate of the report is a float, also when all the inputs are ints.
result = pipeline_capacity({"a": 6, "b": 3}, 4, {"a": 2, "b": 1})
for key in ("effective_rates", "queue_margins", "inflow_rates", "queue_growth"):
    assert all(type(value) is float for value in result[key].values()), key
assert type(result["capacity"]) is float
assert result["queue_growth"] == {"a": 1.0, "b": 0.0}

# %% hidden exercise=pipeline_capacity points=1 name=invalid_input_raises_value_error_in_every_position
# hint: check both dicts, every stage name, every rate, every multiplier and the arrival rate before computing; a wrong type is a ValueError too, and a bool is not a number.
ok_rates, ok_items = {"rollout": 8, "reward": 4}, {"rollout": 4, "reward": 2}
valid = pipeline_capacity(ok_rates, 2.5, ok_items)  # the valid call every case below breaks in one place
assert valid["effective_rates"] == {"rollout": 2.0, "reward": 2.0} and valid["unstable_stages"] == ["rollout"], valid
cases = [
    ([("rollout", 8), ("reward", 4)], 2, ok_items), (ok_rates, 2, [("rollout", 4), ("reward", 2)]), ({}, 2, {}),
    ({"": 1}, 1, {"": 1}), ({" \t\n": 1}, 1, {" \t\n": 1}), ({3: 1}, 1, {3: 1}),
    (ok_rates, 2, {"rollout": 4}), (ok_rates, 2, {"rollout": 4, "reward": 2, "learner": 1}),
    ({"rollout": 8, "reward": "4"}, 2, ok_items), ({"rollout": 8, "reward": False}, 2, ok_items),
    ({"rollout": 8, "reward": float("inf")}, 2, ok_items), ({"rollout": 0, "reward": 4}, 2, ok_items),
    (ok_rates, 2, {"rollout": 4, "reward": -2}), (ok_rates, 2, {"rollout": True, "reward": 2}),
    (ok_rates, 2, {"rollout": float("nan"), "reward": 2}), (ok_rates, 2, {"rollout": 4, "reward": None}),
    (ok_rates, -0.5, ok_items), (ok_rates, float("nan"), ok_items), (ok_rates, True, ok_items),
    (ok_rates, "2", ok_items), (ok_rates, None, ok_items),
]
for stage_rates, arrival_rate, items in cases:
    try:
        pipeline_capacity(stage_rates, arrival_rate, items)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=pipeline_capacity points=2 name=agrees_with_reference_on_generated_pipelines
# hint: any chain of stages the contract allows (ints and floats, fractional multipliers, rates tied within rounding, zero arrivals, the two dicts in different key orders): the same report, with floats where floats are due.
from hypothesis import strategies as st

names = ["rollout", "reference", "reward", "learner", "judge", "Rollout", "a b", "ｒollout"]
rates = st.sampled_from([1, 2, 3, 4, 8, 12, 24, 24.0, 80, 96, 112.0, 0.1, 0.3, 0.25, 0.375, 0.5, 1.5, 1e-3, 7 / 3])
multipliers = st.sampled_from([1, 2, 3, 4, 8, 3.0, 0.5, 0.1, 1 / 3, 1 / 64, 1 / 96])
arrivals = st.sampled_from([0, 0.0, 1, 6, 8, 20, 24, 24.0, 32, 100, 0.1, 0.3, 1 / 3])


@st.composite
def pipelines(draw):
    stages = draw(st.lists(st.sampled_from(names), min_size=1, max_size=5, unique=True))
    stage_rates = {stage: draw(rates) for stage in stages}
    per_unit = {stage: draw(multipliers) for stage in stages}
    return stage_rates, draw(arrivals), {stage: per_unit[stage] for stage in draw(st.permutations(stages))}


@st.composite
def rounding_ties(draw):
    """Stages whose effective rates are 0.1 up to rounding (0.3 / 3, 0.7 / 7, 0.2 / 2, 0.1 / 1), in any order."""
    stages = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4, unique=True))
    pairs = [draw(st.sampled_from([(0.3, 3), (0.7, 7), (0.2, 2), (0.1, 1), (0.6, 6), (0.5, 4)])) for _ in stages]
    arrival = draw(st.sampled_from([0.1, 0.3 / 3, 0.7 / 7, 0.2, 0.05]))
    return dict(zip(stages, (rate for rate, _ in pairs))), arrival, dict(zip(stages, (per for _, per in pairs)))


import unicodedata

from tools.course.grader.clauses import near_but_not_equal


def flow(stage_rates, arrival_rate, items_per_work_unit):
    """(effective rate, inflow) of every stage, in pipeline order."""
    inflow, rows = arrival_rate, []
    for stage, rate in stage_rates.items():
        rows.append((rate / items_per_work_unit[stage], inflow))
        inflow = min(inflow, rows[-1][0])
    return rows


def effective(stage_rates, arrival_rate, items_per_work_unit):
    return [rate for rate, _ in flow(stage_rates, arrival_rate, items_per_work_unit)]


reference.agrees("pipeline_capacity", st.one_of(pipelines(), rounding_ties()), cases=200, clauses={
    "one stage": lambda r, a, i: len(r) == 1,
    "the two dicts in different key orders": lambda r, a, i: list(r) != list(i),
    "every number an int (the report is floats)": lambda r, a, i: all(type(v) is int for v in [*r.values(), a, *i.values()]),
    "a fractional items_per_work_unit": lambda r, a, i: any(v < 1 for v in i.values()),
    "zero arrivals": lambda r, a, i: a == 0,
    "names equal after case folding or NFKC": lambda r, a, i: len(
        {unicodedata.normalize("NFKC", stage).casefold() for stage in r}) < len(r),
    "effective rates tied only within rounding": lambda *call: any(
        near_but_not_equal(rate, min(effective(*call))) for rate in effective(*call)),
    "a later stage receives less than the arrivals": lambda *call: any(inflow < call[1] for _, inflow in flow(*call)),
    "a stage keeps up only within rounding": lambda *call: any(
        rate < inflow and near_but_not_equal(rate, inflow) for rate, inflow in flow(*call)),
    "a stage whose queue grows": lambda *call: any(
        rate < inflow and not near_but_not_equal(rate, inflow) for rate, inflow in flow(*call)),
})

# %% hidden exercise=pipeline_capacity points=2 name=agrees_with_reference_on_generated_invalid_pipelines
# hint: one wrong thing anywhere (a dict that is a list, no stage, a blank or non-str name, a stage missing from one dict, a rate or multiplier that is zero, negative, NaN, infinite, a bool or a str, a bad arrival rate): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of

bad_numbers = [0, 0.0, -1, -0.5, float("nan"), float("inf"), -float("inf"), True, False, None, "4", [4]]
bad_arrivals = [-1, -1e-9, float("nan"), float("inf"), True, False, None, "24", [24]]
bad_names = ["", " ", "\t", "\n", " \t\n", "\u3000", 0, 1.5, None, True, ("a",)]
defects = ([("valid", n) for n in range(30)] + [("rates_type", n) for n in range(5)]
           + [("items_type", n) for n in range(4)] + [("empty", n) for n in range(2)] + [("missing", None), ("extra", None)]
           + [("name", bad) for bad in bad_names] + [(kind, bad) for kind in ("rate", "multiplier") for bad in bad_numbers]
           + [("arrival", bad) for bad in bad_arrivals])


def one_defect(defect, rng):
    """A valid pipeline, or one with exactly this defect."""
    kind, bad = defect
    stages = rng.sample(["rollout", "reference", "reward", "learner"], rng.randint(1, 4))
    stage_rates = {stage: rng.choice([8, 2.5, 96]) for stage in stages}
    per_unit = {stage: rng.choice([4, 1, 1 / 64]) for stage in stages}
    arrival, where = rng.choice([0, 3, 24.0]), rng.choice(stages)
    if kind == "rates_type":
        stage_rates = [list(stage_rates.items()), None, "rollout", 8, tuple(stages)][bad]
    elif kind == "items_type":
        per_unit = [list(per_unit.items()), None, 4, [4] * len(stages)][bad]
    elif kind == "empty":
        stage_rates, per_unit = {}, [{}, per_unit][bad]
    elif kind == "name":
        at = rng.randint(0, len(stages))
        order = stages[:at] + [bad] + stages[at:]
        stage_rates = {stage: stage_rates.get(stage, 8) for stage in order}
        per_unit = {stage: per_unit.get(stage, 1) for stage in order}
    elif kind == "missing":
        del per_unit[where]
    elif kind == "extra":
        per_unit["verifier"] = 1
    elif kind == "rate":
        stage_rates[where] = bad
    elif kind == "multiplier":
        per_unit[where] = bad
    elif kind == "arrival":
        arrival = bad
    return stage_rates, arrival, per_unit


from tools.course.grader.clauses import below, is_blank, is_bool, keys, not_a_number, not_a_str, not_finite, values


def both_dicts(first, second):
    return isinstance(first, dict) and isinstance(second, dict)


reference.agrees("pipeline_capacity", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "stage_rates is not a dict": lambda r, a, i: not isinstance(r, dict),
    "items_per_work_unit is not a dict": lambda r, a, i: not isinstance(i, dict),
    "no stage at all": lambda r, a, i: r == {},
    "a stage name that is not a str": lambda r, a, i: any(not_a_str(stage) for stage in keys(r)),
    "a stage name without a visible character": lambda r, a, i: any(is_blank(stage) for stage in keys(r)),
    "a stage missing from items_per_work_unit": lambda r, a, i: both_dicts(r, i) and bool(set(r) - set(i)),
    "a stage missing from stage_rates": lambda r, a, i: both_dicts(r, i) and bool(set(i) - set(r)),
    "a rate that is a bool": lambda r, a, i: any(is_bool(v) for v in values(r)),
    "a rate that is not a number": lambda r, a, i: any(not_a_number(v) for v in values(r)),
    "a rate that is not finite": lambda r, a, i: any(not_finite(v) for v in values(r)),
    "a rate <= 0": lambda r, a, i: any(below(v, 0, or_equal=True) for v in values(r)),
    "a multiplier that is a bool": lambda r, a, i: any(is_bool(v) for v in values(i)),
    "a multiplier that is not a number": lambda r, a, i: any(not_a_number(v) for v in values(i)),
    "a multiplier that is not finite": lambda r, a, i: any(not_finite(v) for v in values(i)),
    "a multiplier <= 0": lambda r, a, i: any(below(v, 0, or_equal=True) for v in values(i)),
    "an arrival rate that is a bool": lambda r, a, i: is_bool(a),
    "an arrival rate that is not a number": lambda r, a, i: not_a_number(a),
    "an arrival rate that is not finite": lambda r, a, i: not_finite(a),
    "an arrival rate < 0": lambda r, a, i: below(a, 0),
})

# %% hidden exercise=transfer_ledger points=1 name=same_pool_edges_keep_a_zero_row_and_open_no_port
# hint: an edge whose two ends share a pool touches no fabric: its row is all zeros, it opens no port, its fabric and bandwidth are not read, and with no cross-pool edge nothing is critical.
placement = {"rollout": "gen", "reward": "gen", "verifier": "gen"}
edges = [{"source": "rollout", "target": "reward", "bytes_per_item": 4096, "items_per_work_unit": 4,
          "work_units_per_second": 24, "bandwidth_bytes_per_s": 1e9, "fabric_id": "nv-0"},
         {"source": "reward", "target": "verifier", "bytes_per_item": 8, "items_per_work_unit": 4,
          "work_units_per_second": 24, "bandwidth_bytes_per_s": 5e8, "fabric_id": "nv-0"},
         {"source": "verifier", "target": "verifier", "bytes_per_item": 1, "items_per_work_unit": 1,
          "work_units_per_second": 1, "bandwidth_bytes_per_s": 1}]
report = transfer_ledger(edges, placement)
assert report["cross_pool_bytes_per_s"] == 0.0 and report["port_exposed_seconds_per_s"] == {}
assert report["fabric_exposed_seconds_per_s"] == {} and report["critical_exposed_seconds_per_s"] == 0.0
assert report["critical_fabrics"] == []
assert [(row["cross_pool"], row["traffic_bytes_per_s"], row["transfer_seconds_per_s"], row["exposed_seconds_per_s"])
        for row in report["rows"]] == [(False, 0.0, 0.0, 0.0)] * 3
assert transfer_ledger([], {}) == {"cross_pool_bytes_per_s": 0.0, "port_exposed_seconds_per_s": {},
                                   "fabric_exposed_seconds_per_s": {}, "critical_exposed_seconds_per_s": 0.0,
                                   "critical_fabrics": [], "rows": []}

# %% hidden exercise=transfer_ledger points=1 name=opposite_directions_of_a_port_do_not_add
# hint: links are full-duplex: what leaves a pool and what enters it use the two directions of its port, so a weight broadcast and the answers coming back do not share bandwidth.
placement = {"learner": "train", "rollout": "gen"}
edges = [{"source": "learner", "target": "rollout", "bytes_per_item": 600, "items_per_work_unit": 1,
          "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": "ib-0"},
         {"source": "rollout", "target": "learner", "bytes_per_item": 250, "items_per_work_unit": 2,
          "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": "ib-0"}]
report = transfer_ledger(edges, placement)
assert report["port_exposed_seconds_per_s"] == {"ib-0": {"train": {"out": 0.6, "in": 0.5},
                                                         "gen": {"out": 0.5, "in": 0.6}}}
assert report["fabric_exposed_seconds_per_s"] == {"ib-0": 0.6}
assert report["critical_exposed_seconds_per_s"] == 0.6 and report["critical_fabrics"] == ["ib-0"]

# %% hidden exercise=transfer_ledger points=1 name=one_port_one_direction_adds_up
# hint: edges that leave one pool on one fabric share that port's outgoing direction, edges that enter one pool share its incoming direction: their exposed times add.
placement = {"learner": "train", "rollout-0": "gen-0", "rollout-1": "gen-1", "reward": "rm"}


def hop(source, target, size, overlap=0.0):
    return {"source": source, "target": target, "bytes_per_item": size, "items_per_work_unit": 1,
            "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "overlap_fraction": overlap,
            "fabric_id": "ib"}


report = transfer_ledger([hop("learner", "rollout-0", 500, 0.5), hop("learner", "rollout-1", 500, 0.5),
                          hop("rollout-0", "reward", 125), hop("rollout-1", "reward", 250)], placement)
ports = report["port_exposed_seconds_per_s"]["ib"]
assert set(ports) == {"train", "gen-0", "gen-1", "rm"}
assert ports["train"] == {"out": 0.5, "in": 0.0}
assert ports["gen-0"] == {"out": 0.125, "in": 0.25} and ports["gen-1"] == {"out": 0.25, "in": 0.25}
assert ports["rm"] == {"out": 0.0, "in": 0.375}
assert report["fabric_exposed_seconds_per_s"] == {"ib": 0.5}

# %% hidden exercise=transfer_ledger points=1 name=fabric_is_its_busiest_port_and_critical_is_the_busiest_fabric
# hint: a fabric is as busy as its busiest port direction, not the sum of its edges; separate fabrics run in parallel, so the critical value belongs to one fabric, never to a total.
placement = {"a": "p1", "b": "p2", "c": "p3", "d": "p4", "e": "p5", "f": "p6", "g": "p7", "h": "p8"}
edges = [{"source": source, "target": target, "bytes_per_item": size, "items_per_work_unit": 1,
          "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": fabric}
         for source, target, size, fabric in [("a", "b", 200, "ib-0"), ("c", "d", 200, "ib-0"),
                                              ("e", "f", 200, "ib-0"), ("g", "h", 350, "nv-1")]]
report = transfer_ledger(edges, placement)
assert report["fabric_exposed_seconds_per_s"] == {"ib-0": 0.2, "nv-1": 0.35}
assert report["critical_exposed_seconds_per_s"] == 0.35 and report["critical_fabrics"] == ["nv-1"]
assert report["cross_pool_bytes_per_s"] == 950.0

# %% hidden exercise=transfer_ledger points=1 name=rows_copy_the_edge_and_report_overlap
# hint: each row is a copy of its edge (extra keys included, a missing overlap stays missing) plus its own traffic, link time and the part that overlap does not hide; overlap 1 hides everything.
edge = {"source": "rollout", "target": "learner", "bytes_per_item": 100, "items_per_work_unit": 8,
        "work_units_per_second": 10, "bandwidth_bytes_per_s": 16000, "overlap_fraction": 0.75, "fabric_id": "pcie-3",
        "payload": "trajectories"}
placement = {"rollout": "A", "learner": "B"}
expected = {**edge, "cross_pool": True, "traffic_bytes_per_s": 8000.0, "transfer_seconds_per_s": 0.5,
            "exposed_seconds_per_s": 0.125}
row = transfer_ledger([edge], placement)["rows"][0]
assert row == expected
assert row is not edge
hidden = transfer_ledger([dict(edge, overlap_fraction=1)], placement)
assert hidden["rows"][0]["exposed_seconds_per_s"] == 0.0 and hidden["critical_exposed_seconds_per_s"] == 0.0
assert hidden["cross_pool_bytes_per_s"] == 8000.0 and hidden["critical_fabrics"] == ["pcie-3"]
plain = {key: value for key, value in edge.items() if key != "overlap_fraction"}
row = transfer_ledger([plain], placement)["rows"][0]
assert "overlap_fraction" not in row and row["exposed_seconds_per_s"] == 0.5

# %% hidden exercise=transfer_ledger points=1 name=every_edge_is_checked_even_inside_a_pool
# hint: validate every number of every edge before computing, the edges inside one pool included; a missing number, a bool or a str is a ValueError too.
placement = {"rollout": "gen", "reward": "gen", "learner": "train"}
inside = {"source": "rollout", "target": "reward", "bytes_per_item": 16, "items_per_work_unit": 4,
          "work_units_per_second": 24, "bandwidth_bytes_per_s": 1e9, "overlap_fraction": 0.0}
across = {"source": "rollout", "target": "learner", "bytes_per_item": 16, "items_per_work_unit": 4,
          "work_units_per_second": 24, "bandwidth_bytes_per_s": 1e9, "fabric_id": "ib-0"}
bad_inside = [dict(inside, bytes_per_item=float("nan")), dict(inside, items_per_work_unit=0),
              dict(inside, work_units_per_second=-1), dict(inside, bandwidth_bytes_per_s=float("inf")),
              dict(inside, overlap_fraction=1.5), dict(inside, overlap_fraction=None), dict(inside, bytes_per_item=True),
              dict(inside, work_units_per_second="24"), {k: v for k, v in inside.items() if k != "bandwidth_bytes_per_s"}]
valid = transfer_ledger([inside, across], placement)  # the valid edges every case below breaks in one place
assert [row["cross_pool"] for row in valid["rows"]] == [False, True] and valid["cross_pool_bytes_per_s"] == 1536.0, valid
for bad in bad_inside:
    for edges in ([bad], [across, bad], [bad, across]):
        try:
            transfer_ledger(edges, placement)
        except ValueError:
            continue
        raise AssertionError("an invalid edge inside a pool was accepted")

# %% hidden exercise=transfer_ledger points=1 name=critical_fabrics_tie_within_rounding
# hint: fabrics whose busiest port directions differ only by floating-point rounding are tied: report all of them, sorted.
placement = {"learner": "train", "rollout-0": "gen-0", "rollout-1": "gen-1", "reward": "rm"}


def hop(source, target, size, fabric):
    return {"source": source, "target": target, "bytes_per_item": size, "items_per_work_unit": 1,
            "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": fabric}


report = transfer_ledger([hop("reward", "learner", 300, "z"), hop("learner", "rollout-0", 100, "m"),
                          hop("learner", "rollout-1", 200, "m"), hop("rollout-0", "reward", 299, "a")], placement)
assert report["critical_fabrics"] == ["m", "z"]
assert math.isclose(report["critical_exposed_seconds_per_s"], 0.3, rel_tol=1e-9)

# %% hidden exercise=transfer_ledger points=1 name=cross_pool_edges_need_one_fabric_and_one_bandwidth
# hint: a cross-pool edge names its fabric with a str that has a visible character; the cross-pool edges of one fabric share one bandwidth, compared within rounding.
placement = {"rollout": "A", "learner": "B", "reward": "A"}
base = {"source": "rollout", "target": "learner", "bytes_per_item": 10, "items_per_work_unit": 1,
        "work_units_per_second": 1, "bandwidth_bytes_per_s": 0.3, "fabric_id": "ib-0"}
no_fabric = {key: value for key, value in base.items() if key != "fabric_id"}
bad_lists = [[no_fabric], [dict(base, fabric_id=None)], [dict(base, fabric_id="")], [dict(base, fabric_id=" \t")],
             [dict(base, fabric_id=7)], [base, dict(base, source="learner", target="rollout", bandwidth_bytes_per_s=0.31)]]
assert transfer_ledger([base], placement)["fabric_exposed_seconds_per_s"] == {"ib-0": 10 / 0.3}
for edges in bad_lists:
    try:
        transfer_ledger(edges, placement)
    except ValueError:
        continue
    raise AssertionError("a cross-pool edge without one fabric and one bandwidth was accepted")
rounded = transfer_ledger([base, dict(base, source="learner", target="rollout", bandwidth_bytes_per_s=0.1 + 0.2),
                           dict(no_fabric, target="reward", bandwidth_bytes_per_s=5)], placement)
assert set(rounded["fabric_exposed_seconds_per_s"]) == {"ib-0"} and rounded["rows"][2]["cross_pool"] is False

# %% hidden exercise=transfer_ledger points=1 name=placement_and_endpoints_are_checked
# hint: edges is a list of dicts and placement a dict of role -> pool, both str with a visible character; every source and target must be a role of placement.
edge = {"source": "rollout", "target": "learner", "bytes_per_item": 10, "items_per_work_unit": 1,
        "work_units_per_second": 1, "bandwidth_bytes_per_s": 100, "fabric_id": "ib-0"}
placement = {"rollout": "A", "learner": "B"}
calls = [((edge,), placement), ([edge], [("rollout", "A"), ("learner", "B")]), ([edge], None), ([None], placement),
         ([[("source", "rollout")]], placement), ([edge], {"rollout": "A", "learner": ""}),
         ([edge], {"rollout": "A", "learner": 2}), ([edge], {**placement, " ": "C"}), ([edge], {**placement, 5: "C"}),
         ([dict(edge, target="verifier")], placement), ([dict(edge, source=None)], placement),
         ([{k: v for k, v in edge.items() if k != "target"}], placement)]
assert transfer_ledger([edge], placement)["port_exposed_seconds_per_s"] == {"ib-0": {"A": {"out": 0.1, "in": 0.0},
                                                                                   "B": {"out": 0.0, "in": 0.1}}}
for edges, where in calls:
    try:
        transfer_ledger(edges, where)
    except ValueError:
        continue
    raise AssertionError("an invalid edge list or placement was accepted")

# %% hidden exercise=transfer_ledger points=2 name=agrees_with_reference_on_generated_ledgers
# hint: any edges and placement the contract allows (pools shared or not, opposite directions, ints and floats, overlap absent or at 0 and 1, idle edges, bandwidths equal within rounding, fabrics tied within rounding): the same ledger, with floats where floats are due.
from hypothesis import strategies as st

roles = ["learner", "rollout-0", "rollout-1", "reference", "reward"]
pools = ["train", "gen", "gen-b", "Train", "ｇen"]
bandwidths = {"ib-0": [1000, 1000.0], "ib-1": [0.3, 0.1 + 0.2], "nv": [2000.0, 2000]}


@st.composite
def ledgers(draw):
    members = draw(st.lists(st.sampled_from(roles), min_size=1, max_size=5, unique=True))
    placement = {role: draw(st.sampled_from(pools)) for role in members}
    edges = []
    for _ in range(draw(st.integers(0, 6))):
        source, target, fabric = draw(st.sampled_from(members)), draw(st.sampled_from(members)), \
            draw(st.sampled_from(sorted(bandwidths)))
        edge = {"source": source, "target": target,
                "bytes_per_item": draw(st.sampled_from([0, 1, 100, 250, 1000, 2048.0, 0.5])),
                "items_per_work_unit": draw(st.sampled_from([1, 2, 4, 0.5, 1 / 3, 1 / 64])),
                "work_units_per_second": draw(st.sampled_from([0, 1, 2, 3, 0.1, 24.0])),
                "bandwidth_bytes_per_s": draw(st.sampled_from(bandwidths[fabric]))}
        if draw(st.booleans()):
            edge["overlap_fraction"] = draw(st.sampled_from([0, 0.0, 0.25, 0.5, 0.6, 1, 1.0]))
        if placement[source] != placement[target] or draw(st.booleans()):
            edge["fabric_id"] = fabric
        elif draw(st.booleans()):
            edge["fabric_id"] = draw(st.sampled_from([None, "", 7]))  # not read inside a pool
        if draw(st.booleans()):
            edge["payload"] = draw(st.sampled_from(["weights", "trajectories"]))
        edges.append(edge)
    return (edges, placement), {}


@st.composite
def rounding_ties(draw):
    """Two fabrics whose busiest port directions are 0.1 + 0.2 and 0.3, in any order, beside idle edges."""
    tied, other = draw(st.permutations(["x", "y"]))
    placement = {"learner": "train", "rollout-0": "gen-0", "rollout-1": "gen-1", "reward": "rm"}
    edges = [{"source": "learner", "target": "rollout-0", "bytes_per_item": 100, "items_per_work_unit": 1,
              "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": tied},
             {"source": "learner", "target": "rollout-1", "bytes_per_item": 200, "items_per_work_unit": 1,
              "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000, "fabric_id": tied},
             {"source": "reward", "target": "learner", "bytes_per_item": draw(st.sampled_from([300, 150])),
              "items_per_work_unit": draw(st.sampled_from([1, 2])), "work_units_per_second": 1,
              "bandwidth_bytes_per_s": 1000, "fabric_id": other},
             {"source": "rollout-0", "target": "reward", "bytes_per_item": draw(st.sampled_from([0, 10])),
              "items_per_work_unit": 1, "work_units_per_second": 1, "bandwidth_bytes_per_s": 1000,
              "overlap_fraction": 1, "fabric_id": draw(st.sampled_from(["x", "y", "w"]))}]
    return (draw(st.permutations(edges)), placement), {}


import math

from tools.course.grader.clauses import near_but_not_equal


def crossing(edges, placement):
    return [edge for edge in edges if placement[edge["source"]] != placement[edge["target"]]]


def exposed(edge):
    return (edge["bytes_per_item"] * edge["items_per_work_unit"] * edge["work_units_per_second"]
            / edge["bandwidth_bytes_per_s"] * (1 - edge.get("overlap_fraction", 0)))


def port_loads(edges, placement):
    loads = {}
    for edge in crossing(edges, placement):
        for pool, direction in ((placement[edge["source"]], "out"), (placement[edge["target"]], "in")):
            key = (edge["fabric_id"], pool, direction)
            loads[key] = loads.get(key, 0) + exposed(edge)
    return loads


def fabric_loads(edges, placement):
    busiest = {}
    for (fabric, _, _), load in port_loads(edges, placement).items():
        busiest[fabric] = max(busiest.get(fabric, 0), load)
    return sorted(busiest.values())


reference.agrees("transfer_ledger", st.one_of(ledgers(), rounding_ties()), cases=200, clauses={
    "no edge": lambda edges, placement: edges == [],
    "an edge inside one pool": lambda edges, placement: len(crossing(edges, placement)) < len(edges),
    "an edge inside one pool without a valid fabric_id": lambda edges, placement: any(
        placement[e["source"]] == placement[e["target"]] and not isinstance(e.get("fabric_id"), str) for e in edges),
    "one port used in both directions": lambda edges, placement: any(
        (fabric, pool, "in") in port_loads(edges, placement)
        for fabric, pool, direction in port_loads(edges, placement) if direction == "out"),
    "two edges share one port direction": lambda edges, placement: len(port_loads(edges, placement)) < 2 * len(
        crossing(edges, placement)),
    "overlap_fraction absent": lambda edges, placement: any("overlap_fraction" not in e for e in edges),
    "overlap_fraction 1 (all hidden)": lambda edges, placement: any(e.get("overlap_fraction") == 1 for e in edges),
    "an idle edge (no traffic)": lambda edges, placement: any(
        e["bytes_per_item"] == 0 or e["work_units_per_second"] == 0 for e in crossing(edges, placement)),
    "bandwidths of one fabric equal only within rounding": lambda edges, placement: any(
        near_but_not_equal(a["bandwidth_bytes_per_s"], b["bandwidth_bytes_per_s"])
        for a in crossing(edges, placement) for b in crossing(edges, placement) if a["fabric_id"] == b["fabric_id"]),
    "two fabrics tied only within rounding": lambda edges, placement: any(
        near_but_not_equal(a, b) for a in fabric_loads(edges, placement) for b in fabric_loads(edges, placement)),
    "an extra key copied into the row": lambda edges, placement: any("payload" in e for e in edges),
    "pool names equal after case folding or NFKC": lambda edges, placement: len(
        {__import__("unicodedata").normalize("NFKC", pool).casefold() for pool in placement.values()})
        < len(set(placement.values())),
})

# %% hidden exercise=transfer_ledger points=2 name=agrees_with_reference_on_generated_invalid_ledgers
# hint: one wrong thing anywhere, inside a pool as well (edges or an edge that is not a list or dict, a bad role or pool, an unknown endpoint, a missing or bad number, a bool or str for a number, a cross-pool edge without a fabric, two bandwidths on one fabric): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of

numeric = ["bytes_per_item", "items_per_work_unit", "work_units_per_second", "bandwidth_bytes_per_s"]
bad_values = {
    "bytes_per_item": [-1, -0.5, float("nan"), float("inf"), True, "16", None, [16]],
    "items_per_work_unit": [0, 0.0, -1, float("nan"), float("-inf"), False, "4", None],
    "work_units_per_second": [-1, -1e-9, float("nan"), float("inf"), True, "24", None],
    "bandwidth_bytes_per_s": [0, 0.0, -1000, float("nan"), float("inf"), True, "1e9", None],
    "overlap_fraction": [-0.1, 1.5, 2, float("nan"), True, False, "0.5", None],
}
bad_names = ["", " ", "\t\n", "\u3000", 3, None, True, ("gen",)]
bad_endpoints = ["verifier", "Learner", "", None, 3, ["learner"]]
bad_fabrics = ["absent", None, "", " \n", 7, True, ("ib-0",)]
defects = ([("valid", n) for n in range(30)] + [("edges", n) for n in range(5)] + [("edge", n) for n in range(4)]
           + [("placement", n) for n in range(4)] + [("role", bad) for bad in bad_names]
           + [("pool", bad) for bad in bad_names + [["gen"]]] + [("endpoint", bad) for bad in bad_endpoints]
           + [("missing", field) for field in numeric + ["source", "target"]]
           + [("number", (field, bad)) for field in sorted(bad_values) for bad in bad_values[field]]
           + [("fabric", bad) for bad in bad_fabrics] + [("bandwidth", bad) for bad in (25.1e9, 24e9, 1e9)])


def one_defect(defect, rng):
    """Valid edges and placement, or ones with exactly this defect (on any edge, the one inside a pool too)."""
    kind, bad = defect
    placement = {"learner": "train", "rollout": "gen", "reward": "gen"}

    def link(source, target, fabric="ib-0"):
        return {"source": source, "target": target, "bytes_per_item": rng.choice([16, 2048.0]),
                "items_per_work_unit": rng.choice([4, 1 / 64]), "work_units_per_second": 24,
                "bandwidth_bytes_per_s": 25e9, "overlap_fraction": rng.choice([0, 0.6]), "fabric_id": fabric}

    edges = [link("learner", "rollout"), link("rollout", "reward", None), link("rollout", "learner")]
    at, cross = rng.randint(0, 2), rng.choice([0, 2])
    if kind == "edges":
        edges = [tuple(edges), None, "edges", {0: edges[0]}, edges[0]][bad]
    elif kind == "edge":
        edges[at] = [None, "edge", 3, list(edges[at].items())][bad]
    elif kind == "placement":
        placement = [list(placement.items()), None, "gen", ("train", "gen")][bad]
    elif kind == "role":
        placement[bad] = "gen"
    elif kind == "pool":
        placement[rng.choice(["learner", "rollout", "reward"])] = bad
    elif kind == "endpoint":
        edges[at][rng.choice(["source", "target"])] = bad
    elif kind == "missing":
        del edges[at][bad]
    elif kind == "number":
        field, value = bad
        edges[at][field] = value
    elif kind == "fabric" and bad == "absent":
        del edges[cross]["fabric_id"]
    elif kind == "fabric":
        edges[cross]["fabric_id"] = bad
    elif kind == "bandwidth":
        edges[cross]["bandwidth_bytes_per_s"] = bad
    return (edges, placement), {}


from tools.course.grader.clauses import dicts, is_blank, is_bool, keys, not_a_number, not_a_str, not_finite, values

ranges = {"bytes_per_item": (0, False), "items_per_work_unit": (0, True), "work_units_per_second": (0, False),
          "bandwidth_bytes_per_s": (0, True), "overlap_fraction": (0, False)}


def bad_number(field, value):
    low, strict = ranges[field]
    if not_a_number(value) or is_bool(value) or not_finite(value):
        return True
    return value <= low if strict else value < low or (field == "overlap_fraction" and value > 1)


def in_pool(edge, placement):
    roles = keys(placement)
    return edge.get("source") in roles and edge.get("target") in roles and \
        placement[edge["source"]] == placement[edge["target"]]


def number_clause(field):
    return lambda edges, placement: any(field in e and bad_number(field, e[field]) for e in dicts(edges))


def kind_clause(test):
    return lambda edges, placement: any(test(e[f]) for e in dicts(edges) for f in ranges if f in e)


reference.agrees("transfer_ledger", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "edges is not a list": lambda edges, placement: not isinstance(edges, list),
    "an edge that is not a dict": lambda edges, placement: isinstance(edges, list) and any(
        not isinstance(e, dict) for e in edges),
    "placement is not a dict": lambda edges, placement: not isinstance(placement, dict),
    "a role that is not a str": lambda edges, placement: any(not_a_str(role) for role in keys(placement)),
    "a blank role": lambda edges, placement: any(is_blank(role) for role in keys(placement)),
    "a pool that is not a str": lambda edges, placement: any(not_a_str(pool) for pool in values(placement)),
    "a blank pool": lambda edges, placement: any(is_blank(pool) for pool in values(placement)),
    "an endpoint missing from placement": lambda edges, placement: isinstance(placement, dict) and any(
        e.get(end) not in placement for e in dicts(edges) for end in ("source", "target") if end in e),
    "an endpoint key missing": lambda edges, placement: any("source" not in e or "target" not in e for e in dicts(edges)),
    **{f"{field} missing": (lambda field: lambda edges, placement: any(field not in e for e in dicts(edges)))(field)
       for field in ["bytes_per_item", "items_per_work_unit", "work_units_per_second", "bandwidth_bytes_per_s"]},
    **{f"{field} out of range or not a number": number_clause(field) for field in ranges},
    "a number that is a bool": kind_clause(is_bool),
    "a number that is a str or None": kind_clause(lambda v: isinstance(v, str) or v is None),
    "a number that is not finite": kind_clause(not_finite),
    "an invalid number on an edge inside one pool": lambda edges, placement: any(
        in_pool(e, placement) and any(f in e and bad_number(f, e[f]) for f in ranges) for e in dicts(edges)),
    "a cross-pool edge without fabric_id": lambda edges, placement: any(
        "fabric_id" not in e and not in_pool(e, placement) for e in dicts(edges)),
    "a cross-pool edge whose fabric_id is not a str with a visible character": lambda edges, placement: any(
        "fabric_id" in e and not in_pool(e, placement) and (not_a_str(e["fabric_id"]) or is_blank(e["fabric_id"]))
        for e in dicts(edges)),
    "two bandwidths on one fabric": lambda edges, placement: len(
        {e["bandwidth_bytes_per_s"] for e in dicts(edges) if e.get("fabric_id") == "ib-0" and not in_pool(e, placement)}) > 1,
})

# %% hidden exercise=evaluate_topology points=1 name=a_value_at_its_limit_passes_even_after_rounding
# hint: memory equal to its limit and exposure equal to the budget pass, also when they differ from it only by floating-point rounding; anything clearly above fails.
queue_ok = {"unstable_stages": []}
result = evaluate_topology(queue_ok, {"gen": 0.1 + 0.2, "train": 80}, {"gen": 0.3, "train": 80.0},
                           {"fabric_exposed_seconds_per_s": {"ib": 0.1 + 0.2, "nv": 0.1}}, True, True,
                           max_exposed_s_per_s=0.3)
assert result["decision"] == "accept" and result["reasons"] == []
assert result["over_limit_pools"] == [] and result["overloaded_fabrics"] == []
result = evaluate_topology(queue_ok, {"gen": 80.001}, {"gen": 80}, {"fabric_exposed_seconds_per_s": {"ib": 0.1001}},
                           True, True)
assert result["over_limit_pools"] == ["gen"] and result["overloaded_fabrics"] == ["ib"]

# %% hidden exercise=evaluate_topology points=1 name=pool_without_limit_counts_as_over
# hint: a pool with no declared limit cannot be shown to fit; limits of other pools do not matter; over-limit pools are sorted.
result = evaluate_topology({"unstable_stages": []}, {"train": 70, "gen": 10, "aux": 1}, {"train": 60, "gen": 40, "spare": 5},
                           {"fabric_exposed_seconds_per_s": {}}, True, True)
assert result["decision"] == "reject" and result["reasons"] == ["memory_limit"]
assert result["over_limit_pools"] == ["aux", "train"]
nothing_declared = evaluate_topology({"unstable_stages": []}, {"gen": 0}, {}, {"fabric_exposed_seconds_per_s": {}},
                                     True, True)
assert nothing_declared["over_limit_pools"] == ["gen"]

# %% hidden exercise=evaluate_topology points=1 name=every_hard_failure_in_order
# hint: list every hard failure in the documented order, even when an earlier one already decides.
queue_ok, link_ok = {"unstable_stages": []}, {"fabric_exposed_seconds_per_s": {"ib-0": 0.01}}
fits, too_big, limits = {"A": 10}, {"A": 99}, {"A": 40}
assert evaluate_topology(queue_ok, fits, limits, link_ok, False, False)["reasons"] == ["version_sync", "recovery_not_ready"]
assert evaluate_topology(queue_ok, too_big, limits, link_ok, True, False)["reasons"] == ["memory_limit", "recovery_not_ready"]
assert evaluate_topology(queue_ok, too_big, limits, link_ok, False, True)["reasons"] == ["memory_limit", "version_sync"]
assert evaluate_topology(queue_ok, fits, limits, link_ok, True, False)["reasons"] == ["recovery_not_ready"]

# %% hidden exercise=evaluate_topology points=1 name=only_true_confirms_sync_and_recovery
# hint: an unknown or loosely spelt state is not a confirmation: only the bool True counts for version_sync_ok and recovery_ok.
queue_ok, link_ok = {"unstable_stages": []}, {"fabric_exposed_seconds_per_s": {}}
for state in (None, 1, "yes", "True", [True], 1.0):
    sync = evaluate_topology(queue_ok, {"A": 1}, {"A": 2}, link_ok, state, True)
    assert sync["decision"] == "reject" and sync["reasons"] == ["version_sync"], state
    recovery = evaluate_topology(queue_ok, {"A": 1}, {"A": 2}, link_ok, True, state)
    assert recovery["reasons"] == ["recovery_not_ready"], state

# %% hidden exercise=evaluate_topology points=1 name=reject_outranks_tune_and_keeps_all_evidence
# hint: a hard failure decides before any tuning pressure, yet the queue evidence (in the capacity report's own order) and the fabric evidence (sorted) are still reported.
capacity = {"unstable_stages": ["rollout", "reward"], "queue_stable": False}
transfer = {"fabric_exposed_seconds_per_s": {"ib-2": 0.3, "ib-1": 0.05, "ib-0": 0.2}, "critical_fabrics": ["ib-2"]}
result = evaluate_topology(capacity, {"A": 10}, {"A": 40}, transfer, True, False)
assert result["decision"] == "reject" and result["reasons"] == ["recovery_not_ready"]
assert result["unstable_stages"] == ["rollout", "reward"] and result["overloaded_fabrics"] == ["ib-0", "ib-2"]
assert result["unstable_stages"] is not capacity["unstable_stages"]
backwards = evaluate_topology({"unstable_stages": ["reward", "reference"]}, {"A": 10}, {"A": 40}, transfer, True, True)
assert backwards["decision"] == "tune" and backwards["unstable_stages"] == ["reward", "reference"]

# %% hidden exercise=evaluate_topology points=1 name=tuning_order_alone_and_the_budget_keyword
# hint: tuning pressures follow the documented order and each appears alone when it is the only one; the budget is a keyword argument with a default of 0.1.
stable, growing = {"unstable_stages": []}, {"unstable_stages": ["rollout"]}
busy, quiet = {"fabric_exposed_seconds_per_s": {"ib-0": 0.2}}, {"fabric_exposed_seconds_per_s": {"ib-0": 0.02}}
memory, limits = {"A": 10}, {"A": 40}
only_link = evaluate_topology(stable, memory, limits, busy, True, True)
assert only_link["decision"] == "tune" and only_link["reasons"] == ["exposed_transfer"]
only_queue = evaluate_topology(growing, memory, limits, quiet, True, True)
assert only_queue["decision"] == "tune" and only_queue["reasons"] == ["unstable_queue"]
relaxed = evaluate_topology(stable, memory, limits, busy, True, True, max_exposed_s_per_s=0.25)
assert relaxed["decision"] == "accept" and relaxed["overloaded_fabrics"] == []
strict = evaluate_topology(stable, memory, limits, quiet, True, True, max_exposed_s_per_s=0)
assert strict["reasons"] == ["exposed_transfer"] and strict["overloaded_fabrics"] == ["ib-0"]
assert evaluate_topology(stable, memory, limits, {"fabric_exposed_seconds_per_s": {"ib-0": 0.1}}, True, True)["decision"] == "accept"

# %% hidden exercise=evaluate_topology points=1 name=invalid_ledgers_raise_value_error
# hint: the reports need their list and dict, pools and fabrics are str with a visible character, memory_by_pool is not empty, and every amount is a finite int or float >= 0 (a bool is not a number).
queue_ok, link_ok = {"unstable_stages": []}, {"fabric_exposed_seconds_per_s": {"ib-0": 0.01}}
calls = [
    ({}, {"A": 10}, {"A": 40}, link_ok, 0.1), ({"unstable_stages": "reward"}, {"A": 10}, {"A": 40}, link_ok, 0.1),
    (queue_ok, {"A": 10}, {"A": 40}, {}, 0.1), (queue_ok, {}, {"A": 40}, link_ok, 0.1),
    (queue_ok, {"A": float("nan")}, {"A": 40}, link_ok, 0.1), (queue_ok, {"A": -1}, {"A": 40}, link_ok, 0.1),
    (queue_ok, {"A": True}, {"A": 40}, link_ok, 0.1), (queue_ok, {"": 10}, {"A": 40}, link_ok, 0.1),
    (queue_ok, {"A": 10}, {"A": float("inf")}, link_ok, 0.1), (queue_ok, {"A": 10}, {"A": "40"}, link_ok, 0.1),
    (queue_ok, {"A": 10}, [("A", 40)], link_ok, 0.1),
    (queue_ok, {"A": 10}, {"A": 40}, {"fabric_exposed_seconds_per_s": {"ib-0": float("nan")}}, 0.1),
    (queue_ok, {"A": 10}, {"A": 40}, {"fabric_exposed_seconds_per_s": {"ib-0": -0.01}}, 0.1),
    (queue_ok, {"A": 10}, {"A": 40}, {"fabric_exposed_seconds_per_s": {7: 0.01}}, 0.1),
    (queue_ok, {"A": 10}, {"A": 40}, link_ok, -0.1), (queue_ok, {"A": 10}, {"A": 40}, link_ok, float("nan")),
    (queue_ok, {"A": 10}, {"A": 40}, link_ok, True), (queue_ok, {"A": 10}, {"A": 40}, link_ok, None),
]
valid = evaluate_topology(queue_ok, {"A": 10}, {"A": 40}, link_ok, True, True, max_exposed_s_per_s=0.001)
assert valid["decision"] == "tune" and valid["overloaded_fabrics"] == ["ib-0"], valid  # the call every case breaks
for capacity, memory, limits, transfer, budget in calls:
    try:
        evaluate_topology(capacity, memory, limits, transfer, True, True, max_exposed_s_per_s=budget)
    except ValueError:
        continue
    raise AssertionError("an invalid ledger was accepted")

# %% hidden exercise=evaluate_topology points=2 name=agrees_with_reference_on_generated_gates
# hint: any ledgers the contract allows (values at, within rounding of, or just past their limits, pools without limits, loosely spelt confirmations, reports with extra keys, the budget given or not): the same decision, reasons and evidence.
from hypothesis import strategies as st

amounts = st.sampled_from([0, 10, 40, 79.99, 80, 80.0, 80.00000000000001, 80.1, 0.1 + 0.2, 0.3, 120])
exposures = st.sampled_from([0, 0.0, 0.05, 0.1, 0.1 + 1e-12, 0.10000000000000002, 0.1 + 0.2, 0.3, 0.31, 2])
confirmations = st.sampled_from([True, True, False, None, 1, 0, "yes", 1.0])
pool_names, fabric_names = ["gen", "train", "ref", "Gen"], ["ib-0", "ib-1", "nv"]


@st.composite
def gates(draw):
    memory = {pool: draw(amounts) for pool in draw(st.lists(st.sampled_from(pool_names), min_size=1, max_size=3,
                                                              unique=True))}
    limits = {pool: draw(amounts) for pool in draw(st.lists(st.sampled_from(pool_names + ["spare"]), max_size=4,
                                                              unique=True))}
    capacity = {"unstable_stages": draw(st.lists(st.sampled_from(["rollout", "reference", "reward", "learner"]),
                                                 max_size=3, unique=True))}
    if draw(st.booleans()):
        capacity["queue_stable"] = not capacity["unstable_stages"]
    transfer = {"fabric_exposed_seconds_per_s": {fabric: draw(exposures) for fabric in draw(
        st.lists(st.sampled_from(fabric_names), max_size=3, unique=True))}}
    if draw(st.booleans()):
        transfer["critical_fabrics"] = []
    kwargs = {} if draw(st.booleans()) else {"max_exposed_s_per_s": draw(st.sampled_from(
        [0, 0.0, 0.1, 0.3, 1, 0.30000000000000004]))}
    return (capacity, memory, limits, transfer, draw(confirmations), draw(confirmations)), kwargs


import math

from tools.course.grader.clauses import near_but_not_equal


def limit_pairs(capacity, memory, limits, transfer, *flags, max_exposed_s_per_s=0.1):
    return ([(memory[pool], limits[pool]) for pool in memory if pool in limits]
            + [(value, max_exposed_s_per_s) for value in transfer["fabric_exposed_seconds_per_s"].values()])


def above_within_rounding(*call, **kwargs):
    return any(value > limit and near_but_not_equal(value, limit) for value, limit in limit_pairs(*call, **kwargs))


reference.agrees("evaluate_topology", gates(), cases=150, clauses={
    "a value exactly at its limit": lambda *call, **kw: any(v == lim for v, lim in limit_pairs(*call, **kw)),
    "a value above its limit only within rounding": above_within_rounding,
    "a value clearly above its limit": lambda *call, **kw: any(
        v > lim and not math.isclose(v, lim, rel_tol=1e-9) for v, lim in limit_pairs(*call, **kw)),
    "a pool without a limit": lambda cap, memory, limits, *rest, **kw: bool(set(memory) - set(limits)),
    "a limit for a pool that is not used": lambda cap, memory, limits, *rest, **kw: bool(set(limits) - set(memory)),
    "a confirmation that is truthy but not True": lambda *call, **kw: any(
        flag is not True and bool(flag) for flag in call[4:6]),
    "the budget left at its default": lambda *call, **kw: "max_exposed_s_per_s" not in kw,
    "the budget given": lambda *call, **kw: "max_exposed_s_per_s" in kw,
    "unstable stages beside a hard failure": lambda cap, memory, limits, transfer, sync, recovery, **kw:
        bool(cap["unstable_stages"]) and (sync is not True or recovery is not True),
    "reports with extra keys": lambda cap, memory, limits, transfer, *rest, **kw: len(cap) > 1 or len(transfer) > 1,
})

# %% hidden exercise=evaluate_topology points=2 name=agrees_with_reference_on_generated_invalid_gates
# hint: one wrong thing anywhere (a report without its list or dict, an empty or non-dict memory ledger, a blank or non-str pool or fabric, an amount that is negative, NaN, infinite, a bool or a str, a bad budget): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of

bad_amounts = [-1, -0.01, float("nan"), float("inf"), True, False, "80", None, [80]]
bad_names = ["", " ", "\t\n", 3, None, ("gen",)]
replacements = {"capacity": [None, [], {}, {"unstable": []}, "reward"],
                "stages": [None, "reward", ("reward",), [3], {"reward"}],
                "transfer": [None, {}, {"fabric_exposed": {}}, [("ib-0", 0.05)]],
                "exposures": [None, [("ib-0", 0.05)], 0.05], "memory": [{}, None, [("gen", 60)], 60],
                "limits": [None, [("gen", 80)], 80]}
defects = ([("valid", n) for n in range(30)] + [(kind, n) for kind, options in replacements.items()
                                                 for n in range(len(options))]
           + [(kind, bad) for kind in ("pool", "limit_pool", "fabric") for bad in bad_names]
           + [(kind, bad) for kind in ("amount", "limit", "exposure", "budget") for bad in bad_amounts])


def one_defect(defect, rng):
    """Valid ledgers, or ones with exactly this defect."""
    kind, bad = defect
    capacity = {"unstable_stages": rng.choice([[], ["reward"]])}
    memory, limits = {"gen": 60, "train": 70.5}, {"gen": 80, "train": 80}
    transfer = {"fabric_exposed_seconds_per_s": {"ib-0": 0.05, "nv": 0.2}}
    budget = 0.1
    if kind == "capacity":
        capacity = replacements[kind][bad]
    elif kind == "stages":
        capacity["unstable_stages"] = replacements[kind][bad]
    elif kind == "transfer":
        transfer = replacements[kind][bad]
    elif kind == "exposures":
        transfer["fabric_exposed_seconds_per_s"] = replacements[kind][bad]
    elif kind == "memory":
        memory = replacements[kind][bad]
    elif kind == "limits":
        limits = replacements[kind][bad]
    elif kind == "pool":
        memory[bad] = 1
    elif kind == "limit_pool":
        limits[bad] = 1
    elif kind == "fabric":
        transfer["fabric_exposed_seconds_per_s"][bad] = 0.01
    elif kind == "amount":
        memory[rng.choice(["gen", "train"])] = bad
    elif kind == "limit":
        limits[rng.choice(["gen", "train"])] = bad
    elif kind == "exposure":
        transfer["fabric_exposed_seconds_per_s"][rng.choice(["ib-0", "nv"])] = bad
    elif kind == "budget":
        budget = bad
    return (capacity, memory, limits, transfer, rng.choice([True, False, None]), True), \
        {"max_exposed_s_per_s": budget}


from tools.course.grader.clauses import below, is_blank, is_bool, keys, not_a_number, not_a_str, not_finite, values


def bad_amount(value):
    return not_a_number(value) or is_bool(value) or not_finite(value) or below(value, 0)


def amounts_of(capacity, memory, limits, transfer, *flags, max_exposed_s_per_s=0.1):
    exposures = transfer.get("fabric_exposed_seconds_per_s") if isinstance(transfer, dict) else None
    return {"memory": values(memory), "limits": values(limits), "exposures": values(exposures),
            "budget": [max_exposed_s_per_s]}


def names_of(capacity, memory, limits, transfer, *flags, **kwargs):
    exposures = transfer.get("fabric_exposed_seconds_per_s") if isinstance(transfer, dict) else None
    return keys(memory) + keys(limits) + keys(exposures)


def amount_clause(where, test):
    return lambda *call, **kw: any(test(value) for value in amounts_of(*call, **kw)[where])


reference.agrees("evaluate_topology", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "capacity_report is not a dict": lambda cap, *rest, **kw: not isinstance(cap, dict),
    "capacity_report without unstable_stages": lambda cap, *rest, **kw: isinstance(cap, dict) and
        "unstable_stages" not in cap,
    "unstable_stages is not a list": lambda cap, *rest, **kw: isinstance(cap, dict) and "unstable_stages" in cap
        and not isinstance(cap["unstable_stages"], list),
    "unstable_stages holds a non-str": lambda cap, *rest, **kw: isinstance(cap, dict) and isinstance(
        cap.get("unstable_stages"), list) and any(not_a_str(stage) for stage in cap["unstable_stages"]),
    "transfer_report is not a dict or lacks its dict": lambda cap, memory, limits, transfer, *rest, **kw: not (
        isinstance(transfer, dict) and "fabric_exposed_seconds_per_s" in transfer),
    "fabric_exposed_seconds_per_s is not a dict": lambda cap, memory, limits, transfer, *rest, **kw: isinstance(
        transfer, dict) and "fabric_exposed_seconds_per_s" in transfer and not isinstance(
        transfer["fabric_exposed_seconds_per_s"], dict),
    "memory_by_pool is empty": lambda cap, memory, *rest, **kw: memory == {},
    "memory_by_pool is not a dict": lambda cap, memory, *rest, **kw: not isinstance(memory, dict),
    "memory_limits is not a dict": lambda cap, memory, limits, *rest, **kw: not isinstance(limits, dict),
    "a pool or fabric name that is not a str": lambda *call, **kw: any(not_a_str(n) for n in names_of(*call, **kw)),
    "a blank pool or fabric name": lambda *call, **kw: any(is_blank(n) for n in names_of(*call, **kw)),
    "a bad name among the limits only": lambda cap, memory, limits, *rest, **kw: any(
        not_a_str(n) or is_blank(n) for n in keys(limits)),
    **{f"a bad {where} amount": amount_clause(where, bad_amount) for where in ("memory", "limits", "exposures", "budget")},
    "an amount that is a bool": lambda *call, **kw: any(is_bool(v) for vs in amounts_of(*call, **kw).values() for v in vs),
    "an amount that is not finite": lambda *call, **kw: any(
        not_finite(v) for vs in amounts_of(*call, **kw).values() for v in vs),
    "an amount < 0": lambda *call, **kw: any(below(v, 0) for vs in amounts_of(*call, **kw).values() for v in vs),
})
