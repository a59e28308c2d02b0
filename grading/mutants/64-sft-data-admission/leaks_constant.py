# mutant: leaks_constant
# exercise: find_leaks
# mistake: reports no leak and no overlap whatever the splits hold.
def find_leaks(splits, priority):
    return {"leaked": {name: [] for name in priority}, "overlap": []}
