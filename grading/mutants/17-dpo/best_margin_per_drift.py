# mutant: best_margin_per_drift
# exercise: judge_beta_sweep
# mistake: a learner's judgement that measures drift with k1 per response and picks the best margin-to-drift ratio instead of the gated largest margin.
import math


def _ok(value):
    return type(value) in (int, float) and math.isfinite(value)


def _drift(policy, reference):
    per_response = [sum(p - r for p, r in zip(mine, theirs)) / len(mine) for mine, theirs in zip(policy, reference)]
    return sum(per_response) / len(per_response)


def _validated(sweep, max_kl, min_margin):
    if not (_ok(max_kl) and max_kl > 0 and _ok(min_margin) and min_margin > 0):
        raise ValueError("thresholds")
    if not isinstance(sweep, (list, tuple)) or not sweep:
        raise ValueError("sweep")
    betas = []
    for run in sweep:
        if not isinstance(run, dict) or sorted(run) != ["beta", "margin", "policy_logps", "reference_logps"]:
            raise ValueError("run keys")
        if not _ok(run["beta"]) or run["beta"] <= 0 or run["beta"] in betas or not _ok(run["margin"]):
            raise ValueError("beta or margin")
        betas.append(run["beta"])
        pairs = list(zip(run["policy_logps"], run["reference_logps"])) if isinstance(run["policy_logps"], (list, tuple)) \
            and isinstance(run["reference_logps"], (list, tuple)) else []
        if not pairs or len(run["policy_logps"]) != len(run["reference_logps"]) or any(
                not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)) or not a or len(a) != len(b)
                or not all(_ok(v) for v in [*a, *b]) for a, b in pairs):
            raise ValueError("log-probabilities")
    return sorted(sweep, key=lambda item: item["beta"])


def judge_beta_sweep(sweep, max_kl, min_margin):
    rows = [(run, _drift(run["policy_logps"], run["reference_logps"])) for run in _validated(sweep, max_kl, min_margin)]
    report = [{"beta": run["beta"], "kl": kl, "margin": run["margin"],
               "reasons": [name for name, bad in (("margin_too_small", run["margin"] < min_margin),
                                                  ("drift_too_large", kl > max_kl)) if bad]} for run, kl in rows]
    for entry in report:
        entry["eligible"] = not entry["reasons"]
    passing = [entry for entry in report if entry["eligible"]]
    best = max(passing, key=lambda entry: entry["margin"] / max(entry["kl"], 1e-9))["beta"] if passing else None
    return {"per_beta": report, "chosen_beta": best, "decision": "accept_mechanism" if passing else "tune"}
