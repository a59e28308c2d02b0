# mutant: gate_constant_accept
# exercise: whiten_and_gate
# mistake: returns the input as "whitened" and always accepts.
def whiten_and_gate(advantages, response_mask, kl, kl_coef, scores, max_kl_share=0.5):
    return {"whitened": advantages, "advantage_mean": 0.0, "advantage_std": 1.0, "kl_share": 0.0,
            "reasons": [], "decision": "accept"}
