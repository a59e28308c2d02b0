# mutant: quality_delta_reversed
# exercise: build_strategy_pair_evidence
# mistake: subtracts the candidate's eval loss from the baseline's, so a worse loss reads as an improvement.
def build_strategy_pair_evidence(baseline, candidates):
    baseline_usable = _metrics_are_finite(baseline) and baseline["samples_per_s"] > 0
    comparisons = []
    counts = {"comparable": 0, "oom": 0, "failed": 0, "invalid": 0}
    for candidate in candidates:
        name, status = candidate.get("name"), candidate.get("status", "ok")
        if status in ("oom", "failed"):
            counts[status] += 1
            comparisons.append({"name": name, "status": status})
        elif not baseline_usable or not _metrics_are_finite(candidate):
            counts["invalid"] += 1
            comparisons.append({"name": name, "status": "invalid"})
        else:
            counts["comparable"] += 1
            comparisons.append({
                "name": name, "status": "comparable", "repeat_count": candidate.get("repeat_count"),
                "execution_path_verified": candidate.get("execution_path_verified") is True,
                "memory_saving_mb": baseline["peak_memory_mb"] - candidate["peak_memory_mb"],
                "throughput_ratio": candidate["samples_per_s"] / baseline["samples_per_s"],
                "quality_delta": baseline["eval_loss"] - candidate["eval_loss"],
            })
    return {"baseline": baseline, "baseline_usable": baseline_usable, "comparisons": comparisons,
            "comparable_count": counts["comparable"], "oom_count": counts["oom"],
            "failed_count": counts["failed"], "invalid_count": counts["invalid"]}
