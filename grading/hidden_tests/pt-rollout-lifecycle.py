# %% hidden exercise=advance_rollout_state points=1 name=final_states_refuse_every_event
# hint: a rejected rollout and a consumed rollout are final: no event of any type may move them again, not even a second consume.
base = {"rollout_id": "mul-2#s3", "policy_version": 1}
rejected = dict(base, state="rejected", history=["sampled", "scored", "rejected"], reject_reason="version_lag")
consumed = dict(base, state="consumed", history=["sampled", "scored", "admitted", "consumed"], consumed_by="learner-0")
events = [{"type": "score", "scored_version": 2}, {"type": "admit"}, {"type": "reject", "reason": "late"},
          {"type": "consume", "consumer": "learner-1"}]
for rollout in (rejected, consumed):
    for event in events:
        try:
            advance_rollout_state(rollout, event)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{event['type']} accepted for a {rollout['state']} rollout")
assert consumed["consumed_by"] == "learner-0" and consumed["state"] == "consumed"

# %% hidden exercise=advance_rollout_state points=1 name=no_step_may_be_skipped_or_repeated
# hint: every transition starts from exactly one state; admitting or consuming before scoring, and scoring twice, are refused.
sampled = {"rollout_id": "sub-0#s1", "state": "sampled", "policy_version": 0, "history": ["sampled"]}
scored = {"rollout_id": "sub-0#s1", "state": "scored", "policy_version": 0, "history": ["sampled", "scored"],
          "scored_version": 0}
admitted = dict(scored, state="admitted", history=["sampled", "scored", "admitted"])
refused = [
    (sampled, {"type": "admit"}),
    (sampled, {"type": "reject", "reason": "drift"}),
    (sampled, {"type": "consume", "consumer": "learner-0"}),
    (scored, {"type": "score", "scored_version": 1}),
    (scored, {"type": "consume", "consumer": "learner-0"}),
    (admitted, {"type": "admit"}),
    (admitted, {"type": "reject", "reason": "drift"}),
    (admitted, {"type": "score", "scored_version": 1}),
]
for rollout, event in refused:
    try:
        advance_rollout_state(rollout, event)
    except ValueError:
        pass
    else:
        raise AssertionError(f"{event['type']} accepted in state {rollout['state']}")

# %% hidden exercise=advance_rollout_state points=1 name=scoring_policy_cannot_be_older
# hint: the policy that scores a rollout may be the sampling policy or a newer one, never an older one; versions are whole numbers.
rollout = {"rollout_id": "div-1#s0", "state": "sampled", "policy_version": 7, "history": ["sampled"]}
same = advance_rollout_state(rollout, {"type": "score", "scored_version": 7})
assert same["state"] == "scored" and same["scored_version"] == 7
newer = advance_rollout_state(rollout, {"type": "score", "scored_version": 9})
assert newer["scored_version"] == 9
for bad in (6, 0, True, 7.0, None, "8"):
    try:
        advance_rollout_state(rollout, {"type": "score", "scored_version": bad})
    except ValueError:
        pass
    else:
        raise AssertionError(f"scored_version {bad!r} accepted for a rollout sampled at version 7")

# %% hidden exercise=advance_rollout_state points=1 name=returns_a_copy_and_keeps_identity
# hint: build a new dict and a new history list; the caller's rollout, including its history list, must look exactly as before.
history = ["sampled", "scored"]
rollout = {"rollout_id": "add-0#s2", "task_sha256": "ab12", "state": "scored", "policy_version": 2,
           "history": history, "scored_version": 3}
snapshot = {key: (list(value) if isinstance(value, list) else value) for key, value in rollout.items()}
admitted = advance_rollout_state(rollout, {"type": "admit"})
assert rollout == snapshot and history == ["sampled", "scored"]
assert admitted is not rollout and admitted["history"] is not history
assert admitted["history"] == ["sampled", "scored", "admitted"]
assert admitted["rollout_id"] == "add-0#s2" and admitted["task_sha256"] == "ab12"
assert admitted["scored_version"] == 3 and admitted["policy_version"] == 2
consumed = advance_rollout_state(admitted, {"type": "consume", "consumer": "learner-2"})
assert admitted["state"] == "admitted" and "consumed_by" not in admitted
assert consumed["consumed_by"] == "learner-2" and len(consumed["history"]) == 4

# %% hidden exercise=advance_rollout_state points=1 name=invalid_rollouts_and_events
# hint: check the rollout's state and version and the event's type and field before doing anything; empty reasons and consumers are invalid.
good = {"rollout_id": "mul-0#s0", "state": "scored", "policy_version": 1, "history": ["sampled", "scored"]}
cases = [
    (dict(good, state="queued"), {"type": "admit"}),
    (dict(good, policy_version=-1), {"type": "admit"}),
    (dict(good, policy_version=False), {"type": "admit"}),
    (dict(good, policy_version=1.5), {"type": "admit"}),
    (good, {"type": "promote"}),
    (good, {}),
    (good, {"type": "reject", "reason": ""}),
    (good, {"type": "reject", "reason": "   "}),
    (good, {"type": "reject"}),
    (dict(good, state="admitted"), {"type": "consume", "consumer": ""}),
    (dict(good, state="admitted"), {"type": "consume"}),
]
for rollout, event in cases:
    try:
        advance_rollout_state(rollout, event)
    except ValueError:
        pass
    else:
        raise AssertionError(f"accepted rollout {rollout} with event {event}")
rejected = advance_rollout_state(good, {"type": "reject", "reason": "behaviour_drift"})
assert rejected["state"] == "rejected" and rejected["reject_reason"] == "behaviour_drift"

# %% hidden exercise=check_rollout_freshness points=1 name=masked_tokens_take_no_part
# hint: only tokens with mask 1 enter the mean and the maximum, and the mean divides by the number of those tokens.
rollout = {"policy_version": 2, "behaviour_logprobs": [-3.0, -0.5, -8.0, -1.0, -0.25],
           "action_mask": [0, 1, 0, 1, 1]}
result = check_rollout_freshness(rollout, 2, [-0.5, -0.75, -1.0, -1.5, -0.25], max_version_lag=0, max_drift=0.25)
assert result["action_tokens"] == 3
assert result["behaviour_drift"] == 0.25
assert result["max_token_drift"] == 0.5
assert result["admitted"] is True and result["reasons"] == [] and result["version_lag"] == 0

# %% hidden exercise=check_rollout_freshness points=1 name=drift_is_absolute_not_signed
# hint: a token whose log-prob went up and one that went down both move the policy away; their differences must not cancel.
rollout = {"policy_version": 4, "behaviour_logprobs": [-1.0, -1.0, -2.0, -0.5], "action_mask": [1, 1, 1, 1]}
result = check_rollout_freshness(rollout, 4, [-0.5, -1.5, -1.0, -1.5], max_version_lag=2, max_drift=0.5)
assert result["behaviour_drift"] == 0.75
assert result["max_token_drift"] == 1.0
assert result["admitted"] is False and result["reasons"] == ["behaviour_drift"]

# %% hidden exercise=check_rollout_freshness points=1 name=limits_are_inclusive_and_reasons_ordered
# hint: a lag or drift equal to its limit passes; every failed limit is reported, in the documented order, whichever fails.
rollout = {"policy_version": 3, "behaviour_logprobs": [-1.0, -2.0], "action_mask": [1, 1]}
edge = check_rollout_freshness(rollout, 5, [-1.5, -2.5], max_version_lag=2, max_drift=0.5)
assert edge["version_lag"] == 2 and edge["behaviour_drift"] == 0.5
assert edge["admitted"] is True and edge["reasons"] == []
lag_only = check_rollout_freshness(rollout, 6, [-1.0, -2.0], max_version_lag=2, max_drift=0.5)
assert lag_only["reasons"] == ["version_lag"] and lag_only["admitted"] is False
assert lag_only["behaviour_drift"] == 0.0
both = check_rollout_freshness(rollout, 9, [-2.0, -3.0], max_version_lag=0, max_drift=0)
assert both["reasons"] == ["version_lag", "behaviour_drift"] and both["version_lag"] == 6
zero = check_rollout_freshness(rollout, 3, [-1.0, -2.0], max_version_lag=0, max_drift=0)
assert zero["admitted"] is True

# %% hidden exercise=check_rollout_freshness points=1 name=invalid_inputs_are_refused
# hint: validate versions, limits, lengths, mask values and every log-prob before computing; a rollout from a newer policy than the learner is impossible.
rollout = {"policy_version": 3, "behaviour_logprobs": [-1.0, -2.0], "action_mask": [1, 0]}
calls = [
    (rollout, 2, [-1.0, -2.0], 1, 0.5),
    (dict(rollout, policy_version=-1), 2, [-1.0, -2.0], 1, 0.5),
    (rollout, True, [-1.0, -2.0], 1, 0.5),
    (rollout, 4, [-1.0], 1, 0.5),
    (dict(rollout, action_mask=[1, 2]), 4, [-1.0, -2.0], 1, 0.5),
    (dict(rollout, action_mask=[0, 0]), 4, [-1.0, -2.0], 1, 0.5),
    (rollout, 4, [float("nan"), -2.0], 1, 0.5),
    (rollout, 4, [-1.0, float("-inf")], 1, 0.5),
    (dict(rollout, behaviour_logprobs=[float("inf"), -2.0]), 4, [-1.0, -2.0], 1, 0.5),
    (rollout, 4, [-1.0, -2.0], -1, 0.5),
    (rollout, 4, [-1.0, -2.0], 1.5, 0.5),
    (rollout, 4, [-1.0, -2.0], 1, -0.1),
    (rollout, 4, [-1.0, -2.0], 1, float("nan")),
]
for args in calls:
    try:
        check_rollout_freshness(*args)
    except ValueError:
        pass
    else:
        raise AssertionError(f"accepted invalid input {args[1:]} for rollout {args[0]}")

# %% hidden exercise=check_rollout_freshness points=1 name=lag_counts_versions_since_sampling
# hint: the lag is how many versions the learner moved on since the rollout was sampled; the drift limit may be a plain int.
rollout = {"policy_version": 10, "behaviour_logprobs": [-0.5, -0.5, -0.5], "action_mask": [1, 1, 1]}
result = check_rollout_freshness(rollout, 13, [-0.5, -0.5, -0.5], max_version_lag=4, max_drift=1)
assert result["version_lag"] == 3 and result["admitted"] is True
assert result["behaviour_drift"] == 0.0 and result["max_token_drift"] == 0.0 and result["action_tokens"] == 3
late = check_rollout_freshness(rollout, 15, [-0.5, -0.5, -0.5], max_version_lag=4, max_drift=1)
assert late["version_lag"] == 5 and late["reasons"] == ["version_lag"]

# %% hidden exercise=reserve_and_activate points=1 name=reservation_is_all_or_nothing
# hint: when fewer rollouts are free than one batch needs, nothing is reserved and the free list stays as it was.
result = reserve_and_activate(["a", "b", "c"], [
    {"op": "reserve", "consumer": "L0"},
    {"op": "reserve", "consumer": "L1"},
    {"op": "activate", "consumer": "L1", "ok": True},
], batch_size=2)
assert [e["outcome"] for e in result["log"]] == ["reserved", "insufficient", "no_reservation"]
assert result["log"][1]["rollout_ids"] == [] and result["log"][2]["rollout_ids"] == []
assert result["free"] == ["c"] and result["reserved"] == {"L0": ["a", "b"]} and result["consumed"] == {}

# %% hidden exercise=reserve_and_activate points=1 name=one_reservation_per_consumer
# hint: a consumer that already holds a batch cannot reserve a second one until it has activated or released the first.
result = reserve_and_activate(["r1", "r2", "r3", "r4", "r5", "r6"], [
    {"op": "reserve", "consumer": "L0"},
    {"op": "reserve", "consumer": "L0"},
    {"op": "activate", "consumer": "L0", "ok": True},
    {"op": "reserve", "consumer": "L0"},
], batch_size=2)
assert [(e["outcome"], e["rollout_ids"]) for e in result["log"]] == [
    ("reserved", ["r1", "r2"]), ("already_reserved", []), ("activated", ["r1", "r2"]), ("reserved", ["r3", "r4"])]
assert result["reserved"] == {"L0": ["r3", "r4"]} and result["free"] == ["r5", "r6"]
assert list(result["consumed"].items()) == [("r1", "L0"), ("r2", "L0")]

# %% hidden exercise=reserve_and_activate points=1 name=failed_activation_restores_queue_order
# hint: a released batch goes back to the places it had in the queue, so the oldest rollouts are still taken first.
result = reserve_and_activate(["r1", "r2", "r3", "r4", "r5", "r6", "r7"], [
    {"op": "reserve", "consumer": "A"},
    {"op": "reserve", "consumer": "B"},
    {"op": "activate", "consumer": "B", "ok": False},
    {"op": "activate", "consumer": "A", "ok": False},
], batch_size=3)
assert [(e["outcome"], e["rollout_ids"]) for e in result["log"]] == [
    ("reserved", ["r1", "r2", "r3"]), ("reserved", ["r4", "r5", "r6"]),
    ("released", ["r4", "r5", "r6"]), ("released", ["r1", "r2", "r3"])]
assert result["free"] == ["r1", "r2", "r3", "r4", "r5", "r6", "r7"]
assert result["consumed"] == {} and result["reserved"] == {}
again = reserve_and_activate(["r1", "r2", "r3", "r4"], [
    {"op": "reserve", "consumer": "A"},
    {"op": "activate", "consumer": "A", "ok": False},
    {"op": "reserve", "consumer": "B"},
], batch_size=1)
assert again["log"][2]["rollout_ids"] == ["r1"] and again["free"] == ["r2", "r3", "r4"]

# %% hidden exercise=reserve_and_activate points=1 name=no_double_consumption
# hint: activating needs a live reservation; after an activation, the same consumer activating again changes nothing, and consumed rollouts never become free.
result = reserve_and_activate(["x1", "x2", "x3"], [
    {"op": "activate", "consumer": "L0", "ok": True},
    {"op": "reserve", "consumer": "L0"},
    {"op": "activate", "consumer": "L0", "ok": True},
    {"op": "activate", "consumer": "L0", "ok": True},
    {"op": "activate", "consumer": "L0", "ok": False},
    {"op": "reserve", "consumer": "L1"},
    {"op": "reserve", "consumer": "L2"},
], batch_size=1)
assert [e["outcome"] for e in result["log"]] == [
    "no_reservation", "reserved", "activated", "no_reservation", "no_reservation", "reserved", "reserved"]
assert list(result["consumed"].items()) == [("x1", "L0")]
assert result["reserved"] == {"L1": ["x2"], "L2": ["x3"]} and result["free"] == []

# %% hidden exercise=reserve_and_activate points=1 name=invalid_input_is_refused
# hint: check the batch size, every queue id and every event before replaying anything; a batch size must be a whole number of rollouts.
ok_events = [{"op": "reserve", "consumer": "A"}]
calls = [
    (["a", "b"], ok_events, 0),
    (["a", "b"], ok_events, True),
    (["a", "b"], ok_events, 1.0),
    (["a", "a"], ok_events, 1),
    (["a", ""], ok_events, 1),
    (["a", 7], ok_events, 1),
    (["a", "b"], [{"op": "consume", "consumer": "A"}], 1),
    (["a", "b"], [{"op": "reserve", "consumer": ""}], 1),
    (["a", "b"], [{"op": "reserve"}], 1),
    (["a", "b"], ok_events + [{"op": "activate", "consumer": "A", "ok": "yes"}], 1),
    (["a", "b"], ok_events + [{"op": "activate", "consumer": "A"}], 1),
]
for queue, events, batch in calls:
    try:
        reserve_and_activate(queue, events, batch)
    except ValueError:
        pass
    else:
        raise AssertionError(f"accepted queue={queue} events={events} batch_size={batch!r}")

# %% hidden exercise=reserve_and_activate points=1 name=every_rollout_is_accounted_for
# hint: at the end every queued rollout is in exactly one place: free, reserved by one consumer, or consumed by one consumer.
queue = [f"q{i}" for i in range(7)]
events = [{"op": "reserve", "consumer": "A"}, {"op": "reserve", "consumer": "B"},
          {"op": "activate", "consumer": "A", "ok": True}, {"op": "reserve", "consumer": "C"},
          {"op": "activate", "consumer": "B", "ok": False}, {"op": "reserve", "consumer": "A"},
          {"op": "activate", "consumer": "C", "ok": True}]
result = reserve_and_activate(queue, events, batch_size=2)
held = [rid for ids in result["reserved"].values() for rid in ids]
places = result["free"] + held + list(result["consumed"])
assert sorted(places) == sorted(queue) and len(places) == len(queue)
assert list(result["consumed"].items()) == [("q0", "A"), ("q1", "A"), ("q4", "C"), ("q5", "C")]
assert result["reserved"] == {"A": ["q2", "q3"]} and result["free"] == ["q6"]
