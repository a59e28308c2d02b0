# mutant: truthy_path_accepted
# exercise: validate_strategy_experiment
# mistake: accepts any truthy path flag and never checks the baseline's own metrics.
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
        if candidate.get("status", "ok") not in ("oom", "failed") and not candidate.get("execution_path_verified"):
            issues.append(f"{name}:execution_path_unverified")
    return {"is_valid": not issues, "issues": issues, "candidate_names": candidate_names}
