# mutant: stale_scorer_accepted
# exercise: advance_rollout_state
# mistake: does not check that the scoring policy is at least as new as the sampling policy.
import math


def advance_rollout_state(rollout, event):
    transitions = {
        ("sampled", "score"): "scored",
        ("scored", "admit"): "admitted",
        ("scored", "reject"): "rejected",
        ("admitted", "consume"): "consumed",
    }
    states = ("sampled", "scored", "admitted", "rejected", "consumed")
    state = rollout.get("state")
    if state not in states:
        raise ValueError(f"unknown rollout state {state!r}")
    version = rollout.get("policy_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"policy_version must be an int >= 0, got {version!r}")
    kind = event.get("type")
    if kind not in ("score", "admit", "reject", "consume"):
        raise ValueError(f"unknown event type {kind!r}")
    target = transitions.get((state, kind))
    if target is None:
        raise ValueError(f"event {kind!r} is not allowed for a rollout in state {state!r}")

    updated = dict(rollout)
    if kind == "score":
        scored = event.get("scored_version")
        if isinstance(scored, bool) or not isinstance(scored, int):
            raise ValueError(f"scored_version must be an int, got {scored!r}")
        updated["scored_version"] = scored
    elif kind == "reject":
        reason = event.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("a reject event needs a non-empty reason")
        updated["reject_reason"] = reason
    elif kind == "consume":
        consumer = event.get("consumer")
        if not isinstance(consumer, str) or not consumer.strip():
            raise ValueError("a consume event needs a non-empty consumer")
        updated["consumed_by"] = consumer
    updated["state"] = target
    updated["history"] = list(rollout.get("history", [])) + [target]
    return updated
