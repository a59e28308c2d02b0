# mutant: magnitude_per_rank
# exercise: largest_rank_within_budget
# mistake: thinks DoRA's magnitude grows with the rank and searches rank by rank with r * (in + 2 * out).
def largest_rank_within_budget(budget, shapes, method="lora"):
    if type(budget) is not int or budget <= 0:
        raise ValueError("budget")
    if method not in ("lora", "rslora", "dora"):
        raise ValueError("method")
    if type(shapes) not in (list, tuple) or len(shapes) == 0:
        raise ValueError("shapes")
    total_in, total_out = 0, 0
    for pair in shapes:
        if type(pair) not in (list, tuple) or len(pair) != 2:
            raise ValueError("pair")
        for size in pair:
            if type(size) is not int or size <= 0:
                raise ValueError("size")
        total_in += pair[0]
        total_out += pair[1]
    per_rank = total_in + total_out + (total_out if method == "dora" else 0)
    best = 0
    while (best + 1) * per_rank <= budget:
        best += 1
    if best == 0:
        raise ValueError("budget too small")
    return {"rank": best, "parameters": best * per_rank, "unused": budget - best * per_rank}
