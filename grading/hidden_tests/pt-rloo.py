# %% hidden exercise=filter_scoreable_groups points=1 name=none_is_a_missing_reward_not_a_zero
# hint: count only the entries that are not None; a reward of 0 or 0.0 is a real verdict and counts.
_result = filter_scoreable_groups([[0.0, None, None], [None, 0, 0.0], [None], [0.0]])
assert _result["valid_counts"] == [1, 2, 0, 1]
assert _result["scoreable"] == [1] and _result["single_valid_reward"] == [0, 3] and _result["no_valid_reward"] == [2]
assert all(type(count) is int for count in _result["valid_counts"])

# %% hidden exercise=filter_scoreable_groups points=1 name=the_three_index_lists_partition_the_groups
# hint: every group lands in exactly one of scoreable, single_valid_reward and no_valid_reward, each list in ascending index order.
_groups = [[None, None], [1.0, 2.0], [None, 3.0], [4.0], [None], [0.5, None, 0.5, None], [-1, 1, None], [None, None, 7]]
_result = filter_scoreable_groups(_groups)
assert _result == {"scoreable": [1, 5, 6], "valid_counts": [0, 2, 1, 1, 0, 2, 2, 1],
                   "no_valid_reward": [0, 4], "single_valid_reward": [2, 3, 7]}

# %% hidden exercise=filter_scoreable_groups points=1 name=equal_and_negative_rewards_still_have_a_baseline
# hint: scoreable means "at least two valid rewards", whatever their values: equal rewards, negative rewards and ints all count.
_result = filter_scoreable_groups([[1, 1], [0.0, 0.0, 0.0], [-2.5, -2.5, None], [10 ** 6, -(10 ** 6)]])
assert _result["scoreable"] == [0, 1, 2, 3] and _result["no_valid_reward"] == [] and _result["single_valid_reward"] == []

# %% hidden exercise=filter_scoreable_groups points=1 name=invalid_groups_are_refused_valid_ones_counted
# hint: check the outer list, every group (a non-empty list) and every entry (None or a finite int or float, not a bool) before counting.
assert filter_scoreable_groups([[1.0, None, 2]])["valid_counts"] == [2]
for _bad in ([], None, [[]], [[1.0], []], [(1.0, 0.0)], [[1.0, True]], [[False, 1.0]], [[float("nan"), 1.0]],
             [[float("inf"), 0.0]], [["1", 0.0]], [[1.0, [0.0]]], [1.0, 0.0], ((1.0, 0.0),)):
    try:
        filter_scoreable_groups(_bad)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_bad!r}")

# %% hidden exercise=filter_scoreable_groups points=1 name=generated_groups_are_filtered_as_the_reference
# hint: on any groups (None anywhere, ints, floats, equal values, single answers) the index lists and counts are exactly the reference's.
from hypothesis import strategies as st
_entries = st.one_of(st.none(), st.none(), st.integers(-3, 3), st.floats(-5, 5, allow_nan=False, allow_infinity=False))
reference.agrees("filter_scoreable_groups", st.tuples(st.lists(st.lists(_entries, min_size=1, max_size=5), min_size=1,
                                                                max_size=5)), cases=150)

# %% hidden exercise=filter_scoreable_groups points=1 name=generated_invalid_groups_are_refused_as_the_reference
# hint: empty or non-list groups, bools, nan, infinities and text among the rewards each give a ValueError; valid inputs among them give the lists.
from hypothesis import strategies as st
_entries = st.one_of(st.none(), st.sampled_from([0.0, 1, 2.5]), st.sampled_from([True, float("nan"), float("inf"), "1", [1.0]]))
_groups = st.one_of(st.lists(_entries, max_size=4), st.just((1.0, None)), st.just(1.0), st.none())
reference.agrees("filter_scoreable_groups", st.tuples(st.one_of(st.lists(_groups, max_size=4), st.none(), st.just("x"))),
                 cases=150)

# %% hidden exercise=leave_one_out_advantages points=1 name=missing_rewards_stay_out_of_the_baseline
# hint: the baseline of an answer is the mean of the OTHER valid rewards; a None neither gets an advantage nor pulls its siblings' baselines down.
_result = leave_one_out_advantages([[1.0, None, 0.0], [3, None, 1, None, 2]])
assert _result["baselines"] == [[0.0, None, 1.0], [1.5, None, 2.5, None, 2.0]]
assert _result["advantages"] == [[1.0, None, -1.0], [1.5, None, -1.5, None, 0.0]]

# %% hidden exercise=leave_one_out_advantages points=1 name=groups_below_two_valid_rewards_give_only_none
# hint: a group with fewer than two valid rewards has no leave-one-out baseline: every one of its entries is None, and the layout keeps one entry per answer.
_result = leave_one_out_advantages([[None, 0.5, None], [None, None], [2.0], [0.0, 1.0]])
assert _result["baselines"][:3] == [[None, None, None], [None, None], [None]]
assert _result["advantages"][:3] == [[None, None, None], [None, None], [None]]
assert _result["advantages"][3] == [-1.0, 1.0] and _result["baselines"][3] == [1.0, 0.0]

# %% hidden exercise=leave_one_out_advantages points=1 name=advantages_are_floats_that_sum_to_zero
# hint: A_i = m / (m - 1) * (r_i - mean) over the m valid rewards; the valid advantages of a group sum to zero and every value is a Python float, also for int rewards.
_result = leave_one_out_advantages([[2, 4, 9], [0.1, 0.2, None, 0.7, 0.4]])
assert _result["advantages"][0] == [-4.5, -1.5, 6.0] and _result["baselines"][0] == [6.5, 5.5, 3.0]
assert all(type(value) is float for group in _result["advantages"] + _result["baselines"] for value in group if value is not None)
_valid = [value for value in _result["advantages"][1] if value is not None]
assert abs(sum(_valid)) < 1e-12
_mean = (0.1 + 0.2 + 0.7 + 0.4) / 4
assert all(math.isclose(a, 4 / 3 * (r - _mean), rel_tol=1e-9) for a, r in zip(_valid, [0.1, 0.2, 0.7, 0.4]))

# %% hidden exercise=leave_one_out_advantages points=1 name=invalid_groups_are_refused_before_any_advantage
# hint: the same input checks as the filter, before any computation.
assert leave_one_out_advantages([[1, 0]])["advantages"] == [[1.0, -1.0]]
for _bad in ([], [[]], [[1.0, True]], [[float("nan"), 1.0]], [(1.0, 0.0)], [[1.0, "0"]], [[None, float("-inf")]], None):
    try:
        leave_one_out_advantages(_bad)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_bad!r}")

# %% hidden exercise=leave_one_out_advantages points=1 name=generated_groups_give_the_reference_advantages
# hint: on any groups (None anywhere, ints and floats, equal values, one or no valid reward) the baselines and advantages are exactly the reference's, as Python floats and None.
from hypothesis import strategies as st
_entries = st.one_of(st.none(), st.integers(-3, 3), st.floats(-5, 5, allow_nan=False, allow_infinity=False),
                     st.sampled_from([0.0, 1.0, 0.5]))
reference.agrees("leave_one_out_advantages", st.tuples(st.lists(st.lists(_entries, min_size=1, max_size=6), min_size=1,
                                                                 max_size=4)), cases=150)

# %% hidden exercise=leave_one_out_advantages points=1 name=generated_invalid_groups_raise_before_any_advantage
# hint: empty or non-list groups, bools, nan, infinities and text give a ValueError; valid inputs among them give advantages.
from hypothesis import strategies as st
_entries = st.one_of(st.none(), st.sampled_from([0.0, 1, 2.5]), st.sampled_from([False, float("nan"), -float("inf"), "0.5"]))
_groups = st.one_of(st.lists(_entries, max_size=4), st.just((0.0, 1.0)), st.none())
reference.agrees("leave_one_out_advantages", st.tuples(st.one_of(st.lists(_groups, max_size=3), st.just(((0.0,),)))),
                 cases=150)

# %% hidden exercise=sequence_clipped_loss points=1 name=one_ratio_per_response_from_summed_log_ratios
# hint: sum the token log-ratios of each response over its mask, exponentiate once per response, and average the clipped losses over responses, not tokens.
_log_ratios = torch.tensor([[0.05, 0.05, 0.05, 0.05], [-0.1, 0.0, 0.0, 0.0], [0.02, -0.02, 0.3, 0.0]], dtype=torch.float64)
_mask = torch.tensor([[True, True, True, True], [True, False, False, False], [True, True, False, False]])
_advantages = torch.tensor([-1.0, 2.0, 0.5], dtype=torch.float64)
_result = sequence_clipped_loss(_log_ratios, torch.zeros(3, 4, dtype=torch.float64), _advantages, _mask, 0.25)
_rho = [math.exp(0.2), math.exp(-0.1), 1.0]
assert all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(_result["ratios"], _rho))
assert all(type(value) is float for value in _result["ratios"]) and len(_result["ratios"]) == 3
_expected = (_rho[0] * 1.0 - 2.0 * _rho[1] - 0.5) / 3
assert math.isclose(_result["loss"].item(), _expected, rel_tol=1e-9) and _result["loss"].dtype == torch.float64

# %% hidden exercise=sequence_clipped_loss points=1 name=clip_rate_counts_responses_clipped_in_the_advantage_direction
# hint: a response is clipped only when rho > 1 + eps with A > 0 or rho < 1 - eps with A < 0; the share is over responses.
_log_ratios = torch.log(torch.tensor([[1.5], [1.5], [0.5], [0.5], [1.05], [3.0]]))
_advantages = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, 0.0])
_result = sequence_clipped_loss(_log_ratios, torch.zeros(6, 1), _advantages, torch.ones(6, 1, dtype=torch.bool), 0.2)
assert math.isclose(_result["clip_rate"], 2 / 6) and type(_result["clip_rate"]) is float
_expected = (-1.2 + 1.5 + 0.8 - 0.5 - 1.05 + 0.0) / 6
assert math.isclose(_result["loss"].item(), _expected, rel_tol=1e-5)

# %% hidden exercise=sequence_clipped_loss points=1 name=loss_gradient_reaches_unclipped_responses_only
# hint: keep the loss connected to logprobs; every response token of an unclipped response gets -A * rho / batch, a clipped response and masked tokens get nothing, and old_logprobs gets no gradient.
from tools.course.grader.boundary import backward_through

_logprobs = torch.tensor([[0.1, 0.1, 0.0], [0.05, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
_old = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
_mask = torch.tensor([[True, True, False], [True, True, True]])
_result = backward_through(sequence_clipped_loss, _logprobs, _old, torch.tensor([1.0, 2.0], dtype=torch.float64), _mask,
                           0.2, select=["loss"], reduce=None)
assert _old.grad is None or float(_old.grad.abs().sum()) == 0.0
assert torch.all(_logprobs.grad[0] == 0), "response 0 (rho = e^0.2 > 1.2, A > 0) is clipped"
assert torch.allclose(_logprobs.grad[1], torch.full((3,), -2.0 * math.exp(0.05) / 2, dtype=torch.float64))

# %% hidden exercise=sequence_clipped_loss points=1 name=values_outside_the_mask_never_reach_a_result
# hint: nan or inf outside the mask, in logprobs or old_logprobs, must not change the loss, the ratios or the clip rate: replace them before the sum.
_logprobs = torch.tensor([[0.1, -0.2, float("nan")], [0.3, float("inf"), 0.0]])
_old = torch.tensor([[0.0, 0.0, 0.0], [0.1, 0.0, -float("inf")]])
_mask = torch.tensor([[True, True, False], [True, False, False]])
_result = sequence_clipped_loss(_logprobs, _old, torch.tensor([1.0, -1.0]), _mask, 0.2)
assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(_result["ratios"], [math.exp(-0.1), math.exp(0.2)]))
assert math.isclose(_result["loss"].item(), (-math.exp(-0.1) + math.exp(0.2)) / 2, rel_tol=1e-6)
assert _result["clip_rate"] == 0.0 and _result["loss"].dtype == torch.float32

# %% hidden exercise=sequence_clipped_loss points=1 name=invalid_batches_and_settings_are_refused_valid_ones_scored
# hint: check dtypes, shapes, the mask, finite advantages, rows without response tokens and clip_eps in (0, 1) before computing.
_lp = torch.zeros(2, 3, dtype=torch.float64)
_adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
_mask = torch.ones(2, 3, dtype=torch.bool)
_ok = sequence_clipped_loss(_lp, _lp.clone(), _adv, _mask, 0.2)
assert _ok["ratios"] == [1.0, 1.0] and _ok["clip_rate"] == 0.0
_cases = [
    (_lp.float(), _lp, _adv, _mask, 0.2), (_lp, _lp, _adv.float(), _mask, 0.2), (_lp.half(), _lp.half(), _adv.half(), _mask, 0.2),
    (_lp.long(), _lp.long(), _adv, _mask, 0.2), (_lp[0], _lp[0], _adv[:1], _mask[0], 0.2), (_lp, _lp[:, :2], _adv, _mask, 0.2),
    (_lp, _lp, _adv[:1], _mask, 0.2), (_lp, _lp, _adv, _mask.float(), 0.2), (_lp, _lp, _adv, _mask[:, :2], 0.2),
    (_lp, _lp, torch.tensor([1.0, float("inf")], dtype=torch.float64), _mask, 0.2),
    (_lp, _lp, _adv, torch.tensor([[True, True, True], [False, False, False]]), 0.2),
    (_lp[:0], _lp[:0], _adv[:0], _mask[:0], 0.2), (_lp, _lp, _adv, _mask, 0), (_lp, _lp, _adv, _mask, 1),
    (_lp, _lp, _adv, _mask, True), (_lp, _lp, _adv, _mask, None), (_lp, _lp, _adv, _mask, float("nan")),
    (_lp.tolist(), _lp, _adv, _mask, 0.2),
]
for _case in _cases:
    try:
        sequence_clipped_loss(*_case)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {[getattr(item, 'dtype', item) for item in _case]}")

# %% hidden exercise=sequence_clipped_loss points=1 name=generated_batches_match_the_reference
# hint: on any valid batch (float32 or float64, ratios inside and outside the band, positive, negative and zero advantages, ragged masks, nan outside the mask, clip_eps by position, keyword or default) the loss, clip rate and ratios are exactly the reference's.
import torch
from hypothesis import strategies as st


def _batch(dims, values, shifts, flags, gains, dtype, clip, how, grad):
    batch, time = dims
    flags = [row if any(row) else [True] + row[1:] for row in (flags[i * time:(i + 1) * time] for i in range(batch))]
    mask = torch.tensor(flags)
    logprobs = torch.tensor(values, dtype=torch.float64).reshape(batch, time)
    old = logprobs + torch.tensor(shifts, dtype=torch.float64).reshape(batch, time)
    logprobs = torch.where(mask, logprobs, torch.full_like(logprobs, float("nan"))).to(dtype).requires_grad_(grad)
    advantages = torch.tensor(gains, dtype=dtype)
    if how == "default":
        return (logprobs, old.to(dtype), advantages, mask), {}
    if how == "keyword":
        return (logprobs, old.to(dtype), advantages, mask), {"clip_eps": clip}
    return (logprobs, old.to(dtype), advantages, mask, clip), {}


_calls = st.tuples(st.integers(1, 3), st.integers(1, 4)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.lists(st.floats(-4, 0), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.one_of(st.floats(-0.6, 0.6), st.just(0.0)), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.one_of(st.floats(-2, 2), st.just(0.0)), min_size=dims[0], max_size=dims[0]),
    st.sampled_from([torch.float64, torch.float32]), st.sampled_from([0.2, 0.1, 0.5]),
    st.sampled_from(["default", "keyword", "positional"]), st.booleans(),
).map(lambda drawn: _batch(*drawn)))
reference.agrees("sequence_clipped_loss", _calls, cases=120)

# %% hidden exercise=sequence_clipped_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: integer, half or mismatched dtypes, wrong shapes, non-bool or empty-row masks, non-finite advantages and clip_eps outside (0, 1) or of the wrong type each give a ValueError; valid batches among them give a loss.
import torch
from hypothesis import strategies as st
_lp = st.sampled_from([torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.bfloat16),
                       torch.zeros(2, 3, dtype=torch.int32), torch.zeros(6), [[0.0] * 3] * 2])
_old = st.sampled_from([torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.float64), torch.zeros(3, 2), None])
_adv = st.sampled_from([torch.tensor([1.0, -1.0]), torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([0.5]),
                        torch.tensor([1.0, float("nan")]), (1.0, -1.0)])
_mask = st.sampled_from([torch.ones(2, 3, dtype=torch.bool), torch.tensor([[False, True, False], [True, False, False]]),
                         torch.tensor([[False, False, False], [True, True, True]]), torch.ones(2, 3, dtype=torch.uint8),
                         torch.ones(3, 2, dtype=torch.bool)])
_clip = st.sampled_from([0.2, 0.3, 0, 1, 2.0, -0.1, False, None, "0.2", float("inf")])
reference.agrees("sequence_clipped_loss", st.tuples(_lp, _old, _adv, _mask, _clip), cases=150)
