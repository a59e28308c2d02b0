# mutant: deltas_constant
# exercise: paired_deltas
# mistake: reports no pair whatever the runs say.
def paired_deltas(nf4_runs, bf16_runs):
    return {"paired": [], "unpaired": [], "per_seed": {},
            "mean": {"memory_change": None, "step_time_change": None, "quality_delta": None}}
