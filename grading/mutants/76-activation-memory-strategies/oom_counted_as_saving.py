# mutant: oom_counted_as_saving
# exercise: build_strategy_pair_evidence
# mistake: reads a missing peak as 0 MB and pairs every candidate, so an out-of-memory run shows up as the biggest saving.
def build_strategy_pair_evidence(baseline, candidates):
    comparisons = []
    for candidate in candidates:
        peak = candidate.get("peak_memory_mb") or 0.0
        samples = candidate.get("samples_per_s") or 0.0
        loss = candidate.get("eval_loss") or 0.0
        comparisons.append({
            "name": candidate.get("name"), "status": "comparable",
            "repeat_count": candidate.get("repeat_count"),
            "execution_path_verified": candidate.get("execution_path_verified") is True,
            "memory_saving_mb": baseline["peak_memory_mb"] - peak,
            "throughput_ratio": samples / baseline["samples_per_s"],
            "quality_delta": loss - baseline["eval_loss"],
        })
    return {"baseline": baseline, "baseline_usable": True, "comparisons": comparisons,
            "comparable_count": len(comparisons), "oom_count": 0, "failed_count": 0, "invalid_count": 0}
