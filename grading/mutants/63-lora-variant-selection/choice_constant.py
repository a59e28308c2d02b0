# mutant: choice_constant
# exercise: choose_candidate
# mistake: always accepts the smallest rank.
def choose_candidate(gated):
    return {"decision": "accept", "chosen": 4, "ranking": [4], "reason": "cheapest_feasible"}
