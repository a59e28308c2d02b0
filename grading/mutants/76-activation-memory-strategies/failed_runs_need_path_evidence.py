# mutant: failed_runs_need_path_evidence
# exercise: validate_strategy_experiment
# mistake: demands path evidence from candidates that ran out of memory, so one OOM makes the whole experiment unpairable.
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
        for key in ("workload_id", "hardware_id", "repeat_count"):
            if candidate.get(key) != baseline.get(key):
                issues.append(f"{name}:{key}_mismatch")
        if candidate.get("execution_path_verified") is not True:
            issues.append(f"{name}:execution_path_unverified")
    if not _metrics_are_finite(baseline):
        issues.append("baseline:invalid_metrics")
    return {"is_valid": not issues, "issues": issues, "candidate_names": candidate_names}
