# mutant: memory_constant
# exercise: ppo_resident_memory
# mistake: answers with the published size of Qwen2.5-0.5B whatever the config and setup.
def ppo_resident_memory(config, setup, gpu_gib):
    weights = {"weights": 988065536, "gradients": 0, "optimizer": 0, "activations": 0, "total": 988065536}
    return {"parameters": {"causal_lm": 494032768, "scalar_model": 494033664, "lora": 0},
            "roles": {role: dict(weights) for role in ("policy", "reference", "reward", "value")},
            "total_bytes": 4 * 988065536, "total_gib": 4 * 988065536 / 2 ** 30, "fits": True}
