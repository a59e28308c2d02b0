# mutant: leaks_raises
# exercise: find_leaks
# mistake: raises on every input.
def find_leaks(splits, priority):
    raise ValueError("cannot check")
