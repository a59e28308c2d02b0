# mutant: raw_rates_not_normalised
# exercise: pipeline_capacity
# mistake: compares raw stage rates with the arrival rate without dividing by the items per work unit.
import math


def pipeline_capacity(stage_rates, arrival_rate, items_per_work_unit):
    if not stage_rates or set(stage_rates) != set(items_per_work_unit):
        raise ValueError("stage_rates and items_per_work_unit must name the same non-empty stages")
    arrival = float(arrival_rate)
    if not math.isfinite(arrival) or arrival < 0:
        raise ValueError("arrival_rate must be a non-negative finite number")
    effective_rates = {}
    for stage, rate in stage_rates.items():
        rate, per_unit = float(rate), float(items_per_work_unit[stage])
        if not (math.isfinite(rate) and rate > 0 and math.isfinite(per_unit) and per_unit > 0):
            raise ValueError(f"stage {stage!r} needs a positive finite rate and multiplier")
        effective_rates[stage] = rate
    capacity = min(effective_rates.values())
    bottlenecks = sorted(s for s, r in effective_rates.items() if math.isclose(r, capacity, rel_tol=1e-9))
    queue_margins = {stage: rate - arrival for stage, rate in effective_rates.items()}
    unstable_stages = sorted(stage for stage, margin in queue_margins.items() if margin < 0)
    return {"capacity": capacity, "effective_rates": effective_rates, "bottlenecks": bottlenecks,
            "queue_margins": queue_margins, "unstable_stages": unstable_stages,
            "queue_stable": not unstable_stages}
