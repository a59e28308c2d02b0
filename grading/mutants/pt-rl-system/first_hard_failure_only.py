# mutant: first_hard_failure_only
# exercise: evaluate_topology
# mistake: returns at the first hard failure in an if/elif chain, so a later hard failure is never reported.
import math


def evaluate_topology(capacity_report, memory_by_pool, memory_limits, transfer_report,
                      version_sync_ok, recovery_ok, *, max_exposed_s_per_s=0.1):
    if not isinstance(capacity_report, dict) or not isinstance(transfer_report, dict):
        raise ValueError("reports must be dicts")
    stages = capacity_report.get("unstable_stages")
    exposure = transfer_report.get("fabric_exposed_seconds_per_s")
    if not isinstance(stages, list) or any(not isinstance(s, str) for s in stages):
        raise ValueError("unstable_stages must be a list of names")
    if not isinstance(memory_by_pool, dict) or not memory_by_pool or not isinstance(memory_limits, dict) \
            or not isinstance(exposure, dict):
        raise ValueError("memory and exposure tables must be dicts")
    for table in (memory_by_pool, memory_limits, exposure, {"budget": max_exposed_s_per_s}):
        for key, value in table.items():
            if not isinstance(key, str) or not key.strip():
                raise ValueError("names must be visible strings")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{key}: bad amount {value!r}")

    def above(value, limit):
        return value > limit and not math.isclose(value, limit, rel_tol=1e-9)

    evidence = {
        "over_limit_pools": sorted(p for p, v in memory_by_pool.items() if p not in memory_limits or above(v, memory_limits[p])),
        "unstable_stages": list(stages),
        "overloaded_fabrics": sorted(f for f, v in exposure.items() if above(v, max_exposed_s_per_s)),
    }
    if evidence["over_limit_pools"]:
        return {"decision": "reject", "reasons": ["memory_limit"], **evidence}
    elif version_sync_ok is not True:
        return {"decision": "reject", "reasons": ["version_sync"], **evidence}
    elif recovery_ok is not True:
        return {"decision": "reject", "reasons": ["recovery_not_ready"], **evidence}
    reasons = [code for code, hit in (("unstable_queue", stages), ("exposed_transfer", evidence["overloaded_fabrics"])) if hit]
    return {"decision": "tune" if reasons else "accept", "reasons": reasons, **evidence}
