# mutant: branch_raises
# exercise: branch_decision
# mistake: raises on every input.
def branch_decision(deltas, capacity, required_batch, quality_tolerance=0.02):
    raise ValueError("no decision")
