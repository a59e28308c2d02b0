# mutant: repeats_not_checked
# exercise: decide_strategy_handoff
# mistake: skips the repeat-count gate, so a single lucky run is handed to the budget project as if it were paired evidence.
def decide_strategy_handoff(evidence, minimum_repeats=3):
    if isinstance(minimum_repeats, bool) or not isinstance(minimum_repeats, int) or minimum_repeats < 1:
        raise ValueError("minimum_repeats must be an int >= 1")
    comparable = [item for item in evidence.get("comparisons", []) if item.get("status") == "comparable"]
    eligible = [item["name"] for item in comparable if item.get("execution_path_verified") is True]
    if not eligible:
        return {"status": "no_valid_candidate", "reason": "no_verified_comparable_candidate",
                "eligible_candidates": [], "rerun_candidates": [], "next_action": "repair_strategy_execution"}
    return {"status": "ready_for_budget_review", "reason": "paired_evidence_complete",
            "eligible_candidates": eligible, "rerun_candidates": [], "next_action": "send_to_75_memory_budget"}
