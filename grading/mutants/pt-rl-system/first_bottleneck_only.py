# mutant: first_bottleneck_only
# exercise: pipeline_capacity
# mistake: keeps only the first stage found at the minimum rate, so tied bottlenecks are lost.
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
        effective_rates[stage] = rate / per_unit
    bottleneck = min(effective_rates, key=effective_rates.get)
    capacity = effective_rates[bottleneck]
    queue_margins = {stage: rate - arrival for stage, rate in effective_rates.items()}
    unstable_stages = sorted(stage for stage, margin in queue_margins.items() if margin < 0)
    return {"capacity": capacity, "effective_rates": effective_rates, "bottlenecks": [bottleneck],
            "queue_margins": queue_margins, "unstable_stages": unstable_stages,
            "queue_stable": not unstable_stages}
