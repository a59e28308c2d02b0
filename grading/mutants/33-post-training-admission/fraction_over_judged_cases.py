# mutant: fraction_over_judged_cases
# exercise: baseline_gap_report
# mistake: divides by the cases the method evaluated often enough, so missing evidence inflates the closed fraction.
import math


def baseline_gap_report(stable_failures, baseline_runs, min_repeats=3, fix_rate=0.8, required_fraction=1.0):
    def unit_fraction(name, value):
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or not 0 < value <= 1):
            raise ValueError(f"{name} must be a finite number in (0, 1], got {value!r}")
        return value

    if isinstance(min_repeats, bool) or not isinstance(min_repeats, int) or min_repeats < 2:
        raise ValueError(f"min_repeats must be an int >= 2, got {min_repeats!r}")
    unit_fraction("fix_rate", fix_rate)
    unit_fraction("required_fraction", required_fraction)
    if not isinstance(stable_failures, (list, tuple)):
        raise ValueError("stable_failures must be a list of case ids")
    for case_id in stable_failures:
        if not isinstance(case_id, str) or not case_id.strip():
            raise ValueError(f"stable failure id {case_id!r} must be a non-empty str")
    if len(set(stable_failures)) != len(stable_failures):
        raise ValueError("stable_failures lists a case id twice")
    if not isinstance(baseline_runs, dict):
        raise ValueError("baseline_runs must be a dict of method -> list of runs")

    targets = set(stable_failures)
    counts = {}
    for method, runs in baseline_runs.items():
        if not isinstance(method, str) or not method.strip():
            raise ValueError(f"method name {method!r} must be a non-empty str")
        if not isinstance(runs, (list, tuple)):
            raise ValueError(f"the runs of {method!r} must be a list")
        seen = {case_id: 0 for case_id in targets}
        passes = {case_id: 0 for case_id in targets}
        for number, run in enumerate(runs):
            if not isinstance(run, dict):
                raise ValueError(f"{method!r} run {number} must be a dict of case id -> passed")
            for case_id, passed in run.items():
                if not isinstance(passed, bool):
                    raise ValueError(f"{method!r} run {number}: the outcome of {case_id!r} must be a bool")
                if case_id in targets:
                    seen[case_id] += 1
                    passes[case_id] += 1 if passed else 0
        counts[method] = (seen, passes)

    per_method = {}
    for method, (seen, passes) in counts.items():
        judged = [case_id for case_id in targets if seen[case_id] >= min_repeats]
        fixed = sorted(case_id for case_id in judged if passes[case_id] / seen[case_id] >= fix_rate)
        per_method[method] = {
            "fixed": fixed,
            "unfixed": sorted(set(judged) - set(fixed)),
            "missing": sorted(case_id for case_id in targets if seen[case_id] < min_repeats),
            "closed_fraction": len(fixed) / len(judged) if judged else (None if not targets else 0.0),
        }
    ranking = sorted(per_method, key=lambda method: (-(per_method[method]["closed_fraction"] or 0.0), method))
    closing = [method for method in ranking
               if per_method[method]["closed_fraction"] is not None
               and per_method[method]["closed_fraction"] >= required_fraction]
    return {"per_method": per_method, "ranking": ranking, "closing_methods": closing, "gap_closed": bool(closing)}
