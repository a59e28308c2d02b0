# mutant: comparability_raises
# exercise: comparable_candidates
# mistake: raises on every input.
def comparable_candidates(runs, variable, baseline, seeds):
    raise ValueError("not comparable")
