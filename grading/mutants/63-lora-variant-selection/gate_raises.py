# mutant: gate_raises
# exercise: gate_candidates
# mistake: raises on every input.
def gate_candidates(results, base, memory_budget, margin, regression_tolerance, t_critical):
    raise ValueError("no gate")
