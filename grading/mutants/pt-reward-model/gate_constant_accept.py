# mutant: gate_constant_accept
# exercise: reward_model_gate
# mistake: always accepts.
def reward_model_gate(candidate, control, min_gap=0.25, max_ece=0.1):
    return {"gap": 0.5, "reasons": [], "decision": "accept_mechanism"}
