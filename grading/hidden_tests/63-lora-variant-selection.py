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

# %% hidden exercise=gate_candidates points=1 name=the_gain_interval_uses_the_sample_sd_and_t
# hint: each seed's quality minus the base's; mean, sample standard deviation (divide by n - 1), lower end mean - t[n - 1] * sd / sqrt(n); learned only when the lower end is above 0.
import math as _math
def runs(qualities, regressions=None, memory=100):
    regressions = regressions or [0.5] * len(qualities)
    return [{"seed": s, "status": "ok", "quality": q, "regression": r, "memory_bytes": memory}
            for s, (q, r) in enumerate(zip(qualities, regressions), start=1)]
table = {1: 12.706, 2: 4.303, 3: 3.182}
base = {"quality": 0.25, "regression": 0.5}
gated = gate_candidates({4: runs([0.5, 0.75, 0.625]), 8: runs([0.25, 0.5, 0.375])}, base, 1000, 0.0, 0.5, table)
row = gated["candidates"][4]
assert _math.isclose(row["gain_mean"], 0.375, rel_tol=1e-12) and _math.isclose(row["mean_quality"], 0.625, rel_tol=1e-12)
assert _math.isclose(row["gain_lower"], 0.375 - 4.303 * 0.125 / _math.sqrt(3), rel_tol=1e-12), row
assert row["learned"] is True and gated["candidates"][8]["learned"] is False
assert gated["candidates"][8]["reasons"] == ["no_task_gain", "below_margin"]
two = gate_candidates({4: runs([0.5, 0.75])}, base, 1000, 0.0, 0.5, table)["candidates"][4]
assert _math.isclose(two["gain_lower"], 0.375 - 12.706 * (0.125 * _math.sqrt(2)) / _math.sqrt(2), rel_tol=1e-12)
assert two["learned"] is False and two["reasons"] == ["no_task_gain", "below_margin"], \
    "with two seeds t is 12.706: no evidence of a gain, and no admissible best to be close to"

# %% hidden exercise=gate_candidates points=1 name=the_best_is_the_best_admissible_candidate
# hint: the best is the highest mean quality among candidates that learned and kept the base skill (ties: the smaller value); every complete candidate is compared with it seed by seed.
import math as _math
def runs(qualities, regressions, memory=100):
    return [{"seed": s, "status": "ok", "quality": q, "regression": r, "memory_bytes": memory}
            for s, (q, r) in enumerate(zip(qualities, regressions), start=1)]
table = {2: 4.303}
base = {"quality": 0.125, "regression": 0.5}
results = {16: runs([0.875, 0.875, 0.875], [0.25, 0.25, 0.25]),   # best quality, but forgot the base skill
           8: runs([0.75, 0.75, 0.75], [0.5, 0.5, 0.5]), 4: runs([0.75, 0.75, 0.75], [0.5, 0.5, 0.5]),
           2: runs([0.625, 0.75, 0.625], [0.5, 0.5, 0.5])}
gated = gate_candidates(results, base, 1000, 0.125, 0.125, table)
assert gated["best"] == 4 and gated["best_mean"] == 0.75, "rank 16 forgot; 4 and 8 tie, the smaller value wins"
rows = gated["candidates"]
assert rows[16]["reasons"] == ["forgot_base_skill"] and rows[16]["versus_best_mean"] == 0.125
assert rows[8]["equivalent"] and rows[8]["versus_best_lower"] == 0.0
assert _math.isclose(rows[2]["versus_best_mean"], -1 / 12, rel_tol=1e-12)
assert rows[2]["versus_best_lower"] < -0.125 and rows[2]["reasons"] == ["below_margin"]
none = gate_candidates({16: runs([0.875] * 3, [0.25] * 3)}, base, 1000, 0.125, 0.125, table)
assert none["best"] is None and none["best_mean"] is None
assert none["candidates"][16]["versus_best_lower"] is None and none["candidates"][16]["equivalent"] is False

# %% hidden exercise=gate_candidates points=1 name=the_edges_are_inside_but_a_zero_gain_is_no_gain
# hint: a mean base-skill change of exactly -regression_tolerance keeps the skill, a lower end of exactly -margin is equivalent, a peak exactly at the budget passes; a gain whose lower end is exactly 0 is not learned.
def runs(qualities, regressions, memory):
    return [{"seed": s, "status": "ok", "quality": q, "regression": r, "memory_bytes": memory}
            for s, (q, r) in enumerate(zip(qualities, regressions), start=1)]
table = {1: 12.706}
base = {"quality": 0.25, "regression": 0.75}
gated = gate_candidates({"best": runs([0.75, 0.75], [0.75, 0.75], 300), "edge": runs([0.5, 0.5], [0.5, 0.5], 300),
                         "flat": runs([0.25, 0.25], [0.75, 0.75], 301)}, base, 300, 0.25, 0.25, table)
rows = gated["candidates"]
assert gated["best"] == "best"
assert rows["edge"]["kept_skill"] and rows["edge"]["regression_change"] == -0.25
assert rows["edge"]["equivalent"] and rows["edge"]["versus_best_lower"] == -0.25
assert rows["edge"]["memory_passed"] and rows["edge"]["feasible"]
assert rows["flat"]["gain_lower"] == 0.0 and rows["flat"]["learned"] is False
assert rows["flat"]["reasons"] == ["no_task_gain", "below_margin", "over_budget"]

# %% hidden exercise=gate_candidates points=1 name=failures_and_missing_numbers_are_not_passes
# hint: a failed or out-of-memory run, a quality or regression that is None, a memory that is None: each has its reason in order, none passes, and only complete candidates get numbers.
def runs(qualities, regressions, memory=100):
    return [{"seed": s, "status": "ok", "quality": q, "regression": r, "memory_bytes": memory}
            for s, (q, r) in enumerate(zip(qualities, regressions), start=1)]
table = {1: 12.706, 2: 4.303}
base = {"quality": 0.1, "regression": 0.5}
results = {"ok": runs([0.6, 0.62, 0.61], [0.5, 0.51, 0.5]), "fail": runs([0.9, 0.9, 0.9], [0.5] * 3),
           "oom": runs([0.95, 0.95, 0.95], [0.5] * 3, memory=50), "noq": runs([None, 0.9, 0.9], [0.5] * 3),
           "noreg": runs([0.9, 0.9, 0.9], [0.5, None, 0.5]), "nomem": runs([0.6, 0.62, 0.61], [0.5] * 3, memory=None)}
results["fail"][2]["status"] = "failed"
results["oom"][0]["status"] = "oom"
gated = gate_candidates(results, base, 1000, 0.05, 0.05, table)
rows = gated["candidates"]
assert gated["best"] == "nomem", "the best is among the complete candidates that learned and kept the skill"
assert rows["fail"]["reasons"] == ["run_failed"] and rows["fail"]["mean_quality"] is None and not rows["fail"]["complete"]
assert rows["oom"]["reasons"] == ["oom"] and rows["oom"]["memory_passed"] is False and rows["oom"]["gain_lower"] is None
assert rows["noq"]["reasons"] == ["measure_missing"] and rows["noreg"]["reasons"] == ["measure_missing"]
assert rows["noreg"]["regression_change"] is None and rows["noreg"]["versus_best_lower"] is None
assert rows["nomem"]["reasons"] == ["memory_not_measured"] and rows["nomem"]["kept_skill"] is True
assert rows["nomem"]["peak_memory_bytes"] is None and not rows["nomem"]["feasible"] and rows["ok"]["feasible"]

# %% hidden exercise=gate_candidates points=1 name=wrong_gate_calls_raise_and_good_calls_do_not
# hint: the budget, the margin, the tolerance, the base, the t table and every result are checked, and the candidates must hold the same seeds (at least two, with their critical value); the good call answers.
def runs(qualities, memory=100, status="ok", seeds=None):
    seeds = seeds or range(1, len(qualities) + 1)
    return [{"seed": s, "status": status, "quality": q, "regression": 0.5, "memory_bytes": memory}
            for s, q in zip(seeds, qualities)]
table = {1: 12.706, 2: 4.303}
base = {"quality": 0.1, "regression": 0.5}
good = {4: runs([0.5, 0.52, 0.51])}
assert gate_candidates(good, base, 100, 0.1, 0.1, table)["candidates"][4]["feasible"] is True
bad_calls = [(good, base, -1, 0.1, 0.1, table), (good, base, 1.5, 0.1, 0.1, table), (good, base, True, 0.1, 0.1, table),
             (good, base, 100, -0.1, 0.1, table), (good, base, 100, float("nan"), 0.1, table),
             (good, base, 100, True, 0.1, table), (good, base, 100, 0.1, -1, table),
             (good, base, 100, 0.1, float("inf"), table), (good, {"quality": 0.1}, 100, 0.1, 0.1, table),
             (good, {"quality": True, "regression": 0.5}, 100, 0.1, 0.1, table),
             (good, {"quality": 0.1, "regression": float("nan")}, 100, 0.1, 0.1, table), (good, None, 100, 0.1, 0.1, table),
             (good, base, 100, 0.1, 0.1, {2: 0}), (good, base, 100, 0.1, 0.1, {0: 4.3}),
             (good, base, 100, 0.1, 0.1, {True: 4.3}), (good, base, 100, 0.1, 0.1, {1: 12.7}),
             (good, base, 100, 0.1, 0.1, [4.303]), ({}, base, 100, 0.1, 0.1, table), (None, base, 100, 0.1, 0.1, table),
             ({4: []}, base, 100, 0.1, 0.1, table), ({4: runs([0.5, 0.5], status="done")}, base, 100, 0.1, 0.1, table),
             ({4: runs([0.5])}, base, 100, 0.1, 0.1, table), ({4: runs([0.5, 0.5], seeds=[1, 1])}, base, 100, 0.1, 0.1, table),
             ({4: runs([0.5, 0.5]), 8: runs([0.5, 0.5], seeds=[1, 3])}, base, 100, 0.1, 0.1, table),
             ({4: runs([0.5, True])}, base, 100, 0.1, 0.1, table), ({4: runs([0.5, float("inf")])}, base, 100, 0.1, 0.1, table),
             ({4: runs([0.5, 0.5], memory=-1)}, base, 100, 0.1, 0.1, table),
             ({4: runs([0.5, 0.5], memory=1.5)}, base, 100, 0.1, 0.1, table), ({4: [None, None]}, base, 100, 0.1, 0.1, table)]
for position, arguments in enumerate(bad_calls):
    try:
        gate_candidates(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {position} was accepted")

# %% hidden exercise=gate_candidates points=2 name=agrees_with_reference_on_generated_results
# hint: any candidates, statuses, qualities, regressions, memories, budgets, margins and tolerances, valid or with one defect in any position: the same gates and reasons, or the same ValueError.
from hypothesis import strategies as st
from tools.course.grader.clauses import each_of, is_bool, not_finite

NUMBERS = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 1, 0.1 + 0.2, 0.3]
BAD_NUMBERS = [float("nan"), float("inf"), -float("inf"), True, "0.5", None]
T = {1: 12.706, 2: 4.303, 3: 3.182}
defects = ([("valid", n) for n in range(40)] + [("quality", bad) for bad in BAD_NUMBERS[:5]]
           + [("regression", bad) for bad in BAD_NUMBERS[:5]] + [("memory", bad) for bad in (-1, 1.5, True, "1")]
           + [("seed", bad) for bad in (1.0, True, "1", None)] + [("status", bad) for bad in ("done", None)]
           + [("base_quality", bad) for bad in BAD_NUMBERS] + [("base_regression", bad) for bad in BAD_NUMBERS]
           + [("budget", bad) for bad in (-1, 2.0, True)] + [("margin", bad) for bad in (-0.1, float("nan"), True)]
           + [("tolerance", bad) for bad in (-0.1, float("inf"), False)]
           + [("table", bad) for bad in ({}, {1: 0}, {1: float("nan")}, {0: 12.7, 2: 4.3}, [12.706])]
           + [("shape", bad) for bad in ("empty", "twice", "other_seeds", "one_seed", "not_a_dict")])


def one_case(defect, rng):
    kind, bad = defect
    seeds = rng.sample([1, 2, 3, 5], rng.choice([2, 3]))
    results = {}
    for value in rng.sample([2, 4, 8, 16], rng.randint(1, 3)):
        results[value] = [{"seed": s, "status": rng.choice(["ok"] * 6 + ["oom", "failed"]),
                           "quality": rng.choice(NUMBERS + [None]), "regression": rng.choice(NUMBERS + [None]),
                           "memory_bytes": rng.choice([None, 0, 100, 200, 300, 400])} for s in seeds]
    base = {"quality": rng.choice(NUMBERS), "regression": rng.choice(NUMBERS)}
    call = [results, base, rng.choice([0, 150, 300, 500]), rng.choice([0, 0.125, 0.25]),
            rng.choice([0, 0.125, 0.25]), dict(T)]
    target = rng.choice(list(results))
    run = rng.choice(results[target])
    if kind == "quality":
        run["quality"] = bad
    elif kind == "regression":
        run["regression"] = bad
    elif kind == "memory":
        run["memory_bytes"] = bad
    elif kind == "seed":
        run["seed"] = bad
    elif kind == "status":
        run["status"] = bad
    elif kind == "base_quality":
        base["quality"] = bad
    elif kind == "base_regression":
        base["regression"] = bad
    elif kind == "budget":
        call[2] = bad
    elif kind == "margin":
        call[3] = bad
    elif kind == "tolerance":
        call[4] = bad
    elif kind == "table":
        call[5] = bad
    elif kind == "shape":
        if bad == "empty":
            results[target] = []
        elif bad == "twice":
            results[target].append(dict(run))
        elif bad == "other_seeds":
            results[99] = [dict(r, seed=r["seed"] + 10) for r in results[target]]
        elif bad == "one_seed":
            for value in results:
                results[value] = results[value][:1]
        else:
            results[target][0] = None
    return tuple(call)


def gated(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("gate_candidates")(*call)


def rows(*call):
    return list(gated(*call)["candidates"].values())


def has_reason(reason):
    return lambda *call: any(reason in row["reasons"] for row in rows(*call))


reference.agrees("gate_candidates", each_of(defects, one_case, variants=2), cases=2 * len(defects), clauses={
    "a candidate with an oom run": has_reason("oom"),
    "a candidate with a failed run": has_reason("run_failed"),
    "a candidate with a missing measurement": has_reason("measure_missing"),
    "a candidate with no task gain": has_reason("no_task_gain"),
    "a candidate that forgot the base skill": has_reason("forgot_base_skill"),
    "a candidate below the margin": has_reason("below_margin"),
    "a candidate whose memory was not measured": has_reason("memory_not_measured"),
    "a candidate over the memory budget": has_reason("over_budget"),
    "a feasible candidate": lambda *call: any(row["feasible"] for row in rows(*call)),
    "no admissible candidate (no best)": lambda *call: gated(*call)["best"] is None,
    "a peak exactly at the budget": lambda *call: any(row["peak_memory_bytes"] == call[2] for row in rows(*call)),
    "a quality given as an int": lambda *call: gated(*call) and any(
        type(run["quality"]) is int for runs in call[0].values() for run in runs),
    "inexact float arithmetic (0.1 + 0.2) in a quality": lambda *call: gated(*call) and any(
        run["quality"] == 0.1 + 0.2 for runs in call[0].values() for run in runs),
    "a quality that is not finite": lambda *call: any(
        isinstance(run, dict) and not_finite(run.get("quality")) for runs in call[0].values() for run in runs),
    "a regression that is not finite": lambda *call: any(
        isinstance(run, dict) and not_finite(run.get("regression")) for runs in call[0].values() for run in runs),
    "a quality that is a bool": lambda *call: any(
        isinstance(run, dict) and is_bool(run.get("quality")) for runs in call[0].values() for run in runs),
    "a base quality that is not finite or not a number": lambda *call: isinstance(call[1], dict) and (
        not_finite(call[1].get("quality")) or not isinstance(call[1].get("quality"), (int, float))),
    "a base regression that is not finite or not a number": lambda *call: isinstance(call[1], dict) and (
        not_finite(call[1].get("regression")) or not isinstance(call[1].get("regression"), (int, float))),
    "a memory that is a bool": lambda *call: any(
        isinstance(run, dict) and is_bool(run.get("memory_bytes")) for runs in call[0].values() for run in runs),
    "a seed that is not an int": lambda *call: any(
        isinstance(run, dict) and (is_bool(run.get("seed")) or not isinstance(run.get("seed"), int))
        for runs in call[0].values() for run in runs),
    "memory_budget a float or a bool": lambda *call: isinstance(call[2], float) or is_bool(call[2]),
    "a margin that is not finite or a bool": lambda *call: not_finite(call[3]) or is_bool(call[3]),
    "a tolerance that is not finite or a bool": lambda *call: not_finite(call[4]) or is_bool(call[4]),
    "a t table without the degrees of freedom or with a bad value": lambda *call: isinstance(call[5], dict) and (
        not call[5] or any(not (isinstance(v, (int, float)) and v > 0 and v == v) for v in call[5].values())
        or 0 in call[5]),
    "a t table that is not a dict": lambda *call: not isinstance(call[5], dict),
    "candidates holding different seeds": lambda *call: len({frozenset(r.get("seed") for r in runs if isinstance(r, dict))
                                                             for runs in call[0].values() if runs}) > 1,
    "a seed run twice": lambda *call: any(len({r.get("seed") for r in runs if isinstance(r, dict)}) < len(runs)
                                         for runs in call[0].values() if runs),
    "a single seed": lambda *call: all(len(runs) == 1 for runs in call[0].values()),
    "a candidate with no results": lambda *call: any(runs == [] for runs in call[0].values()),
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
