# %% hidden exercise=comparable_candidates points=1 name=every_reason_of_every_run_is_kept
# hint: a candidate collects the reasons of all its runs, each reason once and sorted; one bad run excludes the whole candidate.
base = {"data_sha256": "d", "steps": 10, "lr": 0.001}
runs = [{"name": f"a{seed}", "config": dict(base, rank=4, seed=seed)} for seed in (1, 2)]
runs[0]["config"].update(steps=11, lr=0.002, warmup=3)
runs[1]["config"].update(steps=12, extra_flag=True)
result = comparable_candidates(runs, "rank", base, [1, 2])
assert result == {"comparable": [], "excluded": [{"value": 4, "reasons": ["differs:lr", "differs:steps", "extra:extra_flag",
                                                                           "extra:warmup"]}],
                  "runs": {4: ["a1", "a2"]}}

# %% hidden exercise=comparable_candidates points=1 name=types_must_match_as_well_as_values
# hint: compare value and type, list by list and dict by dict: True is not 1, 8 is not 8.0, a tuple is not a list.
base = {"flag": True, "alpha": 16.0, "targets": ["q", "v"], "opts": {"a": 1}}
good = [{"name": "g", "config": dict(base, rank=2, seed=7)}]
assert comparable_candidates(good, "rank", base, [7])["comparable"] == [2]
for key, other in (("flag", 1), ("alpha", 16), ("targets", ("q", "v")), ("targets", ["v", "q"]), ("opts", {"a": 1.0}),
                   ("opts", {"a": 1, "b": 2})):
    bad = [{"name": "b", "config": dict(base, rank=2, seed=7, **{key: other})}]
    assert comparable_candidates(bad, "rank", base, [7])["excluded"] == [{"value": 2, "reasons": [f"differs:{key}"]}], key

# %% hidden exercise=comparable_candidates points=1 name=the_seed_set_must_be_exact
# hint: each candidate holds exactly the shared seeds: a missing seed, an extra seed or a seed run twice is the reason "seeds".
base = {"steps": 5}
def runs_for(rank, seeds):
    return [{"name": f"r{rank}_{index}", "config": dict(base, rank=rank, seed=seed)} for index, seed in enumerate(seeds)]
runs = runs_for(1, [1, 2, 3]) + runs_for(2, [1, 2]) + runs_for(3, [1, 2, 3, 4]) + runs_for(4, [1, 1, 2, 3]) + runs_for(5, [3, 2, 1])
result = comparable_candidates(runs, "rank", base, (1, 2, 3))
assert result["comparable"] == [1, 5]
assert result["excluded"] == [{"value": v, "reasons": ["seeds"]} for v in (2, 3, 4)]
assert result["runs"][5] == ["r5_0", "r5_1", "r5_2"]

# %% hidden exercise=comparable_candidates points=1 name=values_sort_and_str_values_work
# hint: candidates are ordered by their value (ints numerically, strs as text); the baseline may be empty.
runs = [{"name": f"n{i}", "config": {"method": method, "seed": 1}} for i, method in enumerate(["rslora", "dora", "lora"])]
assert comparable_candidates(runs, "method", {}, [1]) == {"comparable": ["dora", "lora", "rslora"], "excluded": [],
                                                          "runs": {"dora": ["n1"], "lora": ["n2"], "rslora": ["n0"]}}
numbers = [{"name": f"k{rank}", "config": {"rank": rank, "seed": 1}} for rank in (16, 4, 8)]
assert comparable_candidates(numbers, "rank", {}, [1])["comparable"] == [4, 8, 16]

# %% hidden exercise=comparable_candidates points=1 name=wrong_comparability_calls_raise_and_good_calls_do_not
# hint: the variable, the baseline, the seeds, the runs (names, configs, seeds, values) are all checked before any grouping.
runs = [{"name": "a", "config": {"rank": 4, "seed": 1}}]
assert comparable_candidates(runs, "rank", {}, [1])["comparable"] == [4]
bad_calls = [(runs, "seed", {}, [1]), (runs, "", {}, [1]), (runs, 3, {}, [1]), (runs, "rank", {"rank": 4}, [1]),
             (runs, "rank", {"seed": 1}, [1]), (runs, "rank", None, [1]), (runs, "rank", {}, []), (runs, "rank", {}, [1, 1]),
             (runs, "rank", {}, [True]), (runs, "rank", {}, "1"), (runs, "rank", {}, [1.0]), (None, "rank", {}, [1]),
             (runs + runs, "rank", {}, [1]), ([{"name": "a", "config": {"rank": 4}}], "rank", {}, [1]),
             ([{"name": "a", "config": {"rank": 4, "seed": True}}], "rank", {}, [1]),
             ([{"name": "a", "config": {"seed": 1}}], "rank", {}, [1]), ([{"name": 1, "config": {"rank": 4, "seed": 1}}], "rank", {}, [1]),
             ([{"name": "a", "config": {"rank": 4.0, "seed": 1}}], "rank", {}, [1]),
             ([{"name": "a", "config": {"rank": 4, "seed": 1}}, {"name": "b", "config": {"rank": "4", "seed": 1}}], "rank", {}, [1]),
             ([["a", {"rank": 4, "seed": 1}]], "rank", {}, [1])]
for arguments in bad_calls:
    try:
        comparable_candidates(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=comparable_candidates points=2 name=agrees_with_reference_on_generated_matrices
# hint: any matrix of runs, settings and seeds, valid or with one defect: the same comparable and excluded candidates with the same reasons, or the same ValueError.
from hypothesis import strategies as st

settings = st.fixed_dictionaries({"steps": st.sampled_from([10, 11, 10.0]), "alpha": st.sampled_from([16.0, 16, 8.0]),
                                  "targets": st.sampled_from([["q", "v"], ["v", "q"], ("q", "v")])})

@st.composite
def matrices(draw):
    base = {"steps": 10, "alpha": 16.0, "targets": ["q", "v"]}
    runs, names = [], 0
    for value in draw(st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=3, unique=True)):
        for seed in draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4)):
            config = dict(base, rank=value, seed=seed)
            if draw(st.integers(0, 4)) == 0:
                config.update(draw(settings))
            if draw(st.integers(0, 9)) == 0:
                config["extra"] = 1
            runs.append({"name": f"run{names}", "config": config})
            names += 1
    if draw(st.integers(0, 7)) == 0:
        runs.append(draw(st.sampled_from([{"name": "run0", "config": dict(base, rank=2, seed=1)}, None,
                                          {"name": "x", "config": {"rank": 2}}, {"name": "y", "config": dict(base, seed=1)}])))
    seeds = draw(st.sampled_from([[1, 2, 3], (1, 2), [3, 1, 2], [1, 1], [], [True]]))
    variable = draw(st.sampled_from(["rank", "rank", "rank", "seed"]))
    return runs, variable, base, seeds

from tools.course.grader.clauses import is_bool


def compared(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("comparable_candidates")(*call)


def refusal(*call):
    """The stage's error message ('' when it accepts): the first rule the call breaks (same order as the reference)."""
    from tools.experiments.sft_chain.selection_gates import comparable_candidates as staged

    try:
        staged(*call)
    except ValueError as error:
        return str(error)
    return ""


def reasons(*call):
    return [reason for row in compared(*call)["excluded"] for reason in row["reasons"]]


def equal_but_typed(runs, baseline):
    """A run's setting equal to the baseline's in value but not in type (10.0 for 10, 16 for 16.0, a tuple)."""
    return any(key in run["config"] and type(run["config"][key]) is not type(value)
               and (run["config"][key] == value or list(run["config"][key]) == value if isinstance(value, list)
                    else run["config"][key] == value)
               for run in runs for key, value in baseline.items())

reference.agrees("comparable_candidates", matrices(), cases=200, clauses={
    "a setting equal in value but not in type": lambda runs, variable, baseline, seeds: compared(
        runs, variable, baseline, seeds) and equal_but_typed(runs, baseline),
    "a setting with another value": lambda *call: any(
        reason.startswith("differs:") for reason in reasons(*call)) and not equal_but_typed(call[0], call[2]),
    "an extra setting": lambda *call: any(reason.startswith("extra:") for reason in reasons(*call)),
    "a candidate without the shared seeds": lambda *call: "seeds" in reasons(*call),
    "a candidate excluded for two reasons": lambda *call: any(
        len(row["reasons"]) > 1 for row in compared(*call)["excluded"]),
    "every candidate comparable": lambda *call: compared(*call)["comparable"] and not compared(*call)["excluded"],
    "seeds given as a tuple": lambda *call: compared(*call) and isinstance(call[3], tuple),
    "variable is 'seed'": lambda runs, variable, baseline, seeds: variable == "seed",
    "seeds repeated": lambda *call: "seeds must be" in refusal(*call) and len(set(call[3])) < len(call[3]),
    "seeds empty": lambda *call: "seeds must be" in refusal(*call) and len(call[3]) == 0,
    "a seed that is a bool": lambda *call: "seeds must be" in refusal(*call) and any(is_bool(s) for s in call[3]),
    "a run name used twice": lambda *call: "used twice" in refusal(*call),
    "a run that is not a dict": lambda *call: "needs a str name" in refusal(*call) and None in call[0],
    "a run without an int seed": lambda *call: "needs a str name" in refusal(*call) and any(
        isinstance(run, dict) and "seed" not in run["config"] for run in call[0]),
    "a run without the variable": lambda *call: "needs a str name" in refusal(*call) and any(
        isinstance(run, dict) and "rank" not in run["config"] for run in call[0]),
})

# %% hidden exercise=gate_candidates points=1 name=the_band_uses_the_largest_sample_spread
# hint: the sample standard deviation divides by n - 1 (0.0 for one run); the band is max(band_floor, spread_factor * the largest std of the complete candidates).
def runs(qualities, memory=100, status="ok"):
    return [{"seed": i, "status": status, "quality": q, "memory_bytes": memory} for i, q in enumerate(qualities)]
gated = gate_candidates({1: runs([0.3, 0.5]), 2: runs([0.5, 0.5, 0.5]), 3: runs([0.45])}, 1000, 0.01, 1.0)
import math as _math
assert _math.isclose(gated["candidates"][1]["std_quality"], _math.sqrt(0.02), rel_tol=1e-12)
assert gated["candidates"][3]["std_quality"] == 0.0 and gated["candidates"][2]["std_quality"] == 0.0
assert _math.isclose(gated["band"], _math.sqrt(0.02), rel_tol=1e-12) and gated["best_mean"] == 0.5
assert [gated["candidates"][k]["quality_passed"] for k in (1, 2, 3)] == [True, True, True]
floor = gate_candidates({2: runs([0.5, 0.5]), 3: runs([0.45])}, 1000, 0.04, 3.0)
assert floor["band"] == 0.04 and floor["candidates"][3]["reasons"] == ["below_band"]

# %% hidden exercise=gate_candidates points=1 name=the_band_edge_is_inside
# hint: a mean exactly at best_mean - band passes the quality gate; a memory exactly at the budget passes the memory gate.
def runs(qualities, memory=100, status="ok"):
    return [{"seed": i, "status": status, "quality": q, "memory_bytes": memory} for i, q in enumerate(qualities)]
gated = gate_candidates({"a": runs([0.5], memory=300), "b": runs([0.75], memory=301)}, 300, 0.25, 2.0)
assert gated["candidates"]["a"]["quality_passed"] and gated["candidates"]["a"]["memory_passed"]
assert gated["candidates"]["a"]["feasible"] and gated["candidates"]["b"]["reasons"] == ["over_budget"]

# %% hidden exercise=gate_candidates points=1 name=failures_and_missing_numbers_are_not_passes
# hint: a failed or out-of-memory run, a quality that is None, a memory that is None: each has its reason in order, none passes, and only complete candidates define the band.
def runs(qualities, memory=100, status="ok"):
    return [{"seed": i, "status": status, "quality": q, "memory_bytes": memory} for i, q in enumerate(qualities)]
results = {"ok": runs([0.3, 0.3]), "fail": runs([0.9, 0.9]) , "oom": runs([0.95], memory=50),
           "noq": runs([None, 0.9]), "nomem": runs([0.31, 0.29], memory=None)}
results["fail"][1]["status"] = "failed"
results["oom"][0]["status"] = "oom"
gated = gate_candidates(results, 1000, 0.05)
rows = gated["candidates"]
assert gated["best_mean"] == 0.3
assert rows["fail"]["reasons"] == ["run_failed"] and rows["fail"]["mean_quality"] is None and not rows["fail"]["complete"]
assert rows["oom"]["reasons"] == ["oom"] and rows["oom"]["memory_passed"] is False
assert rows["noq"]["reasons"] == ["quality_missing"] and rows["noq"]["std_quality"] is None
assert rows["nomem"]["reasons"] == ["memory_not_measured"] and rows["nomem"]["quality_passed"] is True
assert rows["nomem"]["peak_memory_bytes"] is None and not rows["nomem"]["feasible"] and rows["ok"]["feasible"]
nothing = gate_candidates({"x": runs([None])}, 10, 0.1)
assert nothing["best_mean"] is None and nothing["band"] is None and nothing["candidates"]["x"]["quality_passed"] is False

# %% hidden exercise=gate_candidates points=1 name=wrong_gate_calls_raise_and_good_calls_do_not
# hint: the budget, the band parameters and every result are checked; the good call answers.
def runs(qualities, memory=100, status="ok"):
    return [{"seed": i, "status": status, "quality": q, "memory_bytes": memory} for i, q in enumerate(qualities)]
good = {4: runs([0.5])}
assert gate_candidates(good, 100, 0.1)["candidates"][4]["feasible"] is True
bad_calls = [(good, -1, 0.1), (good, 1.5, 0.1), (good, True, 0.1), (good, 100, -0.1), (good, 100, float("nan")),
             (good, 100, True), (good, 100, 0.1, -1), (good, 100, 0.1, float("inf")), ({}, 100, 0.1), (None, 100, 0.1),
             ({4: []}, 100, 0.1), ({4: runs([0.5], status="done")}, 100, 0.1), ({4: [{"seed": 1, "status": "ok", "quality": True, "memory_bytes": 1}]}, 100, 0.1),
             ({4: [{"seed": 1.0, "status": "ok", "quality": 0.5, "memory_bytes": 1}]}, 100, 0.1),
             ({4: [{"seed": 1, "status": "ok", "quality": 0.5, "memory_bytes": -1}]}, 100, 0.1),
             ({4: [{"seed": 1, "status": "ok", "quality": float("nan"), "memory_bytes": 1}]}, 100, 0.1),
             ({4: [{"seed": 1, "status": "ok", "quality": 0.5, "memory_bytes": 1.5}]}, 100, 0.1), ({4: [None]}, 100, 0.1)]
for arguments in bad_calls:
    try:
        gate_candidates(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=gate_candidates points=2 name=agrees_with_reference_on_generated_results
# hint: any candidates, statuses, qualities, memories, budgets and band parameters, valid or with one defect: the same gates and reasons, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def result_sets(draw):
    results = {}
    for value in draw(st.lists(st.sampled_from([4, 8, 16, 32]), min_size=1, max_size=4, unique=True)):
        results[value] = [{"seed": seed, "status": draw(st.sampled_from(["ok", "ok", "ok", "oom", "failed"])),
                           "quality": draw(st.sampled_from([None, 0.25, 0.5, 0.5, 0.55, 0.6, 0.75, 1, 0])),
                           "memory_bytes": draw(st.sampled_from([None, 100, 200, 300, 400, 0]))}
                          for seed in range(draw(st.integers(1, 3)))]
    budget = draw(st.sampled_from([0, 150, 300, 500, -5, 2.0]))
    floor = draw(st.sampled_from([0, 0.0, 0.02, 0.1, -0.1]))
    factor = draw(st.sampled_from([0, 0.5, 1, 2.0, float("nan")]))
    if draw(st.integers(0, 4)) == 0:
        results[999] = draw(st.sampled_from([[], [None], [{"seed": 1, "status": "ok", "quality": 0.5, "memory_bytes": True}]]))
    return results, budget, floor, factor

@st.composite
def band_edges(draw):
    """A candidate whose mean sits exactly on the band's lower edge (the band from the floor or the spread)."""
    best, band, edge = draw(st.sampled_from([(0.75, 0.25, 0.5), (1, 0.5, 0.5), (0.5, 0.25, 0.25)]))
    results = {4: [{"seed": 0, "status": "ok", "quality": edge, "memory_bytes": 100}],
               8: [{"seed": 0, "status": "ok", "quality": best, "memory_bytes": 200}]}
    return results, draw(st.sampled_from([150, 300])), band, draw(st.sampled_from([0, 2.0]))

from tools.course.grader.clauses import below, is_bool, not_finite


def gated(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("gate_candidates")(*call)


def refusal(*call):
    """The stage's error message ('' when it accepts): the first rule the call breaks (same order as the reference)."""
    from tools.experiments.sft_chain.selection_gates import gate_candidates as staged

    try:
        staged(*call)
    except ValueError as error:
        return str(error)
    return ""


def rows(*call):
    return list(gated(*call)["candidates"].values())


def has_reason(reason):
    return lambda *call: any(reason in row["reasons"] for row in rows(*call))

reference.agrees("gate_candidates", st.one_of(result_sets(), result_sets(), band_edges()), cases=200, clauses={
    "a candidate with an oom run": has_reason("oom"),
    "a candidate with a failed run": has_reason("run_failed"),
    "a candidate whose quality is missing": has_reason("quality_missing"),
    "a candidate below the quality band": has_reason("below_band"),
    "a candidate whose memory was not measured": has_reason("memory_not_measured"),
    "a candidate over the memory budget": has_reason("over_budget"),
    "a candidate mean exactly at the band edge": lambda *call: any(
        row["complete"] and row["mean_quality"] == gated(*call)["best_mean"] - gated(*call)["band"]
        and gated(*call)["band"] > 0 for row in rows(*call)),
    "a peak exactly at the budget": lambda *call: any(
        row["peak_memory_bytes"] == call[1] for row in rows(*call)),
    "the band set by the seed spread": lambda *call: gated(*call)["band"] is not None and gated(*call)["band"] > call[2],
    "the band set by the floor": lambda *call: gated(*call)["band"] is not None and gated(*call)["band"] == call[2] > 0,
    "a feasible candidate": lambda *call: any(row["feasible"] for row in rows(*call)),
    "no complete candidate": lambda *call: gated(*call)["best_mean"] is None,
    "a quality given as an int": lambda *call: gated(*call) and any(
        type(run["quality"]) is int for runs in call[0].values() for run in runs),
    "memory_budget below 0": lambda *call: below(call[1], 0),
    "memory_budget a float": lambda *call: isinstance(call[1], float),
    "band_floor below 0": lambda *call: "band_floor" in refusal(*call) and below(call[2], 0),
    "spread_factor not finite": lambda *call: "spread_factor" in refusal(*call) and not_finite(call[3]),
    "a candidate with no results": lambda *call: "non-empty list" in refusal(*call),
    "a result that is not a dict": lambda *call: "malformed result None" in refusal(*call),
    "a memory that is a bool": lambda *call: "malformed result" in refusal(*call) and any(
        is_bool(run.get("memory_bytes")) for runs in call[0].values() for run in runs if isinstance(run, dict)),
})

# %% hidden exercise=choose_candidate points=1 name=ties_break_by_quality_then_value
# hint: rank the feasible candidates by peak memory ascending, then mean quality descending, then value ascending; infeasible ones never rank.
def row(feasible, memory, quality, complete=True):
    return {"feasible": feasible, "complete": complete, "peak_memory_bytes": memory, "mean_quality": quality}
gated = {"candidates": {16: row(True, 100, 0.5), 8: row(True, 100, 0.5), 4: row(True, 100, 0.6), 2: row(True, 200, 0.9),
                        1: row(False, 1, 1.0)}}
assert choose_candidate(gated) == {"decision": "accept", "chosen": 4, "ranking": [4, 8, 16, 2], "reason": "cheapest_feasible"}

# %% hidden exercise=choose_candidate points=1 name=tune_needs_a_complete_candidate
# hint: no feasible candidate: tune when any candidate is complete (measured but gated out), reject when none is.
def row(feasible, memory, quality, complete=True):
    return {"feasible": feasible, "complete": complete, "peak_memory_bytes": memory, "mean_quality": quality}
assert choose_candidate({"candidates": {4: row(False, None, None, complete=False), 8: row(False, 500, 0.2)}}) == \
    {"decision": "tune", "chosen": None, "ranking": [], "reason": "no_feasible_candidate"}
assert choose_candidate({"candidates": {4: row(False, None, None, complete=False)}}) == \
    {"decision": "reject", "chosen": None, "ranking": [], "reason": "no_complete_candidate"}

# %% hidden exercise=choose_candidate points=1 name=wrong_choice_calls_raise_and_good_calls_do_not
# hint: gated needs a non-empty candidates dict; every row needs bool feasible and complete; a feasible row needs an int memory and a finite quality.
def row(feasible, memory, quality, complete=True):
    return {"feasible": feasible, "complete": complete, "peak_memory_bytes": memory, "mean_quality": quality}
assert choose_candidate({"candidates": {"r": row(True, 5, 0.5)}, "band": 0.1})["chosen"] == "r"
bad = [None, {}, {"candidates": {}}, {"candidates": []}, {"candidates": {4: None}},
       {"candidates": {4: {"feasible": 1, "complete": True}}}, {"candidates": {4: {"feasible": True}}},
       {"candidates": {4: row(True, 5.0, 0.5)}}, {"candidates": {4: row(True, True, 0.5)}},
       {"candidates": {4: row(True, 5, None)}}, {"candidates": {4: row(True, 5, float("nan"))}},
       {"candidates": {4: row(True, 5, True)}}, {"candidates": {4: row(False, 5, 0.5, complete=None)}}]
for gated in bad:
    try:
        choose_candidate(gated)
    except ValueError:
        continue
    raise AssertionError(f"an invalid gated result was accepted: {gated}")

# %% hidden exercise=choose_candidate points=2 name=agrees_with_reference_on_generated_gates
# hint: any gated candidates, valid or with one defect: the same decision, choice, ranking and reason, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def gated_sets(draw):
    candidates = {}
    for value in draw(st.lists(st.sampled_from([2, 4, 8, 16]), min_size=1, max_size=4, unique=True)):
        feasible = draw(st.booleans())
        complete = True if feasible else draw(st.booleans())
        candidates[value] = {"feasible": feasible, "complete": complete,
                             "peak_memory_bytes": draw(st.sampled_from([100, 200, 200, 300])) if feasible else
                             draw(st.sampled_from([None, 100])),
                             "mean_quality": draw(st.sampled_from([0.5, 0.5, 0.6, 0.25])) if feasible or complete else None}
    if draw(st.integers(0, 7)) == 0:
        candidates[99] = draw(st.sampled_from([None, {"feasible": True, "complete": True, "peak_memory_bytes": 1.5,
                                                      "mean_quality": 0.5}, {"feasible": "yes", "complete": True}]))
    return ({"candidates": candidates, "best_mean": None, "band": None},)

def chosen(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("choose_candidate")(*call)


def feasible_rows(gated):
    return [row for row in gated["candidates"].values() if row["feasible"]]

reference.agrees("choose_candidate", gated_sets(), cases=200, clauses={
    "accept: the cheapest feasible": lambda gated: chosen(gated)["decision"] == "accept",
    "a tie on memory broken by quality": lambda gated: chosen(gated) and any(
        a["peak_memory_bytes"] == b["peak_memory_bytes"] and a["mean_quality"] != b["mean_quality"]
        for a in feasible_rows(gated) for b in feasible_rows(gated)),
    "a tie on memory and quality broken by the smaller value": lambda gated: chosen(gated) and any(
        a is not b and a["peak_memory_bytes"] == b["peak_memory_bytes"] and a["mean_quality"] == b["mean_quality"]
        for a in feasible_rows(gated) for b in feasible_rows(gated)),
    "a cheaper candidate that is not feasible": lambda gated: chosen(gated)["chosen"] is not None and any(
        not row["feasible"] and row["peak_memory_bytes"] is not None
        and row["peak_memory_bytes"] < gated["candidates"][chosen(gated)["chosen"]]["peak_memory_bytes"]
        for row in gated["candidates"].values()),
    "tune: complete but none feasible": lambda gated: chosen(gated)["decision"] == "tune",
    "reject: nothing complete": lambda gated: chosen(gated)["decision"] == "reject",
    "a candidate row that is not a dict": lambda gated: gated["candidates"].get(99, {}) is None,
    "a feasible row with a float peak": lambda gated: isinstance(
        (gated["candidates"].get(99) or {}).get("peak_memory_bytes"), float),
    "a feasible flag that is not a bool": lambda gated: (gated["candidates"].get(99) or {}).get("feasible") == "yes",
})
