# mutant: first_hard_failure_only
# exercise: evaluate_topology
# mistake: an if/elif chain returns at the first hard failure, so later hard failures are never reported.
import math


def evaluate_topology(capacity_report, memory_by_pool, memory_limits, transfer_report,
                      version_sync_ok, recovery_ok, max_exposed_s_per_s=0.1):
    numbers = [max_exposed_s_per_s, *memory_by_pool.values(), *memory_limits.values(),
               *transfer_report["fabric_exposed_seconds_per_s"].values()]
    if any(not math.isfinite(float(value)) or float(value) < 0 for value in numbers):
        raise ValueError("memory, limits, exposures and the budget must be finite and non-negative")
    over_limit_pools = sorted(p for p, used in memory_by_pool.items() if p not in memory_limits or used > memory_limits[p])
    unstable_stages = sorted(capacity_report["unstable_stages"])
    overloaded_fabrics = sorted(f for f, v in transfer_report["fabric_exposed_seconds_per_s"].items()
                                if v > max_exposed_s_per_s)
    evidence = {"over_limit_pools": over_limit_pools, "unstable_stages": unstable_stages,
                "overloaded_fabrics": overloaded_fabrics}
    if over_limit_pools:
        return {"decision": "reject", "reasons": ["memory_limit"], **evidence}
    elif not version_sync_ok:
        return {"decision": "reject", "reasons": ["version_sync"], **evidence}
    elif not recovery_ok:
        return {"decision": "reject", "reasons": ["recovery_not_ready"], **evidence}
    tuning = []
    if unstable_stages:
        tuning.append("unstable_queue")
    if overloaded_fabrics:
        tuning.append("exposed_transfer")
    return {"decision": "tune" if tuning else "accept", "reasons": tuning, **evidence}
