# %% hidden exercise=classify_failures points=1 name=fail_rate_equal_to_threshold_is_stable
# hint: a fail rate exactly at the threshold counts as stable; compare the ratio itself with the threshold.
runs = [{"x": False, "y": False}, {"x": True, "y": False}, {"x": False, "y": True},
        {"x": True, "y": False}, {"x": False, "y": False}]
report = classify_failures(runs, min_repeats=5, min_fail_rate=0.6)
assert report["fail_rates"] == {"x": 0.6, "y": 0.8}
assert report["stable"] == ["x", "y"]
assert report["flaky"] == [] and report["passing"] == [] and report["insufficient"] == []
ten = [{"z": index >= 3} for index in range(10)]
assert classify_failures(ten, min_repeats=10, min_fail_rate=0.3)["stable"] == ["z"]

# %% hidden exercise=classify_failures points=1 name=absent_runs_are_not_observations
# hint: a run that does not contain a case says nothing about it: it is neither a pass nor a failure.
runs = [{"m": False, "n": True}, {"n": True}, {"m": False, "n": True}, {"n": False}, {"m": True, "n": True}]
report = classify_failures(runs, min_repeats=3, min_fail_rate=0.6)
assert report["observations"] == {"m": 3, "n": 5}
assert math.isclose(report["fail_rates"]["m"], 2 / 3)
assert report["stable"] == ["m"]
assert report["flaky"] == ["n"]
stricter = classify_failures(runs, min_repeats=4, min_fail_rate=0.6)
assert stricter["insufficient"] == ["m"] and stricter["stable"] == []

# %% hidden exercise=classify_failures points=1 name=few_observations_are_never_judged
# hint: below the minimum number of observations a case is not judged at all, even when every observation failed or passed.
runs = [{"k": False, "b": True, "a": False}, {"k": False, "b": True}]
report = classify_failures(runs, min_repeats=3, min_fail_rate=0.5)
assert report["insufficient"] == ["a", "b", "k"]
assert report["stable"] == [] and report["flaky"] == [] and report["passing"] == []
assert report["fail_rates"] == {"k": 1.0, "b": 0.0, "a": 1.0}
assert report["observations"] == {"k": 2, "b": 2, "a": 1}

# %% hidden exercise=classify_failures points=1 name=classes_sorted_and_disjoint
# hint: every case lands in exactly one class, and each class lists its ids in sorted order whatever the input order.
runs = [{"w9": True, "c2": False, "a7": True, "b1": False, "e5": False},
        {"w9": True, "c2": False, "a7": False, "b1": False, "e5": True},
        {"w9": True, "c2": False, "a7": True, "b1": True, "e5": False},
        {"w9": True, "c2": True, "a7": True, "b1": False, "e5": True}]
report = classify_failures(runs, min_repeats=2, min_fail_rate=0.75)
assert report["stable"] == ["b1", "c2"]
assert report["flaky"] == ["a7", "e5"]
assert report["passing"] == ["w9"]
assert report["insufficient"] == []
together = report["stable"] + report["flaky"] + report["passing"] + report["insufficient"]
assert sorted(together) == sorted(report["observations"]) and len(together) == len(set(together))

# %% hidden exercise=classify_failures points=1 name=invalid_runs_and_parameters_raise
# hint: check both parameters and every run, case id and outcome before counting anything.
good = [{"a": True}, {"a": False}, {"a": False}]
bad_calls = [
    lambda: classify_failures(good, min_repeats=True),
    lambda: classify_failures(good, min_repeats=2.0),
    lambda: classify_failures(good, min_repeats=3, min_fail_rate=0),
    lambda: classify_failures(good, min_repeats=3, min_fail_rate=1.2),
    lambda: classify_failures(good, min_repeats=3, min_fail_rate=float("nan")),
    lambda: classify_failures(good, min_repeats=3, min_fail_rate=True),
    lambda: classify_failures(good + [["a", True]], 3, 0.6),
    lambda: classify_failures(good + [{"": False}], 3, 0.6),
    lambda: classify_failures(good + [{" \t": False}], 3, 0.6),
    lambda: classify_failures(good + [{"\n": True}], 3, 0.6),
    lambda: classify_failures(good + [{7: False}], 3, 0.6),
    lambda: classify_failures(good + [{"a": None}], 3, 0.6),
    lambda: classify_failures(good + [{"a": "False"}], 3, 0.6),
    lambda: classify_failures({"a": True}, 3, 0.6),
    lambda: classify_failures(None, 3, 0.6),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")
assert classify_failures(good, min_repeats=3, min_fail_rate=1)["flaky"] == ["a"]

# %% hidden exercise=baseline_gap_report points=1 name=missing_evidence_stays_in_the_denominator
# hint: the fraction is taken over every stable failure; a case evaluated too rarely is missing, and missing is not fixed.
stable = ["c1", "c2", "c3"]
runs = [{"c1": True, "c2": True, "c3": True}, {"c1": True, "c2": True}, {"c1": True, "c2": True}]
report = baseline_gap_report(stable, {"retrieval": runs}, min_repeats=3, fix_rate=0.8, required_fraction=1.0)
detail = report["per_method"]["retrieval"]
assert detail["fixed"] == ["c1", "c2"] and detail["missing"] == ["c3"] and detail["unfixed"] == []
assert math.isclose(detail["closed_fraction"], 2 / 3)
assert report["closing_methods"] == [] and report["gap_closed"] is False
nothing = baseline_gap_report(stable, {"prompt_v2": []})
assert nothing["per_method"]["prompt_v2"]["missing"] == ["c1", "c2", "c3"]
assert nothing["per_method"]["prompt_v2"]["closed_fraction"] == 0.0

# %% hidden exercise=baseline_gap_report points=1 name=thresholds_are_inclusive
# hint: a pass rate equal to fix_rate fixes the case, and a closed fraction equal to required_fraction closes the gap.
stable = ["a", "b"]
runs = [{"a": True, "b": False}, {"a": True, "b": False}, {"a": True, "b": True},
        {"a": True, "b": False}, {"a": False, "b": True}]
report = baseline_gap_report(stable, {"few_shot": runs}, min_repeats=5, fix_rate=0.8, required_fraction=0.5)
assert report["per_method"]["few_shot"]["fixed"] == ["a"]
assert report["per_method"]["few_shot"]["unfixed"] == ["b"]
assert report["per_method"]["few_shot"]["closed_fraction"] == 0.5
assert report["closing_methods"] == ["few_shot"] and report["gap_closed"] is True
lenient = baseline_gap_report(stable, {"few_shot": runs}, min_repeats=5, fix_rate=0.4, required_fraction=1.0)
assert lenient["per_method"]["few_shot"]["fixed"] == ["a", "b"] and lenient["gap_closed"] is True

# %% hidden exercise=baseline_gap_report points=1 name=ties_rank_by_method_name
# hint: methods with the same closed fraction are ordered by name, whatever order the dict gives them in.
stable = ["s1", "s2"]
fixes_s1 = [{"s1": True, "s2": False}] * 3
fixes_s2 = [{"s1": False, "s2": True}] * 3
fixes_both = [{"s1": True, "s2": True}] * 3
report = baseline_gap_report(stable, {"zeta_prompt": fixes_s1, "alpha_rag": fixes_s2, "mid_prompt": fixes_both,
                                      "beta_rag": []}, required_fraction=0.5)
assert report["ranking"] == ["mid_prompt", "alpha_rag", "zeta_prompt", "beta_rag"]
assert report["closing_methods"] == ["mid_prompt", "alpha_rag", "zeta_prompt"]

# %% hidden exercise=baseline_gap_report points=1 name=only_stable_failures_count
# hint: outcomes of cases that are not stable failures do not change any list or fraction (they must still be valid outcomes).
stable = ["hard"]
runs = [{"hard": True, "easy": False, "other": False}] * 3
report = baseline_gap_report(stable, {"retrieval": runs})
detail = report["per_method"]["retrieval"]
assert detail == {"fixed": ["hard"], "unfixed": [], "missing": [], "closed_fraction": 1.0}
assert report["gap_closed"] is True

# %% hidden exercise=baseline_gap_report points=1 name=nothing_to_close_and_no_baseline
# hint: with no stable failure there is no fraction to report; with no baseline there is nothing to rank.
empty_failures = baseline_gap_report([], {"b_prompt": [{"q": True}] * 3, "a_prompt": []})
assert empty_failures["per_method"]["a_prompt"]["closed_fraction"] is None
assert empty_failures["per_method"]["b_prompt"] == {"fixed": [], "unfixed": [], "missing": [], "closed_fraction": None}
assert empty_failures["ranking"] == ["a_prompt", "b_prompt"]
assert empty_failures["closing_methods"] == [] and empty_failures["gap_closed"] is False
untried = baseline_gap_report(["q1"], {})
assert untried == {"per_method": {}, "ranking": [], "closing_methods": [], "gap_closed": False}

# %% hidden exercise=baseline_gap_report points=1 name=invalid_baseline_inputs_raise
# hint: validate the stable ids, every method, run and outcome, and the three parameters before judging anything.
good = {"few_shot": [{"a": True}] * 3}
bad_calls = [
    lambda: baseline_gap_report(["a", "a"], good),
    lambda: baseline_gap_report(["a", ""], good),
    lambda: baseline_gap_report(["a", 3], good),
    lambda: baseline_gap_report("a", good),
    lambda: baseline_gap_report(["a"], [("few_shot", [{"a": True}])]),
    lambda: baseline_gap_report(["a"], {"few_shot": {"a": True}}),
    lambda: baseline_gap_report(["a"], {"": [{"a": True}] * 3}),
    lambda: baseline_gap_report(["a"], {"few_shot": [["a", True]] * 3}),
    lambda: baseline_gap_report(["a"], {"few_shot": [{"a": True, "b": 1}] * 3}),
    lambda: baseline_gap_report(["a"], good, min_repeats=1),
    lambda: baseline_gap_report(["a"], good, min_repeats=False),
    lambda: baseline_gap_report(["a"], good, fix_rate=0),
    lambda: baseline_gap_report(["a"], good, fix_rate=float("inf")),
    lambda: baseline_gap_report(["a"], good, required_fraction=1.5),
    lambda: baseline_gap_report(["a"], good, required_fraction=-0.5),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")


# %% hidden exercise=choose_entry_stage points=1 name=uniform_groups_give_no_signal_whatever_the_pass_rate
# hint: a group whose answers all got the same reward has zero advantage, so a high pass rate made of all-right and all-wrong groups is not a reason to enter online RL.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
arithmetic = {"format_ok": True, "groups": [[True] * 4] * 7 + [[False] * 4]}
held = choose_entry_stage(failures, tried, arithmetic, {"verifiable_rewards": 400})
assert held["pass_rate"] == 0.875 and held["mixed_group_share"] == 0.0
assert held["candidate_stage"] is None and held["decision"] == "hold" and held["stage"] is None
assert held["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
never = choose_entry_stage(failures, tried, {"format_ok": True, "groups": [[False, False]] * 3}, {"verifiable_rewards": 400})
always = choose_entry_stage(failures, tried, {"format_ok": True, "groups": [(True, True, True)] * 2}, {"verifiable_rewards": 400})
assert never["reasons"] == always["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
with_demos = choose_entry_stage(failures, tried, arithmetic, {"verifiable_rewards": 400, "demonstrations": 250})
assert with_demos["decision"] == "proceed" and with_demos["stage"] == "sft" and with_demos["reasons"] == []

# %% hidden exercise=choose_entry_stage points=1 name=mixed_groups_admit_online_rl_at_a_low_pass_rate
# hint: online RL needs groups with different rewards inside, not a pass rate strictly between 0 and 1; a low pass rate is fine when enough groups are mixed.
failures = {"stable": ["q1", "q2", "q3"]}
tried = {"ranking": ["retrieval"], "closing_methods": []}
sparse = {"format_ok": True, "groups": [[True, False, False, False], [False] * 4, [False, True, False, False]]}
entry = choose_entry_stage(failures, tried, sparse, {"verifiable_rewards": 1200}, min_mixed_group_share=0.5)
assert entry["decision"] == "proceed" and entry["stage"] == "online_rl" and entry["reasons"] == []
assert math.isclose(entry["pass_rate"], 2 / 12) and math.isclose(entry["mixed_group_share"], 2 / 3)
stricter = choose_entry_stage(failures, tried, sparse, {"verifiable_rewards": 1200}, min_mixed_group_share=0.7)
assert stricter["decision"] == "hold" and stricter["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]

# %% hidden exercise=choose_entry_stage points=1 name=mixed_share_threshold_is_inclusive
# hint: a share of mixed groups exactly at min_mixed_group_share is enough; compare the share itself with the threshold.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
one_in_four = {"format_ok": True, "groups": [[True, False], [True, True], [False, False], [True, True]]}
at_limit = choose_entry_stage(failures, tried, one_in_four, {"verifiable_rewards": 100}, min_mixed_group_share=0.25)
assert at_limit["mixed_group_share"] == 0.25 and at_limit["stage"] == "online_rl"
above = choose_entry_stage(failures, tried, one_in_four, {"verifiable_rewards": 100}, min_mixed_group_share=0.26)
assert above["stage"] is None and above["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
all_mixed = {"format_ok": True, "groups": [[False, True]] * 3}
assert choose_entry_stage(failures, tried, all_mixed, {"verifiable_rewards": 100}, min_mixed_group_share=1)["stage"] == "online_rl"
three = {"format_ok": True, "groups": [[True, False], [True, True], [False, False]]}
assert choose_entry_stage(failures, tried, three, {"verifiable_rewards": 100}, min_mixed_group_share=1 / 3)["stage"] == "online_rl"

# %% hidden exercise=choose_entry_stage points=1 name=group_statistics_are_exact_floats
# hint: the pass rate counts every answer of every group (not the mean of group means); both statistics are floats, reported for any SFT model and None without one.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
uneven = {"format_ok": True, "groups": [[True, True], [False, False, False, False, True, False]]}
entry = choose_entry_stage(failures, tried, uneven, {})
assert type(entry["pass_rate"]) is float and entry["pass_rate"] == 3 / 8
assert type(entry["mixed_group_share"]) is float and entry["mixed_group_share"] == 0.5
solved = choose_entry_stage(failures, tried, {"format_ok": True, "groups": [[True, True]]}, {})
assert type(solved["pass_rate"]) is float and solved["pass_rate"] == 1.0
assert type(solved["mixed_group_share"]) is float and solved["mixed_group_share"] == 0.0
broken = choose_entry_stage(failures, tried, {"format_ok": False, "groups": [[False, True, False]]}, {})
assert broken["sft_status"] == "below_bar" and math.isclose(broken["pass_rate"], 1 / 3)
assert broken["mixed_group_share"] == 1.0
absent = choose_entry_stage(failures, tried, None, {})
assert absent["pass_rate"] is None and absent["mixed_group_share"] is None

# %% hidden exercise=choose_entry_stage points=1 name=sft_must_be_ready_before_later_stages
# hint: preference optimisation and online RL start from a working SFT model; until then the only entry is SFT, and it needs demonstrations.
failures = {"stable": ["q1", "q2"]}
tried = {"ranking": ["retrieval"], "closing_methods": []}
rich = {"pairwise_preferences": 5000, "binary_feedback": 5000, "verifiable_rewards": 5000}
mixed = [[True, False, True, False]] * 2
broken = choose_entry_stage(failures, tried, {"format_ok": False, "groups": mixed}, rich)
assert broken["sft_status"] == "below_bar" and broken["candidate_stage"] is None
assert broken["decision"] == "hold" and broken["reasons"] == [{"level": "hold", "code": "needs_demonstrations"}]
absent = choose_entry_stage(failures, tried, None, dict(rich, demonstrations=120))
assert absent["sft_status"] == "absent" and absent["stage"] == "sft"
assert absent["usable_feedback"] == ["demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards"]
binary_only = choose_entry_stage(failures, tried, {"format_ok": True, "groups": mixed}, {"binary_feedback": 300})
assert binary_only["stage"] == "preference"
nothing = choose_entry_stage(failures, tried, {"format_ok": True, "groups": mixed}, {})
assert nothing["decision"] == "hold" and nothing["reasons"] == [{"level": "hold", "code": "no_usable_feedback"}]

# %% hidden exercise=choose_entry_stage points=1 name=min_items_is_inclusive
# hint: a shape with exactly the minimum number of items is usable; one item fewer is not.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
ready = {"format_ok": True, "groups": [[True, False, False]]}
at_limit = choose_entry_stage(failures, tried, ready, {"pairwise_preferences": 50, "demonstrations": 49}, min_items=50)
assert at_limit["usable_feedback"] == ["pairwise_preferences"] and at_limit["stage"] == "preference"
below = choose_entry_stage(failures, tried, ready, {"pairwise_preferences": 49, "demonstrations": 49}, min_items=50)
assert below["usable_feedback"] == [] and below["decision"] == "hold"
assert below["reasons"] == [{"level": "hold", "code": "no_usable_feedback"}]
rewards = choose_entry_stage(failures, tried, ready, {"verifiable_rewards": 1}, min_items=1)
assert rewards["stage"] == "online_rl"

# %% hidden exercise=choose_entry_stage points=1 name=every_reason_kept_and_stage_only_on_proceed
# hint: collect all reasons in the documented order before deciding; the candidate stage is reported even when the decision blocks it.
untried = {"ranking": [], "closing_methods": []}
closed = {"ranking": ["few_shot"], "closing_methods": ["few_shot"]}
held = choose_entry_stage({"stable": ["q1"]}, untried, None, {})
assert held["decision"] == "hold"
assert held["reasons"] == [{"level": "hold", "code": "baseline_not_tried"},
                           {"level": "hold", "code": "needs_demonstrations"}]
everything = choose_entry_stage({"stable": []}, untried, {"format_ok": True, "groups": [[False, False]]},
                                {"verifiable_rewards": 100})
assert everything["decision"] == "reject"
assert everything["reasons"] == [{"level": "reject", "code": "no_stable_failure"},
                                 {"level": "hold", "code": "baseline_not_tried"},
                                 {"level": "hold", "code": "no_reward_variance"}]
shipped = choose_entry_stage({"stable": ("q1",)}, closed, {"format_ok": True, "groups": [[True, False]]},
                             {"pairwise_preferences": 800})
assert shipped["decision"] == "reject" and shipped["candidate_stage"] == "preference" and shipped["stage"] is None
assert shipped["reasons"] == [{"level": "reject", "code": "baseline_closes_gap"}]

# %% hidden exercise=choose_entry_stage points=1 name=invalid_stage_inputs_raise
# hint: check both reports, the SFT baseline and each of its groups, every feedback shape and count, and both thresholds before deciding.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
ready = {"format_ok": True, "groups": [[True, False]]}
bad_calls = [
    lambda: choose_entry_stage({}, tried, ready, {}),
    lambda: choose_entry_stage({"stable": "q1"}, tried, ready, {}),
    lambda: choose_entry_stage(failures, {"ranking": []}, ready, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.5}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": 1, "groups": [[True, False]]}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "groups": []}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "groups": [[True]]}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "groups": [[1, 0]]}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "groups": [True, False]}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "groups": [[True, False]], "pass_rate": 0.5}, {}),
    lambda: choose_entry_stage(failures, tried, "ready", {}),
    lambda: choose_entry_stage(failures, tried, ready, [("demonstrations", 10)]),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": -1}),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": 10.0}),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": True}),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_items=0),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_items=True),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_mixed_group_share=0),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_mixed_group_share=1.5),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_mixed_group_share=float("nan")),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_mixed_group_share=True),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=classify_failures points=2 name=agrees_with_reference_on_generated_valid_runs
# hint: any runs the contract allows (cases absent from some runs, ids that differ only in case or width, tabs inside ids, rates exactly at the threshold): the same report with the same types.
from hypothesis import strategies as st

@st.composite
def valid_runs(draw):
    cases = draw(st.lists(st.sampled_from(["q1", "q2", "a", "B", "ｑ1", "q\t1", " q3 ", "ﬁx"]),
                          min_size=1, max_size=4, unique=True))
    count = draw(st.integers(1, 7))
    marks = {case: draw(st.text(alphabet="PF-", min_size=count, max_size=count)) for case in cases}
    runs = [{case: marks[case][index] == "P" for case in cases if marks[case][index] != "-"} for index in range(count)]
    return runs if draw(st.booleans()) else tuple(runs)

thresholds = st.sampled_from([0.6, 0.5, 0.25, 1 / 3, 2 / 3, 0.75, 0.2, 0.4, 0.8, 1, 1.0])
reference.agrees("classify_failures", st.tuples(valid_runs(), st.integers(2, 5), thresholds), cases=100)

# %% hidden exercise=classify_failures points=2 name=agrees_with_reference_on_generated_invalid_runs
# hint: one wrong thing anywhere (a blank or non-str case id, 0/1 or None for an outcome, a run that is not a dict, bools for ints, NaN or infinity): the same ValueError as the contract says.
from hypothesis import strategies as st

defects = ([("case_id", bad) for bad in ["", " ", "\t", "\n", " \t\n", "\u3000", 7, 0, None, True, 1.5, ("a",)]]
           + [("outcome", bad) for bad in [0, 1, None, "True", "P", 1.0, [], float("nan")]]
           + [("run", bad) for bad in [None, [], ["a", True], "a", 1, ("a", True), {"a"}]]
           + [("runs", bad) for bad in [None, [], (), {}, "", "PF", {"a": True}, 3, True]]
           + [("min_repeats", bad) for bad in [-1, 0, 1, True, False, 2.0, 3.0, None, "3", float("nan"), [3]]]
           + [("min_fail_rate", bad) for bad in [0, 0.0, -0.1, 1.0000001, 1.5, 2, True, False, None, "0.6",
                                                 float("nan"), float("inf"), -float("inf"), [0.6]]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    runs = [dict(run) for run in draw(st.lists(st.dictionaries(st.sampled_from(["a", "b"]), st.booleans(), max_size=2),
                                               min_size=1, max_size=4))]
    where = draw(st.integers(0, len(runs) - 1))
    arguments = {"runs": runs, "min_repeats": 3, "min_fail_rate": 0.6}
    if kind == "case_id":
        runs[where][bad] = False
    elif kind == "outcome":
        runs[where][draw(st.sampled_from(["a", "b"]))] = bad
    elif kind == "run":
        runs.insert(where, bad)
    else:
        arguments[kind] = bad
    return arguments["runs"], arguments["min_repeats"], arguments["min_fail_rate"]

reference.agrees("classify_failures", one_defect(), cases=150)

# %% hidden exercise=baseline_gap_report points=2 name=agrees_with_reference_on_generated_valid_baselines
# hint: any stable failures and baselines the contract allows (tied fractions, names that differ in case or width, rates exactly at the thresholds, empty runs): the same report with the same types.
from hypothesis import strategies as st

universe = ["q1", "q2", "q3", "Q1", "ｑ1", "\tq4"]
rates = st.sampled_from([0.8, 0.5, 1 / 3, 2 / 3, 0.75, 0.25, 0.6, 1, 1.0])

@st.composite
def valid_baselines(draw):
    stable = draw(st.lists(st.sampled_from(universe), max_size=4, unique=True))
    methods = draw(st.lists(st.sampled_from(["few_shot", "retrieval", "Retrieval", "b_rag", "a_prompt", "ｆｅｗ_shot",
                                             "few shot\n"]), max_size=3, unique=True))
    baseline_runs = {}
    for method in methods:
        runs = draw(st.lists(st.dictionaries(st.sampled_from(universe[:4] + ["other"]), st.booleans(), max_size=3),
                             max_size=4))
        baseline_runs[method] = runs if draw(st.booleans()) else tuple(runs)
    return (stable if draw(st.booleans()) else tuple(stable), baseline_runs, draw(st.integers(2, 4)), draw(rates),
            draw(rates))

reference.agrees("baseline_gap_report", valid_baselines(), cases=100)

# %% hidden exercise=baseline_gap_report points=2 name=agrees_with_reference_on_generated_invalid_baselines
# hint: one wrong thing anywhere (a duplicate or blank id, a bad method name, runs that are not a list, a bad id or outcome of any case, stable or not, bools for numbers, NaN): the same ValueError as the contract says.
from hypothesis import strategies as st

bad_ids = ["", " ", "\t\n", "\u3000", 3, None, False, 1.5]
defects = ([("stable", bad) for bad in [None, "q1", {"q1": 1}, 3, {"q1"}]]
           + [("stable_id", bad) for bad in bad_ids] + [("duplicate", "q1"), ("duplicate", "q2")]
           + [("baselines", bad) for bad in [None, [], [("few_shot", [])], "few_shot", 1]]
           + [("method", bad) for bad in bad_ids]
           + [("method_runs", bad) for bad in [None, {"q1": True}, "PPP", 3, True]]
           + [("run", bad) for bad in [None, [("q1", True)], "q1", 1, {"q1"}]]
           + [("case_id", bad) for bad in bad_ids]
           + [("outcome", (case, bad)) for case in ["q1", "x", "other"] for bad in [1, 0, None, "yes", 1.0]]
           + [("min_repeats", bad) for bad in [-1, 0, 1, True, False, 3.0, None, "3", float("nan")]]
           + [(name, bad) for name in ["fix_rate", "required_fraction"]
              for bad in [0, -0.5, 1.5, 2, True, False, None, "0.8", float("nan"), float("inf")]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    method = draw(st.sampled_from(["few_shot", "retrieval"]))
    stable = ["q1", "q2"]
    runs = {"few_shot": [{"q1": True, "q2": False, "x": True}, {"q1": True, "x": False}, {"q2": True}],
            "retrieval": [{"q1": True}, {"q1": True}, {"q1": True}]}
    arguments = {"min_repeats": 3, "fix_rate": 0.8, "required_fraction": 1.0}
    if kind == "stable":
        stable = bad
    elif kind in ("stable_id", "duplicate"):
        stable.insert(draw(st.integers(0, 2)), bad)
    elif kind == "baselines":
        runs = bad
    elif kind == "method":
        runs[bad] = [{"q1": True}] * 3
    elif kind == "method_runs":
        runs[method] = bad
    elif kind == "run":
        runs[method].insert(draw(st.integers(0, 3)), bad)
    elif kind == "case_id":
        runs[method][draw(st.integers(0, 2))][bad] = True
    elif kind == "outcome":
        runs[method][draw(st.integers(0, 2))][bad[0]] = bad[1]
    else:
        arguments[kind] = bad
    return (stable, runs), arguments

reference.agrees("baseline_gap_report", one_defect(), cases=150)

# %% hidden exercise=choose_entry_stage points=2 name=agrees_with_reference_on_generated_valid_requests
# hint: any reports, SFT groups (uniform or mixed, of any size), feedback counts at or near min_items and shares at the threshold: the same decision dict with the same types.
from hypothesis import strategies as st

shapes = ["demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards"]
names = st.lists(st.sampled_from(["few_shot", "retrieval"]), max_size=2, unique=True)
group = st.one_of(st.lists(st.booleans(), min_size=2, max_size=5),
                  st.sampled_from([[True] * 4, [False] * 4, [True, False], (True, True, False)]))
uniform = st.sampled_from([[True] * 4, [False] * 4, (True, True), [False] * 3])
sft = st.one_of(st.none(), st.fixed_dictionaries({"format_ok": st.booleans(),
                                                  "groups": st.lists(group, min_size=1, max_size=6)}),
                st.fixed_dictionaries({"format_ok": st.just(True),
                                       "groups": st.lists(st.one_of(uniform, group), min_size=1, max_size=5)}),
                st.fixed_dictionaries({"format_ok": st.just(True),
                                       "groups": st.lists(group, min_size=1, max_size=4).map(tuple)}))
feedback = st.one_of(st.dictionaries(st.sampled_from(shapes), st.integers(0, 5), max_size=4),
                     st.fixed_dictionaries({"verifiable_rewards": st.integers(2, 5)},
                                           optional={"demonstrations": st.integers(0, 5)}))
reference.agrees("choose_entry_stage", st.tuples(
    st.fixed_dictionaries({"stable": st.sampled_from([[], ["q1"], ("q1", "q2"), ()])}),
    st.fixed_dictionaries({"ranking": names, "closing_methods": names}),
    sft, feedback, st.integers(1, 4), st.sampled_from([0.25, 0.5, 1 / 3, 2 / 3, 0.75, 1, 1.0, 0.2])), cases=150)

# %% hidden exercise=choose_entry_stage points=2 name=agrees_with_reference_on_generated_invalid_requests
# hint: one wrong thing anywhere (a report without its list, an SFT baseline with a missing or extra key, a one-answer group, 0/1 for outcomes, a shape spelt another way, a bool or float count, NaN): the same ValueError as the contract says.
from hypothesis import strategies as st

shapes = ["demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards"]
junk = [None, True, 0, 1.0, float("nan"), "", "q1", {}, {"q1"}]
defects = ([("failures", bad) for bad in junk + [{"stable": "q1"}, {"stable": None}, {"flaky": []}, {"stable": {"q1"}}]]
           + [("tried", bad) for bad in junk + [{"ranking": []}, {"closing_methods": []},
                                               {"ranking": "few_shot", "closing_methods": []},
                                               {"ranking": [], "closing_methods": None}]]
           + [("sft", bad) for bad in [True, "ready", [True, [[True, False]]], 1, {"format_ok": True},
                                       {"groups": [[True, False]]}, {"format_ok": True, "pass_rate": 0.5},
                                       {"format_ok": True, "groups": [[True, False]], "pass_rate": 0.5}]]
           + [("format_ok", bad) for bad in [1, 0, None, "True", 1.0]]
           + [("groups", bad) for bad in [[], (), None, [True, False], "PF", {0: [True, False]}]]
           + [("group", bad) for bad in [[True], [], (False,), "PF", None, {True, False}]]
           + [("outcome", bad) for bad in [1, 0, None, "F", 1.0]]
           + [("feedback", bad) for bad in [None, [("demonstrations", 5)], "demonstrations", 5]]
           + [("shape", bad) for bad in ["Demonstrations", "ｄemonstrations", "demonstrations ", "thumbs_up", 3]]
           + [("count", bad) for bad in [True, False, -1, 5.0, None, "5", float("nan")]]
           + [("min_items", bad) for bad in [0, -1, True, False, 1.0, None, "3", float("inf")]]
           + [("share", bad) for bad in [0, 0.0, -0.25, 1.5, 2, True, False, None, "0.25", float("nan"), float("inf")]])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    groups = [[True, False], [True, True, True]]
    arguments = {"failures": {"stable": ["q1"]}, "tried": {"ranking": ["few_shot"], "closing_methods": []},
                 "sft": {"format_ok": draw(st.booleans()), "groups": groups},
                 "feedback": {"verifiable_rewards": 5, "demonstrations": 1}, "min_items": 3, "share": 0.25}
    if kind in ("format_ok", "groups"):
        arguments["sft"][kind] = bad
    elif kind == "group":
        groups.insert(draw(st.integers(0, 2)), bad)
    elif kind == "outcome":
        groups.insert(draw(st.integers(0, 2)), [True, bad] if draw(st.booleans()) else [bad, False])
    elif kind == "shape":
        arguments["feedback"][bad] = 5
    elif kind == "count":
        arguments["feedback"][draw(st.sampled_from(shapes))] = bad
    else:
        arguments[kind] = bad
    return tuple(arguments.values())

reference.agrees("choose_entry_stage", one_defect(), cases=150)
