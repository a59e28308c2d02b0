# mutant: gate_only_raise
# exercise: whiten_and_gate
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def whiten_and_gate(advantages, response_mask, kl, kl_coef, scores, max_kl_share=0.5):
    raise ValueError("not implemented")
