# mutant: baseline_repeats_only
# exercise: decide_strategy_handoff
# mistake: checks the baseline's repeat count but not the candidates', so a candidate measured once still hands off.
def decide_strategy_handoff(evidence, minimum_repeats=3):
    if isinstance(minimum_repeats, bool) or not isinstance(minimum_repeats, int) or minimum_repeats < 1:
        raise ValueError("minimum_repeats must be an int >= 1")
    if (evidence.get("baseline") or {}).get("repeat_count", 0) < minimum_repeats:
        return {"status": "rerun_required", "reason": "insufficient_repeats", "eligible_candidates": [],
                "rerun_candidates": ["baseline"], "next_action": "repeat_paired_runs"}
    comparable = [item for item in evidence.get("comparisons", []) if item.get("status") == "comparable"]
    eligible = [item["name"] for item in comparable if item.get("execution_path_verified") is True]
    if not eligible:
        return {"status": "no_valid_candidate", "reason": "no_verified_comparable_candidate",
                "eligible_candidates": [], "rerun_candidates": [], "next_action": "repair_strategy_execution"}
    return {"status": "ready_for_budget_review", "reason": "paired_evidence_complete",
            "eligible_candidates": eligible, "rerun_candidates": [], "next_action": "send_to_75_memory_budget"}
