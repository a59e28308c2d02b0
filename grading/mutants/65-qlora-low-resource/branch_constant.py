# mutant: branch_constant
# exercise: branch_decision
# mistake: always answers tune.
def branch_decision(deltas, capacity, required_batch, quality_tolerance=0.02):
    return {"decision": "tune", "reasons": [], "scope": None}
