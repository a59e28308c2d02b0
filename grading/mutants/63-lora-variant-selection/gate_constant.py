# mutant: gate_constant
# exercise: gate_candidates
# mistake: returns the same gates whatever the results are.
def gate_candidates(results, memory_budget, band_floor, spread_factor=2.0):
    return {"best_mean": None, "band": None, "candidates": {}}
