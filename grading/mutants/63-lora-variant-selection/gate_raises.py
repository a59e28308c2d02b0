# mutant: gate_raises
# exercise: gate_candidates
# mistake: raises on every input.
def gate_candidates(results, memory_budget, band_floor, spread_factor=2.0):
    raise ValueError("no gate")
