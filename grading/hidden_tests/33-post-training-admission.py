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
valid = baseline_gap_report(["a", "b"], good)  # the valid call every case below breaks in one place
assert valid["per_method"]["few_shot"]["closed_fraction"] == 0.5 and valid["closing_methods"] == [], valid
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
valid = choose_entry_stage(failures, tried, ready, {"verifiable_rewards": 100})  # the call every case below breaks
assert valid["decision"] == "proceed" and valid["stage"] == "online_rl" and valid["mixed_group_share"] == 1.0, valid
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
boundaries = [(1, 5, 0.2), (1, 10, 0.1), (2, 10, 0.2)]  # k / n == threshold, yet 1 - (n - k) / n < threshold


@st.composite
def rounding_boundaries(draw):
    """A case whose fail rate equals the threshold, where 1 - its pass rate rounds just below it."""
    failures, count, threshold = draw(st.sampled_from(boundaries))
    outcomes = draw(st.permutations([False] * failures + [True] * (count - failures)))
    runs = [{"q1": outcome, "q2": index % 2 == 0} for index, outcome in enumerate(outcomes)]
    return runs, draw(st.integers(2, count)), threshold


def counts(runs):
    seen, failed = {}, {}
    for run in runs:
        for case, passed in run.items():
            seen[case], failed[case] = seen.get(case, 0) + 1, failed.get(case, 0) + (not passed)
    return seen, failed


def at_rounded_threshold(runs, min_repeats=3, min_fail_rate=0.6):
    seen, failed = counts(runs)
    return any(failed[c] / seen[c] == min_fail_rate > 1 - (seen[c] - failed[c]) / seen[c] for c in seen)


reference.agrees("classify_failures", st.one_of(st.tuples(valid_runs(), st.integers(2, 5), thresholds),
                                                rounding_boundaries()), cases=150, clauses={
    "runs is a tuple": lambda runs, *rest: isinstance(runs, tuple),
    "a case absent from some runs": lambda runs, *rest: any(set(counts(runs)[0]) - set(run) for run in runs),
    "a case with fewer observations than min_repeats": lambda runs, repeats, rate: any(
        n < repeats for n in counts(runs)[0].values()),
    "a fail rate exactly at the threshold": lambda runs, repeats, rate: any(
        counts(runs)[1][c] / n == rate for c, n in counts(runs)[0].items()),
    "a fail rate at the threshold that 1 - pass rate rounds below": at_rounded_threshold,
    "a flaky case": lambda runs, repeats, rate: any(
        0 < counts(runs)[1][c] / n < rate and n >= repeats for c, n in counts(runs)[0].items()),
    "ids equal after case folding or NFKC": lambda runs, *rest: len(
        {__import__("unicodedata").normalize("NFKC", c).casefold() for c in counts(runs)[0]}) < len(counts(runs)[0]),
    "an id with inner or outer whitespace": lambda runs, *rest: any(c != c.strip() or "\t" in c for c in counts(runs)[0]),
    "min_fail_rate 1 given as an int": lambda runs, repeats, rate: type(rate) is int,
})

# %% hidden exercise=classify_failures points=2 name=agrees_with_reference_on_generated_invalid_runs
# hint: one wrong thing anywhere (a blank or non-str case id, 0/1 or None for an outcome, a run that is not a dict, bools for ints, NaN or infinity): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import below, each_of, is_blank, is_bool, not_a_number, not_a_str, not_finite, values

defects = ([("valid", n) for n in range(40)]
           + [("case_id", bad) for bad in ["", " ", "\t", "\n", " \t\n", "\u3000", 7, 0, None, True, 1.5, ("a",)]]
           + [("outcome", bad) for bad in [0, 1, None, "True", "P", 1.0, [], float("nan")]]
           + [("run", bad) for bad in [None, [], ["a", True], "a", 1, ("a", True), {"a"}]]
           + [("runs", bad) for bad in [None, [], (), {}, "", "PF", {"a": True}, 3, True]]
           + [("min_repeats", bad) for bad in [-1, 0, 1, True, False, 2.0, 3.0, None, "3", float("nan"), [3]]]
           + [("min_fail_rate", bad) for bad in [0, 0.0, -0.1, 1.0000001, 1.5, 2, True, False, None, "0.6",
                                                 float("nan"), float("inf"), -float("inf"), [0.6]]])

def one_defect(defect, rng):
    """Valid runs, or runs with exactly this defect."""
    kind, bad = defect
    runs = [{case: rng.random() < 0.5 for case in rng.sample(["a", "b"], rng.randint(0, 2))}
            for _ in range(rng.randint(1, 4))]
    where = rng.randrange(len(runs))
    arguments = {"runs": runs, "min_repeats": rng.choice([2, 3]), "min_fail_rate": rng.choice([0.6, 0.5, 1])}
    if kind == "case_id":
        runs[where][bad] = False
    elif kind == "outcome":
        runs[where][rng.choice(["a", "b"])] = bad
    elif kind == "run":
        runs.insert(where, bad)
    elif kind != "valid":
        arguments[kind] = bad
    return arguments["runs"], arguments["min_repeats"], arguments["min_fail_rate"]


def run_items(runs):
    return [item for run in values(runs) if isinstance(run, dict) for item in run.items()]


reference.agrees("classify_failures", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "runs is not a list or tuple": lambda runs, *rest: not isinstance(runs, (list, tuple)),
    "runs is empty": lambda runs, *rest: isinstance(runs, (list, tuple, dict, str)) and len(runs) == 0,
    "a run that is not a dict": lambda runs, *rest: isinstance(runs, (list, tuple)) and any(
        not isinstance(run, dict) for run in runs),
    "a case id that is not a str": lambda runs, *rest: any(not_a_str(c) for c, _ in run_items(runs)),
    "a blank case id": lambda runs, *rest: any(is_blank(c) for c, _ in run_items(runs)),
    "an outcome 0 or 1": lambda runs, *rest: any(o in (0, 1) and not is_bool(o) for _, o in run_items(runs)),
    "an outcome that is not a bool or a number": lambda runs, *rest: any(not_a_number(o) for _, o in run_items(runs)),
    "min_repeats a bool": lambda runs, repeats, rate: is_bool(repeats),
    "min_repeats a float": lambda runs, repeats, rate: isinstance(repeats, float),
    "min_repeats below 2": lambda runs, repeats, rate: below(repeats, 2),
    "min_repeats not a number": lambda runs, repeats, rate: not_a_number(repeats),
    "min_fail_rate a bool": lambda runs, repeats, rate: is_bool(rate),
    "min_fail_rate <= 0": lambda runs, repeats, rate: below(rate, 0, or_equal=True),
    "min_fail_rate above 1": lambda runs, repeats, rate: not is_bool(rate) and isinstance(rate, (int, float))
        and rate > 1 and not not_finite(rate),
    "min_fail_rate not finite": lambda runs, repeats, rate: not_finite(rate),
    "min_fail_rate not a number": lambda runs, repeats, rate: not_a_number(rate),
})

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

@st.composite
def rounding_boundaries(draw):
    """passes / observations == fix_rate while 1 - failures / observations rounds below it (1 - 4/5 < 0.2), or
    fixed / stable failures == required_fraction while adding 1 / len(stable) per fixed case falls short."""
    if draw(st.booleans()):  # fix_rate at the boundary: q0 passes `passes` of `count` runs
        passes, count, rate = draw(st.sampled_from([(1, 5, 0.2), (1, 10, 0.1), (2, 10, 0.2)]))
        outcomes = draw(st.permutations([True] * passes + [False] * (count - passes)))
        return (["q0"], {"few_shot": [{"q0": outcome} for outcome in outcomes]}, 2, rate, 1.0)
    passes, count, rate = draw(st.sampled_from([(6, 6, 1.0), (8, 10, 0.8), (9, 10, 0.9)]))
    stable = [f"q{n}" for n in range(count)]
    fixed = draw(st.permutations(stable))[:passes]  # required_fraction at the boundary: `passes` of `count` fixed
    runs = [{case: case in fixed for case in stable} for _ in range(3)]
    return (stable, {"few_shot": runs, "retrieval": runs[:2]}, 3, 0.8, rate)


def judged(stable, baseline_runs, min_repeats=3, fix_rate=0.8, required_fraction=1.0):
    """(method, passes, observations) of every stable failure."""
    found = []
    for method, runs in baseline_runs.items():
        for case in stable:
            outcomes = [run[case] for run in runs if case in run]
            found.append((method, outcomes.count(True), len(outcomes)))
    return found


def fixed_counts(stable, baseline_runs, min_repeats=3, fix_rate=0.8, required_fraction=1.0):
    fixed = {method: 0 for method in baseline_runs}
    for method, passes, seen in judged(stable, baseline_runs):
        fixed[method] += seen >= min_repeats and passes / seen >= fix_rate
    return fixed.values()


reference.agrees("baseline_gap_report", st.one_of(valid_baselines(), rounding_boundaries()), cases=150, clauses={
    "no stable failure": lambda stable, *rest: len(stable) == 0,
    "no baseline at all": lambda stable, runs, *rest: runs == {},
    "stable_failures a tuple": lambda stable, *rest: isinstance(stable, tuple),
    "a method's runs a tuple": lambda stable, runs, *rest: any(isinstance(r, tuple) for r in runs.values()),
    "a stable failure a method never evaluated": lambda *call: any(seen == 0 for _, _, seen in judged(*call[:2])),
    "a pass rate exactly at fix_rate": lambda *call: any(
        seen and passes / seen == call[3] for _, passes, seen in judged(*call[:2])),
    "a pass rate at fix_rate that 1 - fail rate rounds below": lambda *call: any(
        seen >= call[2] and passes / seen == call[3] > 1 - (seen - passes) / seen for _, passes, seen in judged(*call[:2])),
    "a closed fraction at required_fraction that adding 1 / failures per fixed case misses": lambda *call: any(
        fixed / len(call[0]) == call[4] > sum([1 / len(call[0])] * fixed) for fixed in fixed_counts(*call)) if call[0]
        else False,
    "two methods tied on closed fraction": lambda *call: len(call[1]) >= 2 and len(set(fixed_counts(*call))) < len(call[1]),
    "method names equal after case folding or NFKC": lambda stable, runs, *rest: len(
        {__import__("unicodedata").normalize("NFKC", m).casefold() for m in runs}) < len(runs),
})

# %% hidden exercise=baseline_gap_report points=2 name=agrees_with_reference_on_generated_invalid_baselines
# hint: one wrong thing anywhere (a duplicate or blank id, a bad method name, runs that are not a list, a bad id or outcome of any case, stable or not, bools for numbers, NaN): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import below, each_of, is_blank, is_bool, keys, not_a_number, not_a_str, not_finite, values

bad_ids = ["", " ", "\t\n", "\u3000", 3, None, False, 1.5]
defects = ([("valid", n) for n in range(40)] + [("stable", bad) for bad in [None, "q1", {"q1": 1}, 3, {"q1"}]]
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

def one_defect(defect, rng):
    """Valid failures and baselines, or ones with exactly this defect (in a stable case or any other)."""
    kind, bad = defect
    method = rng.choice(["few_shot", "retrieval"])
    stable = ["q1", "q2"]
    runs = {"few_shot": [{"q1": True, "q2": False, "x": True}, {"q1": True, "x": False}, {"q2": True}],
            "retrieval": [{"q1": True}, {"q1": True}, {"q1": True}]}
    arguments = {"min_repeats": 3, "fix_rate": 0.8, "required_fraction": 1.0}
    if kind == "stable":
        stable = bad
    elif kind in ("stable_id", "duplicate"):
        stable.insert(rng.randint(0, 2), bad)
    elif kind == "baselines":
        runs = bad
    elif kind == "method":
        runs[bad] = [{"q1": True}] * 3
    elif kind == "method_runs":
        runs[method] = bad
    elif kind == "run":
        runs[method].insert(rng.randint(0, 3), bad)
    elif kind == "case_id":
        runs[method][rng.randint(0, 2)][bad] = True
    elif kind == "outcome":
        runs[method][rng.randint(0, 2)][bad[0]] = bad[1]
    elif kind != "valid":
        arguments[kind] = bad
    return (stable, runs), arguments


def items_of(runs):
    return [(case, outcome) for method_runs in values(runs) for run in values(method_runs) if isinstance(run, dict)
            for case, outcome in run.items()]


def unit_clauses(name):
    return {f"{name} a bool": lambda *a, **k: is_bool(k.get(name)),
            f"{name} <= 0 or above 1": lambda *a, **k: not is_bool(k.get(name)) and isinstance(k.get(name), (int, float))
            and not not_finite(k[name]) and not 0 < k[name] <= 1,
            f"{name} not finite": lambda *a, **k: not_finite(k.get(name)),
            f"{name} not a number": lambda *a, **k: not_a_number(k.get(name))}


reference.agrees("baseline_gap_report", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "stable_failures not a list or tuple": lambda stable, *rest, **kw: not isinstance(stable, (list, tuple)),
    "a stable id that is not a str": lambda stable, *rest, **kw: any(not_a_str(c) for c in values(stable)),
    "a blank stable id": lambda stable, *rest, **kw: any(is_blank(c) for c in values(stable)),
    "a duplicate stable id": lambda stable, *rest, **kw: isinstance(stable, list) and len(set(map(repr, stable))) < len(stable),
    "baseline_runs not a dict": lambda stable, runs, **kw: not isinstance(runs, dict),
    "a method name that is not a str": lambda stable, runs, **kw: any(not_a_str(m) for m in keys(runs)),
    "a blank method name": lambda stable, runs, **kw: any(is_blank(m) for m in keys(runs)),
    "a method's runs not a list or tuple": lambda stable, runs, **kw: any(
        not isinstance(r, (list, tuple)) for r in values(runs)),
    "a run that is not a dict": lambda stable, runs, **kw: any(
        not isinstance(run, dict) for r in values(runs) if isinstance(r, (list, tuple)) for run in r),
    "a bad case id in a run": lambda stable, runs, **kw: any(not_a_str(c) or is_blank(c) for c, _ in items_of(runs)),
    "a non-bool outcome of a stable case": lambda stable, runs, **kw: any(
        not is_bool(o) and c in values(stable) for c, o in items_of(runs)),
    "a non-bool outcome of a case that is not stable": lambda stable, runs, **kw: any(
        not is_bool(o) and c not in values(stable) for c, o in items_of(runs)),
    "min_repeats a bool": lambda *a, **k: is_bool(k.get("min_repeats")),
    "min_repeats not an int >= 2": lambda *a, **k: not is_bool(k.get("min_repeats")) and (
        not isinstance(k.get("min_repeats"), int) or k["min_repeats"] < 2),
    **unit_clauses("fix_rate"), **unit_clauses("required_fraction"),
})

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
@st.composite
def rounding_boundaries(draw):
    """mixed groups / groups == min_mixed_group_share, while 1 - uniform groups / groups rounds below it."""
    mixed, count, share = draw(st.sampled_from([(1, 5, 0.2), (1, 10, 0.1), (2, 10, 0.2)]))
    groups = draw(st.permutations([[True, False]] * mixed + [[True, True]] * (count - mixed)))
    return ({"stable": ["q1"]}, {"ranking": ["few_shot"], "closing_methods": []}, {"format_ok": True, "groups": groups},
            {"verifiable_rewards": draw(st.integers(2, 5))}, 2, share)


def mixed_count(sft):
    return sum(1 for group in sft["groups"] if True in group and False in group)


reference.agrees("choose_entry_stage", st.one_of(st.tuples(
    st.fixed_dictionaries({"stable": st.sampled_from([[], ["q1"], ("q1", "q2"), ()])}),
    st.fixed_dictionaries({"ranking": names, "closing_methods": names}),
    sft, feedback, st.integers(1, 4), st.sampled_from([0.25, 0.5, 1 / 3, 2 / 3, 0.75, 1, 1.0, 0.2])),
    rounding_boundaries()), cases=200, clauses={
    "no SFT model": lambda f, b, sft, *rest: sft is None,
    "SFT below the bar": lambda f, b, sft, *rest: sft is not None and sft["format_ok"] is False,
    "only uniform groups": lambda f, b, sft, *rest: sft is not None and mixed_count(sft) == 0,
    "a mixed share exactly at the threshold": lambda f, b, sft, fb, items, share: sft is not None and mixed_count(
        sft) / len(sft["groups"]) == share,
    "a mixed share at the threshold that 1 - uniform share rounds below": lambda f, b, sft, fb, items, share:
        sft is not None and mixed_count(sft) / len(sft["groups"]) == share > 1 - (
            len(sft["groups"]) - mixed_count(sft)) / len(sft["groups"]),
    "a count exactly at min_items": lambda f, b, sft, fb, items, share: items in fb.values(),
    "groups given as a tuple": lambda f, b, sft, *rest: sft is not None and isinstance(sft["groups"], tuple),
    "a stable list given as a tuple": lambda f, *rest: isinstance(f["stable"], tuple),
    "several reasons at once": lambda f, b, *rest: not f["stable"] and (bool(b["closing_methods"]) or not b["ranking"]),
    "verifiable rewards usable but too few mixed groups": lambda f, b, sft, fb, items, share: sft is not None
        and sft["format_ok"] and fb.get("verifiable_rewards", 0) >= items and mixed_count(sft) / len(sft["groups"]) < share,
})

# %% hidden exercise=choose_entry_stage points=2 name=agrees_with_reference_on_generated_invalid_requests
# hint: one wrong thing anywhere (a report without its list, an SFT baseline with a missing or extra key, a one-answer group, 0/1 for outcomes, a shape spelt another way, a bool or float count, NaN): the same ValueError as the contract says.
from hypothesis import strategies as st

shapes = ["demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards"]
from tools.course.grader.clauses import each_of, is_bool, keys, values

junk = [None, True, 0, 1.0, float("nan"), "", "q1", {}, {"q1"}]
defects = ([("valid", n) for n in range(40)] + [("failures", bad) for bad in junk + [{"stable": "q1"}, {"stable": None}, {"flaky": []}, {"stable": {"q1"}}]]
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

def one_defect(defect, rng):
    """A valid request, or one with exactly this defect."""
    kind, bad = defect
    groups = [[True, False], [True, True, True]]
    arguments = {"failures": {"stable": ["q1"]}, "tried": {"ranking": ["few_shot"], "closing_methods": []},
                 "sft": {"format_ok": rng.random() < 0.5, "groups": groups},
                 "feedback": {"verifiable_rewards": 5, "demonstrations": 1}, "min_items": 3, "share": 0.25}
    if kind in ("format_ok", "groups"):
        arguments["sft"][kind] = bad
    elif kind == "group":
        groups.insert(rng.randint(0, 2), bad)
    elif kind == "outcome":
        groups.insert(rng.randint(0, 2), [True, bad] if rng.random() < 0.5 else [bad, False])
    elif kind == "shape":
        arguments["feedback"][bad] = 5
    elif kind == "count":
        arguments["feedback"][rng.choice(shapes)] = bad
    elif kind != "valid":
        arguments[kind] = bad
    return tuple(arguments.values())


def report_list_bad(report, key):
    return not isinstance(report, dict) or not isinstance(report.get(key), (list, tuple))


def sft_groups(sft):
    return sft.get("groups") if isinstance(sft, dict) else None


reference.agrees("choose_entry_stage", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "failure_report without its stable list": lambda f, *rest: report_list_bad(f, "stable"),
    "baseline_report without its ranking list": lambda f, b, *rest: report_list_bad(b, "ranking"),
    "baseline_report without its closing_methods list": lambda f, b, *rest: report_list_bad(b, "closing_methods"),
    "sft_baseline neither None nor a dict": lambda f, b, sft, *rest: sft is not None and not isinstance(sft, dict),
    "sft_baseline with a missing key": lambda f, b, sft, *rest: isinstance(sft, dict) and bool(
        {"format_ok", "groups"} - set(sft)),
    "sft_baseline with an extra key": lambda f, b, sft, *rest: isinstance(sft, dict) and bool(
        set(sft) - {"format_ok", "groups"}),
    "format_ok not a bool": lambda f, b, sft, *rest: isinstance(sft, dict) and "format_ok" in sft and not is_bool(
        sft["format_ok"]),
    "groups not a non-empty list or tuple": lambda f, b, sft, *rest: isinstance(sft, dict) and "groups" in sft and (
        not isinstance(sft["groups"], (list, tuple)) or not sft["groups"]),
    "a group that is not a list or tuple": lambda f, b, sft, *rest: any(
        not isinstance(g, (list, tuple)) for g in values(sft_groups(sft))),
    "a group of fewer than 2 outcomes": lambda f, b, sft, *rest: any(
        isinstance(g, (list, tuple)) and len(g) < 2 for g in values(sft_groups(sft))),
    "an outcome that is not a bool": lambda f, b, sft, *rest: any(
        isinstance(g, (list, tuple)) and not all(is_bool(o) for o in g) for g in values(sft_groups(sft))),
    "feedback not a dict": lambda f, b, sft, fb, *rest: not isinstance(fb, dict),
    "an unknown feedback shape": lambda f, b, sft, fb, *rest: any(s not in shapes for s in keys(fb)),
    "a count that is a bool": lambda f, b, sft, fb, *rest: any(is_bool(c) for c in values(fb)),
    "a count that is not an int >= 0": lambda f, b, sft, fb, *rest: any(
        not is_bool(c) and (not isinstance(c, int) or c < 0) for c in values(fb)),
    "min_items a bool": lambda *call: is_bool(call[4]),
    "min_items not an int >= 1": lambda *call: not is_bool(call[4]) and (not isinstance(call[4], int) or call[4] < 1),
    "min_mixed_group_share a bool": lambda *call: is_bool(call[5]),
    "min_mixed_group_share outside (0, 1] or not a finite number": lambda *call: not is_bool(call[5]) and not (
        isinstance(call[5], (int, float)) and 0 < call[5] <= 1),
})
