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

# %% hidden exercise=choose_entry_stage points=1 name=online_rl_needs_mixed_outcomes
# hint: online RL learns from differences between rewards; a baseline that always fails (or always passes) gives none, and a usable alternative still counts.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
mixed = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.25}, {"verifiable_rewards": 400})
assert mixed["decision"] == "proceed" and mixed["stage"] == "online_rl" and mixed["reasons"] == []
never = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.0}, {"verifiable_rewards": 400})
assert never["decision"] == "hold" and never["stage"] is None and never["candidate_stage"] is None
assert never["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
always = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 1}, {"verifiable_rewards": 400})
assert always["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
with_demos = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.0},
                                {"verifiable_rewards": 400, "demonstrations": 250})
assert with_demos["decision"] == "proceed" and with_demos["stage"] == "sft"

# %% hidden exercise=choose_entry_stage points=1 name=sft_must_be_ready_before_later_stages
# hint: preference optimisation and online RL start from a working SFT model; until then the only entry is SFT, and it needs demonstrations.
failures = {"stable": ["q1", "q2"]}
tried = {"ranking": ["retrieval"], "closing_methods": []}
rich = {"pairwise_preferences": 5000, "binary_feedback": 5000, "verifiable_rewards": 5000}
broken = choose_entry_stage(failures, tried, {"format_ok": False, "pass_rate": 0.4}, rich)
assert broken["sft_status"] == "below_bar" and broken["candidate_stage"] is None
assert broken["decision"] == "hold" and broken["reasons"] == [{"level": "hold", "code": "needs_demonstrations"}]
absent = choose_entry_stage(failures, tried, None, dict(rich, demonstrations=120))
assert absent["sft_status"] == "absent" and absent["stage"] == "sft"
assert absent["usable_feedback"] == ["demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards"]
binary_only = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.5}, {"binary_feedback": 300})
assert binary_only["stage"] == "preference"
nothing = choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.5}, {})
assert nothing["decision"] == "hold" and nothing["reasons"] == [{"level": "hold", "code": "no_usable_feedback"}]

# %% hidden exercise=choose_entry_stage points=1 name=min_items_is_inclusive
# hint: a shape with exactly the minimum number of items is usable; one item fewer is not.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
ready = {"format_ok": True, "pass_rate": 0.3}
at_limit = choose_entry_stage(failures, tried, ready, {"pairwise_preferences": 50, "demonstrations": 49}, min_items=50)
assert at_limit["usable_feedback"] == ["pairwise_preferences"] and at_limit["stage"] == "preference"
below = choose_entry_stage(failures, tried, ready, {"pairwise_preferences": 49, "demonstrations": 49}, min_items=50)
assert below["usable_feedback"] == [] and below["decision"] == "hold"
assert below["reasons"] == [{"level": "hold", "code": "no_usable_feedback"}]

# %% hidden exercise=choose_entry_stage points=1 name=every_reason_kept_and_stage_only_on_proceed
# hint: collect all reasons in the documented order before deciding; the candidate stage is reported even when the decision blocks it.
untried = {"ranking": [], "closing_methods": []}
closed = {"ranking": ["few_shot"], "closing_methods": ["few_shot"]}
held = choose_entry_stage({"stable": ["q1"]}, untried, None, {})
assert held["decision"] == "hold"
assert held["reasons"] == [{"level": "hold", "code": "baseline_not_tried"},
                           {"level": "hold", "code": "needs_demonstrations"}]
everything = choose_entry_stage({"stable": []}, untried, {"format_ok": True, "pass_rate": 0.0},
                                {"verifiable_rewards": 100})
assert everything["decision"] == "reject"
assert everything["reasons"] == [{"level": "reject", "code": "no_stable_failure"},
                                 {"level": "hold", "code": "baseline_not_tried"},
                                 {"level": "hold", "code": "no_reward_variance"}]
shipped = choose_entry_stage({"stable": ["q1"]}, closed, {"format_ok": True, "pass_rate": 0.5},
                             {"pairwise_preferences": 800})
assert shipped["decision"] == "reject" and shipped["candidate_stage"] == "preference" and shipped["stage"] is None
assert shipped["reasons"] == [{"level": "reject", "code": "baseline_closes_gap"}]

# %% hidden exercise=choose_entry_stage points=1 name=invalid_stage_inputs_raise
# hint: check both reports, the SFT baseline, every feedback shape and count, and min_items before deciding.
failures = {"stable": ["q1"]}
tried = {"ranking": ["few_shot"], "closing_methods": []}
ready = {"format_ok": True, "pass_rate": 0.5}
bad_calls = [
    lambda: choose_entry_stage({}, tried, ready, {}),
    lambda: choose_entry_stage({"stable": "q1"}, tried, ready, {}),
    lambda: choose_entry_stage(failures, {"ranking": []}, ready, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": 1, "pass_rate": 0.5}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 1.5}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": float("nan")}, {}),
    lambda: choose_entry_stage(failures, tried, {"format_ok": True, "pass_rate": 0.5, "extra": 1}, {}),
    lambda: choose_entry_stage(failures, tried, "ready", {}),
    lambda: choose_entry_stage(failures, tried, ready, [("demonstrations", 10)]),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": -1}),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": 10.0}),
    lambda: choose_entry_stage(failures, tried, ready, {"demonstrations": True}),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_items=0),
    lambda: choose_entry_stage(failures, tried, ready, {}, min_items=True),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")
