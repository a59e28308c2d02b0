# mutant: memory_only_raise
# exercise: ppo_resident_memory
# mistake: a body that only raises ValueError, to prove the invalid-input tests give it no points.
def ppo_resident_memory(config, setup, gpu_gib):
    raise ValueError("not implemented")
