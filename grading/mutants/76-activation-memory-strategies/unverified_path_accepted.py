# mutant: unverified_path_accepted
# exercise: decide_strategy_handoff
# mistake: hands off every comparable candidate, including one whose declared strategy was never observed to run.
def decide_strategy_handoff(evidence, minimum_repeats=3):
    if isinstance(minimum_repeats, bool) or not isinstance(minimum_repeats, int) or minimum_repeats < 1:
        raise ValueError("minimum_repeats must be an int >= 1")
    comparable = [item for item in evidence.get("comparisons", []) if item.get("status") == "comparable"]
    short = ["baseline"] if (evidence.get("baseline") or {}).get("repeat_count", 0) < minimum_repeats else []
    short += [item["name"] for item in comparable if item.get("repeat_count", 0) < minimum_repeats]
    if short:
        return {"status": "rerun_required", "reason": "insufficient_repeats", "eligible_candidates": [],
                "rerun_candidates": short, "next_action": "repeat_paired_runs"}
    eligible = [item["name"] for item in comparable]
    if not eligible:
        return {"status": "no_valid_candidate", "reason": "no_verified_comparable_candidate",
                "eligible_candidates": [], "rerun_candidates": [], "next_action": "repair_strategy_execution"}
    return {"status": "ready_for_budget_review", "reason": "paired_evidence_complete",
            "eligible_candidates": eligible, "rerun_candidates": [], "next_action": "send_to_75_memory_budget"}
