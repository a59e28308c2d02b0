# %% hidden exercise=pipeline_capacity points=1 name=multipliers_convert_to_prompt_groups
# hint: convert every stage to work units per second before comparing it with the arrival rate; a stage may handle less than one item per work unit.
result = pipeline_capacity(
    {"rollout": 128, "reference": 160, "reward": 80, "learner": 0.5},
    24,
    {"rollout": 4, "reference": 4, "reward": 4, "learner": 1 / 64},
)
assert result["effective_rates"] == {"rollout": 32.0, "reference": 40.0, "reward": 20.0, "learner": 32.0}
assert result["capacity"] == 20.0
assert result["bottlenecks"] == ["reward"]
assert result["queue_margins"] == {"rollout": 8.0, "reference": 16.0, "reward": -4.0, "learner": 8.0}
assert result["unstable_stages"] == ["reward"] and result["queue_stable"] is False

# %% hidden exercise=pipeline_capacity points=1 name=ties_within_rounding_are_all_bottlenecks
# hint: effective rates that differ only by floating-point rounding are tied; the docstring says how to compare them, and the list is sorted.
result = pipeline_capacity({"gen": 0.3, "score": 0.1, "update": 0.2}, 0.05, {"gen": 3, "score": 1, "update": 1})
assert result["bottlenecks"] == ["gen", "score"]
assert math.isclose(result["capacity"], 0.1, rel_tol=1e-9)
result = pipeline_capacity({"zeta": 50, "alpha": 100, "mid": 25}, 10, {"zeta": 2, "alpha": 4, "mid": 1})
assert result["bottlenecks"] == ["alpha", "mid", "zeta"]

# %% hidden exercise=pipeline_capacity points=1 name=unstable_stages_sorted_zero_margin_keeps_up
# hint: list every stage whose queue grows, in a stable order; a stage that exactly keeps up with the arrivals does not build a queue.
result = pipeline_capacity(
    {"zeta": 10, "alpha": 12, "mid": 30, "edge": 20}, 20,
    {"zeta": 1, "alpha": 1, "mid": 1, "edge": 1},
)
assert result["unstable_stages"] == ["alpha", "zeta"]
assert result["queue_margins"]["edge"] == 0.0
assert result["queue_stable"] is False
just_enough = pipeline_capacity({"rollout": 96, "learner": 0.375}, 24, {"rollout": 4, "learner": 1 / 64})
assert just_enough["unstable_stages"] == [] and just_enough["queue_stable"] is True

# %% hidden exercise=pipeline_capacity points=1 name=zero_arrival_is_valid_and_stable
# hint: an arrival rate of zero is a valid input; margins are still reported for every stage.
result = pipeline_capacity({"rollout": 8, "learner": 2}, 0, {"rollout": 4, "learner": 1})
assert result["queue_margins"] == {"rollout": 2.0, "learner": 2.0}
assert result["unstable_stages"] == [] and result["queue_stable"] is True
assert result["bottlenecks"] == ["learner", "rollout"]

# %% hidden exercise=pipeline_capacity points=1 name=invalid_stage_inputs_raise
# hint: check the stage names, every rate, every multiplier and the arrival rate before computing anything.
invalid_inputs = [
    ({}, 1, {}),
    ({"a": 1}, 1, {"a": 1, "b": 1}),
    ({"a": float("inf")}, 1, {"a": 1}),
    ({"a": 0}, 1, {"a": 1}),
    ({"a": -5}, 1, {"a": 1}),
    ({"a": 5}, 1, {"a": 0}),
    ({"a": 5}, 1, {"a": float("nan")}),
    ({"a": 5}, 1, {"a": -2}),
    ({"a": 5}, -1, {"a": 1}),
    ({"a": 5}, float("nan"), {"a": 1}),
    ({"a": 5}, float("inf"), {"a": 1}),
]
for stage_rates, arrival_rate, items_per_work_unit in invalid_inputs:
    try:
        pipeline_capacity(stage_rates, arrival_rate, items_per_work_unit)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=transfer_ledger points=1 name=same_pool_edges_carry_no_traffic
# hint: an edge whose two ends share a pool never touches the interconnect, yet it still gets a row; with no cross-pool edge there is no critical fabric.
edges = [
    {"source": "rollout", "target": "reward", "bytes_per_item": 4096, "items_per_work_unit": 4,
     "work_units_per_second": 24, "bandwidth_bytes_per_s": 1e9, "overlap_fraction": 0.0, "fabric_id": "nvlink-0"},
    {"source": "reward", "target": "rollout", "bytes_per_item": 8, "items_per_work_unit": 4,
     "work_units_per_second": 24, "bandwidth_bytes_per_s": 1e9},
]
report = transfer_ledger(edges, {"rollout": "gen", "reward": "gen"})
assert report["cross_pool_bytes_per_s"] == 0
assert report["fabric_exposed_seconds_per_s"] == {}
assert report["critical_exposed_seconds_per_s"] == 0.0
assert report["critical_fabrics"] == []
assert [row["cross_pool"] for row in report["rows"]] == [False, False]
assert all(row["traffic_bytes_per_s"] == 0 and row["transfer_seconds_per_s"] == 0
           and row["exposed_seconds_per_s"] == 0 for row in report["rows"])
empty = transfer_ledger([], {"rollout": "gen"})
assert empty["cross_pool_bytes_per_s"] == 0 and empty["critical_exposed_seconds_per_s"] == 0.0
assert empty["critical_fabrics"] == [] and empty["rows"] == []

# %% hidden exercise=transfer_ledger points=1 name=critical_value_is_busiest_fabric_not_total
# hint: edges on one fabric compete for it and add up; separate fabrics work in parallel, so the critical value belongs to one fabric.
edges = [
    {"source": "learner", "target": "rollout", "bytes_per_item": 1000, "items_per_work_unit": 2,
     "work_units_per_second": 5, "bandwidth_bytes_per_s": 20000, "overlap_fraction": 0.5, "fabric_id": "ib-0"},
    {"source": "rollout", "target": "learner", "bytes_per_item": 500, "items_per_work_unit": 2,
     "work_units_per_second": 5, "bandwidth_bytes_per_s": 20000, "overlap_fraction": 0.5, "fabric_id": "ib-0"},
    {"source": "reward", "target": "learner", "bytes_per_item": 4000, "items_per_work_unit": 1,
     "work_units_per_second": 5, "bandwidth_bytes_per_s": 80000, "overlap_fraction": 0.0, "fabric_id": "ib-1"},
]
report = transfer_ledger(edges, {"learner": "train", "rollout": "gen", "reward": "rm"})
assert math.isclose(report["cross_pool_bytes_per_s"], 35000.0)
assert set(report["fabric_exposed_seconds_per_s"]) == {"ib-0", "ib-1"}
assert math.isclose(report["fabric_exposed_seconds_per_s"]["ib-0"], 0.375)
assert math.isclose(report["fabric_exposed_seconds_per_s"]["ib-1"], 0.25)
assert math.isclose(report["critical_exposed_seconds_per_s"], 0.375)
assert report["critical_fabrics"] == ["ib-0"]

# %% hidden exercise=transfer_ledger points=1 name=rows_report_overlap_per_edge
# hint: each row reports its edge's own traffic, link time and the part of that time that overlap does not hide, next to the edge's original fields.
edge = {"source": "rollout", "target": "learner", "bytes_per_item": 100, "items_per_work_unit": 8,
        "work_units_per_second": 10, "bandwidth_bytes_per_s": 16000, "overlap_fraction": 0.75, "fabric_id": "pcie-3"}
report = transfer_ledger([edge], {"rollout": "A", "learner": "B"})
row = report["rows"][0]
assert row["source"] == "rollout" and row["target"] == "learner" and row["fabric_id"] == "pcie-3"
assert row["cross_pool"] is True
assert math.isclose(row["traffic_bytes_per_s"], 8000.0)
assert math.isclose(row["transfer_seconds_per_s"], 0.5)
assert math.isclose(row["exposed_seconds_per_s"], 0.125)
hidden = transfer_ledger([dict(edge, overlap_fraction=1.0)], {"rollout": "A", "learner": "B"})
assert hidden["rows"][0]["exposed_seconds_per_s"] == 0.0
assert hidden["critical_exposed_seconds_per_s"] == 0.0
assert math.isclose(hidden["cross_pool_bytes_per_s"], 8000.0)
default_overlap = {key: value for key, value in edge.items() if key != "overlap_fraction"}
plain = transfer_ledger([default_overlap], {"rollout": "A", "learner": "B"})
assert math.isclose(plain["rows"][0]["exposed_seconds_per_s"], 0.5)

# %% hidden exercise=transfer_ledger points=1 name=cross_pool_edge_needs_a_fabric
# hint: a cross-pool edge must name the interconnect it uses; an edge inside one pool needs none.
base = {"source": "rollout", "target": "learner", "bytes_per_item": 10, "items_per_work_unit": 1,
        "work_units_per_second": 1, "bandwidth_bytes_per_s": 100, "overlap_fraction": 0.0}
placement = {"rollout": "A", "learner": "B", "reward": "A"}
for bad_edge in (dict(base), dict(base, fabric_id=None), dict(base, fabric_id="")):
    try:
        transfer_ledger([bad_edge], placement)
    except ValueError:
        continue
    raise AssertionError("a cross-pool edge without a fabric was accepted")
inside = transfer_ledger([dict(base, target="reward")], placement)
assert inside["rows"][0]["cross_pool"] is False

# %% hidden exercise=transfer_ledger points=1 name=invalid_edges_raise
# hint: validate both endpoints and every number of every edge, and keep a single bandwidth per fabric.
base = {"source": "rollout", "target": "learner", "bytes_per_item": 10, "items_per_work_unit": 1,
        "work_units_per_second": 1, "bandwidth_bytes_per_s": 100, "overlap_fraction": 0.0, "fabric_id": "ib-0"}
placement = {"rollout": "A", "learner": "B"}
bad_cases = [
    [dict(base, target="verifier")],
    [dict(base, overlap_fraction=-0.1)],
    [dict(base, overlap_fraction=float("nan"))],
    [dict(base, bandwidth_bytes_per_s=0)],
    [dict(base, bandwidth_bytes_per_s=float("inf"))],
    [dict(base, bytes_per_item=-1)],
    [dict(base, bytes_per_item=float("nan"))],
    [dict(base, work_units_per_second=-1)],
    [dict(base, items_per_work_unit=0)],
    [base, dict(base, source="learner", target="rollout", bandwidth_bytes_per_s=200)],
]
for bad_edges in bad_cases:
    try:
        transfer_ledger(bad_edges, placement)
    except ValueError:
        continue
    raise AssertionError("an invalid edge list was accepted")

# %% hidden exercise=transfer_ledger points=1 name=all_tied_fabrics_are_critical
# hint: report every fabric tied at the largest exposure, in a stable order.
edges = [
    {"source": "learner", "target": f"rollout-{fabric}", "bytes_per_item": 50, "items_per_work_unit": 1,
     "work_units_per_second": 1, "bandwidth_bytes_per_s": 100, "overlap_fraction": 0.0, "fabric_id": fabric}
    for fabric in ("z", "a", "m")
]
placement = {"learner": "train", "rollout-z": "gen-z", "rollout-a": "gen-a", "rollout-m": "gen-m"}
report = transfer_ledger(edges, placement)
assert report["critical_fabrics"] == ["a", "m", "z"]
assert math.isclose(report["critical_exposed_seconds_per_s"], 0.5)

# %% hidden exercise=evaluate_topology points=1 name=value_equal_to_limit_or_budget_passes
# hint: a value exactly at its limit or exactly at the budget is still allowed.
capacity = {"capacity": 24.0, "effective_rates": {"rollout": 24.0}, "bottlenecks": ["rollout"],
            "queue_margins": {"rollout": 0.0}, "unstable_stages": [], "queue_stable": True}
transfer = {"cross_pool_bytes_per_s": 10.0, "fabric_exposed_seconds_per_s": {"ib-0": 0.1},
            "critical_exposed_seconds_per_s": 0.1, "critical_fabrics": ["ib-0"], "rows": []}
result = evaluate_topology(capacity, {"gen": 80, "train": 80.0}, {"gen": 80, "train": 80}, transfer, True, True,
                           max_exposed_s_per_s=0.1)
assert result["decision"] == "accept" and result["reasons"] == []
assert result["over_limit_pools"] == [] and result["overloaded_fabrics"] == []

# %% hidden exercise=evaluate_topology points=1 name=pool_without_limit_counts_as_over
# hint: a pool with no declared limit cannot be shown to fit; report over-limit pools in a stable order.
capacity = {"capacity": 30.0, "effective_rates": {"rollout": 30.0}, "bottlenecks": ["rollout"],
            "queue_margins": {"rollout": 6.0}, "unstable_stages": [], "queue_stable": True}
transfer = {"cross_pool_bytes_per_s": 0.0, "fabric_exposed_seconds_per_s": {},
            "critical_exposed_seconds_per_s": 0.0, "critical_fabrics": [], "rows": []}
result = evaluate_topology(capacity, {"train": 70, "gen": 10, "aux": 1}, {"train": 60, "gen": 40, "spare": 5},
                           transfer, True, True)
assert result["decision"] == "reject"
assert result["reasons"] == ["memory_limit"]
assert result["over_limit_pools"] == ["aux", "train"]

# %% hidden exercise=evaluate_topology points=1 name=every_hard_failure_in_order
# hint: list every hard failure in the documented order, even when an earlier one already decides; an unknown sync state is not a confirmed one.
capacity = {"capacity": 30.0, "effective_rates": {"rollout": 30.0}, "bottlenecks": ["rollout"],
            "queue_margins": {"rollout": 6.0}, "unstable_stages": [], "queue_stable": True}
transfer = {"cross_pool_bytes_per_s": 1.0, "fabric_exposed_seconds_per_s": {"ib-0": 0.01},
            "critical_exposed_seconds_per_s": 0.01, "critical_fabrics": ["ib-0"], "rows": []}
fits, too_big, limits = {"A": 10}, {"A": 99}, {"A": 40}
assert evaluate_topology(capacity, fits, limits, transfer, False, False)["reasons"] == ["version_sync", "recovery_not_ready"]
assert evaluate_topology(capacity, too_big, limits, transfer, True, False)["reasons"] == ["memory_limit", "recovery_not_ready"]
assert evaluate_topology(capacity, too_big, limits, transfer, False, True)["reasons"] == ["memory_limit", "version_sync"]
unknown_sync = evaluate_topology(capacity, fits, limits, transfer, None, True)
assert unknown_sync["decision"] == "reject" and unknown_sync["reasons"] == ["version_sync"]

# %% hidden exercise=evaluate_topology points=1 name=reject_outranks_tune_and_keeps_evidence
# hint: a hard failure decides before any tuning pressure, but the queue and fabric evidence is still reported, sorted.
capacity = {"capacity": 20.0, "effective_rates": {"rollout": 21.0, "reward": 20.0, "learner": 32.0},
            "bottlenecks": ["reward"], "queue_margins": {"rollout": -3.0, "reward": -4.0, "learner": 8.0},
            "unstable_stages": ["rollout", "reward"], "queue_stable": False}
transfer = {"cross_pool_bytes_per_s": 5.0, "fabric_exposed_seconds_per_s": {"ib-2": 0.3, "ib-1": 0.05, "ib-0": 0.2},
            "critical_exposed_seconds_per_s": 0.3, "critical_fabrics": ["ib-2"], "rows": []}
result = evaluate_topology(capacity, {"A": 10}, {"A": 40}, transfer, True, False)
assert result["decision"] == "reject"
assert result["reasons"] == ["recovery_not_ready"]
assert result["unstable_stages"] == ["reward", "rollout"]
assert result["overloaded_fabrics"] == ["ib-0", "ib-2"]

# %% hidden exercise=evaluate_topology points=1 name=tuning_order_and_custom_budget
# hint: tuning pressures follow the documented order, each appears alone when it is the only one, and the budget is a parameter.
stable = {"capacity": 30.0, "effective_rates": {"rollout": 30.0}, "bottlenecks": ["rollout"],
          "queue_margins": {"rollout": 6.0}, "unstable_stages": [], "queue_stable": True}
growing = {"capacity": 20.0, "effective_rates": {"rollout": 20.0}, "bottlenecks": ["rollout"],
           "queue_margins": {"rollout": -4.0}, "unstable_stages": ["rollout"], "queue_stable": False}
busy = {"cross_pool_bytes_per_s": 5.0, "fabric_exposed_seconds_per_s": {"ib-0": 0.2},
        "critical_exposed_seconds_per_s": 0.2, "critical_fabrics": ["ib-0"], "rows": []}
quiet = {"cross_pool_bytes_per_s": 1.0, "fabric_exposed_seconds_per_s": {"ib-0": 0.02},
         "critical_exposed_seconds_per_s": 0.02, "critical_fabrics": ["ib-0"], "rows": []}
memory, limits = {"A": 10}, {"A": 40}
only_link = evaluate_topology(stable, memory, limits, busy, True, True)
assert only_link["decision"] == "tune" and only_link["reasons"] == ["exposed_transfer"]
only_queue = evaluate_topology(growing, memory, limits, quiet, True, True)
assert only_queue["decision"] == "tune" and only_queue["reasons"] == ["unstable_queue"]
relaxed = evaluate_topology(stable, memory, limits, busy, True, True, max_exposed_s_per_s=0.25)
assert relaxed["decision"] == "accept" and relaxed["overloaded_fabrics"] == []
strict = evaluate_topology(stable, memory, limits, quiet, True, True, max_exposed_s_per_s=0.0)
assert strict["reasons"] == ["exposed_transfer"] and strict["overloaded_fabrics"] == ["ib-0"]

# %% hidden exercise=evaluate_topology points=1 name=invalid_ledger_numbers_raise
# hint: memory values, memory limits, fabric exposures and the budget must all be finite and non-negative.
capacity = {"capacity": 30.0, "effective_rates": {"rollout": 30.0}, "bottlenecks": ["rollout"],
            "queue_margins": {"rollout": 6.0}, "unstable_stages": [], "queue_stable": True}


def transfer_with(value):
    return {"cross_pool_bytes_per_s": 1.0, "fabric_exposed_seconds_per_s": {"ib-0": value},
            "critical_exposed_seconds_per_s": value, "critical_fabrics": ["ib-0"], "rows": []}


bad_calls = [
    ({"A": float("nan")}, {"A": 40}, transfer_with(0.01), 0.1),
    ({"A": -1}, {"A": 40}, transfer_with(0.01), 0.1),
    ({"A": 10}, {"A": float("inf")}, transfer_with(0.01), 0.1),
    ({"A": 10}, {"A": -40}, transfer_with(0.01), 0.1),
    ({"A": 10}, {"A": 40}, transfer_with(float("nan")), 0.1),
    ({"A": 10}, {"A": 40}, transfer_with(-0.01), 0.1),
    ({"A": 10}, {"A": 40}, transfer_with(0.01), -0.1),
    ({"A": 10}, {"A": 40}, transfer_with(0.01), float("nan")),
]
for memory, limits, transfer, budget in bad_calls:
    try:
        evaluate_topology(capacity, memory, limits, transfer, True, True, max_exposed_s_per_s=budget)
    except ValueError:
        continue
    raise AssertionError("an invalid ledger number was accepted")
