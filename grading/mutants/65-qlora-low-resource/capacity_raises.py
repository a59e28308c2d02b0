# mutant: capacity_raises
# exercise: capacity_gain
# mistake: raises on every input.
def capacity_gain(ladders, memory_budget):
    raise ValueError("no ladder")
