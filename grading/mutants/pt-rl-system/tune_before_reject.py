# mutant: tune_before_reject
# exercise: evaluate_topology
# mistake: checks the tuning pressures first, so a topology with a queue or link problem is sent to tuning even when it also has a hard failure.
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
    tuning = [reason for reason, hit in (("unstable_queue", unstable_stages),
                                         ("exposed_transfer", overloaded_fabrics)) if hit]
    hard = [reason for reason, hit in (("memory_limit", over_limit_pools), ("version_sync", not version_sync_ok),
                                       ("recovery_not_ready", not recovery_ok)) if hit]
    if tuning:
        decision, reasons = "tune", tuning
    elif hard:
        decision, reasons = "reject", hard
    else:
        decision, reasons = "accept", []
    return {"decision": decision, "reasons": reasons, "over_limit_pools": over_limit_pools,
            "unstable_stages": unstable_stages, "overloaded_fabrics": overloaded_fabrics}
