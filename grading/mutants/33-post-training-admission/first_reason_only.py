# mutant: first_reason_only
# exercise: choose_entry_stage
# mistake: stops at the first blocking reason, so later reject and hold reasons are lost.
import math


def choose_entry_stage(failure_report, baseline_report, sft_baseline, feedback, min_items=100):
    shapes = ("demonstrations", "pairwise_preferences", "binary_feedback", "verifiable_rewards")

    def list_field(report, name, key):
        if not isinstance(report, dict) or not isinstance(report.get(key), (list, tuple)):
            raise ValueError(f"{name} must be a dict with a {key!r} list")
        return list(report[key])

    stable = list_field(failure_report, "failure_report", "stable")
    ranking = list_field(baseline_report, "baseline_report", "ranking")
    closing = list_field(baseline_report, "baseline_report", "closing_methods")
    if isinstance(min_items, bool) or not isinstance(min_items, int) or min_items < 1:
        raise ValueError(f"min_items must be an int >= 1, got {min_items!r}")
    if sft_baseline is not None:
        if not isinstance(sft_baseline, dict) or set(sft_baseline) != {"format_ok", "pass_rate"}:
            raise ValueError("sft_baseline must be None or a dict with exactly format_ok and pass_rate")
        pass_rate = sft_baseline["pass_rate"]
        if not isinstance(sft_baseline["format_ok"], bool):
            raise ValueError("sft_baseline['format_ok'] must be a bool")
        if (isinstance(pass_rate, bool) or not isinstance(pass_rate, (int, float))
                or not math.isfinite(pass_rate) or not 0 <= pass_rate <= 1):
            raise ValueError(f"sft_baseline['pass_rate'] must be a finite number in [0, 1], got {pass_rate!r}")
    if not isinstance(feedback, dict):
        raise ValueError("feedback must be a dict of shape -> item count")
    for shape, count in feedback.items():
        if shape not in shapes:
            raise ValueError(f"unknown feedback shape {shape!r}; known shapes: {', '.join(shapes)}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"the count of {shape!r} must be an int >= 0, got {count!r}")

    if sft_baseline is None:
        sft_status = "absent"
    elif not sft_baseline["format_ok"]:
        sft_status = "below_bar"
    else:
        sft_status = "ready"
    usable = [shape for shape in shapes if feedback.get(shape, 0) >= min_items]

    rl_signal = False
    if sft_status != "ready":
        candidate = "sft" if "demonstrations" in usable else None
    else:
        rl_signal = 0 < sft_baseline["pass_rate"] < 1
        if "pairwise_preferences" in usable or "binary_feedback" in usable:
            candidate = "preference"
        elif "verifiable_rewards" in usable and rl_signal:
            candidate = "online_rl"
        elif "demonstrations" in usable:
            candidate = "sft"
        else:
            candidate = None

    reasons = []
    if not stable:
        reasons.append({"level": "reject", "code": "no_stable_failure"})
    if closing:
        reasons.append({"level": "reject", "code": "baseline_closes_gap"})
    if not ranking:
        reasons.append({"level": "hold", "code": "baseline_not_tried"})
    if candidate is None:
        if sft_status != "ready":
            reasons.append({"level": "hold", "code": "needs_demonstrations"})
        elif "verifiable_rewards" in usable and not rl_signal:
            reasons.append({"level": "hold", "code": "no_reward_variance"})
        else:
            reasons.append({"level": "hold", "code": "no_usable_feedback"})

    reasons = reasons[:1]
    levels = {reason["level"] for reason in reasons}
    decision = "reject" if "reject" in levels else "hold" if "hold" in levels else "proceed"
    return {
        "sft_status": sft_status,
        "usable_feedback": usable,
        "candidate_stage": candidate,
        "reasons": reasons,
        "decision": decision,
        "stage": candidate if decision == "proceed" else None,
    }
