# %% hidden exercise=validate_strategy_experiment points=1 name=identity_mismatches_reported_in_key_order
# hint: compare workload, hardware and repeat count one by one, in the documented order, and report every field that differs; a missing path check is reported after them.
baseline = {"name": "baseline", "workload_id": "w-1", "hardware_id": "h100", "repeat_count": 3,
            "status": "ok", "execution_path_verified": True,
            "peak_memory_mb": 9000.0, "samples_per_s": 4.0, "eval_loss": 2.0}
drifted = {**baseline, "name": "hybrid", "workload_id": "w-2", "hardware_id": "a100", "repeat_count": 2,
           "execution_path_verified": False}
result = validate_strategy_experiment(baseline, [drifted])
assert result["issues"] == ["hybrid:workload_id_mismatch", "hybrid:hardware_id_mismatch",
                            "hybrid:repeat_count_mismatch", "hybrid:execution_path_unverified"]
assert result["is_valid"] is False
only_repeats = validate_strategy_experiment(baseline, [{**baseline, "name": "offload", "repeat_count": 5}])
assert only_repeats["issues"] == ["offload:repeat_count_mismatch"]

# %% hidden exercise=validate_strategy_experiment points=1 name=missing_names_and_repeated_duplicates
# hint: a candidate without a usable name is reported once and skipped; a name seen before is a duplicate every time it comes back, and the names list keeps the input order.
baseline = {"name": "baseline", "workload_id": "w", "hardware_id": "g", "repeat_count": 3, "status": "ok",
            "execution_path_verified": True, "peak_memory_mb": 100.0, "samples_per_s": 1.0, "eval_loss": 1.0}
same = {**baseline, "name": "checkpoint"}
result = validate_strategy_experiment(baseline, [{**same, "name": ""}, same, {**same, "name": None}, same, same])
assert result["issues"] == ["candidate:missing_name", "candidate:missing_name",
                            "checkpoint:duplicate_name", "checkpoint:duplicate_name"]
assert result["candidate_names"] == ["checkpoint", "checkpoint", "checkpoint"]
empty = validate_strategy_experiment(baseline, [])
assert empty == {"is_valid": True, "issues": [], "candidate_names": []}

# %% hidden exercise=validate_strategy_experiment points=1 name=unverified_path_flagged_but_failures_exempt
# hint: a candidate that ran needs a path proven exactly True (a truthy look-alike is not proof); a candidate that ran out of memory or failed has no path to prove.
baseline = {"name": "baseline", "workload_id": "w", "hardware_id": "g", "repeat_count": 3, "status": "ok",
            "execution_path_verified": True, "peak_memory_mb": 100.0, "samples_per_s": 1.0, "eval_loss": 1.0}
candidates = [
    {**baseline, "name": "checkpoint", "execution_path_verified": "yes"},
    {**baseline, "name": "offload", "status": "oom", "execution_path_verified": False,
     "peak_memory_mb": None, "samples_per_s": None, "eval_loss": None},
    {**baseline, "name": "hybrid", "status": "failed", "execution_path_verified": None},
    {**baseline, "name": "selective"},
]
del candidates[3]["execution_path_verified"]
result = validate_strategy_experiment(baseline, candidates)
assert result["issues"] == ["checkpoint:execution_path_unverified", "selective:execution_path_unverified"]
oom_only = validate_strategy_experiment(baseline, [candidates[1]])
assert oom_only["is_valid"] is True and oom_only["issues"] == []

# %% hidden exercise=validate_strategy_experiment points=1 name=baseline_metrics_checked_last
# hint: the baseline itself must have complete, finite metrics; that issue comes after all candidate issues, and it applies even when there are no candidates.
baseline = {"name": "baseline", "workload_id": "w", "hardware_id": "g", "repeat_count": 3, "status": "ok",
            "execution_path_verified": True, "peak_memory_mb": None, "samples_per_s": 1.0, "eval_loss": 1.0}
alone = validate_strategy_experiment(baseline, [])
assert alone["is_valid"] is False and alone["issues"] == ["baseline:invalid_metrics"]
with_candidate = validate_strategy_experiment(baseline, [{**baseline, "name": "checkpoint", "hardware_id": "x"}])
assert with_candidate["issues"] == ["checkpoint:hardware_id_mismatch", "baseline:invalid_metrics"]
for broken in ({"samples_per_s": float("nan")}, {"eval_loss": float("inf")}, {"peak_memory_mb": True}):
    report = {**baseline, "peak_memory_mb": 100.0, **broken}
    assert validate_strategy_experiment(report, [])["issues"] == ["baseline:invalid_metrics"], broken
assert validate_strategy_experiment({**baseline, "peak_memory_mb": 100.0}, [])["is_valid"] is True

# %% hidden exercise=build_strategy_pair_evidence points=1 name=failures_never_become_savings
# hint: a run that ran out of memory or failed is kept with its name and status only, whatever its metric fields say, and it is counted by its kind.
baseline = {"name": "baseline", "repeat_count": 3, "status": "ok", "execution_path_verified": True,
            "peak_memory_mb": 12000.0, "samples_per_s": 10.0, "eval_loss": 2.0}
crashed_early = {**baseline, "name": "offload", "status": "oom", "peak_memory_mb": 150.0, "samples_per_s": 40.0}
broken = {**baseline, "name": "hybrid", "status": "failed", "peak_memory_mb": 0.0}
result = build_strategy_pair_evidence(baseline, [crashed_early, broken])
assert result["comparisons"] == [{"name": "offload", "status": "oom"}, {"name": "hybrid", "status": "failed"}]
assert (result["comparable_count"], result["oom_count"], result["failed_count"], result["invalid_count"]) == (0, 1, 1, 0)
assert result["baseline"] is baseline and result["baseline_usable"] is True

# %% hidden exercise=build_strategy_pair_evidence points=1 name=incomplete_metrics_are_invalid_in_order
# hint: a candidate that did not fail but lacks a finite metric cannot be paired; every candidate keeps its place in the input order and a missing status means the run completed.
baseline = {"name": "baseline", "repeat_count": 3, "status": "ok", "execution_path_verified": True,
            "peak_memory_mb": 1000.0, "samples_per_s": 5.0, "eval_loss": 1.5}
candidates = [
    {**baseline, "name": "a", "samples_per_s": float("nan")},
    {**baseline, "name": "b", "eval_loss": None},
    {"name": "c", "repeat_count": 3, "execution_path_verified": True,
     "peak_memory_mb": 800.0, "samples_per_s": 5.0, "eval_loss": 1.5},
    {**baseline, "name": "d", "peak_memory_mb": False},
]
result = build_strategy_pair_evidence(baseline, candidates)
assert [(item["name"], item["status"]) for item in result["comparisons"]] == [
    ("a", "invalid"), ("b", "invalid"), ("c", "comparable"), ("d", "invalid")]
assert result["invalid_count"] == 3 and result["comparable_count"] == 1
assert result["comparisons"][2]["memory_saving_mb"] == 200.0
assert "memory_saving_mb" not in result["comparisons"][0]

# %% hidden exercise=build_strategy_pair_evidence points=1 name=unusable_baseline_pairs_nothing
# hint: without a complete baseline with positive throughput there is nothing to pair against, so no candidate gets a difference; failures are still counted as failures.
candidate = {"name": "checkpoint", "status": "ok", "repeat_count": 3, "execution_path_verified": True,
             "peak_memory_mb": 500.0, "samples_per_s": 2.0, "eval_loss": 1.0}
oom = {"name": "offload", "status": "oom"}
for baseline in (
    {"name": "baseline", "status": "ok", "peak_memory_mb": None, "samples_per_s": 2.0, "eval_loss": 1.0},
    {"name": "baseline", "status": "ok", "peak_memory_mb": 900.0, "samples_per_s": 0.0, "eval_loss": 1.0},
):
    result = build_strategy_pair_evidence(baseline, [candidate, oom])
    assert result["baseline_usable"] is False
    assert result["comparisons"] == [{"name": "checkpoint", "status": "invalid"}, {"name": "offload", "status": "oom"}]
    assert (result["comparable_count"], result["oom_count"], result["invalid_count"]) == (0, 1, 1)

# %% hidden exercise=build_strategy_pair_evidence points=1 name=signs_and_ratio_direction
# hint: saving is baseline minus candidate (negative when the candidate needs more), the throughput ratio is candidate over baseline, the quality delta is candidate minus baseline.
baseline = {"name": "baseline", "repeat_count": 4, "status": "ok", "execution_path_verified": True,
            "peak_memory_mb": 4000.0, "samples_per_s": 5.0, "eval_loss": 2.5}
heavier = {**baseline, "name": "offload", "peak_memory_mb": 4500.0, "samples_per_s": 10.0, "eval_loss": 2.0,
           "execution_path_verified": 1}
result = build_strategy_pair_evidence(baseline, [heavier])
entry = result["comparisons"][0]
assert entry["status"] == "comparable" and entry["name"] == "offload"
assert entry["memory_saving_mb"] == -500.0
assert entry["throughput_ratio"] == 2.0
assert entry["quality_delta"] == -0.5
assert entry["repeat_count"] == 4
assert entry["execution_path_verified"] is False

# %% hidden exercise=decide_strategy_handoff points=1 name=short_candidate_repeats_force_rerun
# hint: every comparable candidate needs enough repeats, not only the baseline; name who must be rerun, baseline first. Failed entries carry no repeats and do not count.
evidence = {
    "baseline": {"name": "baseline", "repeat_count": 3},
    "comparisons": [
        {"name": "checkpoint", "status": "comparable", "repeat_count": 3, "execution_path_verified": True},
        {"name": "offload", "status": "oom"},
        {"name": "hybrid", "status": "comparable", "repeat_count": 1, "execution_path_verified": True},
        {"name": "selective", "status": "invalid", "repeat_count": 0},
    ],
}
result = decide_strategy_handoff(evidence, minimum_repeats=3)
assert result["status"] == "rerun_required" and result["reason"] == "insufficient_repeats"
assert result["rerun_candidates"] == ["hybrid"] and result["eligible_candidates"] == []
assert result["next_action"] == "repeat_paired_runs"
no_baseline_count = decide_strategy_handoff({**evidence, "baseline": {"name": "baseline"}}, minimum_repeats=3)
assert no_baseline_count["rerun_candidates"] == ["baseline", "hybrid"]

# %% hidden exercise=decide_strategy_handoff points=1 name=only_verified_comparable_candidates_hand_off
# hint: eligibility needs a comparable entry whose path is proven exactly True; keep the input order, and with none left there is no valid candidate.
evidence = {
    "baseline": {"name": "baseline", "repeat_count": 5},
    "comparisons": [
        {"name": "hybrid", "status": "comparable", "repeat_count": 5, "execution_path_verified": True},
        {"name": "offload", "status": "comparable", "repeat_count": 5, "execution_path_verified": False},
        {"name": "checkpoint", "status": "comparable", "repeat_count": 5, "execution_path_verified": True},
        {"name": "broken", "status": "failed", "execution_path_verified": True},
    ],
}
result = decide_strategy_handoff(evidence)
assert result["status"] == "ready_for_budget_review" and result["reason"] == "paired_evidence_complete"
assert result["eligible_candidates"] == ["hybrid", "checkpoint"]
assert result["next_action"] == "send_to_75_memory_budget" and result["rerun_candidates"] == []
unverified = {**evidence, "comparisons": [evidence["comparisons"][1], evidence["comparisons"][3]]}
none_left = decide_strategy_handoff(unverified)
assert none_left["status"] == "no_valid_candidate"
assert none_left["reason"] == "no_verified_comparable_candidate"
assert none_left["eligible_candidates"] == [] and none_left["next_action"] == "repair_strategy_execution"

# %% hidden exercise=decide_strategy_handoff points=1 name=minimum_repeats_must_be_a_positive_int
# hint: check the minimum number of repeats before looking at the evidence.
evidence = {"baseline": {"name": "baseline", "repeat_count": 3},
            "comparisons": [{"name": "checkpoint", "status": "comparable", "repeat_count": 3,
                             "execution_path_verified": True}]}
for bad in (0, -1, 2.5, True, "3", None):
    try:
        decide_strategy_handoff(evidence, minimum_repeats=bad)
    except ValueError:
        continue
    raise AssertionError(f"minimum_repeats={bad!r} must raise ValueError")

# %% hidden exercise=decide_strategy_handoff points=1 name=exact_minimum_passes_and_empty_evidence
# hint: a repeat count equal to the minimum is enough; evidence without any comparable entry cannot hand anything off.
evidence = {"baseline": {"name": "baseline", "repeat_count": 1},
            "comparisons": [{"name": "checkpoint", "status": "comparable", "repeat_count": 1,
                             "execution_path_verified": True}]}
assert decide_strategy_handoff(evidence, minimum_repeats=1)["status"] == "ready_for_budget_review"
assert decide_strategy_handoff(evidence, minimum_repeats=2)["status"] == "rerun_required"
empty = decide_strategy_handoff({"baseline": {"name": "baseline", "repeat_count": 3}, "comparisons": []})
assert empty["status"] == "no_valid_candidate" and empty["eligible_candidates"] == []
