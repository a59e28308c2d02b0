# mutant: gate_constant
# exercise: gate_candidates
# mistake: returns the same gates whatever the results are.
def gate_candidates(results, base, memory_budget, margin, regression_tolerance, t_critical):
    return {"best": None, "best_mean": None, "candidates": {}}
