# %% hidden exercise=rollout_coverage points=1 name=a_group_with_a_truncated_or_unparsed_reply_is_not_scoreable
# hint: a group is scoreable only when every reply is correct or wrong and the rewards are not all equal; a truncated or unparsed reply drops its whole group, whatever its reward.
right, wrong = {"outcome": "correct", "reward": 1.0}, {"outcome": "wrong", "reward": 0.0}
cut, unparsed = {"outcome": "truncated", "reward": 0.0}, {"outcome": "format_error", "reward": 0.0}
paid_cut = {"outcome": "truncated", "reward": 1.0}
groups = [[right, cut, wrong], [wrong, right], [right, unparsed, wrong], [wrong, wrong, wrong], [right, paid_cut],
          [right], [wrong, {"outcome": "correct", "reward": 1}]]
result = rollout_coverage(groups, 0.0, 1.0, 1.0)
assert result["scoreable"] == [1, 6], result["scoreable"]
assert result["scoreable_share"] == 2 / 7 and result["groups"] == 7 and result["rollouts"] == 16
clean = rollout_coverage([[right, wrong], [wrong, right, right]], 0.0, 1.0, 1.0)
assert clean["scoreable"] == [0, 1] and clean["scoreable_share"] == 1.0

# %% hidden exercise=rollout_coverage points=1 name=rates_count_every_rollout_and_limits_are_inclusive
# hint: truncation and parse-failure rates are over every rollout of the batch (not over groups); a rate equal to its limit passes, a larger one does not; a share equal to its minimum passes.
right, wrong = {"outcome": "correct", "reward": 1.0}, {"outcome": "wrong", "reward": 0.0}
cut, unparsed = {"outcome": "truncated", "reward": 0.0}, {"outcome": "format_error", "reward": 0.0}
groups = [[right, wrong, wrong, wrong, right], [right, wrong, cut, unparsed, wrong]]
result = rollout_coverage(groups, 0.5, 0.1, 0.1)
assert result["truncation_rate"] == 0.1 and result["parse_failure_rate"] == 0.1 and result["scoreable_share"] == 0.5
assert result["update_allowed"] is True and result["reasons"] == []
assert result["outcomes"] == {"correct": 3, "wrong": 5, "format_error": 1, "truncated": 1}
assert list(result["outcomes"]) == ["correct", "wrong", "format_error", "truncated"]
tighter = rollout_coverage(groups, 0.5, 0.099, 0.1)
assert tighter["reasons"] == ["truncation"] and tighter["update_allowed"] is False

# %% hidden exercise=rollout_coverage points=1 name=every_reason_in_the_fixed_order
# hint: reasons are "truncation", "parse_failures", "too_few_scoreable" in this order, each when its own limit is crossed; update_allowed is True only without any reason.
right, wrong = {"outcome": "correct", "reward": 1.0}, {"outcome": "wrong", "reward": 0.0}
cut, unparsed = {"outcome": "truncated", "reward": 0.0}, {"outcome": "format_error", "reward": 0.0}
groups = [[cut, right], [unparsed, wrong], [right, right]]
assert rollout_coverage(groups, 0.5, 0.1, 0.1)["reasons"] == ["truncation", "parse_failures", "too_few_scoreable"]
assert rollout_coverage(groups, 0.0, 0.5, 0.1)["reasons"] == ["parse_failures"]
assert rollout_coverage(groups, 0.1, 0.5, 0.5)["reasons"] == ["too_few_scoreable"]
allowed = rollout_coverage(groups, 0.0, 0.5, 0.5)
assert allowed["reasons"] == [] and allowed["update_allowed"] is True and allowed["scoreable"] == []

# %% hidden exercise=rollout_coverage points=1 name=wrong_coverage_calls_raise_and_good_calls_do_not
# hint: groups is a non-empty list of non-empty lists of dicts with a known outcome and a finite, non-bool reward; each limit is a number in [0, 1].
right, wrong = {"outcome": "correct", "reward": 1.0}, {"outcome": "wrong", "reward": 0}
good = [[right, wrong]]
assert rollout_coverage(good)["update_allowed"] is True
assert rollout_coverage([[right, right]])["update_allowed"] is False
bad_calls = [([],), (None,), ((tuple(good[0]),),), ([[]],), ([tuple(good[0])],), ([[right, "wrong"]],),
             ([[right, {"outcome": "timeout", "reward": 0.0}]],), ([[right, {"outcome": "wrong"}]],),
             ([[right, {"outcome": "wrong", "reward": False}]],), ([[right, {"outcome": "wrong", "reward": float("nan")}]],),
             ([[right, {"outcome": "wrong", "reward": "0"}]],), ([[right, {"outcome": "wrong", "reward": None}]],),
             (good, 1.5), (good, 0.5, -0.1), (good, 0.5, 0.1, True), (good, float("nan")), (good, "0.5"),
             (good, 0.5, 0.1, None)]
for number, arguments in enumerate(bad_calls):
    try:
        rollout_coverage(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=rollout_coverage points=2 name=agrees_with_reference_on_generated_batches
# hint: any batch, valid or with one defect (a bad group, verdict, outcome, reward or limit, at any position): the same coverage, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_outcomes = ["correct", "wrong", "format_error", "truncated"]
_cases = ([("valid", n) for n in range(40)] + [("clean", n) for n in range(10)]
          + [("batch", value) for value in ("none", "tuple", "empty", "dict")]
          + [("group", kind) for kind in ("tuple", "empty", "str")]
          + [("verdict", value) for value in ("str", "outcome_none", "outcome_unknown", "no_reward", "no_outcome")]
          + [("reward", value) for value in ("true", "false", "nan", "inf", "str", "none")]
          + [("limit", (position, value)) for position in range(3) for value in ("low", "high", "bool", "nan", "str")]
          + [("edge", kind) for kind in ("truncation", "parse", "share")] + [("extra_keys", n) for n in range(4)])
_bad_values = {"true": True, "false": False, "nan": float("nan"), "inf": float("inf"), "str": "1", "none": None,
               "low": -0.01, "high": 1.01, "bool": True}


def _verdict(rng, outcomes=_outcomes):
    outcome = rng.choice(outcomes)
    reward = rng.choice([1.0, 1]) if outcome == "correct" else rng.choice([0.0, 0, 0.5])
    return {"outcome": outcome, "reward": reward}


def _batch(case, rng):
    kind, value = case
    clean = kind == "clean"
    groups = [[_verdict(rng, _outcomes[:2] if clean else _outcomes) for _ in range(rng.randint(1, 4))]
              for _ in range(rng.randint(1, 5))]
    limits = [rng.choice([0.0, 0.25, 0.5, 1.0]), rng.choice([0.0, 0.1, 0.25, 1.0]), rng.choice([0.0, 0.1, 0.25, 1.0])]
    at = rng.choice([0, len(groups) - 1, rng.randrange(len(groups))])
    if kind == "batch":
        groups = {"none": None, "tuple": tuple(groups), "empty": [], "dict": {"0": groups[0]}}[value]
    elif kind == "group":
        groups[at] = {"tuple": tuple(groups[at]), "empty": [], "str": "correct"}[value]
    elif kind == "verdict":
        inner = rng.randrange(len(groups[at]))
        groups[at][inner] = {"str": "correct", "outcome_none": {"outcome": None, "reward": 0.0},
                             "outcome_unknown": {"outcome": "Correct", "reward": 1.0},
                             "no_reward": {"outcome": "wrong"}, "no_outcome": {"reward": 0.0}}[value]
    elif kind == "reward":
        inner = rng.choice([0, len(groups[at]) - 1])
        groups[at][inner] = {"outcome": rng.choice(_outcomes), "reward": _bad_values[value]}
    elif kind == "limit":
        position, bad = value
        limits[position] = _bad_values[bad]
    elif kind == "edge":
        groups = [[{"outcome": "correct", "reward": 1.0}, {"outcome": "wrong", "reward": 0.0}] for _ in range(4)]
        groups[0][0] = {"outcome": "truncated" if value == "truncation" else "format_error", "reward": 0.0}
        limits = {"truncation": [0.0, 0.125, 0.0], "parse": [0.0, 0.0, 0.125], "share": [0.75, 0.5, 0.5]}[value]
    elif kind == "extra_keys":
        for group in groups:
            for verdict in group:
                verdict["parsed"] = rng.choice([None, 7])
    return (groups, *limits)


def _covered(*call):
    return reference("rollout_coverage")(*call)


def _verdicts(groups):
    return [v for g in groups for v in g] if isinstance(groups, list) and all(isinstance(g, list) for g in groups) else []


def _valid_groups(groups):
    return isinstance(groups, list) and groups and all(isinstance(g, list) and g for g in groups) and all(
        isinstance(v, dict) and v.get("outcome") in _outcomes and isinstance(v.get("reward"), (int, float))
        and not is_bool(v.get("reward")) and not not_finite(v.get("reward")) for g in groups for v in g)


def _limits_ok(*limits):
    return all(isinstance(x, (int, float)) and not is_bool(x) and not not_finite(x) and 0 <= x <= 1 for x in limits)


reference.agrees("rollout_coverage", each_of(_cases, _batch, variants=2), cases=2 * len(_cases), clauses={
    "groups that are not a list": lambda groups, *limits: not isinstance(groups, list),
    "an empty batch": lambda groups, *limits: groups == [],
    "a group that is a tuple": lambda groups, *limits: isinstance(groups, list) and any(isinstance(g, tuple) for g in groups),
    "an empty group": lambda groups, *limits: isinstance(groups, list) and any(g == [] for g in groups),
    "a verdict that is not a dict": lambda groups, *limits: any(not isinstance(v, dict) for v in _verdicts(groups)),
    "an unknown outcome": lambda groups, *limits: any(isinstance(v, dict) and v.get("outcome") not in _outcomes
                                                      and "reward" in v for v in _verdicts(groups)),
    "a verdict without a reward": lambda groups, *limits: any(isinstance(v, dict) and "reward" not in v
                                                              for v in _verdicts(groups)),
    "a bool reward": lambda groups, *limits: any(isinstance(v, dict) and is_bool(v.get("reward"))
                                                 for v in _verdicts(groups)),
    "a non-finite reward": lambda groups, *limits: any(isinstance(v, dict) and not_finite(v.get("reward"))
                                                       for v in _verdicts(groups)),
    "a reward that is a str": lambda groups, *limits: any(isinstance(v, dict) and isinstance(v.get("reward"), str)
                                                          for v in _verdicts(groups)),
    "a bool limit": lambda groups, *limits: _valid_groups(groups) and any(is_bool(x) for x in limits),
    "a limit below 0": lambda groups, *limits: _valid_groups(groups) and any(
        isinstance(x, float) and x < 0 for x in limits),
    "a limit above 1": lambda groups, *limits: _valid_groups(groups) and any(
        isinstance(x, float) and x > 1 for x in limits),
    "a non-finite limit": lambda groups, *limits: _valid_groups(groups) and any(not_finite(x) for x in limits),
    "a str limit": lambda groups, *limits: _valid_groups(groups) and any(isinstance(x, str) for x in limits),
    "a truncation rate equal to its limit": lambda groups, a, b, c: _covered(groups, a, b, c)["truncation_rate"] == b > 0,
    "a parse-failure rate equal to its limit": lambda groups, a, b, c: _covered(groups, a, b, c)["parse_failure_rate"] == c > 0,
    "a scoreable share equal to its minimum": lambda groups, a, b, c: _covered(groups, a, b, c)["scoreable_share"] == a > 0,
    "a mixed group with a truncated reply": lambda *call: _covered(*call) and any(
        any(v["outcome"] == "truncated" for v in g) and len({v["reward"] for v in g}) > 1 for g in call[0]),
    "a mixed group with an unparsed reply": lambda *call: _covered(*call) and any(
        any(v["outcome"] == "format_error" for v in g) and len({v["reward"] for v in g}) > 1 for g in call[0]),
    "a clean group with equal rewards (1 and 1.0)": lambda *call: _covered(*call) and any(
        len(g) > 1 and all(v["outcome"] in ("correct", "wrong") for v in g) and len({v["reward"] for v in g}) == 1
        for g in call[0]),
    "verdicts with extra keys": lambda *call: _covered(*call) and any("parsed" in v for v in _verdicts(call[0])),
    "update allowed": lambda *call: _covered(*call)["update_allowed"],
    "update refused": lambda *call: _limits_ok(*call[1:]) and _valid_groups(call[0]) and not _covered(*call)["update_allowed"],
})

# %% hidden exercise=update_throughput points=1 name=effective_means_an_update_that_moved_the_policy
# hint: a step is effective when it made an optimiser step and its policy change is strictly above min_change; a refused step (no update) or an update that moved nothing is not.
def step(updates, change, seconds=1.0, rollouts=8, in_loss=8):
    return {"rollouts": rollouts, "rollouts_in_loss": in_loss, "optimizer_steps": updates, "policy_change": change,
            "seconds": seconds}
steps = [step(1, 0.5), step(0, None, in_loss=0), step(2, 0.001), step(1, 0.0), step(3, 0.0011)]
result = update_throughput(steps, 0.001)
assert result["effective_steps"] == 2 and result["ineffective"] == [1, 2, 3], result["ineffective"]
assert result["effective_updates_per_second"] == 4 / 5
assert update_throughput(steps, 0.0)["ineffective"] == [1, 3]
assert update_throughput(steps)["effective_steps"] == 3

# %% hidden exercise=update_throughput points=1 name=rates_divide_by_the_time_of_the_whole_run
# hint: every rate divides by the seconds of all steps (idle steps cost time too); idle_seconds sums the ineffective steps' seconds.
def step(updates, change, seconds, rollouts=16, in_loss=16):
    return {"rollouts": rollouts, "rollouts_in_loss": in_loss, "optimizer_steps": updates, "policy_change": change,
            "seconds": seconds}
steps = [step(2, 0.1, 0.5), step(0, None, 1.5, in_loss=0), step(2, 0.2, 2.0, rollouts=32, in_loss=8)]
result = update_throughput(steps)
assert result["seconds"] == 4.0 and result["samples_per_second"] == 64 / 4.0
assert result["effective_updates_per_second"] == 1.0 and result["useful_rollouts_per_second"] == 24 / 4.0
assert result["idle_seconds"] == 1.5 and result["steps"] == 3
busy = update_throughput([steps[0], steps[2]])
assert busy["idle_seconds"] == 0 and busy["ineffective"] == [] and busy["effective_updates_per_second"] == 4 / 2.5

# %% hidden exercise=update_throughput points=1 name=useful_rollouts_are_those_in_the_loss_of_effective_steps
# hint: useful rollouts count rollouts_in_loss (not every sampled reply) and only of effective steps; a refused step's sampled replies are never useful.
def step(updates, change, rollouts, in_loss):
    return {"rollouts": rollouts, "rollouts_in_loss": in_loss, "optimizer_steps": updates, "policy_change": change,
            "seconds": 2.0}
steps = [step(1, 0.3, 64, 40), step(0, None, 64, 24), step(1, 0.0, 64, 64)]
result = update_throughput(steps)
assert result["useful_rollouts_per_second"] == 40 / 6.0 and result["samples_per_second"] == 192 / 6.0
assert result["ineffective"] == [1, 2]
assert update_throughput([step(1, 0.3, 64, 64)])["useful_rollouts_per_second"] == 32.0

# %% hidden exercise=update_throughput points=1 name=wrong_throughput_calls_raise_and_good_calls_do_not
# hint: counts are non-bool ints in range, seconds finite and > 0, policy_change None exactly when no optimiser step was made, an update needs rollouts in the loss, min_change finite and >= 0.
ok = {"rollouts": 8, "rollouts_in_loss": 4, "optimizer_steps": 1, "policy_change": 0.1, "seconds": 0.5}
assert update_throughput([ok])["effective_steps"] == 1
assert update_throughput([dict(ok, optimizer_steps=0, policy_change=None)])["effective_steps"] == 0
bad_steps = [dict(ok, rollouts=0), dict(ok, rollouts=True), dict(ok, rollouts_in_loss=9), dict(ok, rollouts_in_loss=-1),
             dict(ok, optimizer_steps=-1), dict(ok, optimizer_steps=1.0), dict(ok, policy_change=None),
             dict(ok, optimizer_steps=0), dict(ok, policy_change=-0.1), dict(ok, policy_change=float("nan")),
             dict(ok, seconds=0), dict(ok, seconds=float("inf")), dict(ok, seconds=True), dict(ok, rollouts_in_loss=0),
             {key: ok[key] for key in ok if key != "seconds"}, "step"]
for number, bad in enumerate(bad_steps):
    try:
        update_throughput([ok, bad])
    except ValueError:
        continue
    raise AssertionError(f"invalid step {number} was accepted")
for number, arguments in enumerate([([],), (None,), ((ok,),), ([ok], -1e-9), ([ok], True), ([ok], float("nan"))]):
    try:
        update_throughput(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=update_throughput points=2 name=agrees_with_reference_on_generated_runs
# hint: any run, valid or with one defect in one step (at any position) or in min_change: the same accounting, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_cases = ([("valid", n) for n in range(40)] + [("threshold", n) for n in range(6)]
          + [("steps", value) for value in ("none", "empty", "tuple")]
          + [("field", (name, value)) for name, value in (
              ("rollouts", 0), ("rollouts", True), ("rollouts", 2.0), ("rollouts_in_loss", -1), ("rollouts_in_loss", 99),
              ("rollouts_in_loss", True), ("optimizer_steps", -1), ("optimizer_steps", 1.0), ("optimizer_steps", False),
              ("policy_change", "none_with_update"), ("policy_change", "value_without_update"), ("policy_change", -0.5),
              ("policy_change", float("nan")), ("policy_change", True), ("seconds", 0), ("seconds", -1.0),
              ("seconds", float("inf")), ("seconds", True), ("seconds", "1"), ("no_loss", 0), ("missing", "seconds"),
              ("missing", "policy_change"), ("not_dict", 0))]
          + [("min_change", value) for value in (-0.001, True, float("nan"), "0", None)])


def _step(rng):
    rollouts = rng.choice([8, 16, 64])
    updates = rng.choice([0, 0, 1, 2])
    in_loss = 0 if updates == 0 and rng.random() < 0.5 else rng.randint(1, rollouts)
    change = None if updates == 0 else rng.choice([0.0, 1e-7, 1e-6, 0.002, 0.5])
    return {"rollouts": rollouts, "rollouts_in_loss": in_loss, "optimizer_steps": updates, "policy_change": change,
            "seconds": rng.choice([0.25, 0.5, 1.0, 0.1])}


def _run(case, rng):
    kind, value = case
    steps = [_step(rng) for _ in range(rng.randint(1, 6))]
    min_change = rng.choice([1e-6, 0.0, 0.002])
    at = rng.choice([0, len(steps) - 1, rng.randrange(len(steps))])
    if kind == "threshold":
        steps[at] = dict(steps[at], optimizer_steps=1, rollouts_in_loss=max(1, steps[at]["rollouts_in_loss"]),
                         policy_change=min_change)
    elif kind == "steps":
        steps = {"none": None, "empty": [], "tuple": tuple(steps)}[value]
    elif kind == "field":
        name, bad = value
        step = dict(steps[at])
        if name == "policy_change" and bad == "none_with_update":
            step.update(optimizer_steps=1, rollouts_in_loss=1, policy_change=None)
        elif name == "policy_change" and bad == "value_without_update":
            step.update(optimizer_steps=0, policy_change=0.1)
        elif name == "policy_change":
            step.update(optimizer_steps=1, rollouts_in_loss=1, policy_change=bad)
        elif name == "no_loss":
            step.update(optimizer_steps=1, rollouts_in_loss=0, policy_change=0.1)
        elif name == "missing":
            step.pop(bad)
        elif name == "not_dict":
            step = [step["rollouts"], step["seconds"]]
        else:
            step[name] = bad
        steps[at] = step
    elif kind == "min_change":
        min_change = value
    return steps, min_change


def _counted(*call):
    return reference("update_throughput")(*call)


def _valid_steps(steps):
    try:
        reference("update_throughput")(steps)
    except ValueError:
        return False
    return True


def _bad_field(name, test):
    return lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and name in s and test(s[name]) for s in steps)


reference.agrees("update_throughput", each_of(_cases, _run, variants=2), cases=2 * len(_cases), clauses={
    "steps that are not a list": lambda steps, min_change: not isinstance(steps, list),
    "no steps": lambda steps, min_change: steps == [],
    "a step that is not a dict": lambda steps, min_change: isinstance(steps, list) and any(
        not isinstance(s, dict) for s in steps),
    "a step missing a field": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and len(s) < 5 for s in steps),
    "a bool count": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and any(is_bool(s.get(k)) for k in ("rollouts", "rollouts_in_loss", "optimizer_steps"))
        for s in steps),
    "a float count": _bad_field("rollouts", lambda v: isinstance(v, float)),
    "a float optimizer_steps": _bad_field("optimizer_steps", lambda v: isinstance(v, float)),
    "zero rollouts": _bad_field("rollouts", lambda v: v == 0 and not is_bool(v)),
    "rollouts_in_loss above rollouts": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and isinstance(s.get("rollouts_in_loss"), int) and isinstance(s.get("rollouts"), int)
        and s["rollouts_in_loss"] > s["rollouts"] for s in steps),
    "a negative count": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and any(isinstance(s.get(k), int) and s.get(k) < 0 for k in ("rollouts_in_loss", "optimizer_steps"))
        for s in steps),
    "an update without a policy change": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and s.get("optimizer_steps") == 1 and s.get("policy_change", 0) is None for s in steps),
    "a policy change without an update": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and s.get("optimizer_steps") == 0 and s.get("policy_change") is not None
        and not is_bool(s.get("optimizer_steps")) for s in steps),
    "a negative or non-finite policy change": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and isinstance(s.get("policy_change"), float)
        and (s["policy_change"] < 0 or not_finite(s["policy_change"])) for s in steps),
    "a bool policy change": _bad_field("policy_change", is_bool),
    "an update with no rollout in the loss": lambda steps, min_change: isinstance(steps, list) and any(
        isinstance(s, dict) and s.get("optimizer_steps") == 1 and s.get("rollouts_in_loss") == 0
        and s.get("policy_change") == 0.1 for s in steps),
    "seconds zero or negative": _bad_field("seconds", lambda v: isinstance(v, (int, float)) and not is_bool(v) and v <= 0),
    "seconds not finite": _bad_field("seconds", not_finite),
    "seconds a bool or a str": _bad_field("seconds", lambda v: is_bool(v) or isinstance(v, str)),
    "a bad min_change": lambda steps, min_change: _valid_steps(steps) and (
        is_bool(min_change) or not isinstance(min_change, (int, float)) or not_finite(min_change) or min_change < 0),
    "a policy change equal to min_change": lambda steps, min_change: _counted(steps, min_change) and any(
        s["optimizer_steps"] > 0 and s["policy_change"] == min_change for s in steps),
    "a refused step beside effective ones": lambda *call: _counted(*call)["ineffective"] and _counted(*call)["effective_steps"],
    "every step effective": lambda *call: _counted(*call)["ineffective"] == [],
    "a step whose rollouts_in_loss differ from its rollouts": lambda *call: _counted(*call)["effective_steps"] and any(
        s["rollouts_in_loss"] != s["rollouts"] and s["optimizer_steps"] > 0 for s in call[0]),
})

# %% hidden exercise=adoption_decision points=1 name=differences_are_paired_by_seed_in_seed_order
# hint: pair candidate and baseline by seed (not by dict order) and list the differences in ascending seed order.
task = {"candidate": {3: 0.9, 1: 0.5, 2: 0.7}, "baseline": {2: 0.6, 3: 0.6, 1: 0.6}}
skill = {"candidate": {1: 0.5, 2: 0.5, 3: 0.5}, "baseline": {3: 0.5, 1: 0.5, 2: 0.5}}
result = adoption_decision(task, skill, {"measured": 1.0, "budget": 2.0}, {1: 1, 2: 1, 3: 1}, 4.303)
gain = result["task_gain"]
assert gain["seeds"] == [1, 2, 3] and [round(d, 10) for d in gain["differences"]] == [-0.1, 0.1, 0.3]
assert result["skill_change"]["seeds"] == [1, 2, 3] and result["skill_change"]["differences"] == [0.0, 0.0, 0.0]
two = adoption_decision({"candidate": {7: 0.8, 5: 0.6}, "baseline": {5: 0.5, 7: 0.5}},
                        {"candidate": {5: 0.4, 7: 0.5}, "baseline": {5: 0.5, 7: 0.5}}, {"measured": 1.0, "budget": 2.0},
                        {5: 2, 7: 2}, 12.706)
assert two["task_gain"]["seeds"] == [5, 7] and [round(d, 10) for d in two["task_gain"]["differences"]] == [0.1, 0.3]
assert [round(d, 10) for d in two["skill_change"]["differences"]] == [-0.1, 0.0]

# %% hidden exercise=adoption_decision points=1 name=the_interval_uses_the_sample_sd_and_the_given_t_value
# hint: lower/upper = mean -/+ t_value * sd / sqrt(n), sd with n - 1 in the denominator; the gain needs lower strictly above margin.
import math

task = {"candidate": {1: 0.3, 2: 0.5, 3: 0.4, 4: 0.6}, "baseline": {1: 0.2, 2: 0.2, 3: 0.2, 4: 0.2}}
skill = {"candidate": {s: 0.5 for s in (1, 2, 3, 4)}, "baseline": {s: 0.5 for s in (1, 2, 3, 4)}}
updates, resource = {1: 3, 2: 3, 3: 3, 4: 3}, {"measured": 1.0, "budget": 2.0}
result = adoption_decision(task, skill, resource, updates, 3.182)
sd = math.sqrt(sum((d - 0.25) ** 2 for d in (0.1, 0.3, 0.2, 0.4)) / 3)
assert math.isclose(result["task_gain"]["mean"], 0.25)
assert math.isclose(result["task_gain"]["lower"], 0.25 - 3.182 * sd / 2) and math.isclose(
    result["task_gain"]["upper"], 0.25 + 3.182 * sd / 2)
assert result["decision"] == "accept"
lower = result["task_gain"]["lower"]
at_margin = adoption_decision(task, skill, resource, updates, 3.182, margin=lower)
assert at_margin["reasons"] == ["task_gain_not_shown"] and at_margin["decision"] == "tune"
assert adoption_decision(task, skill, resource, updates, 3.182, margin=lower - 1e-9)["decision"] == "accept"

# %% hidden exercise=adoption_decision points=1 name=every_reason_is_kept_in_order
# hint: reasons in this order: no_effective_update, task_worse or task_gain_not_shown, base_skill_lost, resource_not_measured or resource_over_budget; all of them, even when the first already rejects.
task_worse = {"candidate": {1: 0.1, 2: 0.1}, "baseline": {1: 0.5, 2: 0.5}}
skill_lost = {"candidate": {1: 0.1, 2: 0.1}, "baseline": {1: 0.5, 2: 0.5}}
result = adoption_decision(task_worse, skill_lost, {"measured": 9.0, "budget": 2.0}, {1: 0, 2: 4}, 12.706)
assert result["decision"] == "reject" and result["reasons"] == [
    "no_effective_update", "task_worse", "base_skill_lost", "resource_over_budget"], result["reasons"]
gain = {"candidate": {1: 0.7, 2: 0.71}, "baseline": {1: 0.5, 2: 0.5}}
kept = {"candidate": {1: 0.5, 2: 0.5}, "baseline": {1: 0.5, 2: 0.5}}
over = adoption_decision(gain, kept, {"measured": 2.5, "budget": 2.0}, {1: 4, 2: 4}, 12.706)
assert over["decision"] == "tune" and over["reasons"] == ["resource_over_budget"]
at_budget = adoption_decision(gain, kept, {"measured": 2.0, "budget": 2.0}, {1: 4, 2: 4}, 12.706)
assert at_budget["decision"] == "accept" and at_budget["reasons"] == []

# %% hidden exercise=adoption_decision points=1 name=reject_beats_tune_beats_accept
# hint: a lost base skill with a task gain is tune; without a gain it is reject; a task interval wholly below 0 rejects; an unmeasured resource is tune, never a pass.
gain = {"candidate": {1: 0.7, 2: 0.71, 3: 0.72}, "baseline": {1: 0.5, 2: 0.5, 3: 0.5}}
flat = {"candidate": {1: 0.6, 2: 0.4, 3: 0.5}, "baseline": {1: 0.5, 2: 0.5, 3: 0.5}}
lost = {"candidate": {1: 0.3, 2: 0.3, 3: 0.3}, "baseline": {1: 0.5, 2: 0.5, 3: 0.5}}
kept = {"candidate": {1: 0.46, 2: 0.46, 3: 0.46}, "baseline": {1: 0.5, 2: 0.5, 3: 0.5}}
ok, updates = {"measured": 1.0, "budget": 2.0}, {1: 2, 2: 2, 3: 2}
assert adoption_decision(gain, lost, ok, updates, 4.303)["decision"] == "tune"
assert adoption_decision(flat, lost, ok, updates, 4.303)["decision"] == "reject"
assert adoption_decision(flat, kept, ok, updates, 4.303)["decision"] == "tune"
assert adoption_decision(gain, kept, ok, updates, 4.303)["decision"] == "accept"
assert adoption_decision(gain, kept, ok, updates, 4.303, regression_tolerance=0.03)["reasons"] == ["base_skill_lost"]
unmeasured = adoption_decision(gain, kept, {"measured": None, "budget": 2.0}, updates, 4.303)
assert unmeasured["decision"] == "tune" and unmeasured["reasons"] == ["resource_not_measured"]

# %% hidden exercise=adoption_decision points=1 name=wrong_decision_calls_raise_and_good_calls_do_not
# hint: the same int seeds (at least two) on both sides of task and skill, finite non-bool values, resource with exactly measured and budget, effective_updates for exactly those seeds, t_value > 0, margin and tolerance >= 0.
task = {"candidate": {1: 0.7, 2: 0.7}, "baseline": {1: 0.5, 2: 0.6}}
skill = {"candidate": {1: 0.5, 2: 0.5}, "baseline": {1: 0.5, 2: 0.5}}
ok, updates = {"measured": 1.0, "budget": 2.0}, {1: 1, 2: 1}
assert adoption_decision(task, skill, ok, updates, 12.706)["decision"] == "tune"
assert adoption_decision(task, skill, ok, updates, 1.0)["decision"] == "accept"
bad_calls = [
    ({"candidate": {1: 0.7}, "baseline": {1: 0.5}}, {"candidate": {1: 0.5}, "baseline": {1: 0.5}}, ok, {1: 1}, 12.7),
    ({"candidate": {1: 0.7, 2: 0.7}, "baseline": {1: 0.5, 3: 0.6}}, skill, ok, updates, 12.7),
    ({"candidate": {True: 0.7, 2: 0.7}, "baseline": {True: 0.5, 2: 0.6}}, skill, ok, updates, 12.7),
    ({"candidate": {"1": 0.7, "2": 0.7}, "baseline": {"1": 0.5, "2": 0.6}}, skill, ok, updates, 12.7),
    ({"candidate": {1: True, 2: 0.7}, "baseline": {1: 0.5, 2: 0.6}}, skill, ok, updates, 12.7),
    ({"candidate": {1: float("nan"), 2: 0.7}, "baseline": {1: 0.5, 2: 0.6}}, skill, ok, updates, 12.7),
    (dict(task, extra={}), skill, ok, updates, 12.7), ({"candidate": task["candidate"]}, skill, ok, updates, 12.7),
    (task, {"candidate": {1: 0.5, 3: 0.5}, "baseline": {1: 0.5, 3: 0.5}}, ok, updates, 12.7),
    (task, skill, {"measured": 1.0}, updates, 12.7), (task, skill, {"measured": -1.0, "budget": 2.0}, updates, 12.7),
    (task, skill, {"measured": 1.0, "budget": 0}, updates, 12.7), (task, skill, {"measured": True, "budget": 2.0}, updates, 12.7),
    (task, skill, dict(ok, spare=1), updates, 12.7), (task, skill, ok, {1: 1}, 12.7), (task, skill, ok, {1: 1, 2: -1}, 12.7),
    (task, skill, ok, {1: 1, 2: 1.0}, 12.7), (task, skill, ok, {1: 1, 2: True}, 12.7), (task, skill, ok, {1: 1, "2": 1}, 12.7),
    (task, skill, ok, updates, 0), (task, skill, ok, updates, float("inf")), (task, skill, ok, updates, True),
    (task, skill, ok, updates, 12.7, -0.1), (task, skill, ok, updates, 12.7, 0.0, -0.05), (None, skill, ok, updates, 12.7),
]
for number, arguments in enumerate(bad_calls):
    try:
        adoption_decision(*arguments)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {number} was accepted")

# %% hidden exercise=adoption_decision points=2 name=agrees_with_reference_on_generated_decisions
# hint: any paired evidence, valid or with one defect: the same decision, reasons and intervals, or the same ValueError.
from tools.course.grader.clauses import each_of, is_bool, not_finite

_cases = ([("valid", n) for n in range(50)] + [("clear_gain", n) for n in range(8)]
          + [("edge", kind) for kind in ("margin", "tolerance", "budget")]
          + [("seeds", kind) for kind in ("one", "other", "bool", "str", "skill_other")]
          + [("value", value) for value in (True, float("nan"), float("inf"), "0.5", None)]
          + [("shape", kind) for kind in ("task_extra", "task_missing", "skill_none", "side_list")]
          + [("resource", kind) for kind in ("missing", "extra", "negative", "bool", "zero_budget", "nan_budget", "str")]
          + [("updates", kind) for kind in ("missing", "extra", "negative", "float", "bool", "str_key")]
          + [("number", (position, value)) for position in (4, 5, 6) for value in (-0.5, True, float("nan"), "1")]
          + [("t_zero", 0)])


def _side(rng, seeds, centre):
    return {seed: round(min(1.0, max(0.0, centre + rng.uniform(-0.15, 0.15))), 4) for seed in seeds}


def _decision_case(case, rng):
    kind, value = case
    seeds = rng.sample([1, 2, 3, 4, 5, 11], rng.randint(2, 4))
    base, shift = rng.uniform(0.3, 0.7), rng.choice([-0.3, -0.05, 0.0, 0.05, 0.2, 0.4])
    task = {"candidate": _side(rng, seeds, base + shift), "baseline": _side(rng, seeds, base)}
    skill = {"candidate": _side(rng, seeds, 0.5 + rng.choice([-0.2, -0.04, 0.0])), "baseline": _side(rng, seeds, 0.5)}
    resource = {"measured": rng.choice([None, 0.5, 1.0, 3.0]), "budget": rng.choice([1.0, 2.0])}
    updates = {seed: rng.choice([0, 3, 24, 24]) for seed in seeds}
    numbers = [rng.choice([12.706, 4.303, 3.182, 2.0]), rng.choice([0.0, 0.0, 0.05]), rng.choice([0.05, 0.0, 0.1])]
    seed = rng.choice(seeds)
    if kind == "clear_gain":
        task = {"candidate": {s: round(v + 0.2 + rng.uniform(0, 0.01), 4) for s, v in task["baseline"].items()},
                "baseline": task["baseline"]}
        skill = {"candidate": dict(skill["baseline"]), "baseline": skill["baseline"]}
        resource, updates = {"measured": rng.choice([0.5, 2.0]), "budget": 2.0}, {s: 24 for s in seeds}
        numbers[1] = 0.0
    elif kind == "edge" and value == "margin":
        task = {"candidate": {s: 0.6 for s in seeds}, "baseline": {s: 0.5 for s in seeds}}
        numbers[1] = 0.09999999999999998
    elif kind == "edge" and value == "tolerance":
        skill = {"candidate": {s: 0.45 for s in seeds}, "baseline": {s: 0.5 for s in seeds}}
        numbers[2] = 0.04999999999999999
    elif kind == "edge":
        resource = {"measured": 2.0, "budget": 2.0}
    elif kind == "seeds":
        if value == "one":
            task = {side: {seeds[0]: values[seeds[0]]} for side, values in task.items()}
        elif value == "other":
            task["baseline"] = {seed + 100 if seed == seeds[0] else seed: v for seed, v in task["baseline"].items()}
        elif value in ("bool", "str"):
            key = True if value == "bool" else str(seeds[0])
            task = {side: {key if s == seeds[0] else s: v for s, v in values.items()} for side, values in task.items()}
        else:
            skill["candidate"] = {s + 100: v for s, v in skill["candidate"].items()}
            skill["baseline"] = {s + 100: v for s, v in skill["baseline"].items()}
    elif kind == "value":
        target = rng.choice([task, skill])
        target[rng.choice(["candidate", "baseline"])][seed] = value
    elif kind == "shape":
        if value == "task_extra":
            task["spare"] = {}
        elif value == "task_missing":
            task.pop("baseline")
        elif value == "skill_none":
            skill = None
        else:
            task["candidate"] = list(task["candidate"].items())
    elif kind == "resource":
        resource = {"missing": {"measured": 1.0}, "extra": dict(resource, spare=0), "negative": dict(resource, measured=-1.0),
                    "bool": dict(resource, measured=True), "zero_budget": dict(resource, budget=0.0),
                    "nan_budget": dict(resource, budget=float("nan")), "str": dict(resource, measured="1.0")}[value]
    elif kind == "updates":
        updates = dict(updates)
        if value == "missing":
            updates.pop(seed)
        elif value == "extra":
            updates[999] = 1
        elif value == "str_key":
            updates[str(seed)] = updates.pop(seed)
        else:
            updates[seed] = {"negative": -1, "float": 3.0, "bool": True}[value]
    elif kind == "number":
        position, bad = value
        numbers[position - 4] = bad
    elif kind == "t_zero":
        numbers[0] = 0
    return (task, skill, resource, updates, *numbers)


def _decided(*call):
    return reference("adoption_decision")(*call)


def _paired_ok(pair):
    return isinstance(pair, dict) and set(pair) == {"candidate", "baseline"} and all(
        isinstance(side, dict) and side and all(type(k) is int for k in side) for side in pair.values())


reference.agrees("adoption_decision", each_of(_cases, _decision_case, variants=2), cases=2 * len(_cases), clauses={
    "one seed only": lambda task, *rest: _paired_ok(task) and len(task["candidate"]) == 1,
    "other seeds on the two sides": lambda task, *rest: _paired_ok(task) and set(task["candidate"]) != set(task["baseline"]),
    "a bool seed": lambda task, *rest: isinstance(task, dict) and any(
        isinstance(side, dict) and any(is_bool(k) for k in side) for side in task.values()),
    "a str seed": lambda task, *rest: isinstance(task, dict) and any(
        isinstance(side, dict) and any(isinstance(k, str) for k in side) for side in task.values()),
    "skill with other seeds": lambda task, skill, *rest: _paired_ok(task) and _paired_ok(skill)
        and set(skill["candidate"]) != set(task["candidate"]),
    "a bool value": lambda task, skill, *rest: any(_paired_ok(p) and any(is_bool(v) for s in p.values() for v in s.values())
                                                   for p in (task, skill)),
    "a non-finite value": lambda task, skill, *rest: any(_paired_ok(p) and any(not_finite(v) for s in p.values()
                                                                               for v in s.values()) for p in (task, skill)),
    "a str or None value": lambda task, skill, *rest: any(_paired_ok(p) and any(v is None or isinstance(v, str)
                                                                                for s in p.values() for v in s.values())
                                                          for p in (task, skill)),
    "task with an extra key": lambda task, *rest: isinstance(task, dict) and "spare" in task,
    "task without its baseline": lambda task, *rest: isinstance(task, dict) and "baseline" not in task,
    "skill None": lambda task, skill, *rest: skill is None,
    "a side that is a list": lambda task, *rest: isinstance(task, dict) and any(isinstance(s, list) for s in task.values()),
    "resource missing a key": lambda task, skill, resource, *rest: _paired_ok(task) and isinstance(resource, dict)
        and "budget" not in resource,
    "resource with an extra key": lambda task, skill, resource, *rest: isinstance(resource, dict) and "spare" in resource,
    "a negative measured resource": lambda task, skill, resource, *rest: isinstance(resource, dict)
        and isinstance(resource.get("measured"), float) and resource["measured"] < 0,
    "a bool or str measured resource": lambda task, skill, resource, *rest: isinstance(resource, dict)
        and (is_bool(resource.get("measured")) or isinstance(resource.get("measured"), str)),
    "a zero or non-finite budget": lambda task, skill, resource, *rest: isinstance(resource, dict)
        and isinstance(resource.get("budget"), float) and (resource["budget"] == 0 or not_finite(resource["budget"])),
    "effective updates missing a seed": lambda task, skill, resource, updates, *rest: _paired_ok(task)
        and isinstance(updates, dict) and len(updates) < len(task["candidate"]) and all(type(k) is int for k in updates),
    "effective updates for an extra seed": lambda task, skill, resource, updates, *rest: isinstance(updates, dict)
        and 999 in updates,
    "a negative, float or bool update count": lambda task, skill, resource, updates, *rest: isinstance(updates, dict)
        and any(is_bool(v) or isinstance(v, float) or (isinstance(v, int) and v < 0) for v in updates.values()),
    "a str seed in effective updates": lambda task, skill, resource, updates, *rest: isinstance(updates, dict)
        and any(isinstance(k, str) for k in updates),
    "a zero t_value": lambda *call: len(call) > 4 and call[4] == 0 and not is_bool(call[4]),
    "a bad t_value, margin or tolerance": lambda *call: _paired_ok(call[0]) and any(
        is_bool(x) or isinstance(x, str) or not_finite(x) or (isinstance(x, float) and x < 0) for x in call[4:]),
    "a mean gain exactly at the margin": lambda *call: _decided(*call) and call[5] > 0
        and "task_gain_not_shown" in _decided(*call)["reasons"] and _decided(*call)["task_gain"]["mean"] >= call[5],
    "a skill change exactly at the tolerance": lambda *call: _decided(*call) and call[6] > 0
        and abs(_decided(*call)["skill_change"]["mean"] + call[6]) < 1e-12,
    "a measured resource equal to the budget": lambda task, skill, resource, *rest: _decided(task, skill, resource, *rest)
        and resource["measured"] == resource["budget"],
    "no effective update on a seed": lambda *call: "no_effective_update" in _decided(*call)["reasons"],
    "a task interval below 0": lambda *call: "task_worse" in _decided(*call)["reasons"],
    "skill lost with a task gain (tune)": lambda *call: _decided(*call)["reasons"] == ["base_skill_lost"],
    "resource not measured": lambda *call: "resource_not_measured" in _decided(*call)["reasons"],
    "resource over budget": lambda *call: "resource_over_budget" in _decided(*call)["reasons"],
    "accept": lambda *call: _decided(*call)["decision"] == "accept",
    "reject": lambda *call: _decided(*call)["decision"] == "reject",
    "tune": lambda *call: _decided(*call)["decision"] == "tune",
})
