# mutant: strict_thresholds
# exercise: admit_by_verifier
# mistake: treats a rate equal to its threshold as a failure (<= and >= instead of < and >).
def admit_by_verifier(samples, labels, min_pass_rate=0.9, max_wrong_rate=0.05):
    for value in (min_pass_rate, max_wrong_rate):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError("thresholds must be in [0, 1]")
    for label in labels.values():
        if isinstance(label, bool) or not isinstance(label, int):
            raise ValueError("labels must be ints")
    seen = set()
    for sample in samples:
        sample_id = sample.get("sample_id") if isinstance(sample, dict) else None
        if not isinstance(sample_id, str) or not sample_id or sample_id in seen:
            raise ValueError("bad sample_id")
        seen.add(sample_id)
        if sample.get("response") is not None and not isinstance(sample.get("response"), str):
            raise ValueError("bad response")
    counts = {"total": len(samples), "admitted": 0, "no_label": 0, "not_integer": 0, "wrong_answer": 0}
    admitted, rejected = [], {}
    for sample in samples:
        parsed = parse_integer_response(sample.get("response"))
        if sample["sample_id"] not in labels:
            reason = "no_label"
        elif parsed is None:
            reason = "not_integer"
        elif parsed != labels[sample["sample_id"]]:
            reason = "wrong_answer"
        else:
            reason = None
        if reason is None:
            counts["admitted"] += 1
            admitted.append(sample["sample_id"])
        else:
            counts[reason] += 1
            rejected[sample["sample_id"]] = reason
    total = counts["total"]
    pass_rate = counts["admitted"] / total if total else None
    wrong_rate = counts["wrong_answer"] / total if total else None
    hard = (["empty_batch"] if total == 0 else []) + (["unverifiable"] if counts["no_label"] else []) + \
        (["wrong_rate_above_max"] if wrong_rate is not None and wrong_rate >= max_wrong_rate and wrong_rate > 0 else [])
    tune = ["pass_rate_below_min"] if pass_rate is not None and pass_rate <= min_pass_rate and pass_rate < 1 else []
    decision, reasons = ("reject", hard) if hard else (("tune", tune) if tune else ("accept", []))
    return {"decision": decision, "reasons": reasons, "counts": counts, "pass_rate": pass_rate,
            "wrong_rate": wrong_rate, "admitted": admitted, "rejected": rejected}
