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
admitted = advance_rollout_state(dict(base, state="admitted", history=["sampled", "scored", "admitted"]), events[3])
assert admitted["state"] == "consumed" and admitted["consumed_by"] == "learner-1", admitted  # the last step is allowed

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
for rollout, event, state in ((sampled, {"type": "score", "scored_version": 1}, "scored"), (scored, {"type": "admit"}, "admitted"),
                              (admitted, {"type": "consume", "consumer": "learner-0"}, "consumed")):
    expected = rollout["history"] + [state]
    assert advance_rollout_state(rollout, event)["history"] == expected  # the allowed steps

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

# %% hidden exercise=advance_rollout_state points=1 name=rollout_and_event_shapes_are_checked
# hint: a rollout and an event are dicts; a rollout needs a visible rollout_id and a history list; a wrong type anywhere is a ValueError too.
good = {"rollout_id": "sub-2#s1", "state": "scored", "policy_version": 2, "history": ["sampled", "scored"]}
cases = [
    (None, {"type": "admit"}), ([("state", "scored")], {"type": "admit"}), (good, None), (good, "admit"),
    (good, [("type", "admit")]), ({k: v for k, v in good.items() if k != "rollout_id"}, {"type": "admit"}),
    (dict(good, rollout_id=""), {"type": "admit"}), (dict(good, rollout_id=" \t\n"), {"type": "admit"}),
    (dict(good, rollout_id=7), {"type": "admit"}), ({k: v for k, v in good.items() if k != "history"}, {"type": "admit"}),
    (dict(good, history=("sampled", "scored")), {"type": "admit"}), (dict(good, history="sampled"), {"type": "admit"}),
    (dict(good, state=["scored"]), {"type": "admit"}), (good, {"type": ["admit"]}), (good, {"type": "Admit"}),
    (dict(good, state="admitted"), {"type": "consume", "consumer": "\u3000"}),
]
for rollout, event in cases:
    try:
        advance_rollout_state(rollout, event)
    except ValueError:
        continue
    raise AssertionError(f"accepted rollout {rollout!r} with event {event!r}")
kept = advance_rollout_state(dict(good, reject_reason=None, note={"a": 1}), {"type": "admit", "extra": 3})
assert kept["note"] == {"a": 1} and "extra" not in kept and kept["state"] == "admitted"

# %% hidden exercise=advance_rollout_state points=2 name=agrees_with_reference_on_generated_lifecycles
# hint: any rollout in any state with any event the contract names (allowed or refused, scored at, above or below the sampling version, extra fields kept): the same new rollout, or the same ValueError, and the input untouched.
from hypothesis import strategies as st

states = ["sampled", "scored", "admitted", "rejected", "consumed"]
legal = {"sampled": "score", "scored": "admit", "admitted": "consume"}


@st.composite
def lifecycles(draw):
    version = draw(st.integers(0, 5))
    rollout = {"rollout_id": draw(st.sampled_from(["add-1#s0", "mul-2#s3", " x "])), "state": draw(st.sampled_from(states)),
               "policy_version": version, "history": draw(st.lists(st.sampled_from(states), max_size=3))}
    for field, values in (("scored_version", [version, version + 1]), ("task_sha256", ["ab12"]),
                          ("reject_reason", ["version_lag"])):
        if draw(st.booleans()):
            rollout[field] = draw(st.sampled_from(values))
    kind = legal.get(rollout["state"], "admit") if draw(st.booleans()) else draw(
        st.sampled_from(["score", "admit", "reject", "consume"]))
    if kind == "admit" and rollout["state"] == "scored" and draw(st.booleans()):
        kind = "reject"
    event = {"type": kind}
    if kind == "score":
        event["scored_version"] = draw(st.integers(max(0, version - 2), version + 3))
    elif kind == "reject":
        event["reason"] = draw(st.sampled_from(["behaviour_drift", "version_lag, behaviour_drift", " late "]))
    elif kind == "consume":
        event["consumer"] = draw(st.sampled_from(["learner-0", "L", " learner "]))
    if draw(st.booleans()):
        event["note"] = "ignored"
    return rollout, event


legal_pairs = {("sampled", "score"), ("scored", "admit"), ("scored", "reject"), ("admitted", "consume")}
reference.agrees("advance_rollout_state", lifecycles(), cases=150, clauses={
    **{f"{state} -> {kind}": (lambda state, kind: lambda rollout, event: rollout["state"] == state and event["type"] == kind)(
        state, kind) for state, kind in sorted(legal_pairs)},
    "an event not allowed in the state": lambda rollout, event: (rollout["state"], event["type"]) not in legal_pairs,
    "an event on a final state": lambda rollout, event: rollout["state"] in ("rejected", "consumed"),
    "scored at the sampling version": lambda rollout, event: event.get("scored_version") == rollout["policy_version"],
    "scored by a newer version": lambda rollout, event: event.get("scored_version", -1) > rollout["policy_version"],
    "scored by an older version": lambda rollout, event: "scored_version" in event and event[
        "scored_version"] < rollout["policy_version"],
    "extra rollout fields kept": lambda rollout, event: "task_sha256" in rollout,
    "an extra event key": lambda rollout, event: "note" in event,
    "a reason or consumer with outer spaces": lambda rollout, event: any(
        isinstance(event.get(k), str) and event[k] != event[k].strip() for k in ("reason", "consumer")),
})

# %% hidden exercise=advance_rollout_state points=2 name=agrees_with_reference_on_generated_invalid_events
# hint: one wrong thing anywhere (not a dict, a blank or missing id, an unknown state, a bool or float version, a history that is not a list, an unknown event, a bool, float or older scored_version, a blank reason or consumer): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import each_of, is_blank, is_bool, not_a_str

states = ["sampled", "scored", "admitted", "rejected", "consumed"]
defects = ([("valid", n) for n in range(30)] + [("rollout", bad) for bad in [None, [("state", "sampled")], "rollout", 3]]
           + [("event", bad) for bad in [None, [("type", "score")], "score", 1]]
           + [("rollout_id", bad) for bad in ["", " ", "\t\n", "\u3000", 7, None, True, ("a",), "MISSING"]]
           + [("state", bad) for bad in ["queued", "Scored", " scored", None, 1, ["sampled"], "MISSING"]]
           + [("policy_version", bad) for bad in [-1, True, False, 1.0, "1", None, "MISSING"]]
           + [("history", bad) for bad in [None, "sampled", ("sampled",), {"sampled"}, "MISSING"]]
           + [("type", bad) for bad in ["promote", "Score", "", None, 3, ["score"], "MISSING"]]
           + [("scored_version", bad) for bad in [True, False, 2.0, "3", None, -1, "older", "MISSING"]]
           + [("reason", bad) for bad in ["", " ", "\n\t", None, 3, ["late"], "MISSING"]]
           + [("consumer", bad) for bad in ["", "  ", "\u3000", None, 0, ("learner",), "MISSING"]])
needs = {"scored_version": ("sampled", "score"), "reason": ("scored", "reject"), "consumer": ("admitted", "consume")}


def one_defect(defect, rng):
    kind, bad = defect
    version = rng.randint(1, 4)
    state, event_type = needs.get(kind, rng.choice([("sampled", "score"), ("scored", "admit"),
                                                                ("scored", "reject"), ("admitted", "consume")]))
    rollout = {"rollout_id": "add-1#s0", "state": state, "policy_version": version, "history": ["sampled"]}
    event = {"type": event_type, "scored_version": version + 1, "reason": "behaviour_drift", "consumer": "learner-0"}
    if kind == "valid":
        return rollout, event
    if kind == "rollout":
        return bad, event
    if kind == "event":
        return rollout, bad
    target = event if kind in ("type", "scored_version", "reason", "consumer") else rollout
    if bad == "MISSING":
        del target[kind]
    else:
        target[kind] = version - 1 if bad == "older" else bad
    return rollout, event


def field(container, key):
    return container.get(key, "MISSING") if isinstance(container, dict) else "NOT A DICT"


def bad_text(value):
    return value != "MISSING" and (not_a_str(value) or is_blank(value))


reference.agrees("advance_rollout_state", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a rollout that is not a dict": lambda rollout, event: not isinstance(rollout, dict),
    "an event that is not a dict": lambda rollout, event: not isinstance(event, dict),
    "a missing rollout_id": lambda rollout, event: field(rollout, "rollout_id") == "MISSING",
    "a blank or non-str rollout_id": lambda rollout, event: bad_text(field(rollout, "rollout_id")),
    "an unknown or missing state": lambda rollout, event: isinstance(rollout, dict) and field(rollout, "state") not in states,
    "a policy_version that is a bool": lambda rollout, event: is_bool(field(rollout, "policy_version")),
    "a policy_version that is not an int >= 0": lambda rollout, event: isinstance(rollout, dict) and not is_bool(
        field(rollout, "policy_version")) and (not isinstance(rollout.get("policy_version"), int) or rollout[
            "policy_version"] < 0),
    "a history that is not a list": lambda rollout, event: isinstance(rollout, dict) and not isinstance(
        rollout.get("history"), list),
    "an unknown or missing event type": lambda rollout, event: isinstance(event, dict) and field(
        event, "type") not in ("score", "admit", "reject", "consume"),
    "a scored_version that is a bool": lambda rollout, event: is_bool(field(event, "scored_version")),
    "a scored_version that is not an int": lambda rollout, event: field(event, "type") == "score" and not isinstance(
        field(event, "scored_version"), int),
    "a scored_version older than policy_version": lambda rollout, event: field(event, "type") == "score" and type(
        field(event, "scored_version")) is int and type(field(rollout, "policy_version")) is int and event[
        "scored_version"] < rollout["policy_version"],
    "a missing reason": lambda rollout, event: field(event, "type") == "reject" and field(event, "reason") == "MISSING",
    "a blank or non-str reason": lambda rollout, event: field(event, "type") == "reject" and bad_text(field(event, "reason")),
    "a missing consumer": lambda rollout, event: field(event, "type") == "consume" and field(event, "consumer") == "MISSING",
    "a blank or non-str consumer": lambda rollout, event: field(event, "type") == "consume" and bad_text(
        field(event, "consumer")),
})

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
valid = check_rollout_freshness(rollout, 4, [-1.25, -9.0], 1, 0.5)  # the valid call every case below breaks
assert valid["behaviour_drift"] == 0.25 and valid["admitted"] is True and valid["action_tokens"] == 1, valid
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

# %% hidden exercise=check_rollout_freshness points=1 name=same_version_drift_is_train_inference_mismatch
# hint: the drift is measured at every lag, 0 included: at the same version it is the engine/learner mismatch, and it can reject a rollout on its own.
rollout = {"policy_version": 6, "behaviour_logprobs": [-0.5, -1.5, -0.25], "action_mask": [1, 1, 1]}
same = check_rollout_freshness(rollout, 6, [-0.75, -1.25, -0.25], max_version_lag=0, max_drift=0.125)
assert same["version_lag"] == 0 and same["admitted"] is False and same["reasons"] == ["behaviour_drift"]
assert same["behaviour_drift"] == 0.5 / 3 and same["max_token_drift"] == 0.25
close = check_rollout_freshness(rollout, 6, [-0.75, -1.25, -0.25], max_version_lag=0, max_drift=0.25)
assert close["admitted"] is True and close["reasons"] == []

# %% hidden exercise=check_rollout_freshness points=1 name=mask_and_lists_have_exact_types
# hint: the mask holds the ints 0 and 1 only (True, False, 1.0 and 0.0 are refused) and the log-probs and the mask are lists; a bool is not a log-prob.
rollout = {"policy_version": 1, "behaviour_logprobs": [-1.0, -2.0], "action_mask": [1, 0]}
valid = check_rollout_freshness(rollout, 2, [-1.75, -2.0], max_version_lag=1, max_drift=0.5)  # the call every case breaks
assert valid["reasons"] == ["behaviour_drift"] and valid["max_token_drift"] == 0.75, valid
calls = [
    (dict(rollout, action_mask=[True, 0]), [-1.0, -2.0]), (dict(rollout, action_mask=[1, False]), [-1.0, -2.0]),
    (dict(rollout, action_mask=[1.0, 0]), [-1.0, -2.0]), (dict(rollout, action_mask=(1, 0)), [-1.0, -2.0]),
    (dict(rollout, behaviour_logprobs=(-1.0, -2.0)), [-1.0, -2.0]), (rollout, (-1.0, -2.0)),
    (dict(rollout, behaviour_logprobs=[True, -2.0]), [-1.0, -2.0]), (rollout, [-1.0, "-2.0"]),
    ({k: v for k, v in rollout.items() if k != "action_mask"}, [-1.0, -2.0]), (None, [-1.0, -2.0]),
    ({k: v for k, v in rollout.items() if k != "policy_version"}, [-1.0, -2.0]),
]
for bad_rollout, current in calls:
    try:
        check_rollout_freshness(bad_rollout, 2, current, max_version_lag=1, max_drift=0.5)
    except ValueError:
        continue
    raise AssertionError(f"accepted rollout {bad_rollout!r} with current log-probs {current!r}")

# %% hidden exercise=check_rollout_freshness points=1 name=results_have_the_documented_types
# hint: the lag and the token count are ints, the two drifts are floats even when every log-prob is an int, and admitted is a bool.
rollout = {"policy_version": 2, "behaviour_logprobs": [-1, -3, 0], "action_mask": [1, 1, 0]}
result = check_rollout_freshness(rollout, 3, [-2, -3, -5], max_version_lag=1, max_drift=1)
assert result == {"version_lag": 1, "behaviour_drift": 0.5, "max_token_drift": 1.0, "action_tokens": 2,
                  "admitted": True, "reasons": []}
assert type(result["behaviour_drift"]) is float and type(result["max_token_drift"]) is float
assert type(result["version_lag"]) is int and type(result["action_tokens"]) is int and result["admitted"] is True

# %% hidden exercise=check_rollout_freshness points=2 name=agrees_with_reference_on_generated_rollouts
# hint: any rollout the contract allows (ints and floats, masked tokens, lags and drifts at, under and over their limits, lag 0 with a mismatch): the same verdict with the same types.
from hypothesis import strategies as st

values = st.sampled_from([0, -1, -3, -0.5, -0.25, -2.25, -0.125, -1.5, -7.0])
shifts = st.sampled_from([0, 0.0, 0.25, -0.25, 0.5, -1, 1, 0.125, -2.0])


@st.composite
def rollouts(draw):
    size = draw(st.integers(1, 6))
    behaviour = [draw(values) for _ in range(size)]
    current = [value + draw(shifts) for value in behaviour]
    mask = [draw(st.sampled_from([0, 1])) for _ in range(size)]
    mask[draw(st.integers(0, size - 1))] = 1
    version = draw(st.integers(0, 6))
    rollout = {"policy_version": version, "behaviour_logprobs": behaviour, "action_mask": mask}
    if draw(st.booleans()):
        rollout["rollout_id"] = "add-1#s0"
    arguments = (rollout, version + draw(st.integers(0, 4)), current, draw(st.integers(0, 3)),
                 draw(st.sampled_from([0, 0.0, 0.125, 0.25, 0.5, 1, 1.5])))
    if draw(st.booleans()):
        return arguments[:3], {"max_version_lag": arguments[3], "max_drift": arguments[4]}
    return arguments


def unpack(*args, **kwargs):
    rollout, current_version, current = args[:3]
    lag_limit, drift_limit = (*args[3:], kwargs.get("max_version_lag"), kwargs.get("max_drift"))[-2:] if kwargs else args[3:]
    diffs = [abs(c - b) for c, b, m in zip(current, rollout["behaviour_logprobs"], rollout["action_mask"]) if m == 1]
    return current_version - rollout["policy_version"], sum(diffs) / len(diffs), lag_limit, drift_limit, rollout


reference.agrees("check_rollout_freshness", rollouts(), cases=150, clauses={
    "limits given by keyword": lambda *a, **k: bool(k),
    "a masked token": lambda *a, **k: 0 in unpack(*a, **k)[4]["action_mask"],
    "a lag exactly at its limit": lambda *a, **k: unpack(*a, **k)[0] == unpack(*a, **k)[2],
    "a lag over its limit": lambda *a, **k: unpack(*a, **k)[0] > unpack(*a, **k)[2],
    "a drift exactly at its limit (above 0)": lambda *a, **k: unpack(*a, **k)[1] == unpack(*a, **k)[3] > 0,
    "a drift over its limit at lag 0": lambda *a, **k: unpack(*a, **k)[0] == 0 and unpack(*a, **k)[1] > unpack(*a, **k)[3],
    "both limits failed": lambda *a, **k: unpack(*a, **k)[0] > unpack(*a, **k)[2] and unpack(*a, **k)[1] > unpack(*a, **k)[3],
    "int log-probs": lambda *a, **k: any(type(v) is int for v in a[0]["behaviour_logprobs"]),
    "signed differences that cancel": lambda *a, **k: any(c > b for c, b in zip(a[2], a[0]["behaviour_logprobs"])) and any(
        c < b for c, b in zip(a[2], a[0]["behaviour_logprobs"])),
    "extra rollout fields": lambda *a, **k: "rollout_id" in a[0],
})

# %% hidden exercise=check_rollout_freshness points=2 name=agrees_with_reference_on_generated_invalid_rollouts
# hint: one wrong thing anywhere (a rollout that is not a dict, a missing field, a bool, float or negative version or lag limit, a learner older than the rollout, a bad drift limit, a tuple for a list, a NaN, bool or str log-prob, a mask value other than the ints 0 and 1, lists of different lengths, no action token): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import below, each_of, is_bool, not_a_number, not_finite, values

bad_logprob = [float("nan"), float("inf"), -float("inf"), True, "x", None]
defects = ([("valid", n) for n in range(30)] + [("rollout", bad) for bad in [None, [("policy_version", 1)], "rollout"]]
           + [("policy_version", bad) for bad in [-1, True, 1.0, "1", None, "MISSING"]]
           + [("current_version", bad) for bad in [True, -1, 1.5, None, "2", "older"]]
           + [("max_version_lag", bad) for bad in [-1, True, False, 1.0, None, "1"]]
           + [("max_drift", bad) for bad in [-0.1, float("nan"), float("inf"), True, "0.5", None]]
           + [(field, bad) for field in ["behaviour_logprobs", "current_logprobs"]
              for bad in [None, "abc", "TUPLE", "MISSING"] + [("value", value) for value in bad_logprob]]
           + [("action_mask", bad) for bad in [None, "TUPLE", "MISSING", ("value", 2), ("value", -1), ("value", True),
                                               ("value", False), ("value", 1.0), ("value", None), "ZEROS"]]
           + [("length", field) for field in ["behaviour_logprobs", "current_logprobs", "action_mask"]])


def one_defect(defect, rng):
    kind, bad = defect
    size = rng.randint(1, 4)
    version = rng.randint(1, 5)
    rollout = {"policy_version": version, "behaviour_logprobs": [-0.5] * size, "action_mask": [1] * size}
    arguments = {"current_version": version + 1, "current_logprobs": [-0.75] * size, "max_version_lag": 1,
                 "max_drift": 0.5}
    at = rng.randint(0, size - 1)
    if kind == "valid":
        arguments["current_logprobs"][at] = rng.choice([-0.5, -1.25, -0.125])  # admitted or not, and valid
    elif kind == "rollout":
        rollout = bad
    elif kind in ("policy_version", "behaviour_logprobs", "action_mask", "current_version", "max_version_lag",
                  "max_drift", "current_logprobs"):
        holder = rollout if kind in ("policy_version", "behaviour_logprobs", "action_mask") else arguments
        if bad == "MISSING" and holder is rollout:
            del holder[kind]
        elif bad == "MISSING":
            holder[kind] = None
        elif bad == "TUPLE":
            holder[kind] = tuple(holder[kind])
        elif bad == "ZEROS":
            holder[kind] = [0] * size
        elif bad == "older":
            holder[kind] = version - 1
        elif isinstance(bad, tuple) and bad and bad[0] == "value":
            holder[kind][at] = bad[1]
        else:
            holder[kind] = bad
    else:
        holder = rollout if bad in rollout else arguments
        holder[bad] = holder[bad] + holder[bad][:1]
    return (rollout, arguments["current_version"], arguments["current_logprobs"], arguments["max_version_lag"],
            arguments["max_drift"])


def rollout_field(rollout, key):
    return rollout.get(key, "MISSING") if isinstance(rollout, dict) else "MISSING"


def bad_version(value):
    return is_bool(value) or not isinstance(value, int) or value < 0


def logprob_lists(rollout, current):
    return {"behaviour_logprobs": rollout_field(rollout, "behaviour_logprobs"), "current_logprobs": current}


def freshness_clauses():
    found = {
        "a rollout that is not a dict": lambda r, cv, cl, lag, drift: not isinstance(r, dict),
        "a policy_version that is missing or not an int >= 0": lambda r, cv, cl, lag, drift: isinstance(
            r, dict) and bad_version(rollout_field(r, "policy_version")),
        "a current_version that is a bool or not an int": lambda r, cv, cl, lag, drift: is_bool(cv) or not isinstance(cv, int),
        "a current_version older than policy_version": lambda r, cv, cl, lag, drift: type(cv) is int and type(
            rollout_field(r, "policy_version")) is int and cv < r["policy_version"],
        "a max_version_lag that is a bool": lambda r, cv, cl, lag, drift: is_bool(lag),
        "a max_version_lag that is not an int >= 0": lambda r, cv, cl, lag, drift: not is_bool(lag) and bad_version(lag),
        "a max_drift that is a bool": lambda r, cv, cl, lag, drift: is_bool(drift),
        "a max_drift that is negative, not finite or not a number": lambda r, cv, cl, lag, drift: not is_bool(drift) and (
            not_a_number(drift) or not_finite(drift) or below(drift, 0)),
        "a mask that is not a list": lambda r, cv, cl, lag, drift: isinstance(r, dict) and not isinstance(
            rollout_field(r, "action_mask"), list),
        "a mask value that is a bool": lambda r, cv, cl, lag, drift: any(
            is_bool(m) for m in values(rollout_field(r, "action_mask"))),
        "a mask value other than the ints 0 and 1": lambda r, cv, cl, lag, drift: any(
            not is_bool(m) and m not in (0, 1) or type(m) is float for m in values(rollout_field(r, "action_mask"))),
        "no action token": lambda r, cv, cl, lag, drift: isinstance(rollout_field(r, "action_mask"), list) and all(
            m == 0 for m in r["action_mask"]),
        "lists of different lengths": lambda r, cv, cl, lag, drift: isinstance(r, dict) and all(
            isinstance(v, list) for v in (rollout_field(r, "behaviour_logprobs"), rollout_field(r, "action_mask"), cl))
            and len({len(r["behaviour_logprobs"]), len(r["action_mask"]), len(cl)}) > 1,
    }
    for name in ("behaviour_logprobs", "current_logprobs"):
        pick = (lambda name: lambda r, cl: logprob_lists(r, cl)[name])(name)
        found[f"{name} not a list"] = (lambda pick: lambda r, cv, cl, lag, drift: isinstance(r, dict) and not isinstance(
            pick(r, cl), list))(pick)
        found[f"a {name} value that is a bool"] = (lambda pick: lambda r, cv, cl, lag, drift: any(
            is_bool(v) for v in values(pick(r, cl))))(pick)
        found[f"a {name} value that is not finite"] = (lambda pick: lambda r, cv, cl, lag, drift: any(
            not_finite(v) for v in values(pick(r, cl))))(pick)
        found[f"a {name} value that is not a number"] = (lambda pick: lambda r, cv, cl, lag, drift: any(
            not_a_number(v) for v in values(pick(r, cl))))(pick)
    return found


reference.agrees("check_rollout_freshness", each_of(defects, one_defect, variants=2), cases=2 * len(defects),
                 clauses=freshness_clauses())

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
valid = reserve_and_activate(["a", "b"], ok_events + [{"op": "activate", "consumer": "A", "ok": False}], 1)
assert valid["free"] == ["a", "b"] and valid["log"][1]["outcome"] == "released", valid  # the call every case breaks
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
every_id = sorted(queue)
result = reserve_and_activate(queue, events, batch_size=2)
held = [rid for ids in result["reserved"].values() for rid in ids]
places = result["free"] + held + list(result["consumed"])
assert sorted(places) == every_id and len(places) == len(every_id)
assert list(result["consumed"].items()) == [("q0", "A"), ("q1", "A"), ("q4", "C"), ("q5", "C")]
assert result["reserved"] == {"A": ["q2", "q3"]} and result["free"] == ["q6"]

# %% hidden exercise=reserve_and_activate points=1 name=released_batches_go_back_to_their_queue_places
# hint: a released batch returns to the places it had in the queue, not to the front or the back of the free list, so the oldest free rollout is always taken first.
result = reserve_and_activate(["r1", "r2", "r3", "r4", "r5", "r6"], [
    {"op": "reserve", "consumer": "A"},
    {"op": "reserve", "consumer": "B"},
    {"op": "activate", "consumer": "A", "ok": False},
    {"op": "activate", "consumer": "B", "ok": False},
    {"op": "reserve", "consumer": "C"},
], batch_size=2)
assert result["log"][3]["rollout_ids"] == ["r3", "r4"]
assert result["log"][4]["rollout_ids"] == ["r1", "r2"]
assert result["free"] == ["r3", "r4", "r5", "r6"] and result["reserved"] == {"C": ["r1", "r2"]}

# %% hidden exercise=reserve_and_activate points=1 name=consumed_in_the_order_of_consumption
# hint: the consumed dict follows the order in which batches were activated, not the queue order; reservations still held keep the order in which they were made.
result = reserve_and_activate(["q1", "q2", "q3", "q4", "q5", "q6"], [
    {"op": "reserve", "consumer": "A"}, {"op": "reserve", "consumer": "B"}, {"op": "reserve", "consumer": "C"},
    {"op": "activate", "consumer": "C", "ok": True}, {"op": "activate", "consumer": "A", "ok": True},
], batch_size=2)
assert list(result["consumed"].items()) == [("q5", "C"), ("q6", "C"), ("q1", "A"), ("q2", "A")]
assert result["reserved"] == {"B": ["q3", "q4"]} and result["free"] == []

# %% hidden exercise=reserve_and_activate points=1 name=inputs_have_exact_types
# hint: the queue and the events are lists, every event a dict with a visible consumer; other keys of an event are ignored, and a reserve event's ok is never read.
calls = [
    (("a", "b"), [], 1), (["a", "b"], ({"op": "reserve", "consumer": "A"},), 1), (["a", "b"], [None], 1),
    (["a", "b"], ["reserve"], 1), (["a", " "], [], 1), (["a", "b"], [{"op": "reserve", "consumer": " \t"}], 1),
    (["a", "b"], [{"op": ["reserve"], "consumer": "A"}], 1),
    (["a", "b"], [{"op": "reserve", "consumer": "A"}, {"op": "activate", "consumer": "A", "ok": 1}], 1),
]
for queue, events, batch in calls:
    try:
        reserve_and_activate(queue, events, batch)
    except ValueError:
        continue
    raise AssertionError(f"accepted queue={queue!r} events={events!r} batch_size={batch!r}")
loose = reserve_and_activate(["a", "b"], [{"op": "reserve", "consumer": "A", "ok": "ignored", "note": 1}], 2)
assert loose["reserved"] == {"A": ["a", "b"]} and loose["log"][0]["outcome"] == "reserved"

# %% hidden exercise=reserve_and_activate points=2 name=agrees_with_reference_on_generated_replays
# hint: any queue and any sequence of reservations and activations (contention, repeated and failed activations, batches larger than the queue, extra keys): the same log and the same three places.
from hypothesis import strategies as st


@st.composite
def replays(draw):
    queue = draw(st.lists(st.sampled_from(["r1", "r2", "r3", "r4", "r5", "r6", "r7"]), max_size=7, unique=True))
    events = [{"op": "reserve", "consumer": consumer} for consumer in draw(st.permutations(["A", "B", "C"]))[
        :draw(st.integers(0, 3))]]  # contention first, then anything
    for _ in range(draw(st.integers(0, 10))):
        event = {"op": draw(st.sampled_from(["reserve", "activate"])), "consumer": draw(st.sampled_from(["A", "B", "C"]))}
        if event["op"] == "activate":
            event["ok"] = draw(st.sampled_from([True, False, False]))
        elif draw(st.booleans()):
            event["ok"] = draw(st.sampled_from([None, "yes"]))
        events.append(event)
    return queue, events, draw(st.integers(1, 3))


def simulate(queue, events, batch_size):
    """How many reservations found too few free rollouts, were repeated, or had none to activate."""
    free, held, seen = list(queue), {}, {"insufficient": 0, "already_reserved": 0, "no_reservation": 0, "released": 0}
    for event in events:
        consumer = event["consumer"]
        if event["op"] == "reserve":
            if consumer in held:
                seen["already_reserved"] += 1
            elif len(free) < batch_size:
                seen["insufficient"] += 1
            else:
                held[consumer], free = free[:batch_size], free[batch_size:]
        elif consumer not in held:
            seen["no_reservation"] += 1
        else:
            batch = held.pop(consumer)
            if event["ok"] is not True:
                seen["released"] += 1
                free = [item for item in queue if item in free or item in batch]
    return seen


reference.agrees("reserve_and_activate", replays(), cases=150, clauses={
    **{f"an event whose outcome is {outcome}": (lambda outcome: lambda q, e, b: simulate(q, e, b)[outcome] > 0)(outcome)
       for outcome in ("insufficient", "already_reserved", "no_reservation", "released")},
    "an empty queue": lambda q, e, b: q == [],
    "a batch larger than the queue": lambda q, e, b: b > len(q),
    "a reserve event with an extra ok key": lambda q, e, b: any(x["op"] == "reserve" and "ok" in x for x in e),
    "no event at all": lambda q, e, b: e == [],
})

# %% hidden exercise=reserve_and_activate points=2 name=agrees_with_reference_on_generated_invalid_replays
# hint: one wrong thing anywhere, even in the last event (a bad batch size, a queue or events that are not lists, a blank, non-str or repeated id, an event that is not a dict, an unknown op, a missing or blank consumer, an activation whose ok is not a bool): the same ValueError as the contract says.
from hypothesis import strategies as st

from tools.course.grader.clauses import dicts, each_of, is_blank, is_bool, not_a_str

defects = ([("valid", n) for n in range(30)] + [("batch_size", bad) for bad in [0, -1, True, False, 1.0, "2", None]]
           + [("queue", bad) for bad in [("r1", "r2"), "r1", None, {"r1"}]]
           + [("queue_id", bad) for bad in ["", " ", "\t", 7, None, ("r1",), "DUPLICATE"]]
           + [("events", bad) for bad in [None, "reserve", {"op": "reserve", "consumer": "A"}, "TUPLE"]]
           + [("event", bad) for bad in [None, "reserve", [("op", "reserve")], 3]]
           + [("op", bad) for bad in ["consume", "Reserve", "", None, 3, ["reserve"], "MISSING"]]
           + [("consumer", bad) for bad in ["", " ", "\u3000", None, 3, ["A"], "MISSING"]]
           + [("ok", bad) for bad in [1, 0, "yes", None, "MISSING"]])


def one_defect(defect, rng):
    kind, bad = defect
    queue = ["r1", "r2", "r3", "r4"]
    events = [{"op": "reserve", "consumer": "A"}, {"op": "activate", "consumer": "A", "ok": True},
              {"op": "reserve", "consumer": "B"}, {"op": "activate", "consumer": "B", "ok": False}]
    batch_size = rng.randint(1, 2)
    at = rng.randint(0, 3)
    if kind == "valid":
        events = events[:at + 1]
    elif kind == "batch_size":
        batch_size = bad
    elif kind == "queue":
        queue = bad
    elif kind == "queue_id":
        queue[rng.randint(0, 3)] = "r1" if bad == "DUPLICATE" and at else ("r2" if bad == "DUPLICATE" else bad)
    elif kind == "events":
        events = tuple(events) if bad == "TUPLE" else bad
    elif kind == "event":
        events[at] = bad
    else:
        if kind == "ok":
            at = rng.choice([1, 3])
        if bad == "MISSING":
            del events[at][kind]
        else:
            events[at][kind] = bad
    return queue, events, batch_size


def event_dicts(events):
    return dicts(events)


reference.agrees("reserve_and_activate", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a batch_size that is a bool": lambda q, e, b: is_bool(b),
    "a batch_size that is not an int >= 1": lambda q, e, b: not is_bool(b) and (not isinstance(b, int) or b < 1),
    "a queue that is not a list": lambda q, e, b: not isinstance(q, list),
    "a queue id that is blank or not a str": lambda q, e, b: isinstance(q, list) and any(
        not_a_str(x) or is_blank(x) for x in q),
    "a duplicate queue id": lambda q, e, b: isinstance(q, list) and len(q) != len(set(map(repr, q))),
    "events that are not a list": lambda q, e, b: not isinstance(e, list),
    "an event that is not a dict": lambda q, e, b: isinstance(e, list) and any(not isinstance(x, dict) for x in e),
    "an unknown or missing op": lambda q, e, b: any(x.get("op") not in ("reserve", "activate") for x in event_dicts(e)),
    "a missing consumer": lambda q, e, b: any("consumer" not in x for x in event_dicts(e)),
    "a blank or non-str consumer": lambda q, e, b: any(
        "consumer" in x and (not_a_str(x["consumer"]) or is_blank(x["consumer"])) for x in event_dicts(e)),
    "an activation whose ok is not a bool": lambda q, e, b: any(
        x.get("op") == "activate" and not is_bool(x.get("ok")) for x in event_dicts(e)),
    "the defect in the last event": lambda q, e, b: isinstance(e, list) and len(e) == 4 and isinstance(e[3], dict) and (
        not is_bool(e[3].get("ok")) or e[3].get("op") != "activate" or not isinstance(e[3].get("consumer"), str)
        or is_blank(e[3].get("consumer"))),
})
