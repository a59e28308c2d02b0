# %% hidden exercise=verify_integer_answer points=1 name=truncated_replies_are_never_parsed
# hint: decide "truncated" from finished alone, before reading the text: an unfinished reply earns nothing even when its digits are right.
for _text, _label in (("42", 42), ("", 0), ("The answer is 42.", 42), ("12 + 30 = 42\n42", 42), ("-7", -7)):
    assert verify_integer_answer(_text, _label, False) == {"outcome": "truncated", "parsed": None, "reward": 0.0}, _text
assert verify_integer_answer("42", 42, True) == {"outcome": "correct", "parsed": 42, "reward": 1.0}

# %% hidden exercise=verify_integer_answer points=1 name=the_final_line_is_the_answer
# hint: strip the reply's trailing whitespace, take the piece after the last newline and strip it; working lines before it are allowed, text after the number is not.
for _text in ("Let me compute: 12 + 30\n= 42\n42", "42\n\n  ", "  \n 42 \t", "40 + 2\r\n42\r\n", "\t42"):
    assert verify_integer_answer(_text, 42, True) == {"outcome": "correct", "parsed": 42, "reward": 1.0}, repr(_text)
for _text in ("42\nThat is my answer.", "42\n43.", "", "\n\n", "answer:\n"):
    assert verify_integer_answer(_text, 42, True) == {"outcome": "format_error", "parsed": None, "reward": 0.0}, repr(_text)
assert verify_integer_answer("42\n41", 42, True) == {"outcome": "wrong", "parsed": 41, "reward": 0.0}

# %% hidden exercise=verify_integer_answer points=1 name=only_the_canonical_integer_form_counts
# hint: the final line must read back exactly as str(n): no sign "+", no leading zero, no "-0", no separators or decimal point, only ASCII digits.
for _text, _label in (("007", 7), ("-0", 0), ("+5", 5), ("5.0", 5), ("1_000", 1000), ("1,000", 1000), ("４２", 42),
                      ("٤٢", 42), ("4 2", 42), ("42.", 42), ("0x2a", 42), ("1e2", 100), ("--3", 3)):
    assert verify_integer_answer(_text, _label, True) == {"outcome": "format_error", "parsed": None, "reward": 0.0}, _text
for _text, _label in (("0", 0), ("-12", -12), (" 42 ", 42), ("1000", 1000), ("123456789012345678901234567890",
                                                                          123456789012345678901234567890)):
    assert verify_integer_answer(_text, _label, True) == {"outcome": "correct", "parsed": _label, "reward": 1.0}, _text

# %% hidden exercise=verify_integer_answer points=1 name=wrong_answers_keep_their_integer_and_rewards_are_floats
# hint: a canonical integer that is not the label is "wrong" with that integer as parsed; every reward is the float 1.0 or 0.0.
assert verify_integer_answer("41", 42, True) == {"outcome": "wrong", "parsed": 41, "reward": 0.0}
assert verify_integer_answer("-42", 42, True) == {"outcome": "wrong", "parsed": -42, "reward": 0.0}
assert verify_integer_answer("0", -1, True) == {"outcome": "wrong", "parsed": 0, "reward": 0.0}
for _text, _finished in (("42", True), ("41", True), ("x", True), ("42", False)):
    _result = verify_integer_answer(_text, 42, _finished)
    assert type(_result["reward"]) is float and set(_result) == {"outcome", "parsed", "reward"}
    assert _result["parsed"] is None or type(_result["parsed"]) is int

# %% hidden exercise=verify_integer_answer points=1 name=invalid_arguments_are_refused_valid_ones_scored
# hint: check the response (a str), the label (an int, not a bool) and finished (a bool) before reading anything.
assert verify_integer_answer("8", 8, True)["reward"] == 1.0 and verify_integer_answer("9", 8, True)["outcome"] == "wrong"
for _args in ((None, 1, True), (b"42", 42, True), (42, 42, True), ("42", 42.0, True), ("42", "42", True),
              ("42", True, True), ("42", None, True), ("42", 42, 1), ("42", 42, None), ("42", 42, "yes"),
              (["42"], 42, True)):
    try:
        verify_integer_answer(*_args)
    except ValueError:
        continue
    raise AssertionError(f"invalid arguments accepted: {_args!r}")

# %% hidden exercise=verify_integer_answer points=1 name=generated_replies_match_the_reference
# hint: on any reply (integers in many spellings and scripts, working lines, every kind of line break and Unicode space, blank lines, text) and any label, finished or not, the outcome, parsed integer and reward are exactly the reference's: lines are split at "\n" only.
from hypothesis import strategies as st
_numbers = st.integers(-120, 120)
_other_digits = {"full-width": "０１２３４５６７８９", "arabic-indic": "٠١٢٣٤٥٦٧٨٩", "devanagari": "०१२३४५६७८९"}
_spellings = st.one_of(_numbers.map(str), _numbers.map(lambda n: f"+{n}"), _numbers.map(lambda n: f"0{abs(n)}"),
                       _numbers.map(lambda n: f"{n}."), _numbers.map(lambda n: f"{n}.0"), st.just("-0"),
                       st.tuples(_numbers, st.sampled_from(sorted(_other_digits.values()))).map(
                           lambda drawn: str(drawn[0]).translate(str.maketrans("0123456789", drawn[1]))),
                       st.tuples(_numbers, st.sampled_from(["\xa0", "\u3000", "\u2009", "\ufeff", "\x0b", "\x0c"]),
                                 st.booleans()).map(lambda drawn: f"{drawn[1]}{drawn[0]}" if drawn[2] else f"{drawn[0]}{drawn[1]}"),
                       st.sampled_from(["The answer is 42.", "", " ", "\t", "forty-two", "4 2", "1_0", "42!"]))
_lines = st.lists(st.one_of(_spellings, st.sampled_from(["12 + 30 = 42", "Let me think.", "= 7"])), min_size=1,
                  max_size=3)
_breaks = ["\n", "\r\n", "\n\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"]
_replies = st.tuples(_lines, st.sampled_from(_breaks), st.sampled_from(["", "\n", " \n\t", "  ", "\u2028", "\xa0\n"])).map(
    lambda drawn: drawn[1].join(drawn[0]) + drawn[2])


def _final_line(text):
    return text.rstrip().split("\n")[-1].strip()


def _reads_as_int(line):
    try:
        int(line)
    except ValueError:
        return False
    return True


_correct = _numbers.flatmap(lambda n: st.tuples(st.sampled_from([f"{n}", f"12 + 30\n{n}", f" {n} \n", f"x\r\n{n}\r\n",
                                                                  f"\u3000{n}\xa0", f"7\u2028{n}", f"x\n{n}\u2029",
                                                                  f"\ufeff{n}", f"x\n{n}\ufeff"]),
                                                 st.just(n), st.just(True)))
_zero = st.tuples(st.sampled_from(["0", "-0", "+0", "00", "0\n", "1\n-0"]), st.just(0), st.just(True))
_wrong = _numbers.flatmap(lambda n: st.tuples(st.sampled_from([str(n + 1), f"{n}\n{n - 1}", f"{-n - 1} "]), st.just(n),
                                               st.just(True)))


def _other_line_break(text):
    return any(mark in text.rstrip() for mark in ("\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"))


reference.agrees("verify_integer_answer", st.one_of(st.tuples(_replies, st.one_of(_numbers, st.just(42)), st.booleans()),
                                                    _correct, _zero, _wrong), cases=260, clauses={
    "an unfinished reply": lambda text, label, finished: not finished,
    "a correct canonical final line": lambda text, label, finished: finished and _final_line(text) == str(label),
    "a wrong canonical integer": lambda text, label, finished: finished and _reads_as_int(_final_line(text))
        and str(int(_final_line(text))) == _final_line(text) and _final_line(text) != str(label),
    "an integer spelling int() reads that is not canonical (+, leading zero, -0, full-width)":
        lambda text, label, finished: finished and _reads_as_int(_final_line(text))
        and str(int(_final_line(text))) != _final_line(text),
    "a final line int() cannot read (text, decimal point, blank)":
        lambda text, label, finished: finished and not _reads_as_int(_final_line(text)),
    "working lines before the final line": lambda text, label, finished: finished and "\n" in text.rstrip(),
    "whitespace or blank lines after the final line": lambda text, label, finished: finished and text != text.rstrip(),
    "a carriage return": lambda text, label, finished: finished and "\r" in text,
    "an unfinished reply whose final line is correct": lambda text, label, finished: not finished
        and _final_line(text) == str(label),
    "a line break splitlines() sees and split('\\n') does not (\\r, \\x0b, \\x0c, \\x1c, \\x85, \\u2028, \\u2029)":
        lambda text, label, finished: finished and _other_line_break(text),
    "Unicode whitespace strip() removes around the final line (no-break, ideographic, thin space)":
        lambda text, label, finished: finished and any(mark in text for mark in ("\xa0", "\u3000", "\u2009")),
    "a zero-width no-break space strip() keeps": lambda text, label, finished: finished and "\ufeff" in _final_line(text),
    "digits of another script int() reads (full-width, Arabic-Indic, Devanagari)":
        lambda text, label, finished: finished and any(c in text for digits in _other_digits.values() for c in digits),
    "label 0 against 0, -0, +0 and 00": lambda text, label, finished: finished and label == 0
        and _final_line(text) in ("0", "-0", "+0", "00"),
})

# %% hidden exercise=verify_integer_answer points=1 name=generated_invalid_arguments_raise_as_the_reference
# hint: non-text replies, labels that are floats, text, None or bools, and a finished flag that is not a bool each give a ValueError; valid calls among them are scored.
from hypothesis import strategies as st
_responses = st.one_of(st.sampled_from(["42", "x", "", "7\n"]), st.sampled_from([None, 42, b"42", ["42"], 4.2]))
_labels = st.one_of(st.integers(-5, 50), st.sampled_from([True, False, 4.0, "4", None, [4]]))
_flags = st.one_of(st.booleans(), st.sampled_from([1, 0, None, "True", 1.0]))


def _defects(response, label, finished):
    found = set()
    if not isinstance(response, str):
        found.add("response")
    if isinstance(label, bool):
        found.add("label bool")
    elif not isinstance(label, int):
        found.add("label")
    if not isinstance(finished, bool):
        found.add("finished")
    return found


reference.agrees("verify_integer_answer", st.tuples(_responses, _labels, _flags), cases=150, clauses={
    "a response that is not a str (None, int, bytes, list, float), and no other defect":
        lambda r, l, f: _defects(r, l, f) == {"response"},
    "a label that is a bool, and no other defect": lambda r, l, f: _defects(r, l, f) == {"label bool"},
    "a label that is not an int (float, str, None, list), and no other defect":
        lambda r, l, f: _defects(r, l, f) == {"label"},
    "a finished flag that is not a bool (1, 0, None, str, float), and no other defect":
        lambda r, l, f: _defects(r, l, f) == {"finished"},
    "a finished flag that is the int 1 or 0": lambda r, l, f: _defects(r, l, f) == {"finished"} and type(f) is int,
    "a valid call": lambda r, l, f: not _defects(r, l, f),
})

# %% hidden exercise=group_advantages points=1 name=groups_without_reward_variance_are_not_scoreable
# hint: a group whose rewards are all equal, or that has one answer, gives None (not a list of zeros) and False in scoreable; the share counts scoreable groups among all groups.
_result = group_advantages([[0.0, 0.0, 0.0], [1.0], [2, 2.0], [0.0, 1.0]])
assert _result["advantages"][:3] == [None, None, None]
assert _result["scoreable"] == [False, False, False, True]
assert _result["scoreable_share"] == 0.25 and type(_result["scoreable_share"]) is float
assert _result["advantages"][3] is not None and len(_result["advantages"][3]) == 2
_none = group_advantages([[5, 5], [0.5]])
assert _none == {"advantages": [None, None], "scoreable": [False, False], "scoreable_share": 0.0}

# %% hidden exercise=group_advantages points=1 name=sample_standard_deviation_and_eps
# hint: divide by the sample standard deviation (n - 1) plus eps, not by the population one, and use the eps given.
_result = group_advantages([[3.0, 1.0]])
_std = math.sqrt(2.0)
assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(_result["advantages"][0], [1 / (_std + 1e-4), -1 / (_std + 1e-4)]))
_result = group_advantages([[0.0, 0.0, 3.0]], eps=0.5)
_std = math.sqrt((1 + 1 + 4) / 2)
assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(_result["advantages"][0], [-1 / (_std + 0.5), -1 / (_std + 0.5), 2 / (_std + 0.5)]))
_result = group_advantages([[1, 0, 0, 0, 0, 0, 0, 0]], eps=1)
assert math.isclose(_result["advantages"][0][0], 0.875 / (math.sqrt(0.875 / 7) + 1), rel_tol=1e-12)

# %% hidden exercise=group_advantages points=1 name=centred_advantages_sum_to_zero_as_floats
# hint: without the std, each advantage is the reward minus its group's mean; every advantage is a Python float even for int rewards, in the answers' order.
_result = group_advantages([[1, 2, 3, 6], [0, 1]], scale_by_std=False)
assert _result["advantages"] == [[-2.0, -1.0, 0.0, 3.0], [-0.5, 0.5]]
assert all(type(value) is float for group in _result["advantages"] for value in group)
_scaled = group_advantages([[0.1, 0.7, 0.3, 0.3, 0.9]])
assert abs(sum(_scaled["advantages"][0])) < 1e-12
assert _scaled["advantages"][0][4] > _scaled["advantages"][0][1] > _scaled["advantages"][0][2] == _scaled["advantages"][0][3]

# %% hidden exercise=group_advantages points=1 name=invalid_groups_and_settings_are_refused_valid_ones_scored
# hint: check every group and every reward (finite int or float, not a bool), scale_by_std (a bool) and eps (a finite number > 0) before computing.
assert group_advantages([[1, 0]], scale_by_std=False)["advantages"] == [[0.5, -0.5]]
_cases = [([], {}), ([[]], {}), ([[1, None]], {}), ([[float("nan"), 1.0]], {}), ([[float("inf"), 1.0]], {}),
          ([[1.0, True]], {}), ([[1.0, "2"]], {}), ([(1.0, 0.0)], {}), (((1.0, 0.0),), {}), ([1.0, 0.0], {}),
          ([[1.0, 0.0]], {"scale_by_std": 1}), ([[1.0, 0.0]], {"scale_by_std": None}), ([[1.0, 0.0]], {"eps": 0}),
          ([[1.0, 0.0]], {"eps": -1e-4}), ([[1.0, 0.0]], {"eps": True}), ([[1.0, 0.0]], {"eps": float("nan")}),
          ([[1.0, 0.0]], {"eps": float("inf")}), ([[1.0, 0.0]], {"eps": "1e-4"}), ([[1.0, 0.0], []], {})]
for _groups, _kwargs in _cases:
    try:
        group_advantages(_groups, **_kwargs)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_groups!r} {_kwargs!r}")

# %% hidden exercise=group_advantages points=1 name=generated_groups_match_the_reference
# hint: on any list of groups (ints and floats, equal rewards, single answers, large and tiny spreads, with or without the std, any positive eps given by position or keyword) the advantages, scoreable flags and share are exactly the reference's.
from hypothesis import strategies as st
import math

_rewards = st.one_of(st.sampled_from([0, 1, 0.0, 1.0, 0.5, -1.0]), st.integers(-3, 3),
                     st.floats(-10, 10, allow_nan=False, allow_infinity=False))
_last_bit = st.sampled_from([0.3, 1.0, 0.1, -2.5]).map(lambda r: [r, math.nextafter(r, math.inf), r])
_inexact = st.sampled_from([[0.1, 0.2, 0.7], [0.1 + 0.2, 0.3], [0.1, 0.1, 0.1, 0.3 - 0.2], [1e-16, 0.0, 1e-16]])
_groups = st.lists(st.one_of(st.lists(_rewards, min_size=1, max_size=6), _last_bit, _inexact), min_size=1, max_size=4)
_calls = st.one_of(st.tuples(_groups),
                   st.tuples(_groups, st.booleans()),
                   st.tuples(_groups, st.booleans(), st.sampled_from([1e-4, 1e-6, 0.5, 1, 2.0, 5e-324, 1e300])),
                   st.tuples(st.tuples(_groups), st.fixed_dictionaries({"scale_by_std": st.booleans(),
                                                                        "eps": st.sampled_from([1e-4, 0.1, 3])})))


def _settings(groups, *rest, **named):
    scale = named.get("scale_by_std", rest[0] if len(rest) > 0 else True)
    return groups, scale, named.get("eps", rest[1] if len(rest) > 1 else 1e-4)


reference.agrees("group_advantages", _calls, cases=150, clauses={
    "a group whose rewards are all equal": lambda *a, **k: any(len(g) > 1 and max(g) == min(g) for g in _settings(*a, **k)[0]),
    "a group of one answer": lambda *a, **k: any(len(g) == 1 for g in _settings(*a, **k)[0]),
    "a scoreable group": lambda *a, **k: any(len(g) > 1 and max(g) != min(g) for g in _settings(*a, **k)[0]),
    "a group of int rewards only": lambda *a, **k: any(all(type(r) is int for r in g) and max(g) != min(g)
                                                       for g in _settings(*a, **k)[0]),
    "several groups": lambda *a, **k: len(_settings(*a, **k)[0]) > 1,
    "without the std": lambda *a, **k: _settings(*a, **k)[1] is False,
    "a given eps other than the default": lambda *a, **k: _settings(*a, **k)[2] != 1e-4,
    "settings by keyword": lambda *a, **k: bool(k),
    "rewards that differ only in their last bit": lambda *a, **k: any(
        len(g) > 1 and max(g) != min(g) and max(g) == math.nextafter(min(g), math.inf) for g in _settings(*a, **k)[0]),
    "rewards whose float sum is inexact (0.1 + 0.2 != 0.3)": lambda *a, **k: any(
        any(r in (0.1, 0.1 + 0.2, 0.3 - 0.2) for r in g) for g in _settings(*a, **k)[0]),
    "an eps at a floating-point extreme (the smallest subnormal, 1e300)": lambda *a, **k: _settings(*a, **k)[2] in (5e-324, 1e300),
})

# %% hidden exercise=group_advantages points=1 name=generated_invalid_groups_raise_as_the_reference
# hint: lists that are empty or not lists, groups that are empty or tuples, rewards that are None, bools, text, nan or infinite, and settings of the wrong type or range each give a ValueError; valid calls among them give advantages.
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite

_defects = ([("valid", n) for n in range(12)]
            + [("outer", bad) for bad in (None, (), [], "x", ((1.0, 0.0),))]
            + [("group", bad) for bad in ([], (1.0, 0.0), 1.0, None)]
            + [("reward", bad) for bad in (True, False, None, "1", float("nan"), float("inf"), -float("inf"), [1.0])]
            + [("scale_by_std", bad) for bad in (1, 0, None, "yes")]
            + [("eps", bad) for bad in (0, -1.0, True, float("nan"), float("inf"), None, "1e-4", -0.0, -5e-324)]
            + [("reward at", where) for where in ("first", "middle", "last")])


def _one_defect(defect, rng):
    kind, bad = defect
    groups = [[rng.choice([0.0, 1.0, 1, 0, 0.5, -1]) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))]
    if kind == "reward at":  # a non-finite reward at a chosen position of a group of three (first, middle, last)
        group = rng.choice(groups)
        group[:] = [rng.choice([0.0, 1.0]) for _ in range(3)]
        group[{"first": 0, "middle": 1, "last": 2}[bad]] = rng.choice([float("nan"), float("inf"), -float("inf")])
    scale, eps = rng.choice([True, False]), rng.choice([1e-4, 1, 0.5])
    if kind == "outer":
        groups = bad
    elif kind == "group":
        groups[rng.randrange(len(groups))] = bad
    elif kind == "reward":
        group = rng.choice(groups)
        group[rng.randrange(len(group))] = bad
    elif kind == "scale_by_std":
        scale = bad
    elif kind == "eps":
        eps = bad
    return groups, scale, eps


def _reward_ok(value):
    return is_number(value) and not not_finite(value)


def _groups_ok(groups):
    return isinstance(groups, list) and bool(groups) and all(isinstance(g, list) and g for g in groups)


reference.agrees("group_advantages", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "group_rewards not a non-empty list (None, a tuple, [], text)": lambda g, s, e: not isinstance(g, list) or not g,
    "a group that is empty, a tuple, a number or None": lambda g, s, e: isinstance(g, list) and bool(g) and any(
        not isinstance(x, list) or not x for x in g),
    "a reward that is a bool": lambda g, s, e: _groups_ok(g) and any(is_bool(r) for x in g for r in x),
    "a reward that is nan or infinite": lambda g, s, e: _groups_ok(g) and any(not_finite(r) for x in g for r in x),
    "a reward that is None, text or a list": lambda g, s, e: _groups_ok(g) and any(
        r is None or isinstance(r, (str, list)) for x in g for r in x),
    "scale_by_std that is not a bool (1, 0, None, str)": lambda g, s, e: not isinstance(s, bool),
    "eps that is 0 or negative": lambda g, s, e: is_number(e) and e <= 0,
    "eps that is a bool, nan, inf, None or text": lambda g, s, e: not _reward_ok(e),
    "eps that is -0.0 or the negative subnormal": lambda g, s, e: e in (-0.0, -5e-324) and str(e).startswith("-"),
    "a non-finite reward first in its group": lambda g, s, e: _groups_ok(g) and any(not_finite(x[0]) for x in g),
    "a non-finite reward inside its group, neither first nor last": lambda g, s, e: _groups_ok(g) and any(
        any(not_finite(r) for r in x[1:-1]) for x in g),
    "a non-finite reward last in a group of several": lambda g, s, e: _groups_ok(g) and any(
        len(x) > 1 and not_finite(x[-1]) for x in g),
    "a valid call": lambda g, s, e: _groups_ok(g) and all(_reward_ok(r) for x in g for r in x) and isinstance(s, bool)
        and _reward_ok(e) and e > 0,
})

# %% hidden exercise=clipped_grpo_loss points=1 name=aggregations_weigh_unequal_responses_differently
# hint: "sequence" averages each response over its own tokens and then averages the responses; "token" divides the sum over all response tokens by their number.
_logprobs = torch.zeros(3, 4, dtype=torch.float64)
_advantages = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
_mask = torch.tensor([[True, False, False, False], [True, True, True, True], [True, True, False, False]])
_sequence = clipped_grpo_loss(_logprobs, _logprobs.clone(), _advantages, _mask, 0.2, "sequence")
_token = clipped_grpo_loss(_logprobs, _logprobs.clone(), _advantages, _mask, 0.2, "token")
assert math.isclose(_sequence["loss"].item(), -(1.0 - 2.0 + 4.0) / 3, rel_tol=1e-12)
assert math.isclose(_token["loss"].item(), -(1.0 - 8.0 + 8.0) / 7, rel_tol=1e-12)
assert _sequence["response_tokens"] == _token["response_tokens"] == 7 and _token["clip_rate"] == 0.0
assert _sequence["loss"].dtype == torch.float64 and _sequence["loss"].dim() == 0

# %% hidden exercise=clipped_grpo_loss points=1 name=clip_rate_counts_only_active_clips
# hint: a token is clipped only when the ratio leaves the band in the direction of its advantage (above 1 + eps with A > 0, below 1 - eps with A < 0); the other side and A == 0 are not clips.
_ratios = torch.tensor([[1.5, 0.5, 1.25, 1.0], [1.5, 0.5, 0.75, 1.0], [3.0, 0.1, 1.0, 1.0]], dtype=torch.float64)
_mask = torch.tensor([[True, True, True, True], [True, True, True, False], [True, True, False, False]])
_advantages = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
_result = clipped_grpo_loss(torch.log(_ratios), torch.zeros(3, 4, dtype=torch.float64), _advantages, _mask, 0.2, "token")
assert _result["response_tokens"] == 9
assert math.isclose(_result["clip_rate"], 4 / 9), "1.5 and 1.25 with A > 0; 0.5 and 0.75 with A < 0"
_edge = torch.tensor([[1.2, 0.8]], dtype=torch.float64)
_inside = clipped_grpo_loss(torch.log(_edge), torch.zeros(1, 2, dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64),
                            torch.tensor([[True, True]]), 0.25, "sequence")
assert _inside["clip_rate"] == 0.0 and type(_inside["clip_rate"]) is float

# %% hidden exercise=clipped_grpo_loss points=1 name=loss_gradient_reaches_only_unclipped_tokens_of_the_policy
# hint: the loss must keep its graph to logprobs; clipped and masked tokens get no gradient, and old_logprobs is a constant that gets none.
from tools.course.grader.boundary import backward_through

_logprobs = torch.log(torch.tensor([[1.0, 1.5, 0.9], [0.5, 1.0, 2.0]], dtype=torch.float64)).requires_grad_(True)
_old = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
_mask = torch.tensor([[True, True, True], [True, True, False]])
_result = backward_through(clipped_grpo_loss, _logprobs, _old, torch.tensor([1.0, -1.0], dtype=torch.float64), _mask, 0.2,
                           "token", select=["loss"], reduce=None)
assert _old.grad is None or float(_old.grad.abs().sum()) == 0.0
_grad = _logprobs.grad
assert _grad[0, 1].item() == 0.0 and _grad[1, 0].item() == 0.0 and _grad[1, 2].item() == 0.0
assert math.isclose(_grad[0, 0].item(), -1.0 / 5, rel_tol=1e-9) and math.isclose(_grad[1, 1].item(), 1.0 / 5, rel_tol=1e-9)
assert math.isclose(_grad[0, 2].item(), -0.9 / 5, rel_tol=1e-9)

# %% hidden exercise=clipped_grpo_loss points=1 name=values_outside_the_mask_never_reach_a_result
# hint: nan or inf outside the mask, in logprobs or old_logprobs, must not change the loss or the clip rate: replace them before exp, not after.
_logprobs = torch.log(torch.tensor([[1.1, 0.7, 1.0], [1.0, 1.3, 1.0]]))
_old = torch.zeros(2, 3)
_mask = torch.tensor([[True, True, False], [True, True, False]])
_advantages = torch.tensor([0.5, -2.0])
_clean = clipped_grpo_loss(_logprobs, _old, _advantages, _mask, 0.2, "sequence")
assert math.isclose(_clean["loss"].item(), ((-0.55 - 0.35) / 2 + (2.0 + 2.6) / 2) / 2, rel_tol=1e-5)
_dirty_logprobs, _dirty_old = _logprobs.clone(), _old.clone()
_dirty_logprobs[0, 2], _dirty_logprobs[1, 2], _dirty_old[1, 2] = float("nan"), float("inf"), -float("inf")
_dirty = clipped_grpo_loss(_dirty_logprobs, _dirty_old, _advantages, _mask, 0.2, "sequence")
assert math.isfinite(_dirty["loss"].item()) and math.isclose(_dirty["loss"].item(), _clean["loss"].item(), rel_tol=1e-6)
assert _dirty["clip_rate"] == _clean["clip_rate"] and _dirty["loss"].dtype == torch.float32

# %% hidden exercise=clipped_grpo_loss points=1 name=invalid_batches_and_settings_are_refused_valid_ones_scored
# hint: check dtypes, shapes, the mask, finite advantages, a row without response tokens, clip_eps in (0, 1) and the aggregation name before computing.
_lp = torch.zeros(2, 3, dtype=torch.float64)
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.ones(2, 3, dtype=torch.bool)
assert math.isclose(clipped_grpo_loss(_lp, _lp.clone(), _adv, _mask, 0.2, "token")["loss"].item(), 0.0, abs_tol=1e-12)
_cases = [
    (_lp.float(), _lp, _adv, _mask, 0.2, "token"), (_lp, _lp.float(), _adv, _mask, 0.2, "token"),
    (_lp, _lp, _adv.float(), _mask, 0.2, "token"), (_lp.half(), _lp.half(), _adv.half(), _mask, 0.2, "token"),
    (_lp.long(), _lp.long(), _adv, _mask, 0.2, "token"), (_lp[0], _lp[0], _adv, _mask[0], 0.2, "token"),
    (_lp, _lp[:, :2], _adv, _mask, 0.2, "token"), (_lp, _lp, _adv[:1], _mask, 0.2, "token"),
    (_lp, _lp, _adv.unsqueeze(1), _mask, 0.2, "token"), (_lp, _lp, _adv, _mask.long(), 0.2, "token"),
    (_lp, _lp, _adv, _mask[:, :2], 0.2, "token"), (_lp, _lp, torch.tensor([1.0, float("nan")], dtype=torch.float64), _mask, 0.2, "token"),
    (_lp, _lp, _adv, torch.tensor([[True, True, True], [False, False, False]]), 0.2, "sequence"),
    (_lp[:0], _lp[:0], _adv[:0], _mask[:0], 0.2, "token"), (_lp, _lp, _adv, _mask, 0.0, "token"),
    (_lp, _lp, _adv, _mask, 1.0, "token"), (_lp, _lp, _adv, _mask, True, "token"), (_lp, _lp, _adv, _mask, "0.2", "token"),
    (_lp, _lp, _adv, _mask, float("nan"), "token"), (_lp, _lp, _adv, _mask, 0.2, "mean"),
    (_lp, _lp, _adv, _mask, 0.2, "Token"), (_lp, _lp, _adv, _mask, 0.2, None), (_lp.tolist(), _lp, _adv, _mask, 0.2, "token"),
]
for _case in _cases:
    try:
        clipped_grpo_loss(*_case)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {[getattr(item, 'dtype', item) for item in _case]}")

# %% hidden exercise=clipped_grpo_loss points=1 name=generated_batches_match_the_reference
# hint: on any valid batch (float32 or float64, ratios inside and far outside the band, positive, negative and zero advantages, ragged masks, nan outside the mask, either aggregation, clip_eps by position, keyword or default) the loss, clip rate and token count are exactly the reference's.
import torch
from hypothesis import strategies as st


_FILLS = (float("nan"), float("inf"), -float("inf"))


def _batch(dims, values, shifts, flags, gains, dtype, clip, aggregation, how, grad, fills=(0, 0)):
    batch, time = dims
    flags = [row if any(row) else [True] + row[1:] for row in (flags[i * time:(i + 1) * time] for i in range(batch))]
    mask = torch.tensor(flags)
    logprobs = torch.tensor(values, dtype=torch.float64).reshape(batch, time).to(dtype)
    old = logprobs + torch.tensor(shifts, dtype=torch.float64).reshape(batch, time).to(dtype)
    if clip in (0.2, 0.5):  # ratios exactly on the band's edges: exp(log(1 +- eps)) is exact in both dtypes
        logprobs[0, 0], old[0, 0] = 0.0, -torch.log(torch.tensor(1 + clip, dtype=dtype))
        logprobs[-1, -1], old[-1, -1] = torch.log(torch.tensor(1 - clip, dtype=dtype)), 0.0
    logprobs = torch.where(mask, logprobs, torch.full_like(logprobs, _FILLS[fills[0]])).requires_grad_(grad)
    if fills[1]:
        old = torch.where(mask, old, torch.full_like(old, _FILLS[fills[1] - 1]))
    advantages = torch.tensor(gains, dtype=dtype)
    if how == "default":
        return (logprobs, old, advantages, mask), {}
    if how == "keyword":
        return (logprobs, old, advantages, mask), {"clip_eps": clip, "aggregation": aggregation}
    return (logprobs, old, advantages, mask, clip, aggregation), {}


_calls = st.tuples(st.integers(1, 3), st.integers(1, 4)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.lists(st.floats(-4, 0), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.one_of(st.floats(-1.5, 1.5), st.sampled_from([0.0, 0.1, -0.1])), min_size=dims[0] * dims[1],
             max_size=dims[0] * dims[1]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.one_of(st.floats(-2, 2), st.just(0.0)), min_size=dims[0], max_size=dims[0]),
    st.sampled_from([torch.float64, torch.float32]), st.sampled_from([0.2, 0.1, 0.28, 0.5]),
    st.sampled_from(["sequence", "token"]), st.sampled_from(["default", "keyword", "positional"]), st.booleans(),
    st.tuples(st.integers(0, 2), st.integers(0, 3)),
).map(lambda drawn: _batch(*drawn)))


def _parts(logprobs, old, advantages, mask, clip_eps=0.2, aggregation="sequence"):
    ratio = torch.exp(torch.where(mask, logprobs.detach().double() - old.double(), torch.zeros(mask.shape, dtype=torch.float64)))
    return ratio, advantages.double().unsqueeze(1), mask, clip_eps, aggregation


def _on_edge(logprobs, old, advantages, mask, clip_eps=0.2, aggregation="sequence"):
    ratio = torch.exp(torch.where(mask, logprobs.detach() - old, torch.zeros_like(old)))
    return bool((((ratio == 1 + clip_eps) | (ratio == 1 - clip_eps)) & mask & (advantages.unsqueeze(1) != 0)).any())


def _clips(side, *a, **k):
    ratio, gain, mask, eps, _ = _parts(*a, **k)
    above, below = (ratio > 1 + eps) & mask, (ratio < 1 - eps) & mask
    if side == "active":
        return bool(((above & (gain > 0)) | (below & (gain < 0))).any())
    return bool(((above & (gain < 0)) | (below & (gain > 0))).any())


reference.agrees("clipped_grpo_loss", _calls, cases=120, clauses={
    "float32 tensors": lambda *a, **k: a[0].dtype == torch.float32,
    "float64 tensors": lambda *a, **k: a[0].dtype == torch.float64,
    "clip_eps and aggregation by default": lambda *a, **k: len(a) == 4 and not k,
    "clip_eps and aggregation by keyword": lambda *a, **k: "clip_eps" in k,
    "sequence aggregation": lambda *a, **k: _parts(*a, **k)[4] == "sequence",
    "token aggregation": lambda *a, **k: _parts(*a, **k)[4] == "token",
    "responses of different lengths": lambda *a, **k: len(set(a[3].sum(dim=1).tolist())) > 1,
    "nan outside the mask": lambda *a, **k: bool((~a[3]).any()),
    "a zero advantage": lambda *a, **k: bool((a[2] == 0).any()),
    "an active clip (ratio beyond the band in the advantage's direction)": lambda *a, **k: _clips("active", *a, **k),
    "a ratio beyond the band on the inactive side (not a clip)": lambda *a, **k: _clips("inactive", *a, **k),
    "logprobs that require grad": lambda *a, **k: a[0].requires_grad,
    "+inf or -inf logprobs outside the mask": lambda *a, **k: bool((torch.isinf(a[0].detach()) & ~a[3]).any()),
    "nan, +inf or -inf old_logprobs outside the mask": lambda *a, **k: bool((~torch.isfinite(a[1]) & ~a[3]).any()),
    "a masked-out first position": lambda *a, **k: bool((~a[3][:, 0]).any()),
    "a ratio exactly on the band's edge (1 + eps or 1 - eps: not a clip)": lambda *a, **k: _on_edge(*a, **k),
})

# %% hidden exercise=clipped_grpo_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: integer, half or mismatched dtypes, wrong shapes, non-bool or empty-row masks, non-finite advantages, clip_eps outside (0, 1) or of the wrong type, and unknown aggregations each give a ValueError; valid batches among them give a loss.
import torch
from hypothesis import strategies as st
from tools.course.grader.clauses import each_of, is_bool

_defects = ([("valid", n) for n in range(12)]
            + [("logprobs", kind) for kind in ("float16", "int64", "1-D", "3-D", "list")]
            + [("old", kind) for kind in ("dtype", "shape", "None")]
            + [("mask", kind) for kind in ("float", "long", "shape", "list")]
            + [("advantages", kind) for kind in ("dtype", "short", "2-D", "inf", "nan", "list", "-inf", "nan at 0")]
            + [("rows", kind) for kind in ("a row without tokens", "no rows")]
            + [("clip_eps", bad) for bad in (0, 1, 1.5, -0.2, True, None, "0.2", float("nan"))]
            + [("aggregation", bad) for bad in ("mean", "TOKEN", " sequence", None, 1)])


def _one_defect(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    batch, time = rng.randint(1, 3), rng.randint(2, 4)
    generator = torch.Generator().manual_seed(rng.randrange(10 ** 6))
    lp = -torch.rand(batch, time, generator=generator, dtype=torch.float64)
    old = lp + 0.4 * (torch.rand(batch, time, generator=generator, dtype=torch.float64) - 0.5)
    mask = torch.rand(batch, time, generator=generator) < 0.7
    mask[:, 0] = True
    adv = torch.randn(batch, generator=generator, dtype=torch.float64)
    lp, old, adv = lp.to(dtype), old.to(dtype), adv.to(dtype)
    args = [lp, old, adv, mask, rng.choice([0.2, 0.1, 0.5]), rng.choice(["sequence", "token"])]
    if kind == "logprobs":
        if bad in ("float16", "int64"):
            target = torch.float16 if bad == "float16" else torch.int64
            args[:3] = [lp.to(target), old.to(target), adv.to(target)]
        elif bad == "1-D":
            args[:4] = [lp[0], old[0], adv[:1], mask[0]]
        elif bad == "3-D":
            args[:4] = [lp.unsqueeze(0), old.unsqueeze(0), adv, mask.unsqueeze(0)]
        else:
            args[0] = lp.tolist()
    elif kind == "old":
        args[1] = {"dtype": old.to(torch.float64 if dtype == torch.float32 else torch.float32), "shape": old[:, :1],
                   "None": None}[bad]
    elif kind == "mask":
        args[3] = {"float": mask.float(), "long": mask.long(), "shape": mask[:, :1], "list": mask.tolist()}[bad]
    elif kind == "advantages":
        nan = adv.clone()
        spot = 0 if bad == "nan at 0" else rng.randrange(batch)
        nan[spot] = {"inf": float("inf"), "-inf": -float("inf")}.get(bad, float("nan"))
        args[2] = {"dtype": adv.to(torch.float64 if dtype == torch.float32 else torch.float32),
                   "short": adv[:0] if batch == 1 else adv[:-1], "2-D": adv.unsqueeze(1), "inf": nan, "nan": nan,
                   "-inf": nan, "nan at 0": nan, "list": adv.tolist()}[bad]
    elif kind == "rows" and bad == "no rows":
        args[:4] = [lp[:0], old[:0], adv[:0], mask[:0]]
    elif kind == "rows":
        mask[rng.randrange(batch)] = False
    elif kind == "clip_eps":
        args[4] = bad
    elif kind == "aggregation":
        args[5] = bad
    return tuple(args)


def _is(value, dtypes=(torch.float32, torch.float64), dim=2):
    return isinstance(value, torch.Tensor) and value.dim() == dim and value.dtype in dtypes


def _good_prefix(lp, old, adv, mask):
    return (_is(lp) and isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype
            and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == lp.shape)


def _good_advantages(lp, adv):
    return (isinstance(adv, torch.Tensor) and adv.dtype == lp.dtype and tuple(adv.shape) == (lp.shape[0],)
            and bool(torch.isfinite(adv).all()))


reference.agrees("clipped_grpo_loss", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "logprobs of a half or integer dtype": lambda lp, old, adv, m, c, g: isinstance(lp, torch.Tensor)
        and lp.dim() == 2 and lp.dtype not in (torch.float32, torch.float64),
    "logprobs that are not 2-D or not a tensor": lambda lp, old, adv, m, c, g: not isinstance(lp, torch.Tensor) or lp.dim() != 2,
    "old_logprobs of another dtype, shape, or not a tensor": lambda lp, old, adv, m, c, g: _is(lp) and not (
        isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype),
    "a mask that is not a bool tensor of the shape of logprobs": lambda lp, old, adv, m, c, g: _is(lp)
        and isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype and not (
        isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.shape == lp.shape),
    "advantages of another dtype or shape, or not a tensor": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m)
        and not (isinstance(adv, torch.Tensor) and adv.dtype == lp.dtype and tuple(adv.shape) == (lp.shape[0],)),
    "advantages with nan or inf": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m) and isinstance(
        adv, torch.Tensor) and tuple(adv.shape) == (lp.shape[0],) and not bool(torch.isfinite(adv).all()),
    "a non-finite advantage on the first response": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m)
        and isinstance(adv, torch.Tensor) and tuple(adv.shape) == (lp.shape[0],) and lp.shape[0] > 0
        and not bool(torch.isfinite(adv[0])),
    "a non-finite advantage on a later response": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m)
        and isinstance(adv, torch.Tensor) and tuple(adv.shape) == (lp.shape[0],) and lp.shape[0] > 1
        and not bool(torch.isfinite(adv[1:]).all()),
    "a response without a token in the mask": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m)
        and _good_advantages(lp, adv) and lp.shape[0] > 0 and not bool(m.any(dim=1).all()),
    "no responses at all": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m) and lp.shape[0] == 0,
    "clip_eps outside (0, 1)": lambda lp, old, adv, m, c, g: not is_bool(c) and isinstance(c, (int, float))
        and not 0 < c < 1,
    "clip_eps that is a bool, None or text": lambda lp, old, adv, m, c, g: is_bool(c) or not isinstance(c, (int, float)),
    "an unknown or miscased aggregation, or not a str": lambda lp, old, adv, m, c, g: g not in ("sequence", "token"),
    "a valid call": lambda lp, old, adv, m, c, g: _good_prefix(lp, old, adv, m) and _good_advantages(lp, adv)
        and lp.shape[0] > 0 and bool(m.any(dim=1).all()) and not is_bool(c) and isinstance(c, (int, float))
        and 0 < c < 1 and g in ("sequence", "token"),
})
