# %% hidden exercise=build_online_pairs points=1 name=first_best_against_first_worst
# hint: chosen is the response at the first position of the highest score, rejected at the first position of the lowest; the scores are returned as given.
group = {"prompt_id": "a", "prompt": "P", "policy_version": "v", "responses": ["r0", "r1", "r2", "r3", "r4"],
         "scores": [0.5, 2, -1, 2, -1.0]}
result = build_online_pairs([group], "v")
assert result["pairs"] == [{"prompt_id": "a", "prompt": "P", "chosen": "r1", "rejected": "r2", "chosen_score": 2,
                            "rejected_score": -1, "policy_version": "v"}]
assert type(result["pairs"][0]["chosen_score"]) is int
two = build_online_pairs([dict(group, responses=("x", "y"), scores=(0.25, 0.75))], "v")["pairs"][0]
assert (two["chosen"], two["rejected"], two["chosen_score"]) == ("y", "x", 0.75)

# %% hidden exercise=build_online_pairs points=1 name=ties_are_skipped_and_reported
# hint: a group whose scores are all equal has no preference: report its prompt_id in ties and build no pair.
groups = [{"prompt_id": f"g{k}", "prompt": "P", "policy_version": "v", "responses": ["a", "b", "c"], "scores": scores}
          for k, scores in enumerate([[1, 1, 1], [0, 0, 0], [0.5, 0.5, 0.5000001], [3, 3, 3.0]])]
result = build_online_pairs(groups, "v")
assert result["ties"] == ["g0", "g1", "g3"] and [pair["prompt_id"] for pair in result["pairs"]] == ["g2"]
assert result["stale"] == []

# %% hidden exercise=build_online_pairs points=1 name=stale_groups_never_pair
# hint: a group sampled by another version is stale, whatever its scores, and listed only under stale (even when it is also a tie).
groups = [{"prompt_id": "old", "prompt": "P", "policy_version": "v0", "responses": ["a", "b"], "scores": [1, 0]},
          {"prompt_id": "old_tie", "prompt": "P", "policy_version": "V1", "responses": ["a", "b"], "scores": [1, 1]},
          {"prompt_id": "new", "prompt": "P", "policy_version": "v1", "responses": ["a", "b"], "scores": [0, 1]}]
result = build_online_pairs(groups, "v1")
assert result["stale"] == ["old", "old_tie"] and result["ties"] == []
assert [(pair["prompt_id"], pair["policy_version"]) for pair in result["pairs"]] == [("new", "v1")]

# %% hidden exercise=build_online_pairs points=1 name=input_order_and_untouched_groups
# hint: pairs, ties and stale follow the input order of the groups, and the groups are not modified.
groups = ({"prompt_id": "z", "prompt": "Pz", "policy_version": "v", "responses": ["a", "b"], "scores": [0, 1]},
          {"prompt_id": "a", "prompt": "Pa", "policy_version": "v", "responses": ["c", "d"], "scores": [5, 1]},
          {"prompt_id": "m", "prompt": "Pm", "policy_version": "v", "responses": ["e", "f"], "scores": [2, 2]})
result = build_online_pairs(groups, "v")
assert [pair["prompt_id"] for pair in result["pairs"]] == ["z", "a"] and result["ties"] == ["m"]
assert groups[0]["responses"] == ["a", "b"] and groups[1]["scores"] == [5, 1]
assert build_online_pairs([], "v") == {"pairs": [], "ties": [], "stale": []}

# %% hidden exercise=build_online_pairs points=1 name=malformed_groups_raise
# hint: check the version, the list, every group's keys, ids (non-blank, unique), prompt, version, responses (at least 2 str) and scores (finite, not bools, one per response).
good = {"prompt_id": "a", "prompt": "P", "policy_version": "v", "responses": ["x", "y"], "scores": [1, 0]}
assert len(build_online_pairs([good], "v")["pairs"]) == 1
bad_calls = [
    lambda: build_online_pairs([good], ""), lambda: build_online_pairs([good], None), lambda: build_online_pairs([good], " "),
    lambda: build_online_pairs(good, "v"), lambda: build_online_pairs(None, "v"), lambda: build_online_pairs([good, "x"], "v"),
    lambda: build_online_pairs([good, dict(good)], "v"), lambda: build_online_pairs([dict(good, prompt_id=" ")], "v"),
    lambda: build_online_pairs([dict(good, prompt_id=3)], "v"), lambda: build_online_pairs([dict(good, prompt=None)], "v"),
    lambda: build_online_pairs([dict(good, policy_version="")], "v"), lambda: build_online_pairs([dict(good, responses=["x"])], "v"),
    lambda: build_online_pairs([dict(good, responses=["x", 2])], "v"), lambda: build_online_pairs([dict(good, responses="xy")], "v"),
    lambda: build_online_pairs([dict(good, scores=[1])], "v"), lambda: build_online_pairs([dict(good, scores=[1, True])], "v"),
    lambda: build_online_pairs([dict(good, scores=[1, float("nan")])], "v"),
    lambda: build_online_pairs([dict(good, scores=[1, "0"])], "v"), lambda: build_online_pairs([dict(good, extra=1)], "v"),
    lambda: build_online_pairs([{k: v for k, v in good.items() if k != "scores"}], "v"),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=adoption_gate points=1 name=counts_rate_and_interval
# hint: ties stay out of the rate; the interval is wilson_interval(wins, wins + losses, confidence).
ids = [f"e{k}" for k in range(20)]
outcomes = {key: ("win" if k < 14 else "loss" if k < 17 else "tie") for k, key in enumerate(ids)}
result = adoption_gate(outcomes, ids, confidence=0.9, min_decisive=5)
assert (result["wins"], result["losses"], result["ties"], result["decisive"]) == (14, 3, 3, 17)
assert math.isclose(result["win_rate"], 14 / 17) and result["interval"] == wilson_interval(14, 17, 0.9)
assert result["decision"] == "adopt" and result["reason"] is None

# %% hidden exercise=adoption_gate points=1 name=the_lower_bound_must_be_above_one_half
# hint: adopt only when interval[0] > 0.5; a point estimate above 1/2 is not enough.
ids = [f"e{k}" for k in range(30)]
for wins, losses, expected in ((12, 8, "keep"), (18, 10, "keep"), (22, 6, "adopt"), (8, 12, "keep")):
    outcomes = {key: ("win" if k < wins else "loss" if k < wins + losses else "tie") for k, key in enumerate(ids)}
    result = adoption_gate(outcomes, ids, min_decisive=1)
    assert result["decision"] == expected, (wins, losses)
    assert (result["interval"][0] > 0.5) == (expected == "adopt")
    assert result["reason"] == (None if expected == "adopt" else "not_better")

# %% hidden exercise=adoption_gate points=1 name=too_few_decisive_verdicts_come_first
# hint: with fewer than min_decisive wins + losses the candidate is kept with reason too_few_decisive, however one-sided; exactly min_decisive is enough.
ids = [f"e{k}" for k in range(12)]
seven = {key: ("win" if k < 7 else "tie") for k, key in enumerate(ids)}
assert adoption_gate(seven, ids, min_decisive=8)["reason"] == "too_few_decisive"
assert adoption_gate(seven, ids, min_decisive=7)["decision"] == "adopt"
nothing = adoption_gate({key: "tie" for key in ids}, ids, min_decisive=1)
assert nothing["win_rate"] is None and nothing["interval"] is None and nothing["reason"] == "too_few_decisive"

# %% hidden exercise=adoption_gate points=1 name=only_the_fixed_evaluation_set
# hint: the outcomes must cover exactly the fixed evaluation set: one prompt missing or one extra is refused, whatever the order of the ids.
ids = ("b", "a", "c", "d")
outcomes = {"a": "win", "b": "win", "c": "win", "d": "loss"}
assert adoption_gate(outcomes, ids, min_decisive=1)["decisive"] == 4
for wrong in ({"a": "win", "b": "win", "c": "win"}, {**outcomes, "e": "win"}, {**{"a": "win"}, "x": "tie", "b": "win", "c": "win"}):
    try:
        adoption_gate(wrong, ids, min_decisive=1)
    except ValueError:
        continue
    raise AssertionError(f"outcomes for another set were accepted: {sorted(wrong)}")

# %% hidden exercise=adoption_gate points=1 name=malformed_arguments_raise
# hint: check the id list (non-empty, distinct, non-blank str), the outcomes, the confidence (0 < c < 1) and min_decisive (an int >= 1) before counting.
ids = ["a", "b"]
assert adoption_gate({"a": "win", "b": "win"}, ids, min_decisive=2)["wins"] == 2
bad_calls = [
    lambda: adoption_gate({}, []), lambda: adoption_gate({"a": "win"}, ["a", "a"]), lambda: adoption_gate({" ": "win"}, [" "]),
    lambda: adoption_gate({1: "win"}, [1]), lambda: adoption_gate({"a": "win"}, "a"), lambda: adoption_gate([("a", "win")], ["a"]),
    lambda: adoption_gate({"a": "won", "b": "win"}, ids), lambda: adoption_gate({"a": None, "b": "win"}, ids),
    lambda: adoption_gate({"a": "Win", "b": "win"}, ids), lambda: adoption_gate({"a": "win", "b": "win"}, ids, confidence=1),
    lambda: adoption_gate({"a": "win", "b": "win"}, ids, confidence=0), lambda: adoption_gate({"a": "win", "b": "win"}, ids, confidence=True),
    lambda: adoption_gate({"a": "win", "b": "win"}, ids, confidence=float("nan")),
    lambda: adoption_gate({"a": "win", "b": "win"}, ids, min_decisive=0),
    lambda: adoption_gate({"a": "win", "b": "win"}, ids, min_decisive=2.0),
    lambda: adoption_gate({"a": "win", "b": "win"}, ids, min_decisive=True),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=guard_rollback points=1 name=within_the_tolerance_the_candidate_serves
# hint: a drop of exactly max_drop is not a regression; the candidate's entry is appended as good and it becomes the serving version.
v0, v1 = hashlib.sha256(b"base").hexdigest(), hashlib.sha256(b"cand").hexdigest()
log = [{"version": v0, "parent": None, "guard": 0.5, "state": "good"}]
result = guard_rollback(log, {"version": v1, "parent": v0}, 0.25, 0.25)
assert result["rolled_back"] is False and result["serving"] == v1 and result["drop"] == 0.25
assert result["log"] == [log[0], {"version": v1, "parent": v0, "guard": 0.25, "state": "good"}]
better = guard_rollback(log, {"version": v1, "parent": v0}, 0.75, 0.0)
assert better["drop"] == -0.25 and type(better["drop"]) is float and better["serving"] == v1

# %% hidden exercise=guard_rollback points=1 name=a_regression_rolls_back_to_the_last_good_version
# hint: compare with the guard of the version serving now (the last good entry), not the base; on a regression the serving version stays that last good one.
names = [hashlib.sha256(name.encode()).hexdigest() for name in ("v0", "v1", "v2", "v3")]
log = [{"version": names[0], "parent": None, "guard": 0.9, "state": "good"},
       {"version": names[1], "parent": names[0], "guard": 0.5, "state": "good"}]
kept = guard_rollback(log, {"version": names[2], "parent": names[1]}, 0.45, 0.1)
assert kept["rolled_back"] is False and kept["serving"] == names[2], "0.45 is within 0.1 of the serving guard 0.5"
dropped = guard_rollback(log, {"version": names[2], "parent": names[1]}, 0.39, 0.1)
assert dropped["rolled_back"] is True and dropped["serving"] == names[1]
assert dropped["log"][-1] == {"version": names[2], "parent": names[1], "guard": 0.39, "state": "regressed"}
again = guard_rollback(dropped["log"], {"version": names[3], "parent": names[1]}, 0.6, 0.1)
assert again["serving"] == names[3] and again["log"][-1]["parent"] == names[1]

# %% hidden exercise=guard_rollback points=1 name=the_old_log_is_left_untouched
# hint: return a new list of copies; the caller's log and its entries keep their content.
v0, v1 = hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"b").hexdigest()
entry = {"version": v0, "parent": None, "guard": 1.0, "state": "good"}
log = (entry,)
result = guard_rollback(log, {"version": v1, "parent": v0}, 0.1, 0.2)
assert log == ({"version": v0, "parent": None, "guard": 1.0, "state": "good"},) and len(log) == 1
assert isinstance(result["log"], list) and len(result["log"]) == 2 and result["log"][-1]["state"] == "regressed"

# %% hidden exercise=guard_rollback points=1 name=an_inconsistent_log_is_refused
# hint: walk the log: the first entry is a good base without parent, each later parent is the version serving before that entry, versions are unique digests, a regressed version is never a parent.
h = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(5)]
base = {"version": h[0], "parent": None, "guard": 0.5, "state": "good"}
fine = [base, {"version": h[1], "parent": h[0], "guard": 0.1, "state": "regressed"},
        {"version": h[2], "parent": h[0], "guard": 0.6, "state": "good"}]
assert guard_rollback(fine, {"version": h[3], "parent": h[2]}, 0.6, 0.0)["serving"] == h[3]
broken_logs = [
    [dict(base, parent=h[4])], [dict(base, state="regressed")], [base, {"version": h[1], "parent": h[4], "guard": 0.5, "state": "good"}],
    [base, {"version": h[1], "parent": h[0], "guard": 0.1, "state": "regressed"}, {"version": h[2], "parent": h[1], "guard": 0.6, "state": "good"}],
    [base, dict(base)], [dict(base, version=h[0].upper())], [dict(base, version=h[0][:63])], [dict(base, version="g" * 64)],
    [dict(base, guard=True)], [dict(base, guard=float("nan"))], [dict(base, state="bad")], [dict(base, note="x")],
    [{k: v for k, v in base.items() if k != "guard"}], [], None, base,
]
for broken in broken_logs:
    try:
        guard_rollback(broken, {"version": h[3], "parent": h[0]}, 0.5, 0.1)
    except ValueError:
        continue
    raise AssertionError(f"an inconsistent log was accepted: {broken!r}")

# %% hidden exercise=guard_rollback points=1 name=the_candidate_and_numbers_are_checked
# hint: the candidate is trained from the serving version and has a new, well-formed version; guard is finite; max_drop is finite and >= 0.
h = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(3)]
log = [{"version": h[0], "parent": None, "guard": 0.5, "state": "good"}]
assert guard_rollback(log, {"version": h[1], "parent": h[0]}, 0.5, 0)["serving"] == h[1]
bad_calls = [
    lambda: guard_rollback(log, {"version": h[0], "parent": h[0]}, 0.5, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[2]}, 0.5, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": None}, 0.5, 0.1),
    lambda: guard_rollback(log, {"version": "v1", "parent": h[0]}, 0.5, 0.1),
    lambda: guard_rollback(log, {"version": h[1]}, 0.5, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0], "guard": 0.5}, 0.5, 0.1),
    lambda: guard_rollback(log, [h[1], h[0]], 0.5, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, None, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, float("inf"), 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, False, 0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, 0.5, -0.1),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, 0.5, float("nan")),
    lambda: guard_rollback(log, {"version": h[1], "parent": h[0]}, 0.5, True),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=build_online_pairs points=2 name=agrees_with_reference_on_generated_valid_groups
# hint: any well-formed groups (ties, repeated best or worst scores, stale versions, ints and floats): the same pairs, ties and stale lists.
from hypothesis import strategies as st

@st.composite
def valid_groups(draw):
    count = draw(st.integers(0, 6))
    groups = []
    for index in range(count):
        size = draw(st.integers(2, 5))
        groups.append({"prompt_id": f"q{index}", "prompt": draw(st.sampled_from(["Compute 2 + 2.", "", "P"])),
                       "policy_version": draw(st.sampled_from(["v1", "v1", "v1", "v0", "V1"])),
                       "responses": [draw(st.sampled_from(["4", "5", " 4", "", "four"])) for _ in range(size)],
                       "scores": [draw(st.sampled_from([0, 1, 0.5, 1.0, -2, 0.0])) for _ in range(size)]})
    return (groups if draw(st.booleans()) else tuple(groups), "v1")

reference.agrees("build_online_pairs", valid_groups(), cases=150)

# %% hidden exercise=build_online_pairs points=2 name=agrees_with_reference_on_generated_malformed_groups
# hint: one malformed thing anywhere (a key, a blank or repeated id, one response, a bool, NaN or str score, a blank version): the same ValueError.
from hypothesis import strategies as st

defects = ([("groups", bad) for bad in [None, "groups", {"prompt_id": "a"}, 3]]
           + [("group", bad) for bad in [None, "g", ["a", "P"]]]
           + [("prompt_id", bad) for bad in ["", " ", None, 3, True]] + [("dup_id", None)]
           + [("prompt", bad) for bad in [None, 3, ["P"]]] + [("policy_version", bad) for bad in ["", "\t", None, 1]]
           + [("responses", bad) for bad in [[], ["only"], "ab", None, ["a", 2], ["a", None]]]
           + [("scores", bad) for bad in [[], [1], [1, 0, 1], "10", None, [1, True], [1, float("nan")], [1, float("inf")],
                                          [1, "0"], [1, None]]]
           + [("drop", key) for key in ["prompt_id", "prompt", "policy_version", "responses", "scores"]]
           + [("extra", "judge"), ("current_version", ""), ("current_version", None), ("current_version", " ")])

@st.composite
def one_defect(draw):
    kind, bad = draw(st.sampled_from(defects))
    groups = [{"prompt_id": name, "prompt": "P", "policy_version": "v1", "responses": ["a", "b"], "scores": [1, 0]}
              for name in ("x", "y", "z")]
    current = "v1"
    where = draw(st.integers(0, 2))
    if kind == "groups":
        groups = bad
    elif kind == "group":
        groups.insert(where, bad)
    elif kind == "dup_id":
        groups[where]["prompt_id"] = groups[(where + 1) % 3]["prompt_id"]
    elif kind == "drop":
        del groups[where][bad]
    elif kind == "extra":
        groups[where][bad] = 1
    elif kind == "current_version":
        current = bad
    else:
        groups[where][kind] = bad
    return (groups, current)

reference.agrees("build_online_pairs", one_defect(), cases=150)

# %% hidden exercise=adoption_gate points=2 name=agrees_with_reference_on_generated_valid_evaluations
# hint: any complete evaluation at any confidence and minimum (one-sided, close, tie-heavy, at the minimum): the same counts, rate, interval, decision and reason.
from hypothesis import strategies as st

@st.composite
def valid_evaluations(draw):
    size = draw(st.integers(1, 30))
    ids = [f"e{k}" for k in range(size)]
    outcomes = {key: draw(st.sampled_from(["win", "win", "loss", "tie"])) for key in ids}
    order = draw(st.permutations(ids))
    return (outcomes, list(order) if draw(st.booleans()) else tuple(order),
            draw(st.sampled_from([0.95, 0.9, 0.8, 0.99, 0.5])), draw(st.integers(1, 12)))

reference.agrees("adoption_gate", valid_evaluations(), cases=150)

# %% hidden exercise=adoption_gate points=2 name=agrees_with_reference_on_generated_invalid_evaluations
# hint: one thing wrong (a prompt missing or extra, an unknown outcome, repeated or blank ids, a bad confidence or minimum): the same ValueError.
from hypothesis import strategies as st

@st.composite
def one_defect(draw):
    ids = ["a", "b", "c", "d"]
    outcomes = {key: "win" for key in ids}
    confidence, minimum = 0.95, 2
    kind = draw(st.sampled_from(["missing", "extra", "outcome", "dup_id", "blank_id", "ids_type", "outcomes_type",
                                 "confidence", "minimum"]))
    if kind == "missing":
        del outcomes[draw(st.sampled_from(ids))]
    elif kind == "extra":
        outcomes[draw(st.sampled_from(["e", "A", " a"]))] = "tie"
    elif kind == "outcome":
        outcomes[draw(st.sampled_from(ids))] = draw(st.sampled_from(["won", "Win", "", None, 1, True, "draw"]))
    elif kind == "dup_id":
        ids = ids + [draw(st.sampled_from(ids))]
    elif kind == "blank_id":
        bad = draw(st.sampled_from(["", " ", "\t"]))
        ids, outcomes = ids + [bad], {**outcomes, bad: "win"}
    elif kind == "ids_type":
        ids = draw(st.sampled_from(["abcd", None, {"a", "b", "c", "d"}, []]))
    elif kind == "outcomes_type":
        outcomes = draw(st.sampled_from([None, [("a", "win")], "win"]))
    elif kind == "confidence":
        confidence = draw(st.sampled_from([0, 1, 0.0, 1.0, -0.5, 95, True, None, "0.95", float("nan")]))
    else:
        minimum = draw(st.sampled_from([0, -1, 2.0, True, None, "2"]))
    return (outcomes, ids, confidence, minimum)

reference.agrees("adoption_gate", one_defect(), cases=150)

# %% hidden exercise=guard_rollback points=2 name=agrees_with_reference_on_generated_valid_logs
# hint: any consistent log (regressions, rollbacks, retraining from the last good version) and any candidate guard: the same new log, serving version and drop.
from hypothesis import strategies as st

@st.composite
def valid_logs(draw):
    length = draw(st.integers(1, 5))
    digests = [hashlib.sha256(f"w{k}".encode()).hexdigest() for k in range(length + 1)]
    log, serving = [], None
    for index in range(length):
        state = "good" if index == 0 else draw(st.sampled_from(["good", "regressed"]))
        log.append({"version": digests[index], "parent": serving, "guard": draw(st.sampled_from([0.2, 0.5, 0.55, 0.8, 1])),
                    "state": state})
        if state == "good":
            serving = digests[index]
    return (log if draw(st.booleans()) else tuple(log), {"version": digests[-1], "parent": serving},
            draw(st.sampled_from([0.1, 0.45, 0.5, 0.75, 0.9, 0])), draw(st.sampled_from([0, 0.05, 0.1, 0.25, 1])))

reference.agrees("guard_rollback", valid_logs(), cases=150)

# %% hidden exercise=guard_rollback points=2 name=agrees_with_reference_on_generated_broken_logs
# hint: one thing wrong (a parent that is not the serving version, a regressed parent, a repeated or malformed digest, a bad candidate, bad numbers): the same ValueError.
from hypothesis import strategies as st

@st.composite
def one_defect(draw):
    h = [hashlib.sha256(f"x{k}".encode()).hexdigest() for k in range(5)]
    log = [{"version": h[0], "parent": None, "guard": 0.5, "state": "good"},
           {"version": h[1], "parent": h[0], "guard": 0.2, "state": "regressed"},
           {"version": h[2], "parent": h[0], "guard": 0.6, "state": "good"}]
    candidate, guard, max_drop = {"version": h[3], "parent": h[2]}, 0.5, 0.1
    kind = draw(st.sampled_from(["parent", "regressed_parent", "base_parent", "base_state", "dup_version", "bad_digest",
                                 "state", "guard_entry", "keys", "log_type", "cand_parent", "cand_version", "cand_keys",
                                 "guard", "max_drop"]))
    if kind == "parent":
        log[2]["parent"] = h[4]
    elif kind == "regressed_parent":
        log.append({"version": h[4], "parent": h[1], "guard": 0.6, "state": "good"})
    elif kind == "base_parent":
        log[0]["parent"] = h[4]
    elif kind == "base_state":
        log[0]["state"] = "regressed"
    elif kind == "dup_version":
        log[2]["version"] = h[draw(st.integers(0, 1))]
    elif kind == "bad_digest":
        log[draw(st.integers(0, 2))]["version"] = draw(st.sampled_from(["v1", h[0].upper(), h[0] + "0", "", None, 7]))
    elif kind == "state":
        log[draw(st.integers(0, 2))]["state"] = draw(st.sampled_from(["ok", "", None, "Good"]))
    elif kind == "guard_entry":
        log[draw(st.integers(0, 2))]["guard"] = draw(st.sampled_from([None, "0.5", True, float("nan"), float("inf")]))
    elif kind == "keys":
        log[draw(st.integers(0, 2))]["extra"] = 1
    elif kind == "log_type":
        log = draw(st.sampled_from([[], None, "log", log[0]]))
    elif kind == "cand_parent":
        candidate["parent"] = draw(st.sampled_from([h[0], h[1], None, h[4]]))
    elif kind == "cand_version":
        candidate["version"] = draw(st.sampled_from([h[0], h[2], "v3", h[3][:10], None]))
    elif kind == "cand_keys":
        candidate = draw(st.sampled_from([{"version": h[3]}, {**candidate, "guard": 0.5}, None, [h[3], h[2]]]))
    elif kind == "guard":
        guard = draw(st.sampled_from([None, "0.5", True, float("nan"), float("-inf")]))
    else:
        max_drop = draw(st.sampled_from([-0.01, None, True, float("nan"), float("inf"), "0.1"]))
    return (log, candidate, guard, max_drop)

reference.agrees("guard_rollback", one_defect(), cases=150)
