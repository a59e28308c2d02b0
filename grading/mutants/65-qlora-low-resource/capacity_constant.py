# mutant: capacity_constant
# exercise: capacity_gain
# mistake: always claims the original course's 1.5B result.
def capacity_gain(ladders, memory_budget):
    return {"largest": {"bf16": 4, "nf4": 8}, "measured": True, "gain": 2.0, "capacity_gained": True}
