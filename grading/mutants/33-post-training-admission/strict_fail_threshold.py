# mutant: strict_fail_threshold
# exercise: classify_failures
# mistake: uses a strict comparison, so a fail rate exactly at the threshold is called flaky.
import math


def classify_failures(runs, min_repeats=3, min_fail_rate=0.6):
    if isinstance(min_repeats, bool) or not isinstance(min_repeats, int) or min_repeats < 2:
        raise ValueError(f"min_repeats must be an int >= 2, got {min_repeats!r}")
    if (isinstance(min_fail_rate, bool) or not isinstance(min_fail_rate, (int, float))
            or not math.isfinite(min_fail_rate) or not 0 < min_fail_rate <= 1):
        raise ValueError(f"min_fail_rate must be a finite number in (0, 1], got {min_fail_rate!r}")
    if not isinstance(runs, (list, tuple)) or not runs:
        raise ValueError("runs must be a non-empty list of evaluation runs")

    observations, failures = {}, {}
    for number, run in enumerate(runs):
        if not isinstance(run, dict):
            raise ValueError(f"run {number} must be a dict of case id -> passed, got {type(run).__name__}")
        for case_id, passed in run.items():
            if not isinstance(case_id, str) or not case_id.strip():
                raise ValueError(f"run {number}: case id {case_id!r} must be a non-empty str")
            if not isinstance(passed, bool):
                raise ValueError(f"run {number}: the outcome of {case_id!r} must be a bool, got {passed!r}")
            observations[case_id] = observations.get(case_id, 0) + 1
            failures[case_id] = failures.get(case_id, 0) + (0 if passed else 1)

    fail_rates = {case_id: failures[case_id] / count for case_id, count in observations.items()}
    classes = {"stable": [], "flaky": [], "passing": [], "insufficient": []}
    for case_id in sorted(observations):
        if observations[case_id] < min_repeats:
            classes["insufficient"].append(case_id)
        elif fail_rates[case_id] > min_fail_rate:
            classes["stable"].append(case_id)
        elif failures[case_id] > 0:
            classes["flaky"].append(case_id)
        else:
            classes["passing"].append(case_id)
    return {"observations": observations, "fail_rates": fail_rates, **classes}
