# mutant: repeat_count_not_compared
# exercise: validate_strategy_experiment
# mistake: compares workload and hardware but not the number of repeats, so a 2-run candidate is paired with a 5-run baseline.
def validate_strategy_experiment(baseline, candidates):
    issues, candidate_names, seen = [], [], set()
    for candidate in candidates:
        name = candidate.get("name")
        if not isinstance(name, str) or not name:
            issues.append("candidate:missing_name")
            continue
        if name in seen:
            issues.append(f"{name}:duplicate_name")
        seen.add(name)
        candidate_names.append(name)
        for key in ("workload_id", "hardware_id"):
            if candidate.get(key) != baseline.get(key):
                issues.append(f"{name}:{key}_mismatch")
        if candidate.get("status", "ok") not in ("oom", "failed") and candidate.get("execution_path_verified") is not True:
            issues.append(f"{name}:execution_path_unverified")
    if not _metrics_are_finite(baseline):
        issues.append("baseline:invalid_metrics")
    return {"is_valid": not issues, "issues": issues, "candidate_names": candidate_names}
