# mutant: only_minimum_repeats_validated
# exercise: decide_strategy_handoff
# mistake: checks minimum_repeats and the baseline's presence but not the records themselves, so an unknown status, a repeated name or a bool count goes through.
def decide_strategy_handoff(candidates, minimum_repeats=3):
    if type(minimum_repeats) is not int or minimum_repeats < 1:
        raise ValueError("minimum_repeats")
    by_name = {c["name"]: c for c in candidates}
    if "baseline" not in by_name:
        raise ValueError("no baseline")
    out = {"status": None, "reason": None, "eligible_candidates": [], "rerun_candidates": [],
           "failed_candidates": [c["name"] for c in candidates if c["status"] in ("oom", "failed")]}
    base = by_name["baseline"]
    if base["status"] != "ok" or base["successful_runs"] < minimum_repeats:
        out["rerun_candidates"].append("baseline")
    for c in candidates:
        if c["name"] == "baseline" or c["status"] in ("oom", "failed"):
            continue
        if c["status"] != "ok" or c["successful_runs"] < minimum_repeats:
            out["rerun_candidates"].append(c["name"])
    if out["rerun_candidates"]:
        out.update(status="rerun_required", reason="incomplete_repeats",
                   next_action="repeat_paired_runs_with_a_new_label")
        return out
    for c in candidates:
        peak = c.get("peak_memory_mb")
        if c["name"] != "baseline" and c["status"] == "ok" and c.get("execution_path_verified") is True \
                and type(peak) in (int, float) and math.isfinite(peak):
            out["eligible_candidates"].append(c["name"])
    if out["eligible_candidates"]:
        out.update(status="ready_for_budget_review", reason="paired_evidence_complete",
                   next_action="send_to_75_memory_budget")
    else:
        out.update(status="no_valid_candidate", reason="no_measured_verified_candidate",
                   next_action="repair_strategy_execution_or_measure_on_a_gpu")
    return out
