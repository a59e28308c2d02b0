# mutant: duplicates_silently_dropped
# exercise: validate_strategy_experiment
# mistake: skips a name it has already seen instead of reporting it, so two runs of one strategy pass as one experiment.
def validate_strategy_experiment(baseline, candidates):
    issues, candidate_names = [], []
    for candidate in candidates:
        name = candidate.get("name")
        if not isinstance(name, str) or not name:
            issues.append("candidate:missing_name")
            continue
        if name in candidate_names:
            continue
        candidate_names.append(name)
        for key in ("workload_id", "hardware_id", "repeat_count"):
            if candidate.get(key) != baseline.get(key):
                issues.append(f"{name}:{key}_mismatch")
        if candidate.get("status", "ok") not in ("oom", "failed") and candidate.get("execution_path_verified") is not True:
            issues.append(f"{name}:execution_path_unverified")
    if not _metrics_are_finite(baseline):
        issues.append("baseline:invalid_metrics")
    return {"is_valid": not issues, "issues": issues, "candidate_names": candidate_names}
