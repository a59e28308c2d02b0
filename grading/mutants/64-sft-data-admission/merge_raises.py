# mutant: merge_raises
# exercise: merge_blockers
# mistake: raises on every input (a body that only refuses must earn nothing).
def merge_blockers(findings, split_sizes, frozen=(), max_drop_fraction=0.1, min_records=1):
    raise ValueError("not admitted")
