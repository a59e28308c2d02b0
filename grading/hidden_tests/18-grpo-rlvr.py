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
# hint: on any reply (integers in many spellings, working lines, blank lines, tabs, carriage returns, full-width digits, text) and any label, finished or not, the outcome, parsed integer and reward are exactly the reference's.
from hypothesis import strategies as st
_numbers = st.integers(-120, 120)
_spellings = st.one_of(_numbers.map(str), _numbers.map(lambda n: f"+{n}"), _numbers.map(lambda n: f"0{abs(n)}"),
                       _numbers.map(lambda n: f"{n}."), _numbers.map(lambda n: f"{n}.0"), st.just("-0"),
                       _numbers.map(lambda n: str(n).translate(str.maketrans("0123456789", "０１２３４５６７８９"))),
                       st.sampled_from(["The answer is 42.", "", " ", "\t", "forty-two", "4 2", "1_0", "42!"]))
_lines = st.lists(st.one_of(_spellings, st.sampled_from(["12 + 30 = 42", "Let me think.", "= 7"])), min_size=1,
                  max_size=3)
_replies = st.tuples(_lines, st.sampled_from(["\n", "\r\n", "\n\n"]), st.sampled_from(["", "\n", " \n\t", "  "])).map(
    lambda drawn: drawn[1].join(drawn[0]) + drawn[2])
reference.agrees("verify_integer_answer", st.tuples(_replies, st.one_of(_numbers, st.just(42)), st.booleans()),
                 cases=200)

# %% hidden exercise=verify_integer_answer points=1 name=generated_invalid_arguments_raise_as_the_reference
# hint: non-text replies, labels that are floats, text, None or bools, and a finished flag that is not a bool each give a ValueError; valid calls among them are scored.
from hypothesis import strategies as st
_responses = st.one_of(st.sampled_from(["42", "x", "", "7\n"]), st.sampled_from([None, 42, b"42", ["42"], 4.2]))
_labels = st.one_of(st.integers(-5, 50), st.sampled_from([True, False, 4.0, "4", None, [4]]))
_flags = st.one_of(st.booleans(), st.sampled_from([1, 0, None, "True", 1.0]))
reference.agrees("verify_integer_answer", st.tuples(_responses, _labels, _flags), cases=150)

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
_rewards = st.one_of(st.sampled_from([0, 1, 0.0, 1.0, 0.5, -1.0]), st.integers(-3, 3),
                     st.floats(-10, 10, allow_nan=False, allow_infinity=False))
_groups = st.lists(st.lists(_rewards, min_size=1, max_size=6), min_size=1, max_size=4)
_calls = st.one_of(st.tuples(_groups),
                   st.tuples(_groups, st.booleans()),
                   st.tuples(_groups, st.booleans(), st.sampled_from([1e-4, 1e-6, 0.5, 1, 2.0])),
                   st.tuples(st.tuples(_groups), st.fixed_dictionaries({"scale_by_std": st.booleans(),
                                                                        "eps": st.sampled_from([1e-4, 0.1, 3])})))
reference.agrees("group_advantages", _calls, cases=150)

# %% hidden exercise=group_advantages points=1 name=generated_invalid_groups_raise_as_the_reference
# hint: lists that are empty or not lists, groups that are empty or tuples, rewards that are None, bools, text, nan or infinite, and settings of the wrong type or range each give a ValueError; valid calls among them give advantages.
from hypothesis import strategies as st
_items = st.one_of(st.sampled_from([0.0, 1.0, 1, 0]), st.sampled_from([None, True, "1", float("nan"), float("inf")]))
_group = st.one_of(st.lists(_items, max_size=4), st.just((1.0, 0.0)), st.just(1.0))
_outer = st.one_of(st.lists(_group, max_size=3), st.just(None), st.just(((1.0, 0.0),)))
_scale = st.sampled_from([True, False, 1, 0, None, "yes"])
_eps = st.sampled_from([1e-4, 1, 0, -1.0, True, float("nan"), float("inf"), None])
reference.agrees("group_advantages", st.tuples(_outer, _scale, _eps), cases=150)

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


def _batch(dims, values, shifts, flags, gains, dtype, clip, aggregation, how, grad):
    batch, time = dims
    flags = [row if any(row) else [True] + row[1:] for row in (flags[i * time:(i + 1) * time] for i in range(batch))]
    mask = torch.tensor(flags)
    logprobs = torch.tensor(values, dtype=torch.float64).reshape(batch, time)
    old = logprobs + torch.tensor(shifts, dtype=torch.float64).reshape(batch, time)
    logprobs = torch.where(mask, logprobs, torch.full_like(logprobs, float("nan"))).to(dtype).requires_grad_(grad)
    old = old.to(dtype)
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
).map(lambda drawn: _batch(*drawn)))
reference.agrees("clipped_grpo_loss", _calls, cases=120)

# %% hidden exercise=clipped_grpo_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: integer, half or mismatched dtypes, wrong shapes, non-bool or empty-row masks, non-finite advantages, clip_eps outside (0, 1) or of the wrong type, and unknown aggregations each give a ValueError; valid batches among them give a loss.
import torch
from hypothesis import strategies as st
_lp = st.sampled_from([torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float16),
                       torch.zeros(2, 3, dtype=torch.long), torch.zeros(3), torch.zeros(2, 2), [[0.0] * 3] * 2])
_old = st.sampled_from([torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 2), None])
_adv = st.sampled_from([torch.tensor([1.0, -1.0]), torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([1.0]),
                        torch.tensor([[1.0], [-1.0]]), torch.tensor([1.0, float("inf")]), [1.0, -1.0]])
_mask = st.sampled_from([torch.ones(2, 3, dtype=torch.bool), torch.tensor([[True, False, False], [False, False, True]]),
                         torch.tensor([[True, True, True], [False, False, False]]), torch.ones(2, 3),
                         torch.ones(2, 2, dtype=torch.bool)])
_clip = st.sampled_from([0.2, 0.5, 0, 1, 1.5, -0.2, True, None, "0.2", float("nan")])
_aggregation = st.sampled_from(["sequence", "token", "mean", "TOKEN", " sequence", None, 1])
reference.agrees("clipped_grpo_loss", st.tuples(_lp, _old, _adv, _mask, _clip, _aggregation), cases=150)
