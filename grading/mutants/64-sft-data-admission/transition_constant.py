# mutant: transition_constant
# exercise: admission_transition
# mistake: always hands off, whatever the line's history says.
def admission_transition(history, admission, max_repairs=2):
    return {"state": "accept", "reason": "verdict", "round": 1, "next_action": "hand_off", "history": [admission]}
