# mutant: deltas_raises
# exercise: paired_deltas
# mistake: raises on every input.
def paired_deltas(nf4_runs, bf16_runs):
    raise ValueError("cannot pair")
