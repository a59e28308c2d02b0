# mutant: baseline_not_checked_for_pairing
# exercise: build_strategy_pair_evidence
# mistake: only checks the candidate's metrics, so a baseline without a measured peak (or with zero throughput) crashes or pairs nonsense.
def build_strategy_pair_evidence(baseline, candidates):
    comparisons = []
    counts = {"comparable": 0, "oom": 0, "failed": 0, "invalid": 0}
    for candidate in candidates:
        name, status = candidate.get("name"), candidate.get("status", "ok")
        if status in ("oom", "failed"):
            counts[status] += 1
            comparisons.append({"name": name, "status": status})
        elif not _metrics_are_finite(candidate):
            counts["invalid"] += 1
            comparisons.append({"name": name, "status": "invalid"})
        else:
            counts["comparable"] += 1
            comparisons.append({
                "name": name, "status": "comparable", "repeat_count": candidate.get("repeat_count"),
                "execution_path_verified": candidate.get("execution_path_verified") is True,
                "memory_saving_mb": baseline["peak_memory_mb"] - candidate["peak_memory_mb"],
                "throughput_ratio": candidate["samples_per_s"] / baseline["samples_per_s"],
                "quality_delta": candidate["eval_loss"] - baseline["eval_loss"],
            })
    return {"baseline": baseline, "baseline_usable": True, "comparisons": comparisons,
            "comparable_count": counts["comparable"], "oom_count": counts["oom"],
            "failed_count": counts["failed"], "invalid_count": counts["invalid"]}
