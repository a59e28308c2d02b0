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
result = guard_rollback([dict(entry) for entry in log], {"version": v1, "parent": v0}, 0.25, 0.25)
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


def fresh(groups, current):
    return [group for group in groups if group["policy_version"] == current]


reference.agrees("build_online_pairs", valid_groups(), cases=150, clauses={
    "groups is a tuple": lambda groups, current: isinstance(groups, tuple),
    "no groups": lambda groups, current: len(groups) == 0,
    "a group whose scores are all equal (a tie)": lambda groups, current: any(
        len(set(g["scores"])) == 1 for g in fresh(groups, current)),
    "a stale group": lambda groups, current: any(g["policy_version"] != current for g in groups),
    "a version that differs only in case": lambda groups, current: any(
        g["policy_version"] != current and g["policy_version"].lower() == current.lower() for g in groups),
    "the best score repeated (the first one is chosen)": lambda groups, current: any(
        len(set(g["scores"])) > 1 and g["scores"].count(max(g["scores"])) > 1 for g in fresh(groups, current)),
    "the worst score repeated (the first one is rejected)": lambda groups, current: any(
        len(set(g["scores"])) > 1 and g["scores"].count(min(g["scores"])) > 1 for g in fresh(groups, current)),
    "an int and a float score that are equal": lambda groups, current: any(
        any(type(a) is int and type(b) is float and a == b for a in g["scores"] for b in g["scores"]) for g in groups),
    "a negative best or worst score": lambda groups, current: any(min(g["scores"]) < 0 for g in fresh(groups, current)),
    "an empty prompt": lambda groups, current: any(g["prompt"] == "" for g in fresh(groups, current)),
})

# %% hidden exercise=build_online_pairs points=2 name=agrees_with_reference_on_generated_malformed_groups
# hint: valid groups, or one malformed thing anywhere (a key, a blank or repeated id, one response, a bool, NaN or str score, a blank version): the same pairs, or the same ValueError.
from tools.course.grader.clauses import dicts, each_of, is_blank, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(30)]
           + [("groups", bad) for bad in [None, "groups", {"prompt_id": "a"}, 3]]
           + [("group", bad) for bad in [None, "g", ["a", "P"]]]
           + [("prompt_id", bad) for bad in ["", " ", None, 3, True]] + [("dup_id", None)]
           + [("prompt", bad) for bad in [None, 3, ["P"]]] + [("policy_version", bad) for bad in ["", "\t", None, 1]]
           + [("responses", bad) for bad in [[], ["only"], "ab", None, ["a", 2], ["a", None]]]
           + [("scores", bad) for bad in [[], [1], [1, 0, 1], "10", None, [1, True], [1, float("nan")], [1, float("inf")],
                                          [1, "0"], [1, None]]]
           + [("drop", key) for key in ["prompt_id", "prompt", "policy_version", "responses", "scores"]]
           + [("extra", "judge"), ("current_version", ""), ("current_version", None), ("current_version", " ")])

def one_defect(defect, rng):
    """Three valid groups, or with exactly this defect."""
    kind, bad = defect
    groups = [{"prompt_id": name, "prompt": "P", "policy_version": rng.choice(["v1", "v1", "v0"]),
               "responses": ["a", "b"], "scores": rng.choice([[1, 0], [0, 0], [0.5, 1]])} for name in ("x", "y", "z")]
    current = "v1"
    where = rng.randrange(3)
    if kind == "valid" and rng.random() < 0.5:
        groups = tuple(groups)
    elif kind == "groups":
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
    elif kind != "valid":
        groups[where][kind] = bad
    return (groups, current)

GROUP_KEYS = {"prompt_id", "prompt", "policy_version", "responses", "scores"}


def whole(groups):
    return [group for group in dicts(groups) if set(group) == GROUP_KEYS]


def ids(groups):
    return [group["prompt_id"] for group in whole(groups) if isinstance(group["prompt_id"], str)]


def paired_scores(groups):
    return [score for g in whole(groups) if isinstance(g["scores"], (list, tuple)) and isinstance(g["responses"], list)
            and len(g["scores"]) == len(g["responses"]) for score in g["scores"]]


reference.agrees("build_online_pairs", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "current_version blank": lambda groups, current: is_blank(current),
    "current_version not a str": lambda groups, current: not isinstance(current, str),
    "groups not a list or tuple": lambda groups, current: not isinstance(groups, (list, tuple)),
    "a group that is not a dict": lambda groups, current: isinstance(groups, (list, tuple)) and any(
        not isinstance(g, dict) for g in groups),
    "a group without one of the five keys": lambda groups, current: any(GROUP_KEYS - set(g) for g in dicts(groups)),
    "a group with an extra key": lambda groups, current: any(set(g) - GROUP_KEYS for g in dicts(groups)),
    "a blank prompt_id": lambda groups, current: any(is_blank(g["prompt_id"]) for g in whole(groups)),
    "a prompt_id that is not a str": lambda groups, current: any(
        not isinstance(g["prompt_id"], str) for g in whole(groups)),
    "a repeated prompt_id": lambda groups, current: len(ids(groups)) > len(set(ids(groups))),
    "a prompt that is not a str": lambda groups, current: any(not isinstance(g["prompt"], str) for g in whole(groups)),
    "a blank policy_version": lambda groups, current: any(is_blank(g["policy_version"]) for g in whole(groups)),
    "a policy_version that is not a str": lambda groups, current: any(
        not isinstance(g["policy_version"], str) for g in whole(groups)),
    "fewer than two responses": lambda groups, current: any(
        isinstance(g["responses"], list) and len(g["responses"]) < 2 for g in whole(groups)),
    "responses that are not a list": lambda groups, current: any(
        not isinstance(g["responses"], (list, tuple)) for g in whole(groups)),
    "a response that is not a str": lambda groups, current: any(
        isinstance(g["responses"], list) and len(g["responses"]) >= 2
        and not all(isinstance(r, str) for r in g["responses"]) for g in whole(groups)),
    "scores not one per response": lambda groups, current: any(
        not isinstance(g["scores"], (list, tuple)) or len(g["scores"]) != len(g["responses"]) for g in whole(groups)
        if isinstance(g["responses"], list) and len(g["responses"]) >= 2),
    "a score that is a bool": lambda groups, current: any(is_bool(s) for s in paired_scores(groups)),
    "a score that is not finite": lambda groups, current: any(not_finite(s) for s in paired_scores(groups)),
    "a score that is not a number": lambda groups, current: any(not_a_number(s) for s in paired_scores(groups)),
})

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


def decisive(outcomes):
    return sum(value in ("win", "loss") for value in outcomes.values())


def lower_bound(outcomes, confidence):
    wins, n = sum(value == "win" for value in outcomes.values()), decisive(outcomes)
    return wilson_interval(wins, n, confidence)[0] if n else None


reference.agrees("adoption_gate", valid_evaluations(), cases=150, clauses={
    "eval_prompt_ids a tuple": lambda outcomes, ids, confidence, minimum: isinstance(ids, tuple),
    "no decisive verdict": lambda outcomes, ids, confidence, minimum: decisive(outcomes) == 0,
    "too few decisive verdicts": lambda outcomes, ids, confidence, minimum: 0 < decisive(outcomes) < minimum,
    "exactly min_decisive decisive verdicts": lambda outcomes, ids, confidence, minimum: decisive(outcomes) == minimum,
    "adopted (lower bound above one half)": lambda outcomes, ids, confidence, minimum: decisive(
        outcomes) >= minimum and lower_bound(outcomes, confidence) > 0.5,
    "kept although more wins than losses": lambda outcomes, ids, confidence, minimum: decisive(
        outcomes) >= minimum and lower_bound(outcomes, confidence) <= 0.5 and 2 * sum(
        v == "win" for v in outcomes.values()) > decisive(outcomes),
    "ids listed in another order than the outcomes": lambda outcomes, ids, confidence, minimum: list(ids) != list(outcomes),
})

# %% hidden exercise=adoption_gate points=2 name=agrees_with_reference_on_generated_invalid_evaluations
# hint: a valid evaluation, or one thing wrong (a prompt missing or extra, an unknown outcome, repeated or blank ids, a bad confidence or minimum): the same result, or the same ValueError.
from tools.course.grader.clauses import below, each_of, is_blank, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(24)]
           + [("missing", n) for n in range(4)] + [("extra", bad) for bad in ["e", "A", " a"]]
           + [("outcome", bad) for bad in ["won", "Win", "", None, 1, True, "draw"]]
           + [("dup_id", n) for n in range(2)] + [("blank_id", bad) for bad in ["", " ", "\t"]]
           + [("ids_type", bad) for bad in ["abcd", None, frozenset("abcd"), []]]
           + [("outcomes_type", bad) for bad in [None, (("a", "win"),), "win"]]
           + [("confidence", bad) for bad in [0, 1, 0.0, 1.0, -0.5, 95, True, None, "0.95", float("nan")]]
           + [("minimum", bad) for bad in [0, -1, 2.0, True, None, "2"]])

def one_defect(defect, rng):
    """A valid evaluation of four prompts, or with exactly this defect."""
    kind, bad = defect
    ids = ["a", "b", "c", "d"]
    outcomes = {key: rng.choice(["win", "win", "loss", "tie"]) for key in ids}
    confidence, minimum = rng.choice([0.95, 0.5]), rng.choice([1, 2, 4])
    if kind == "valid" and rng.random() < 0.5:
        ids = tuple(reversed(ids))
    elif kind == "missing":
        del outcomes[ids[bad]]
    elif kind == "extra":
        outcomes[bad] = "tie"
    elif kind == "outcome":
        outcomes[rng.choice(ids)] = bad
    elif kind == "dup_id":
        ids = ids + [rng.choice(ids)]
    elif kind == "blank_id":
        ids, outcomes = ids + [bad], {**outcomes, bad: "win"}
    elif kind == "ids_type":
        ids = set(bad) if isinstance(bad, frozenset) else bad
    elif kind == "outcomes_type":
        outcomes = list(bad) if isinstance(bad, tuple) else bad
    elif kind == "confidence":
        confidence = bad
    elif kind == "minimum":
        minimum = bad
    return (outcomes, ids, confidence, minimum)


def good_ids(ids):
    return (isinstance(ids, (list, tuple)) and ids and all(isinstance(i, str) and i.strip() for i in ids)
            and len(set(ids)) == len(ids))


def good_evaluation(outcomes, ids):
    return good_ids(ids) and isinstance(outcomes, dict) and set(outcomes) == set(ids) and all(
        v in ("win", "loss", "tie") for v in outcomes.values())


reference.agrees("adoption_gate", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "eval_prompt_ids not a list or tuple": lambda outcomes, ids, c, m: not isinstance(ids, (list, tuple)),
    "eval_prompt_ids empty": lambda outcomes, ids, c, m: isinstance(ids, (list, tuple)) and not ids,
    "a blank prompt id": lambda outcomes, ids, c, m: isinstance(ids, (list, tuple)) and any(is_blank(i) for i in ids),
    "a repeated prompt id": lambda outcomes, ids, c, m: isinstance(ids, (list, tuple)) and len(set(ids)) < len(ids),
    "outcomes not a dict": lambda outcomes, ids, c, m: good_ids(ids) and not isinstance(outcomes, dict),
    "a prompt of the set without an outcome": lambda outcomes, ids, c, m: good_ids(ids) and isinstance(
        outcomes, dict) and bool(set(ids) - set(outcomes)),
    "an outcome for a prompt outside the set": lambda outcomes, ids, c, m: good_ids(ids) and isinstance(
        outcomes, dict) and bool(set(outcomes) - set(ids)),
    "an unknown outcome": lambda outcomes, ids, c, m: good_ids(ids) and isinstance(outcomes, dict) and set(
        outcomes) == set(ids) and any(v not in ("win", "loss", "tie") for v in outcomes.values()),
    "confidence a bool": lambda o, i, c, m: good_evaluation(o, i) and is_bool(c),
    "confidence not a number": lambda o, i, c, m: good_evaluation(o, i) and not_a_number(c),
    "confidence not finite": lambda o, i, c, m: good_evaluation(o, i) and not_finite(c),
    "confidence <= 0": lambda o, i, c, m: good_evaluation(o, i) and not is_bool(c) and below(c, 0, or_equal=True),
    "confidence >= 1": lambda o, i, c, m: good_evaluation(o, i) and not is_bool(c) and isinstance(
        c, (int, float)) and c >= 1 and not not_finite(c),
    "min_decisive a bool": lambda o, i, c, m: good_evaluation(o, i) and is_bool(m),
    "min_decisive a float": lambda o, i, c, m: good_evaluation(o, i) and isinstance(m, float),
    "min_decisive below 1": lambda o, i, c, m: good_evaluation(o, i) and not is_bool(m) and below(m, 1),
    "min_decisive not a number": lambda o, i, c, m: good_evaluation(o, i) and not_a_number(m),
})

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


def serving_guard(log):
    return [entry["guard"] for entry in log if entry["state"] == "good"][-1]


reference.agrees("guard_rollback", valid_logs(), cases=150, clauses={
    "log is a tuple": lambda log, candidate, guard, max_drop: isinstance(log, tuple),
    "a log of the base alone": lambda log, candidate, guard, max_drop: len(log) == 1,
    "a regressed version in the log": lambda log, candidate, guard, max_drop: any(e["state"] == "regressed" for e in log),
    "a regressed last entry (serving an earlier version)": lambda log, candidate, guard, max_drop: log[-1][
        "state"] == "regressed",
    "a regression: rolled back": lambda log, candidate, guard, max_drop: guard < serving_guard(log) - max_drop,
    "a drop within max_drop: adopted": lambda log, candidate, guard, max_drop: serving_guard(
        log) - max_drop <= guard < serving_guard(log),
    "a guard that improves": lambda log, candidate, guard, max_drop: guard > serving_guard(log),
    "max_drop 0": lambda log, candidate, guard, max_drop: max_drop == 0,
    "a guard given as an int": lambda log, candidate, guard, max_drop: type(guard) is int,
})

# %% hidden exercise=guard_rollback points=2 name=agrees_with_reference_on_generated_broken_logs
# hint: a valid log, or one thing wrong (a parent that is not the serving version, a regressed parent, a repeated or malformed digest, a bad candidate, bad numbers): the same log, or the same ValueError.
import re as _re

from tools.course.grader.clauses import dicts, each_of, is_bool, not_a_number, not_finite

DIGESTS = [hashlib.sha256(f"x{k}".encode()).hexdigest() for k in range(5)]
defects = ([("valid", n) for n in range(30)]
           + [(kind, None) for kind in ["parent", "regressed_parent", "base_parent", "base_state", "keys"]]
           + [("dup_version", n) for n in range(2)]
           + [("bad_digest", bad) for bad in ["v1", DIGESTS[0].upper(), DIGESTS[0] + "0", "", None, 7]]
           + [("state", bad) for bad in ["ok", "", None, "Good"]]
           + [("guard_entry", bad) for bad in [None, "0.5", True, float("nan"), float("inf")]]
           + [("log_type", bad) for bad in ["empty", None, "log", "entry"]]
           + [("cand_parent", bad) for bad in [DIGESTS[0], DIGESTS[1], None, DIGESTS[4]]]
           + [("cand_version", bad) for bad in [DIGESTS[0], DIGESTS[2], "v3", DIGESTS[3][:10], None]]
           + [("cand_keys", bad) for bad in ["version only", "extra guard", None, "list"]]
           + [("guard", bad) for bad in [None, "0.5", True, float("nan"), float("-inf")]]
           + [("max_drop", bad) for bad in [-0.01, None, True, float("nan"), float("inf"), "0.1"]])

def one_defect(defect, rng):
    """A valid log of a base, a regression and a retrain, or with exactly this defect."""
    kind, bad = defect
    h = DIGESTS
    log = [{"version": h[0], "parent": None, "guard": 0.5, "state": "good"},
           {"version": h[1], "parent": h[0], "guard": 0.2, "state": "regressed"},
           {"version": h[2], "parent": h[0], "guard": 0.6, "state": "good"}]
    candidate, guard, max_drop = {"version": h[3], "parent": h[2]}, rng.choice([0.5, 0.4, 0.7, 1]), rng.choice([0.1, 0])
    where = rng.randrange(3)
    if kind == "valid" and rng.random() < 0.5:
        log = tuple(log)
    elif kind == "parent":
        log[2]["parent"] = h[4]
    elif kind == "regressed_parent":
        log.append({"version": h[4], "parent": h[1], "guard": 0.6, "state": "good"})
    elif kind == "base_parent":
        log[0]["parent"] = h[4]
    elif kind == "base_state":
        log[0]["state"] = "regressed"
    elif kind == "dup_version":
        log[2]["version"] = h[bad]
    elif kind == "bad_digest":
        log[where]["version"] = bad
    elif kind == "state":
        log[where]["state"] = bad
    elif kind == "guard_entry":
        log[where]["guard"] = bad
    elif kind == "keys":
        log[where]["extra"] = 1
    elif kind == "log_type":
        log = {"empty": [], None: None, "log": "log", "entry": log[0]}[bad]
    elif kind == "cand_parent":
        candidate["parent"] = bad
    elif kind == "cand_version":
        candidate["version"] = bad
    elif kind == "cand_keys":
        candidate = {"version only": {"version": h[3]}, "extra guard": {**candidate, "guard": 0.5}, None: None,
                     "list": [h[3], h[2]]}[bad]
    elif kind == "guard":
        guard = bad
    elif kind == "max_drop":
        max_drop = bad
    return (log, candidate, guard, max_drop)

ENTRY_KEYS = {"version", "parent", "guard", "state"}


def digest(value):
    return isinstance(value, str) and _re.fullmatch(r"[0-9a-f]{64}", value) is not None


def entries(log):
    return dicts(log) if isinstance(log, (list, tuple)) else []


def well_formed(log):
    """Entries of the right shape, digests, states and guards, whatever their chain."""
    versions = [e.get("version") for e in entries(log)]
    return (isinstance(log, (list, tuple)) and log and len(entries(log)) == len(log)
            and all(set(e) == ENTRY_KEYS and digest(e["version"]) and e["state"] in ("good", "regressed")
                    and not is_bool(e["guard"]) and isinstance(e["guard"], (int, float)) and not not_finite(e["guard"])
                    for e in entries(log)) and len(set(versions)) == len(versions))


def serving_after(log):
    serving = None
    for index, entry in enumerate(log):
        if index > 0 and entry["parent"] != serving:
            return "broken"
        if entry["state"] == "good":
            serving = entry["version"]
    return serving


def sound(log):
    return well_formed(log) and log[0]["parent"] is None and log[0]["state"] == "good" and serving_after(log) != "broken"


def sound_with_candidate(log, candidate):
    return (sound(log) and isinstance(candidate, dict) and set(candidate) == {"version", "parent"}
            and digest(candidate["version"]) and candidate["version"] not in {e["version"] for e in log}
            and candidate["parent"] == serving_after(log))


reference.agrees("guard_rollback", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "log not a list or tuple": lambda log, *rest: not isinstance(log, (list, tuple)),
    "an empty log": lambda log, *rest: isinstance(log, (list, tuple)) and not log,
    "an entry without exactly the four keys": lambda log, *rest: any(set(e) != ENTRY_KEYS for e in entries(log)),
    "a version that is not a sha256 hex digest": lambda log, *rest: any(
        not digest(e.get("version")) for e in entries(log)),
    "a repeated version": lambda log, *rest: len({e.get("version") for e in entries(log)}) < len(entries(log)),
    "a state other than good or regressed": lambda log, *rest: any(
        e.get("state") not in ("good", "regressed") for e in entries(log)),
    "a guard entry that is not a finite number": lambda log, *rest: any(
        "guard" in e and (is_bool(e["guard"]) or not_a_number(e["guard"]) or not_finite(e["guard"]))
        for e in entries(log)),
    "a base with a parent": lambda log, *rest: well_formed(log) and log[0]["parent"] is not None,
    "a regressed base": lambda log, *rest: well_formed(log) and log[0]["state"] != "good",
    "an entry whose parent is not the serving version": lambda log, *rest: well_formed(log) and log[0][
        "parent"] is None and log[0]["state"] == "good" and serving_after(log) == "broken",
    "an entry trained from a regressed version": lambda log, *rest: well_formed(log) and any(
        e["parent"] in {r["version"] for r in log if r["state"] == "regressed"} for e in log),
    "a candidate that is not a dict of version and parent": lambda log, candidate, *rest: sound(log) and (
        not isinstance(candidate, dict) or set(candidate) != {"version", "parent"}),
    "a candidate version that is not a digest": lambda log, candidate, *rest: sound(log) and isinstance(
        candidate, dict) and set(candidate) == {"version", "parent"} and not digest(candidate["version"]),
    "a candidate version already in the log": lambda log, candidate, *rest: sound(log) and isinstance(
        candidate, dict) and candidate.get("version") in {e["version"] for e in log},
    "a candidate trained from another version than the serving one": lambda log, candidate, *rest: sound(
        log) and isinstance(candidate, dict) and set(candidate) == {"version", "parent"} and digest(
        candidate["version"]) and candidate["version"] not in {e["version"] for e in log} and candidate[
        "parent"] != serving_after(log),
    "guard not a finite number": lambda log, candidate, guard, max_drop: sound_with_candidate(log, candidate) and (
        is_bool(guard) or not_a_number(guard) or not_finite(guard)),
    "max_drop negative": lambda log, candidate, guard, max_drop: sound_with_candidate(log, candidate) and not is_bool(
        max_drop) and isinstance(max_drop, (int, float)) and max_drop < 0,
    "max_drop a bool": lambda log, candidate, guard, max_drop: sound_with_candidate(log, candidate) and is_bool(max_drop),
    "max_drop not a finite number": lambda log, candidate, guard, max_drop: sound_with_candidate(log, candidate) and (
        not_a_number(max_drop) or not_finite(max_drop)),
})
