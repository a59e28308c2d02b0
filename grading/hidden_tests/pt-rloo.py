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

def _valid_counts(groups):
    return [sum(r is not None for r in g) for g in groups]


reference.agrees("filter_scoreable_groups", st.tuples(st.lists(st.lists(_entries, min_size=1, max_size=5), min_size=1,
                                                                max_size=5)), cases=150, clauses={
    "a group without a valid reward": lambda groups: 0 in _valid_counts(groups),
    "a group with one valid reward": lambda groups: 1 in _valid_counts(groups),
    "a scoreable group with a None in it": lambda groups: any(c >= 2 and c < len(g) for c, g in zip(_valid_counts(groups), groups)),
    "a scoreable group of equal rewards": lambda groups: any(
        len({r for r in g if r is not None}) == 1 and c >= 2 for c, g in zip(_valid_counts(groups), groups)),
    "a reward of 0 beside a None": lambda groups: any(0 in g and None in g for g in groups),
    "groups of every kind at once": lambda groups: {0, 1} <= set(_valid_counts(groups)) and max(_valid_counts(groups)) >= 2,
})

# %% hidden exercise=filter_scoreable_groups points=1 name=generated_invalid_groups_are_refused_as_the_reference
# hint: empty or non-list groups, bools, nan, infinities and text among the rewards each give a ValueError; valid inputs among them give the lists.
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite

_defects = ([("valid", n) for n in range(12)]
            + [("outer", bad) for bad in (None, (), [], "x", ((1.0, None),), 1.0)]
            + [("group", bad) for bad in ([], (1.0, None), 1.0, None)]
            + [("entry", bad) for bad in (True, False, "1", float("nan"), float("inf"), -float("inf"), [1.0])])


def _one_defect(defect, rng):
    kind, bad = defect
    groups = [[rng.choice([0.0, 1.0, 1, 0, 2.5, None, None]) for _ in range(rng.randint(1, 4))]
              for _ in range(rng.randint(1, 3))]
    if kind == "outer":
        groups = bad
    elif kind == "group":
        groups[rng.randrange(len(groups))] = bad
    elif kind == "entry":
        group = rng.choice(groups)
        group[rng.randrange(len(group))] = bad
    return (groups,)


def _groups_ok(groups):
    return isinstance(groups, list) and bool(groups) and all(isinstance(g, list) and g for g in groups)


reference.agrees("filter_scoreable_groups", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "group_rewards not a non-empty list (None, a tuple, [], text, a number)": lambda g: not isinstance(g, list) or not g,
    "a group that is empty, a tuple, a number or None": lambda g: isinstance(g, list) and bool(g) and any(
        not isinstance(x, list) or not x for x in g),
    "an entry that is a bool": lambda g: _groups_ok(g) and any(is_bool(r) for x in g for r in x),
    "an entry that is nan or infinite": lambda g: _groups_ok(g) and any(not_finite(r) for x in g for r in x),
    "an entry that is text or a list": lambda g: _groups_ok(g) and any(isinstance(r, (str, list)) for x in g for r in x),
    "a valid call with a None entry": lambda g: _groups_ok(g) and all(
        r is None or (is_number(r) and not not_finite(r)) for x in g for r in x) and any(None in x for x in g),
})

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
_special = st.sampled_from([0.1, 0.2, 0.7, None, 1e-300])  # inexact decimal sums, a tiny magnitude

def _valid_counts(groups):
    return [sum(r is not None for r in g) for g in groups]


reference.agrees("leave_one_out_advantages", st.tuples(st.one_of(
        st.lists(st.lists(_entries, min_size=1, max_size=6), min_size=1, max_size=4),
        st.lists(st.lists(_special, min_size=1, max_size=6), min_size=1, max_size=4))), cases=180, clauses={
    "a group with fewer than two valid rewards": lambda groups: min(_valid_counts(groups)) < 2,
    "a group of exactly two valid rewards": lambda groups: 2 in _valid_counts(groups),
    "a group of three or more valid rewards with a None": lambda groups: any(
        c >= 3 and c < len(g) for c, g in zip(_valid_counts(groups), groups)),
    "a group of int rewards only": lambda groups: any(
        c >= 2 and all(type(r) is int for r in g if r is not None) for c, g in zip(_valid_counts(groups), groups)),
    "a group of equal valid rewards": lambda groups: any(
        c >= 2 and len({r for r in g if r is not None}) == 1 for c, g in zip(_valid_counts(groups), groups)),
    "several groups": lambda groups: len(groups) > 1,
    "a None first in a scoreable group": lambda groups: any(
        g[0] is None and c >= 2 for c, g in zip(_valid_counts(groups), groups)),
    "a None last in a scoreable group": lambda groups: any(
        g[-1] is None and c >= 2 for c, g in zip(_valid_counts(groups), groups)),
    "decimal rewards whose sums are inexact (0.1, 0.2, 0.7)": lambda groups: any(
        sum(r in (0.1, 0.2, 0.7) for r in g) >= 2 for g in groups),
    "a reward of 1e-300 beside others": lambda groups: any(
        c >= 2 and any(r == 1e-300 for r in g) for c, g in zip(_valid_counts(groups), groups)),
})

# %% hidden exercise=leave_one_out_advantages points=1 name=generated_invalid_groups_raise_before_any_advantage
# hint: empty or non-list groups, bools, nan, infinities and text give a ValueError; valid inputs among them give advantages.
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite

_defects = ([("valid", n) for n in range(12)]
            + [("outer", bad) for bad in (None, (), [], "x", ((1.0, None),), 1.0)]
            + [("group", bad) for bad in ([], (1.0, None), 1.0, None)]
            + [("entry", bad) for bad in (True, False, "1", float("nan"), float("inf"), -float("inf"), [1.0])])


def _one_defect(defect, rng):
    kind, bad = defect
    groups = [[rng.choice([0.0, 1.0, 1, 0, 2.5, None, None]) for _ in range(rng.randint(1, 4))]
              for _ in range(rng.randint(1, 3))]
    if kind == "outer":
        groups = bad
    elif kind == "group":
        groups[rng.randrange(len(groups))] = bad
    elif kind == "entry":
        group = rng.choice(groups)
        group[rng.randrange(len(group))] = bad
    return (groups,)


def _groups_ok(groups):
    return isinstance(groups, list) and bool(groups) and all(isinstance(g, list) and g for g in groups)


reference.agrees("leave_one_out_advantages", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "group_rewards not a non-empty list (None, a tuple, [], text, a number)": lambda g: not isinstance(g, list) or not g,
    "a group that is empty, a tuple, a number or None": lambda g: isinstance(g, list) and bool(g) and any(
        not isinstance(x, list) or not x for x in g),
    "an entry that is a bool": lambda g: _groups_ok(g) and any(is_bool(r) for x in g for r in x),
    "an entry that is nan or infinite": lambda g: _groups_ok(g) and any(not_finite(r) for x in g for r in x),
    "an entry that is text or a list": lambda g: _groups_ok(g) and any(isinstance(r, (str, list)) for x in g for r in x),
    "a valid call with a None entry": lambda g: _groups_ok(g) and all(
        r is None or (is_number(r) and not not_finite(r)) for x in g for r in x) and any(None in x for x in g),
})

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


def _batch(dims, values, shifts, flags, gains, dtype, clip, how, grad, outside):
    batch, time = dims
    flags = [row if any(row) else [True] + row[1:] for row in (flags[i * time:(i + 1) * time] for i in range(batch))]
    mask = torch.tensor(flags)
    logprobs = torch.tensor(values, dtype=torch.float64).reshape(batch, time)
    old = logprobs + torch.tensor(shifts, dtype=torch.float64).reshape(batch, time)
    old = torch.where(mask, old, torch.full_like(old, outside))  # anything outside the mask: inf, -inf, nan, a number
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
    st.sampled_from([float("inf"), -float("inf"), float("nan"), 0.0, 1e30]),
).map(lambda drawn: _batch(*drawn)))


def _parts(logprobs, old, advantages, mask, clip_eps=0.2):
    log_ratio = torch.where(mask, logprobs.detach().double() - old.double(), torch.zeros(mask.shape, dtype=torch.float64))
    return torch.exp(log_ratio.sum(dim=1)), advantages.double(), mask, clip_eps


def _clips(side, *a, **k):
    ratio, gain, _, eps = _parts(*a, **k)
    above, below = ratio > 1 + eps, ratio < 1 - eps
    if side == "active":
        return bool(((above & (gain > 0)) | (below & (gain < 0))).any())
    return bool(((above & (gain < 0)) | (below & (gain > 0))).any())


reference.agrees("sequence_clipped_loss", _calls, cases=120, clauses={
    "float32 tensors": lambda *a, **k: a[0].dtype == torch.float32,
    "float64 tensors": lambda *a, **k: a[0].dtype == torch.float64,
    "clip_eps by default": lambda *a, **k: len(a) == 4 and not k,
    "clip_eps by keyword": lambda *a, **k: "clip_eps" in k,
    "responses of different lengths": lambda *a, **k: len(set(a[3].sum(dim=1).tolist())) > 1,
    "nan outside the mask": lambda *a, **k: bool((~a[3]).any()),
    "a zero advantage": lambda *a, **k: bool((a[2] == 0).any()),
    "an active clip (rho beyond the band in the advantage's direction)": lambda *a, **k: _clips("active", *a, **k),
    "rho beyond the band on the inactive side (not a clip)": lambda *a, **k: _clips("inactive", *a, **k),
    "logprobs that require grad": lambda *a, **k: a[0].requires_grad,
    "inf outside the mask in old_logprobs": lambda *a, **k: bool((a[1].isinf() & (a[1] > 0) & ~a[3]).any()),
    "-inf outside the mask in old_logprobs": lambda *a, **k: bool((a[1].isinf() & (a[1] < 0) & ~a[3]).any()),
    "nan outside the mask in old_logprobs": lambda *a, **k: bool((a[1].isnan() & ~a[3]).any()),
    "a masked token only in the last column": lambda *a, **k: bool((~a[3][:, -1]).any()) and bool(a[3][:, :-1].all()),
})

# %% hidden exercise=sequence_clipped_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: integer, half or mismatched dtypes, wrong shapes, non-bool or empty-row masks, non-finite advantages and clip_eps outside (0, 1) or of the wrong type each give a ValueError; valid batches among them give a loss.
import torch
from tools.course.grader.clauses import each_of, is_bool

_defects = ([("valid", n) for n in range(12)]
            + [("logprobs", kind) for kind in ("bfloat16", "int32", "1-D", "3-D", "list")]
            + [("old", kind) for kind in ("dtype", "shape", "None")]
            + [("mask", kind) for kind in ("float", "uint8", "shape", "list")]
            + [("advantages", kind) for kind in ("dtype", "short", "2-D", "inf", "nan", "tuple")]
            + [("rows", kind) for kind in ("a row without tokens", "no rows")]
            + [("clip_eps", bad) for bad in (0, 1, 2.0, -0.1, False, None, "0.2", float("inf"))])


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
    args = [lp, old, adv, mask, rng.choice([0.2, 0.1, 0.5])]
    if kind == "logprobs":
        if bad in ("bfloat16", "int32"):
            target = torch.bfloat16 if bad == "bfloat16" else torch.int32
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
        args[3] = {"float": mask.float(), "uint8": mask.to(torch.uint8), "shape": mask[:, :1], "list": mask.tolist()}[bad]
    elif kind == "advantages":
        broken = adv.clone()
        broken[rng.randrange(batch)] = float("inf") if bad == "inf" else float("nan")
        args[2] = {"dtype": adv.to(torch.float64 if dtype == torch.float32 else torch.float32),
                   "short": adv[:0] if batch == 1 else adv[:-1], "2-D": adv.unsqueeze(1), "inf": broken, "nan": broken,
                   "tuple": tuple(adv.tolist())}[bad]
    elif kind == "rows" and bad == "no rows":
        args[:4] = [lp[:0], old[:0], adv[:0], mask[:0]]
    elif kind == "rows":
        mask[rng.randrange(batch)] = False
    elif kind == "clip_eps":
        args[4] = bad
    return tuple(args)


def _is(value, dtypes=(torch.float32, torch.float64), dim=2):
    return isinstance(value, torch.Tensor) and value.dim() == dim and value.dtype in dtypes


def _good_prefix(lp, old, adv, mask):
    return (_is(lp) and isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype
            and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == lp.shape)


def _good_advantages(lp, adv):
    return (isinstance(adv, torch.Tensor) and adv.dtype == lp.dtype and tuple(adv.shape) == (lp.shape[0],)
            and bool(torch.isfinite(adv).all()))


reference.agrees("sequence_clipped_loss", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "logprobs of a half or integer dtype": lambda lp, old, adv, m, c: isinstance(lp, torch.Tensor)
        and lp.dim() == 2 and lp.dtype not in (torch.float32, torch.float64),
    "logprobs that are not 2-D or not a tensor": lambda lp, old, adv, m, c: not isinstance(lp, torch.Tensor) or lp.dim() != 2,
    "old_logprobs of another dtype, shape, or not a tensor": lambda lp, old, adv, m, c: _is(lp) and not (
        isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype),
    "a mask that is not a bool tensor of the shape of logprobs": lambda lp, old, adv, m, c: _is(lp)
        and isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype and not (
        isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.shape == lp.shape),
    "advantages of another dtype or shape, or not a tensor": lambda lp, old, adv, m, c: _good_prefix(lp, old, adv, m)
        and not (isinstance(adv, torch.Tensor) and adv.dtype == lp.dtype and tuple(adv.shape) == (lp.shape[0],)),
    "advantages with nan or inf": lambda lp, old, adv, m, c: _good_prefix(lp, old, adv, m) and isinstance(
        adv, torch.Tensor) and tuple(adv.shape) == (lp.shape[0],) and not bool(torch.isfinite(adv).all()),
    "a response without a token in the mask": lambda lp, old, adv, m, c: _good_prefix(lp, old, adv, m)
        and _good_advantages(lp, adv) and lp.shape[0] > 0 and not bool(m.any(dim=1).all()),
    "no responses at all": lambda lp, old, adv, m, c: _good_prefix(lp, old, adv, m) and lp.shape[0] == 0,
    "clip_eps outside (0, 1)": lambda lp, old, adv, m, c: not is_bool(c) and isinstance(c, (int, float)) and not 0 < c < 1,
    "clip_eps that is a bool, None or text": lambda lp, old, adv, m, c: is_bool(c) or not isinstance(c, (int, float)),
    "a valid call": lambda lp, old, adv, m, c: _good_prefix(lp, old, adv, m) and _good_advantages(lp, adv)
        and lp.shape[0] > 0 and bool(m.any(dim=1).all()) and not is_bool(c) and isinstance(c, (int, float)) and 0 < c < 1,
})
