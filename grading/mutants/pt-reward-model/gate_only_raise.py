# mutant: gate_only_raise
# exercise: reward_model_gate
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def reward_model_gate(candidate, control, min_gap=0.25, max_ece=0.1):
    raise ValueError("not implemented")
