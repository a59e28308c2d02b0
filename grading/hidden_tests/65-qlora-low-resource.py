# %% hidden exercise=paired_deltas points=1 name=only_seeds_ok_on_both_sides_pair
# hint: a seed pairs only when both sides have it and both have status ok; every other seed of either side is unpaired, ascending.
def run(memory=100, time_s=1.0, quality=0.5, status="ok"):
    return {"status": status, "peak_memory_bytes": memory, "step_time_s": time_s, "quality": quality}
nf4 = {3: run(), 1: run(), 2: run(status="failed"), 7: run()}
bf16 = {1: run(), 2: run(), 3: run(status="oom"), 5: run()}
deltas = paired_deltas(nf4, bf16)
assert deltas["paired"] == [1] and deltas["unpaired"] == [2, 3, 5, 7]
assert list(deltas["per_seed"]) == [1]
none = paired_deltas({}, {})
assert none == {"paired": [], "unpaired": [], "per_seed": {},
                "mean": {"memory_change": None, "step_time_change": None, "quality_delta": None}}

# %% hidden exercise=paired_deltas points=1 name=changes_are_relative_to_bf16_and_quality_is_absolute
# hint: (nf4 - bf16) / bf16 for memory and step time, nf4 - bf16 for quality; means over the paired seeds.
def run(memory=100, time_s=1.0, quality=0.5, status="ok"):
    return {"status": status, "peak_memory_bytes": memory, "step_time_s": time_s, "quality": quality}
deltas = paired_deltas({1: run(80, 1.5, 0.40), 2: run(90, 3.0, 0.62)}, {1: run(100, 1.0, 0.50), 2: run(100, 2.0, 0.60)})
row = deltas["per_seed"][1]
assert abs(row["memory_change"] + 0.2) < 1e-12 and abs(row["step_time_change"] - 0.5) < 1e-12
assert abs(row["quality_delta"] + 0.1) < 1e-12
assert abs(deltas["mean"]["memory_change"] + 0.15) < 1e-12 and abs(deltas["mean"]["step_time_change"] - 0.5) < 1e-12
assert abs(deltas["mean"]["quality_delta"] + 0.04) < 1e-12

# %% hidden exercise=paired_deltas points=1 name=a_missing_number_stays_missing
# hint: None on either side gives None for that seed; a bf16 value of 0 gives no relative change; a mean skips the None values and is None when all are.
def run(memory=100, time_s=1.0, quality=0.5, status="ok"):
    return {"status": status, "peak_memory_bytes": memory, "step_time_s": time_s, "quality": quality}
deltas = paired_deltas({1: run(None, 1.2, None), 2: run(50, 1.0, 0.5), 3: run(10, 0.0, 0.4)},
                       {1: run(100, 1.0, 0.5), 2: run(None, 0.0, 0.5), 3: run(20, 1.0, 0.4)})
assert deltas["per_seed"][1] == {"memory_change": None, "step_time_change": deltas["per_seed"][1]["step_time_change"],
                                 "quality_delta": None}
assert deltas["per_seed"][2]["memory_change"] is None and deltas["per_seed"][2]["step_time_change"] is None
assert abs(deltas["mean"]["memory_change"] + 0.5) < 1e-12, "only seed 3 has both memories"
assert abs(deltas["mean"]["quality_delta"]) < 1e-12
all_missing = paired_deltas({1: run(None, None, None)}, {1: run(None, None, None)})
assert all_missing["mean"] == {"memory_change": None, "step_time_change": None, "quality_delta": None}

# %% hidden exercise=paired_deltas points=1 name=wrong_delta_calls_raise_and_good_calls_do_not
# hint: both sides are dicts keyed by int seeds (no bool); each run has a known status; measurements are None or finite numbers, memory and time not negative.
def run(memory=100, time_s=1.0, quality=0.5, status="ok"):
    return {"status": status, "peak_memory_bytes": memory, "step_time_s": time_s, "quality": quality}
assert paired_deltas({1: run()}, {1: run()})["paired"] == [1]
bad_calls = [(None, {}), ({}, []), ({True: run()}, {}), ({"1": run()}, {}), ({1.0: run()}, {}), ({1: None}, {}),
             ({1: run(status="done")}, {}), ({1: run(memory=-1)}, {}), ({1: run(time_s=-0.1)}, {}),
             ({1: run(quality=float("nan"))}, {}), ({1: run(memory=True)}, {}), ({1: run(quality="0.5")}, {}),
             ({}, {2: run(time_s=float("inf"))})]
for arguments in bad_calls:
    try:
        paired_deltas(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")
assert paired_deltas({1: run(quality=-0.5)}, {1: run(quality=0.0)})["mean"]["quality_delta"] == -0.5

# %% hidden exercise=paired_deltas points=2 name=agrees_with_reference_on_generated_pairs
# hint: any runs on either side (statuses, missing numbers, zeros, seeds on one side only), valid or with one defect: the same pairs and deltas, or the same ValueError.
from hypothesis import strategies as st

values = st.sampled_from([None, 0, 0.0, 1, 2.5, 100, 80.0])

@st.composite
def sides(draw):
    def side():
        return {seed: {"status": draw(st.sampled_from(["ok", "ok", "oom", "failed"])), "peak_memory_bytes": draw(values),
                       "step_time_s": draw(values), "quality": draw(st.sampled_from([None, 0.0, 0.5, -0.25, 1]))}
                for seed in draw(st.lists(st.integers(1, 5), max_size=4, unique=True))}
    nf4, bf16 = side(), side()
    if draw(st.integers(0, 7)) == 0:
        nf4[draw(st.sampled_from([True, "2", 2.0, 3]))] = draw(st.sampled_from([None, {"status": "ok", "quality": True},
                                                                             {"status": "x"}]))
    return nf4, bf16

@st.composite
def shared_sides(draw):
    """Seeds 1-3 run and ok on both sides: means over several pairs, some deltas None."""
    def side():
        return {seed: {"status": "ok", "peak_memory_bytes": draw(values), "step_time_s": draw(values),
                       "quality": draw(st.sampled_from([None, 0.0, 0.5, -0.25, 1]))} for seed in (1, 2, 3)}
    return side(), side()

from tools.course.grader.clauses import is_bool


def paired(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("paired_deltas")(*call)


def per_seed(*call):
    return list(paired(*call)["per_seed"].values())


def bad_entries(nf4, bf16):
    return [(seed, run) for seed, run in nf4.items() if not (isinstance(seed, int) and not is_bool(seed))
            or not isinstance(run, dict) or run.get("status") not in ("ok", "oom", "failed") or is_bool(run.get("quality"))]

reference.agrees("paired_deltas", st.one_of(sides(), sides(), shared_sides()), cases=200, clauses={
    "a seed on one side only": lambda nf4, bf16: paired(nf4, bf16) and set(nf4) != set(bf16),
    "a seed on both sides that is not ok on one": lambda nf4, bf16: paired(nf4, bf16) and any(
        "ok" in (nf4[s]["status"], bf16[s]["status"]) and nf4[s]["status"] != bf16[s]["status"] for s in set(nf4) & set(bf16)),
    "no paired seed": lambda *call: paired(*call)["paired"] == [] and (call[0] or call[1]),
    "a bf16 memory or step time of 0 (no change computed)": lambda nf4, bf16: any(
        bf16[s].get(m) == 0 and nf4[s].get(m) is not None for s in paired(nf4, bf16)["paired"]
        for m in ("peak_memory_bytes", "step_time_s")),
    "a metric missing on one side": lambda nf4, bf16: any(
        (nf4[s].get(m) is None) != (bf16[s].get(m) is None) for s in paired(nf4, bf16)["paired"]
        for m in ("peak_memory_bytes", "step_time_s", "quality")),
    "a negative quality": lambda nf4, bf16: any(
        (nf4[s]["quality"] or 0) < 0 or (bf16[s]["quality"] or 0) < 0 for s in paired(nf4, bf16)["paired"]),
    "a mean over some seeds only (a None delta beside a number)": lambda *call: any(
        len({row[key] is None for row in per_seed(*call)}) == 2 for key in ("memory_change", "step_time_change", "quality_delta")),
    "an nf4 seed that is a bool": lambda nf4, bf16: any(is_bool(seed) for seed in nf4),
    "an nf4 seed that is a str": lambda nf4, bf16: "2" in nf4,
    "an nf4 seed that is a float": lambda nf4, bf16: any(isinstance(seed, float) for seed in nf4),
    "an nf4 run that is not a dict": lambda nf4, bf16: any(run is None for run in nf4.values()),
    "an nf4 quality that is a bool": lambda nf4, bf16: any(
        isinstance(run, dict) and is_bool(run.get("quality")) for run in nf4.values()),
    "an nf4 status that is unknown": lambda nf4, bf16: any(
        isinstance(run, dict) and run.get("status") == "x" for run in nf4.values()),
})

# %% hidden exercise=capacity_gain points=1 name=a_step_fits_only_ok_measured_and_within_budget
# hint: a fitting step has status ok, a measured peak and a peak at most the budget (equal fits); an oom, a failed step or one over budget does not.
def step(batch, status="ok", peak=None):
    return {"batch_size": batch, "status": status, "peak_memory_bytes": peak}
ladders = {"bf16": [step(1, peak=10), step(2, peak=20), step(4, "failed", 30), step(8, peak=41)],
           "nf4": [step(1, peak=5), step(2, peak=40), step(4, "oom"), step(16, peak=None)]}
result = capacity_gain(ladders, 40)
assert result == {"largest": {"bf16": 2, "nf4": 2}, "measured": True, "gain": 1.0, "capacity_gained": False}

# %% hidden exercise=capacity_gain points=1 name=a_fit_where_bf16_has_none_is_a_gain
# hint: when bf16 fits no batch and nf4 fits one, the capacity is gained but no ratio exists (gain None).
def step(batch, status="ok", peak=None):
    return {"batch_size": batch, "status": status, "peak_memory_bytes": peak}
result = capacity_gain({"bf16": [step(4, "oom")], "nf4": [step(4, peak=10), step(8, peak=19)]}, 20)
assert result == {"largest": {"bf16": None, "nf4": 8}, "measured": True, "gain": None, "capacity_gained": True}
nothing = capacity_gain({"bf16": [step(4, "oom")], "nf4": [step(4, "oom")]}, 20)
assert nothing["measured"] is True and nothing["capacity_gained"] is False and nothing["largest"] == {"bf16": None, "nf4": None}

# %% hidden exercise=capacity_gain points=1 name=nothing_measured_claims_nothing
# hint: a ladder is measured only with a peak or an oom in it; when either ladder is not measured, gain and capacity_gained are None, but largest is still reported.
def step(batch, status="ok", peak=None):
    return {"batch_size": batch, "status": status, "peak_memory_bytes": peak}
cpu = capacity_gain({"bf16": [step(4), step(8)], "nf4": []}, 100)
assert cpu == {"largest": {"bf16": None, "nf4": None}, "measured": False, "gain": None, "capacity_gained": None}
half = capacity_gain({"bf16": [step(4, peak=10)], "nf4": [step(4)]}, 100)
assert half == {"largest": {"bf16": 4, "nf4": None}, "measured": False, "gain": None, "capacity_gained": None}

# %% hidden exercise=capacity_gain points=1 name=wrong_capacity_calls_raise_and_good_calls_do_not
# hint: the budget is an int >= 0, the ladders exactly bf16 and nf4, each a list of well-formed steps with distinct batch sizes.
def step(batch, status="ok", peak=None):
    return {"batch_size": batch, "status": status, "peak_memory_bytes": peak}
good = {"bf16": [step(2, peak=1)], "nf4": (step(2, peak=1),)}
assert capacity_gain(good, 1)["gain"] == 1.0
bad_calls = [(good, -1), (good, 1.0), (good, True), ({"bf16": []}, 1), ({"bf16": [], "nf4": [], "fp8": []}, 1),
             ({"bf16": None, "nf4": []}, 1), ({"bf16": [step(0)], "nf4": []}, 1), ({"bf16": [step(2, "maybe")], "nf4": []}, 1),
             ({"bf16": [step(2, peak=-1)], "nf4": []}, 1), ({"bf16": [step(2, peak=1.5)], "nf4": []}, 1),
             ({"bf16": [step(2), step(2)], "nf4": []}, 1), ({"bf16": [step(True)], "nf4": []}, 1), ({"bf16": [None], "nf4": []}, 1),
             (None, 1)]
for arguments in bad_calls:
    try:
        capacity_gain(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=capacity_gain points=2 name=agrees_with_reference_on_generated_ladders
# hint: any two ladders and any budget, valid or with one defect: the same largest batches, measured flag, gain and verdict, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def ladder_sets(draw):
    def ladder():
        sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8, 16]), max_size=4, unique=True))
        return [{"batch_size": size, "status": draw(st.sampled_from(["ok", "ok", "oom", "failed"])),
                 "peak_memory_bytes": draw(st.sampled_from([None, 10, 50, 100, 101]))} for size in sizes]
    ladders = {"bf16": ladder(), "nf4": ladder()}
    budget = draw(st.sampled_from([0, 50, 100, 200, -1, 100.0]))
    if draw(st.integers(0, 7)) == 0:
        ladders[draw(st.sampled_from(["bf16", "nf4"]))].append(draw(st.sampled_from(
            [None, {"batch_size": 0, "status": "ok", "peak_memory_bytes": 1}, {"batch_size": 1, "status": "ok",
                                                                                "peak_memory_bytes": 1}])))
    return ladders, budget

def gained(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("capacity_gain")(*call)


def refusal(*call):
    """The stage's error message ('' when it accepts): the first rule the call breaks (same order as the reference)."""
    from tools.experiments.sft_chain.qlora_gates import capacity_gain as staged

    try:
        staged(*call)
    except ValueError as error:
        return str(error)
    return ""


def unmeasured(steps):
    return all(step["status"] != "oom" and step["peak_memory_bytes"] is None for step in steps)

reference.agrees("capacity_gain", ladder_sets(), cases=200, clauses={
    "a ladder with nothing measured": lambda ladders, budget: gained(ladders, budget)["measured"] is False and any(
        steps and unmeasured(steps) for steps in ladders.values()),
    "an empty ladder": lambda ladders, budget: gained(ladders, budget) and [] in ladders.values(),
    "an oom step counts as measured": lambda ladders, budget: gained(ladders, budget)["measured"] and any(
        all(step["peak_memory_bytes"] is None for step in steps) for steps in ladders.values()),
    "nf4 fits a larger batch": lambda *call: gained(*call)["capacity_gained"] is True and gained(*call)["gain"],
    "nf4 fits where bf16 fits nothing": lambda *call: gained(*call)["capacity_gained"] is True
        and gained(*call)["largest"]["bf16"] is None,
    "equal largest batches (no gain)": lambda *call: gained(*call)["measured"] and gained(*call)["gain"] == 1,
    "nf4 fits nothing": lambda *call: gained(*call)["measured"] and gained(*call)["largest"]["nf4"] is None,
    "a peak exactly at the budget": lambda ladders, budget: gained(ladders, budget) and any(
        step["status"] == "ok" and step["peak_memory_bytes"] == budget for steps in ladders.values() for step in steps),
    "an ok step without a peak": lambda ladders, budget: gained(ladders, budget) and any(
        step["status"] == "ok" and step["peak_memory_bytes"] is None for steps in ladders.values() for step in steps),
    "memory_budget below 0": lambda ladders, budget: "memory_budget" in refusal(ladders, budget) and budget == -1,
    "memory_budget a float": lambda ladders, budget: "memory_budget" in refusal(ladders, budget) and isinstance(budget, float),
    "a step that is not a dict": lambda *call: "malformed step None" in refusal(*call),
    "a batch size of 0": lambda *call: "malformed step" in refusal(*call) and "'batch_size': 0" in refusal(*call),
    "a batch size tried twice": lambda *call: "twice" in refusal(*call),
})

# %% hidden exercise=branch_decision points=1 name=quality_rules_come_first_with_one_reason
# hint: no pair, no quality or lost quality rejects at once with that one reason, whatever the capacity says.
def deltas(quality=0.0, time_change=0.1, memory=-0.1, paired=(1, 2)):
    return {"paired": list(paired), "mean": {"memory_change": memory, "step_time_change": time_change, "quality_delta": quality}}
doubled = {"largest": {"bf16": 4, "nf4": 8}, "measured": True}
assert branch_decision(deltas(paired=()), doubled, 8) == {"decision": "reject", "reasons": ["no_paired_seed"], "scope": None}
assert branch_decision(deltas(quality=None), doubled, 8)["reasons"] == ["quality_not_measured"]
assert branch_decision(deltas(quality=-0.0201), doubled, 8, 0.02)["reasons"] == ["quality_lost"]
assert branch_decision(deltas(quality=-0.02), doubled, 8, 0.02)["decision"] == "accept", "a drop equal to the tolerance is kept"

# %% hidden exercise=branch_decision points=1 name=accept_needs_the_required_batch_on_nf4_only
# hint: accept when capacity was measured, bf16 cannot fit required_batch (None or smaller) and nf4 can (>= required_batch); every other reason is still listed.
def deltas(quality=0.0, time_change=0.1, memory=-0.1, paired=(1, 2)):
    return {"paired": list(paired), "mean": {"memory_change": memory, "step_time_change": time_change, "quality_delta": quality}}
assert branch_decision(deltas(time_change=-0.1), {"largest": {"bf16": None, "nf4": 16}, "measured": True}, 8) == \
    {"decision": "accept", "reasons": [], "scope": "capacity-bound training"}
short = branch_decision(deltas(), {"largest": {"bf16": 4, "nf4": 6}, "measured": True}, 8)
assert short == {"decision": "tune", "reasons": ["no_capacity_gain", "slower_steps"], "scope": None}
none_fit = branch_decision(deltas(memory=None), {"largest": {"bf16": None, "nf4": None}, "measured": True}, 8)
assert none_fit["reasons"] == ["no_capacity_gain", "slower_steps", "memory_not_measured"]

# %% hidden exercise=branch_decision points=1 name=a_smaller_peak_alone_is_tune
# hint: when bf16 already fits the required batch the capacity is not needed; when nothing was measured the capacity is not measured; both are tune.
def deltas(quality=0.0, time_change=0.1, memory=-0.1, paired=(1, 2)):
    return {"paired": list(paired), "mean": {"memory_change": memory, "step_time_change": time_change, "quality_delta": quality}}
fits = branch_decision(deltas(memory=-0.3, time_change=0.0), {"largest": {"bf16": 8, "nf4": 16}, "measured": True}, 8)
assert fits == {"decision": "tune", "reasons": ["capacity_not_needed"], "scope": None}
cpu = branch_decision(deltas(memory=None, time_change=0.4), {"largest": {"bf16": None, "nf4": None}, "measured": False}, 8)
assert cpu == {"decision": "tune", "reasons": ["capacity_not_measured", "slower_steps", "memory_not_measured"], "scope": None}

# %% hidden exercise=branch_decision points=1 name=wrong_branch_calls_raise_and_good_calls_do_not
# hint: required_batch is an int >= 1, the tolerance a finite number >= 0, and deltas and capacity have their shapes.
def deltas(quality=0.0, time_change=0.1, memory=-0.1, paired=(1, 2)):
    return {"paired": list(paired), "mean": {"memory_change": memory, "step_time_change": time_change, "quality_delta": quality}}
doubled = {"largest": {"bf16": 4, "nf4": 8}, "measured": True}
assert branch_decision(deltas(), doubled, 8, 0)["decision"] == "accept"
bad_calls = [(deltas(), doubled, 0), (deltas(), doubled, 8.0), (deltas(), doubled, True), (deltas(), doubled, 8, -0.1),
             (deltas(), doubled, 8, float("nan")), (deltas(), doubled, 8, True), (None, doubled, 8), ({"paired": [1]}, doubled, 8),
             (deltas(quality=float("inf")), doubled, 8), (deltas(quality=True), doubled, 8), (deltas(), None, 8),
             (deltas(), {"largest": {"bf16": 4, "nf4": 8}}, 8), (deltas(), {"largest": {"bf16": 4.0, "nf4": 8}, "measured": True}, 8),
             (deltas(), {"largest": {"bf16": 4, "nf4": 8}, "measured": 1}, 8), ({"paired": None, "mean": {}}, doubled, 8)]
for arguments in bad_calls:
    try:
        branch_decision(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"an invalid call was accepted: {arguments}")

# %% hidden exercise=branch_decision points=2 name=agrees_with_reference_on_generated_branches
# hint: any deltas, capacities, required batches and tolerances, valid or with one defect: the same decision, reasons and scope, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def branches(draw):
    numbers = st.sampled_from([None, -0.3, -0.05, -0.02, 0.0, 0.02, 0.4])
    deltas = {"paired": draw(st.sampled_from([[], [1], [1, 2, 3]])),
              "mean": {"memory_change": draw(numbers), "step_time_change": draw(numbers), "quality_delta": draw(numbers)}}
    sizes = st.sampled_from([None, 2, 4, 8, 16])
    capacity = {"largest": {"bf16": draw(sizes), "nf4": draw(sizes)}, "measured": draw(st.booleans())}
    required = draw(st.sampled_from([1, 4, 8, 16, 0, 8.0]))
    tolerance = draw(st.sampled_from([0, 0.02, 0.05, -1, float("nan")]))
    return deltas, capacity, required, tolerance

@st.composite
def decidable(draw):
    """Paired seeds, a measured quality and capacity, a valid batch and tolerance: the capacity rules decide."""
    deltas, capacity, _, _ = draw(branches())
    deltas["paired"] = [1, 2]
    deltas["mean"]["quality_delta"] = draw(st.sampled_from([0.0, 0.02, -0.02, -0.3]))
    return deltas, dict(capacity, measured=True), draw(st.sampled_from([4, 8])), draw(st.sampled_from([0.02, 0.05]))

@st.composite
def broken_capacity(draw, capacity):
    """Valid deltas, batch and tolerance beside a capacity that is not a capacity_gain result."""
    deltas, _, _, _ = draw(branches())
    return deltas, capacity, 4, 0.02

def decided(*call):
    """The reference's result (raises on an invalid call, so a valid-input clause never counts one)."""
    return reference("branch_decision")(*call)


def refusal(*call):
    """The stage's error message ('' when it accepts): the first rule the call breaks (same order as the reference)."""
    from tools.experiments.sft_chain.qlora_gates import branch_decision as staged

    try:
        staged(*call)
    except ValueError as error:
        return str(error)
    return ""


def with_reason(reason):
    return lambda *call: reason in decided(*call)["reasons"]

reference.agrees("branch_decision", st.one_of(
    branches(), branches(), decidable(), decidable(), broken_capacity(None), broken_capacity({"largest": {}}),
    broken_capacity({"largest": {"bf16": "4"}, "measured": True})), cases=300, clauses={
    "no paired seed": with_reason("no_paired_seed"),
    "quality not measured": with_reason("quality_not_measured"),
    "quality lost beyond the tolerance": with_reason("quality_lost"),
    "a quality delta exactly at -tolerance (kept)": lambda *call: decided(*call) and call[0]["paired"]
        and call[0]["mean"]["quality_delta"] == -call[3] != 0,
    "capacity not measured": with_reason("capacity_not_measured"),
    "capacity not needed": with_reason("capacity_not_needed"),
    "no capacity gain": with_reason("no_capacity_gain"),
    "accept for capacity-bound training": lambda *call: decided(*call)["decision"] == "accept",
    "accept despite slower steps": lambda *call: decided(*call)["decision"] == "accept"
        and "slower_steps" in decided(*call)["reasons"],
    "tune with slower steps": lambda *call: decided(*call)["decision"] == "tune"
        and "slower_steps" in decided(*call)["reasons"],
    "memory not measured": with_reason("memory_not_measured"),
    "bf16 fits no batch": lambda *call: decided(*call) and call[1]["largest"]["bf16"] is None,
    "required_batch 0": lambda *call: "required_batch" in refusal(*call) and call[2] == 0,
    "required_batch a float": lambda *call: "required_batch" in refusal(*call) and isinstance(call[2], float),
    "quality_tolerance below 0": lambda *call: "quality_tolerance" in refusal(*call) and call[3] == -1,
    "quality_tolerance NaN": lambda *call: "quality_tolerance" in refusal(*call) and call[3] != call[3],
    "capacity None": lambda *call: "capacity must be" in refusal(*call) and call[1] is None,
    "capacity without measured": lambda *call: "capacity must be" in refusal(*call) and call[1] == {"largest": {}},
    "a largest batch that is a str": lambda *call: "capacity must be" in refusal(*call)
        and isinstance(call[1], dict) and call[1].get("largest", {}).get("bf16") == "4",
})
