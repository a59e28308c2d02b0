# mutant: first_reason_only
# exercise: check_rollout_freshness
# mistake: stops at the first failed limit, so a rollout that is both stale and drifted reports one reason.
import math


def check_rollout_freshness(rollout, current_version, current_logprobs, max_version_lag, max_drift):
    def whole(name, value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        return value

    produced = whole("policy_version", rollout.get("policy_version"))
    now = whole("current_version", current_version)
    lag_limit = whole("max_version_lag", max_version_lag)
    if isinstance(max_drift, bool) or not isinstance(max_drift, (int, float)) \
            or not math.isfinite(max_drift) or max_drift < 0:
        raise ValueError(f"max_drift must be a finite number >= 0, got {max_drift!r}")
    if now < produced:
        raise ValueError(f"current_version {now} is older than the rollout's policy_version {produced}")
    behaviour = list(rollout["behaviour_logprobs"])
    mask = list(rollout["action_mask"])
    current = list(current_logprobs)
    if not len(behaviour) == len(mask) == len(current):
        raise ValueError("behaviour_logprobs, action_mask and current_logprobs must have the same length")
    if any(flag not in (0, 1) for flag in mask):
        raise ValueError("action_mask values must be 0 or 1")
    for value in behaviour + current:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"log-probs must be finite numbers, got {value!r}")
    gaps = [abs(float(new) - float(old)) for old, new, flag in zip(behaviour, current, mask) if flag == 1]
    if not gaps:
        raise ValueError("the rollout has no action token to compare")
    drift = sum(gaps) / len(gaps)
    lag = now - produced
    reasons = []
    if lag > lag_limit:
        reasons.append("version_lag")
    if drift > max_drift and not reasons:
        reasons.append("behaviour_drift")
    return {"version_lag": lag, "behaviour_drift": drift, "max_token_drift": max(gaps),
            "action_tokens": len(gaps), "admitted": not reasons, "reasons": reasons}
