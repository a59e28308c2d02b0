# mutant: merge_constant
# exercise: merge_blockers
# mistake: returns the same answer for every input.
def merge_blockers(findings, split_sizes, frozen=(), max_drop_fraction=0.1, min_records=1):
    return {"verdict": "accept", "blockers": [], "repair": {}}
