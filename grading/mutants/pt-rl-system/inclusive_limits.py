# mutant: inclusive_limits
# exercise: evaluate_topology
# mistake: uses >= against the memory limit and the exposure budget, so a value exactly at its limit fails.
import math


def evaluate_topology(capacity_report, memory_by_pool, memory_limits, transfer_report,
                      version_sync_ok, recovery_ok, max_exposed_s_per_s=0.1):
    numbers = [max_exposed_s_per_s, *memory_by_pool.values(), *memory_limits.values(),
               *transfer_report["fabric_exposed_seconds_per_s"].values()]
    if any(not math.isfinite(float(value)) or float(value) < 0 for value in numbers):
        raise ValueError("memory, limits, exposures and the budget must be finite and non-negative")
    over_limit_pools = sorted(p for p, used in memory_by_pool.items() if p not in memory_limits or used >= memory_limits[p])
    unstable_stages = sorted(capacity_report["unstable_stages"])
    overloaded_fabrics = sorted(f for f, v in transfer_report["fabric_exposed_seconds_per_s"].items()
                                if v >= max_exposed_s_per_s)
    hard = [reason for reason, hit in (("memory_limit", over_limit_pools), ("version_sync", not version_sync_ok),
                                       ("recovery_not_ready", not recovery_ok)) if hit]
    tuning = [reason for reason, hit in (("unstable_queue", unstable_stages),
                                         ("exposed_transfer", overloaded_fabrics)) if hit]
    decision = "reject" if hard else ("tune" if tuning else "accept")
    return {"decision": decision, "reasons": hard or tuning, "over_limit_pools": over_limit_pools,
            "unstable_stages": unstable_stages, "overloaded_fabrics": overloaded_fabrics}
