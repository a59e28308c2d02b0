# mutant: comparability_constant
# exercise: comparable_candidates
# mistake: declares every candidate comparable without looking.
def comparable_candidates(runs, variable, baseline, seeds):
    values = sorted({run["config"][variable] for run in runs})
    return {"comparable": values, "excluded": [], "runs": {value: [] for value in values}}
