# %% hidden exercise=token_level_rewards points=1 name=score_on_last_valid_token_for_any_padding
# hint: the score goes on the position of the last 1 of each mask row, whether padding is on the right, on the left or in the middle.
_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 1, 1, 0], [0, 0, 0, 0, 1]])
_lp = torch.full((4, 5), -0.5, dtype=torch.float64)
_out = token_level_rewards(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64), _lp, _lp.clone(), _mask, 0.3)
assert _out["score_positions"] == [4, 2, 3, 4]
assert all(type(position) is int for position in _out["score_positions"])
_expected = torch.zeros(4, 5, dtype=torch.float64)
_expected[0, 4], _expected[1, 2], _expected[2, 3], _expected[3, 4] = 1.0, 2.0, 3.0, 4.0
assert torch.allclose(_out["rewards"], _expected, atol=1e-12)

# %% hidden exercise=token_level_rewards points=1 name=masked_positions_carry_no_penalty_or_score
# hint: whatever log-probabilities sit at masked positions, the KL there is 0 and so is the reward.
_mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0]])
_lp = torch.tensor([[-0.2, -0.4, -9.0, 3.0], [-1.0, 5.0, -0.3, -7.0]], dtype=torch.float64)
_ref = torch.tensor([[-0.3, -0.1, 2.0, -8.0], [-0.5, -6.0, -0.3, 4.0]], dtype=torch.float64)
for _estimator in ("k1", "k3"):
    _out = token_level_rewards(torch.tensor([0.5, -1.0], dtype=torch.float64), _lp, _ref, _mask.clone(), 0.5, _estimator)
    assert float(_out["kl"][~_mask.bool()].abs().max()) == 0.0, _estimator
    assert float(_out["rewards"][0, 2:].abs().max()) == 0.0 and float(_out["rewards"][1, 3].abs()) == 0.0
    assert float(_out["rewards"][1, 1].abs()) == 0.0
_k1 = token_level_rewards(torch.tensor([0.5, -1.0], dtype=torch.float64), _lp, _ref, _mask, 0.5)
assert math.isclose(float(_k1["rewards"][0, 1]), 0.5 * (0.4 - 0.1) + 0.5, rel_tol=1e-12)
assert math.isclose(float(_k1["rewards"][1, 2]), -1.0, rel_tol=1e-12)

# %% hidden exercise=token_level_rewards points=1 name=k3_estimate_clamped_and_capped
# hint: k3 = exp(d) - d - 1 with d = ref - logp clamped to [-20, 20], then capped at 10; it is never negative.
_lp = torch.tensor([[-0.5, -0.5, -0.5, -0.5, -1.0]], dtype=torch.float64)
_ref = torch.tensor([[-0.5, -0.6, -30.5, 29.5, -0.2]], dtype=torch.float64)
_out = token_level_rewards(torch.zeros(1, dtype=torch.float64), _lp, _ref, torch.ones(1, 5, dtype=torch.long), 1.0, "k3")
_d = [0.0, -0.1, -20.0, 20.0, 0.8]
_expected = [min(math.exp(d) - d - 1, 10.0) for d in _d]
assert torch.allclose(_out["kl"][0], torch.tensor(_expected, dtype=torch.float64), rtol=1e-9, atol=1e-12)
assert float(_out["kl"][0, 2]) == 10.0 and float(_out["kl"][0, 3]) == 10.0
assert math.isclose(_out["mean_kl"], sum(_expected) / 5, rel_tol=1e-9)

# %% hidden exercise=token_level_rewards points=1 name=mean_kl_averages_per_response_first
# hint: average the KL over each response's own valid tokens, then average those means over responses; a long response does not weigh more.
_mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
_lp = torch.zeros(2, 6, dtype=torch.float64)
_ref = torch.tensor([[-0.1] * 6, [-1.0, -5.0, -5.0, -5.0, -5.0, -5.0]], dtype=torch.float64)
_out = token_level_rewards(torch.zeros(2, dtype=torch.float64), _lp, _ref, _mask, 0.0)
assert type(_out["mean_kl"]) is float and math.isclose(_out["mean_kl"], (0.1 + 1.0) / 2, rel_tol=1e-12)
assert float(_out["rewards"].abs().max()) == 0.0, "kl_coef 0: no penalty, and the scores are 0"

# %% hidden exercise=token_level_rewards points=1 name=dtype_and_coefficient_types_kept
# hint: the outputs keep log_probs' dtype (scores of another floating dtype are cast); an int coefficient is a number, a bool is not.
_lp = torch.tensor([[-0.5, -0.25, -1.0]], dtype=torch.float32)
_ref = torch.tensor([[-0.75, -0.25, -0.5]], dtype=torch.float32)
_mask = torch.tensor([[True, True, False]])
_out = token_level_rewards(torch.tensor([2.0], dtype=torch.float64), _lp, _ref, _mask, 1)
assert _out["rewards"].dtype == torch.float32 and _out["kl"].dtype == torch.float32
assert torch.allclose(_out["rewards"], torch.tensor([[-0.25, 2.0, 0.0]]), atol=1e-6)
assert _out["score_positions"] == [1]
try:
    token_level_rewards(torch.tensor([2.0]), _lp, _ref, _mask, True)
except ValueError:
    pass
else:
    raise AssertionError("a bool kl_coef was accepted")

# %% hidden exercise=token_level_rewards points=1 name=rewards_invalid_inputs_refused_valid_ones_scored
# hint: check every argument before computing: shapes, floating dtypes, a 0/1 bool or integer mask with a valid token per row, finite values, the coefficient, the estimator.
_s = torch.tensor([1.0, 0.0], dtype=torch.float64)
_lp = torch.tensor([[-0.5, -0.2, 0.0], [-0.1, -0.3, -0.4]], dtype=torch.float64)
_ref = torch.tensor([[-0.4, -0.2, 0.0], [-0.2, -0.1, -0.4]], dtype=torch.float64)
_m = torch.tensor([[1, 1, 0], [1, 1, 1]])
_good = token_level_rewards(_s, _lp, _ref, _m, 0.5)
assert _good["score_positions"] == [1, 2] and math.isclose(float(_good["rewards"][0, 1]), 1.0, rel_tol=1e-12)
assert math.isclose(float(_good["rewards"][1, 0]), -0.05, rel_tol=1e-9)
_bad_calls = [
    (_s, _lp, _ref, _m.float(), 0.5, "k1"), (_s, _lp, _ref, _m * 2, 0.5, "k1"), (_s, _lp, _ref, _m[:, :2], 0.5, "k1"),
    (_s, _lp, _ref, torch.tensor([[1, 1, 0], [0, 0, 0]]), 0.5, "k1"), (_s, _lp, _ref.float(), _m, 0.5, "k1"),
    (_s, _lp, _ref[:, :2], _m, 0.5, "k1"), (_s[:1], _lp, _ref, _m, 0.5, "k1"), (torch.tensor([1, 0]), _lp, _ref, _m, 0.5, "k1"),
    (_s, _lp.long(), _ref.long(), _m, 0.5, "k1"), (_s, _lp[0], _ref[0], _m[0], 0.5, "k1"), (_s, _lp.tolist(), _ref, _m, 0.5, "k1"),
    (torch.tensor([1.0, float("nan")], dtype=torch.float64), _lp, _ref, _m, 0.5, "k1"),
    (_s, _lp, torch.where(_m.bool(), _ref, torch.tensor(float("-inf"), dtype=torch.float64)), _m, 0.5, "k1"),
    (_s, _lp, _ref, _m, -0.1, "k1"), (_s, _lp, _ref, _m, float("inf"), "k1"), (_s, _lp, _ref, _m, "0.5", "k1"),
    (_s, _lp, _ref, _m, 0.5, "k2"), (_s, _lp, _ref, _m, 0.5, None),
]
for _args in _bad_calls:
    try:
        token_level_rewards(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=token_level_rewards points=2 name=rewards_generated_batches_agree_with_reference
# hint: any batch size, length, mask (left, right or inner padding), estimator and coefficient: the same rewards, KL, positions and mean.
from hypothesis import strategies as st


@st.composite
def _reward_batches(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    rows = []
    for _ in range(batch):
        row = draw(st.lists(st.integers(0, 1), min_size=time, max_size=time))
        if not any(row):
            row[draw(st.integers(0, time - 1))] = 1
        rows.append(row)
    mask = torch.tensor(rows, dtype=draw(st.sampled_from([torch.bool, torch.long, torch.int32])))
    values = st.floats(-6.0, 0.0, allow_nan=False)
    log_probs = torch.tensor(draw(st.lists(st.lists(values, min_size=time, max_size=time), min_size=batch, max_size=batch)),
                             dtype=torch.float64)
    ref = torch.tensor(draw(st.lists(st.lists(values, min_size=time, max_size=time), min_size=batch, max_size=batch)),
                       dtype=torch.float64)
    for _ in range(draw(st.integers(0, 2))):  # a token far from the reference, at any position (valid or masked)
        row, column = draw(st.integers(0, batch - 1)), draw(st.integers(0, time - 1))
        ref[row, column] = log_probs[row, column] + draw(st.sampled_from([-30.0, -21.0, 3.5, 21.0, 30.0]))
    scores = torch.tensor(draw(st.lists(st.floats(-2.0, 2.0), min_size=batch, max_size=batch)), dtype=torch.float64)
    coefficient = draw(st.sampled_from([0.0, 0.05, 0.3, 1, 2.5]))
    return scores, log_probs, ref, mask, coefficient, draw(st.sampled_from(["k1", "k3"]))


def _row_kinds(mask):
    kinds = set()
    for row in mask.long().tolist():
        ones = [t for t, v in enumerate(row) if v]
        if ones and ones[0] > 0:
            kinds.add("left")
        if ones and ones[-1] < len(row) - 1:
            kinds.add("right")
        if ones and ones[-1] - ones[0] + 1 > len(ones):
            kinds.add("inner")
    return kinds


def _k3_capped(lp, ref, mask):
    delta = (ref - lp).clamp(-20, 20)
    return bool(((delta.exp() - delta - 1) > 10)[mask.bool()].any())


reference.agrees("token_level_rewards", _reward_batches(), cases=80, clauses={
    "padding before a response": lambda s, lp, ref, m, c, e: "left" in _row_kinds(m),
    "padding after a response": lambda s, lp, ref, m, c, e: "right" in _row_kinds(m),
    "a gap inside a response": lambda s, lp, ref, m, c, e: "inner" in _row_kinds(m),
    "responses with different valid counts": lambda s, lp, ref, m, c, e: len(set(m.long().sum(dim=1).tolist())) > 1,
    "a bool mask": lambda s, lp, ref, m, c, e: m.dtype == torch.bool,
    "an int32 mask": lambda s, lp, ref, m, c, e: m.dtype == torch.int32,
    "the k3 estimator": lambda s, lp, ref, m, c, e: e == "k3",
    "a k3 estimate capped at 10": lambda s, lp, ref, m, c, e: e == "k3" and _k3_capped(lp, ref, m),
    "a valid token past k3's log-ratio clamp": lambda s, lp, ref, m, c, e: e == "k3" and bool(
        ((ref - lp).abs() > 20)[m.bool()].any()),
    "a masked token far from the reference": lambda s, lp, ref, m, c, e: bool(((ref - lp).abs() > 20)[~m.bool()].any()),
    "a kl_coef that is an int": lambda s, lp, ref, m, c, e: type(c) is int,
    "a kl_coef of 0": lambda s, lp, ref, m, c, e: c == 0,
    "a response of one token": lambda s, lp, ref, m, c, e: lp.shape[1] == 1,
})

# %% hidden exercise=token_level_rewards points=2 name=rewards_generated_defects_agree_with_reference
# hint: a valid batch gets the reference's result; a batch with one defect anywhere (mask, shape, dtype, a non-finite value, the coefficient, the estimator) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "float_mask": lambda a: {**a, "response_mask": a["response_mask"].double()},
    "mask_value_two": lambda a: {**a, "response_mask": a["response_mask"] * 2},
    "empty_row": lambda a: {**a, "response_mask": torch.cat([a["response_mask"][:-1], torch.zeros_like(a["response_mask"][-1:])])},
    "ref_dtype": lambda a: {**a, "ref_log_probs": a["ref_log_probs"].float()},
    "ref_shape": lambda a: {**a, "ref_log_probs": a["ref_log_probs"][:, :-1]},
    "scores_shape": lambda a: {**a, "scores": a["scores"][None]},
    "scores_int": lambda a: {**a, "scores": a["scores"].long()},
    "nan_log_prob": lambda a: {**a, "log_probs": torch.full_like(a["log_probs"], float("nan"))},
    "nan_log_prob_masked": lambda a: {**a, "log_probs": _put(a["log_probs"], (0, -1), float("nan")),
                                      "response_mask": _put(a["response_mask"], (0, -1), 0)},
    "inf_ref_first": lambda a: {**a, "ref_log_probs": _put(a["ref_log_probs"], (0, 0), -float("inf"))},
    "nan_score_last": lambda a: {**a, "scores": _put(a["scores"], -1, float("nan"))},
    "inf_coef": lambda a: {**a, "kl_coef": float("inf")},
    "inf_score": lambda a: {**a, "scores": torch.full_like(a["scores"], float("inf"))},
    "negative_coef": lambda a: {**a, "kl_coef": -0.5},
    "bool_coef": lambda a: {**a, "kl_coef": False},
    "nan_coef": lambda a: {**a, "kl_coef": float("nan")},
    "estimator": lambda a: {**a, "estimator": "low_var_kl"},
    "one_dim": lambda a: {**a, "log_probs": a["log_probs"][0], "ref_log_probs": a["ref_log_probs"][0],
                          "response_mask": a["response_mask"][0]},
    "str_coef": lambda a: {**a, "kl_coef": "0.2"},
    "list_log_probs": lambda a: {**a, "log_probs": a["log_probs"].tolist()},
}
from tools.course.grader.clauses import below, each_of, is_bool, not_finite


def _put(tensor, where, value):
    changed = tensor.clone()
    changed[where] = value
    return changed


def _broken(case, rng):
    time, batch = rng.randint(2, 5), rng.randint(1, 3)
    args = {"scores": torch.linspace(-1, 1, batch, dtype=torch.float64),
            "log_probs": -torch.rand(batch, time, dtype=torch.float64, generator=torch.Generator().manual_seed(time)),
            "ref_log_probs": -torch.rand(batch, time, dtype=torch.float64, generator=torch.Generator().manual_seed(batch)),
            "response_mask": torch.ones(batch, time, dtype=torch.long), "kl_coef": 0.2, "estimator": "k1"}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return (args["scores"], args["log_probs"], args["ref_log_probs"], args["response_mask"], args["kl_coef"],
            args["estimator"])


_cases = [("valid", n) for n in range(8)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("token_level_rewards", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "a float mask": lambda s, lp, ref, m, c, e: m.is_floating_point(),
    "a mask value other than 0 and 1": lambda s, lp, ref, m, c, e: not m.is_floating_point() and bool(((m != 0) & (m != 1)).any()),
    "a response without a valid token": lambda s, lp, ref, m, c, e: m.dim() == 2 and bool((m == 0).all(dim=1).any()),
    "ref_log_probs of another dtype": lambda s, lp, ref, m, c, e: ref.dtype != lp.dtype,
    "ref_log_probs of another shape": lambda s, lp, ref, m, c, e: ref.shape != lp.shape,
    "scores that are not 1-D": lambda s, lp, ref, m, c, e: s.dim() != 1,
    "integer scores": lambda s, lp, ref, m, c, e: not s.is_floating_point(),
    "a NaN log-probability": lambda s, lp, ref, m, c, e: bool(lp.isnan().all()),
    "a NaN log-probability on a masked token": lambda s, lp, ref, m, c, e: bool((lp.isnan() & (m == 0)).any())
    and not bool(lp.isnan().all()),
    "a -inf reference log-probability on the first token": lambda s, lp, ref, m, c, e: ref.dim() == 2 and bool(
        ref[0, 0].isinf()),
    "a NaN score for the last response": lambda s, lp, ref, m, c, e: s.dim() == 1 and bool(s[-1].isnan()),
    "an infinite score": lambda s, lp, ref, m, c, e: bool(s.isinf().any()),
    "a negative kl_coef": lambda s, lp, ref, m, c, e: below(c, 0),
    "a kl_coef that is a bool": lambda s, lp, ref, m, c, e: is_bool(c),
    "a kl_coef that is not finite": lambda s, lp, ref, m, c, e: not_finite(c),
    "a kl_coef that is text": lambda s, lp, ref, m, c, e: isinstance(c, str),
    "an unknown estimator": lambda s, lp, ref, m, c, e: e not in ("k1", "k3"),
    "1-D tensors": lambda s, lp, ref, m, c, e: lp.dim() == 1,
    "log_probs that are a list": lambda s, lp, ref, m, c, e: isinstance(lp, list),
})

# %% hidden exercise=gae_advantages points=1 name=recursion_matches_hand_computation
# hint: delta = r + gamma * V(next valid) - V, A = delta + gamma * lam * A(next valid), nothing after the last valid token; returns = A + V.
_rewards = torch.tensor([[0.1, -0.2, 1.0]], dtype=torch.float64)
_values = torch.tensor([[0.5, 0.4, 0.8]], dtype=torch.float64)
_out = gae_advantages(_rewards, _values, torch.ones(1, 3, dtype=torch.long), 0.9, 0.8)
_d2 = 1.0 - 0.8
_d1 = -0.2 + 0.9 * 0.8 - 0.4
_d0 = 0.1 + 0.9 * 0.4 - 0.5
_a2, _a1 = _d2, _d1 + 0.72 * _d2
_a0 = _d0 + 0.72 * _a1
assert torch.allclose(_out["advantages"], torch.tensor([[_a0, _a1, _a2]], dtype=torch.float64), rtol=1e-12, atol=1e-12)
assert torch.allclose(_out["returns"], torch.tensor([[_a0 + 0.5, _a1 + 0.4, _a2 + 0.8]], dtype=torch.float64), atol=1e-12)

# %% hidden exercise=gae_advantages points=1 name=masked_positions_are_skipped_not_discounted
# hint: a masked position is not a step: the next value of a valid token is the value of the next valid token, with one discount.
_rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0]], dtype=torch.float64)
_values = torch.tensor([[0.3, 5.0, 5.0, 0.6, 0.9]], dtype=torch.float64)
_holes = gae_advantages(_rewards, _values, torch.tensor([[1, 0, 0, 1, 1]]), 0.5, 0.5)
_dense = gae_advantages(_rewards[:, [0, 3, 4]], _values[:, [0, 3, 4]], torch.ones(1, 3, dtype=torch.long), 0.5, 0.5)
assert torch.allclose(_holes["advantages"][:, [0, 3, 4]], _dense["advantages"], atol=1e-12)
assert torch.allclose(_holes["returns"][:, [0, 3, 4]], _dense["returns"], atol=1e-12)
assert torch.allclose(_dense["advantages"][0], torch.tensor([0.03125, 0.125, 1.1], dtype=torch.float64), atol=1e-12)
assert float(_holes["advantages"][0, 1:3].abs().max()) == 0.0 and float(_holes["returns"][0, 1:3].abs().max()) == 0.0

# %% hidden exercise=gae_advantages points=1 name=masked_rewards_and_values_never_used
# hint: changing the reward or value at a masked position changes nothing at any position.
_mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 0, 1, 1]])
_rewards = torch.tensor([[0.0, 0.2, 1.0, 0.0, 0.0], [0.0, 0.1, 0.0, -0.3, 1.0]], dtype=torch.float64)
_values = torch.tensor([[0.2, 0.3, 0.4, 0.0, 0.0], [0.0, 0.5, 0.0, 0.6, 0.7]], dtype=torch.float64)
_clean = gae_advantages(_rewards, _values, _mask, 0.95, 0.9)
assert math.isclose(float(_clean["advantages"][0, 2]), 0.6, rel_tol=1e-12)
assert math.isclose(float(_clean["advantages"][1, 4]), 0.3, rel_tol=1e-12)
_noise = torch.where(_mask.bool(), torch.zeros_like(_rewards), torch.full_like(_rewards, 3.0))
_dirty = gae_advantages(_rewards + _noise, _values - _noise, _mask, 0.95, 0.9)
assert torch.allclose(_clean["advantages"], _dirty["advantages"], atol=1e-12)
assert torch.allclose(_clean["returns"], _dirty["returns"], atol=1e-12)

# %% hidden exercise=gae_advantages points=1 name=lambda_limits_and_empty_rows
# hint: lam = 1 with gamma = 1 gives the rewards still to come minus V, lam = 0 the one-step error; a row with no valid token is all 0.
_rewards = torch.tensor([[0.5, 0.0, 1.0], [4.0, 4.0, 4.0]], dtype=torch.float64)
_values = torch.tensor([[0.1, 0.2, 0.3], [1.0, 1.0, 1.0]], dtype=torch.float64)
_mask = torch.tensor([[True, True, True], [False, False, False]])
_mc = gae_advantages(_rewards, _values, _mask, 1, 1)
assert torch.allclose(_mc["advantages"][0], torch.tensor([1.4, 0.8, 0.7], dtype=torch.float64), atol=1e-12)
_td = gae_advantages(_rewards, _values, _mask, 1.0, 0)
assert torch.allclose(_td["advantages"][0], torch.tensor([0.6, 0.1, 0.7], dtype=torch.float64), atol=1e-12)
assert float(_mc["advantages"][1].abs().max()) == 0.0 and float(_mc["returns"][1].abs().max()) == 0.0
_float32 = gae_advantages(_rewards.float(), _values.float(), _mask, 1.0, 1.0)
assert _float32["advantages"].dtype == torch.float32 and _float32["returns"].dtype == torch.float32

# %% hidden exercise=gae_advantages points=1 name=gae_invalid_inputs_refused_valid_ones_scored
# hint: check both tensors, the mask, finiteness and gamma and lam in [0, 1] (bools refused) before the recursion.
_r = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
_v = torch.tensor([[0.25, 0.5]], dtype=torch.float64)
_m = torch.tensor([[1, 1]])
_good = gae_advantages(_r, _v, _m, 1.0, 1.0)
assert torch.allclose(_good["advantages"], torch.tensor([[0.75, 0.5]], dtype=torch.float64))
_bad_calls = [
    (_r, _v.float(), _m, 1.0, 1.0), (_r, _v[:, :1], _m, 1.0, 1.0), (_r.long(), _v.long(), _m, 1.0, 1.0),
    (_r[0], _v[0], _m[0], 1.0, 1.0), (_r, _v, _m.float(), 1.0, 1.0), (_r, _v, _m - 2, 1.0, 1.0),
    (_r, _v, _m[:, :1], 1.0, 1.0), (_r, torch.tensor([[0.25, float("nan")]], dtype=torch.float64), _m, 1.0, 1.0),
    (torch.tensor([[float("inf"), 1.0]], dtype=torch.float64), _v, _m, 1.0, 1.0), (_r, _v, _m, 1.5, 1.0),
    (_r, _v, _m, 1.0, -0.1), (_r, _v, _m, True, 1.0), (_r, _v, _m, 1.0, False), (_r, _v, _m, float("nan"), 0.5),
    (_r, _v, _m, "1", 0.5), ([[0.0, 1.0]], _v, _m, 1.0, 1.0), (torch.zeros(0, 2, dtype=torch.float64),
                                                              torch.zeros(0, 2, dtype=torch.float64),
                                                              torch.zeros(0, 2, dtype=torch.long), 1.0, 1.0),
]
for _args in _bad_calls:
    try:
        gae_advantages(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=gae_advantages points=2 name=gae_generated_signals_agree_with_reference
# hint: any rewards, values, mask, gamma and lambda: the same advantages and returns, 0 at masked positions.
from hypothesis import strategies as st


@st.composite
def _gae_inputs(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 7))
    numbers = st.floats(-3.0, 3.0, allow_nan=False)
    grid = lambda: torch.tensor(draw(st.lists(st.lists(numbers, min_size=time, max_size=time), min_size=batch,
                                              max_size=batch)), dtype=torch.float64)
    mask = torch.tensor(draw(st.lists(st.lists(st.integers(0, 1), min_size=time, max_size=time), min_size=batch,
                                      max_size=batch)), dtype=draw(st.sampled_from([torch.bool, torch.long])))
    gamma = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0, 1]))
    lam = draw(st.sampled_from([0.0, 0.3, 0.95, 1.0, 0]))
    if draw(st.integers(0, 3)) == 1:  # the Monte Carlo limit: rewards still to come minus V
        gamma, lam = draw(st.sampled_from([(1.0, 1.0), (1, 1)]))
    rewards, values = grid(), grid()
    if draw(st.booleans()):  # huge numbers at masked positions, which must never reach a valid one
        rewards = torch.where(mask.bool(), rewards, torch.full_like(rewards, 1e6))
        values = torch.where(mask.bool(), values, torch.full_like(values, -1e6))
    return rewards, values, mask, gamma, lam


def _row_kinds(mask):
    kinds = set()
    for row in mask.long().tolist():
        ones = [t for t, v in enumerate(row) if v]
        if not ones:
            kinds.add("empty")
        elif ones[0] > 0:
            kinds.add("left")
        if ones and ones[-1] < len(row) - 1:
            kinds.add("right")
        if ones and ones[-1] - ones[0] + 1 > len(ones):
            kinds.add("inner")
    return kinds


reference.agrees("gae_advantages", _gae_inputs(), cases=80, clauses={
    "a row without a valid token": lambda r, v, m, g, l: "empty" in _row_kinds(m),
    "padding before the first valid token": lambda r, v, m, g, l: "left" in _row_kinds(m),
    "padding after the last valid token": lambda r, v, m, g, l: "right" in _row_kinds(m),
    "a masked position between valid ones": lambda r, v, m, g, l: "inner" in _row_kinds(m),
    "a bool mask": lambda r, v, m, g, l: m.dtype == torch.bool,
    "gamma of 0": lambda r, v, m, g, l: g == 0,
    "lam of 0": lambda r, v, m, g, l: l == 0,
    "gamma and lam both 1": lambda r, v, m, g, l: g == 1 and l == 1,
    "gamma or lam given as an int": lambda r, v, m, g, l: type(g) is int or type(l) is int,
    "huge values at masked positions": lambda r, v, m, g, l: bool((r.abs() >= 1e6)[~m.bool()].any()),
})

# %% hidden exercise=gae_advantages points=2 name=gae_generated_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (dtype, shape, mask, a non-finite value, gamma or lam out of range or a bool) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "values_dtype": lambda a: {**a, "values": a["values"].float()},
    "values_shape": lambda a: {**a, "values": a["values"][:, 1:]},
    "int_rewards": lambda a: {**a, "rewards": a["rewards"].long(), "values": a["values"].long()},
    "float_mask": lambda a: {**a, "response_mask": a["response_mask"].float()},
    "mask_minus_one": lambda a: {**a, "response_mask": -a["response_mask"]},
    "nan_value": lambda a: {**a, "values": a["values"] * float("nan")},
    "gamma_high": lambda a: {**a, "gamma": 1.01},
    "lam_negative": lambda a: {**a, "lam": -0.5},
    "gamma_bool": lambda a: {**a, "gamma": True},
    "lam_none": lambda a: {**a, "lam": None},
    "list_rewards": lambda a: {**a, "rewards": a["rewards"].tolist()},
    "gamma_text": lambda a: {**a, "gamma": "0.9"},
}
from tools.course.grader.clauses import below, each_of, is_bool, is_number, not_finite


def _broken(case, rng):
    batch, time = rng.randint(1, 3), rng.randint(2, 5)
    args = {"rewards": torch.linspace(-1, 1, batch * time, dtype=torch.float64).reshape(batch, time),
            "values": torch.linspace(0, 1, batch * time, dtype=torch.float64).reshape(batch, time),
            "response_mask": torch.ones(batch, time, dtype=torch.long), "gamma": 0.9, "lam": 0.8}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["rewards"], args["values"], args["response_mask"], args["gamma"], args["lam"]


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("gae_advantages", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "values of another dtype": lambda r, v, m, g, l: r.is_floating_point() and v.dtype != r.dtype,
    "values of another shape": lambda r, v, m, g, l: v.shape != r.shape,
    "integer rewards and values": lambda r, v, m, g, l: not r.is_floating_point(),
    "a float mask": lambda r, v, m, g, l: m.is_floating_point(),
    "a negative mask value": lambda r, v, m, g, l: bool((m < 0).any()),
    "a NaN value": lambda r, v, m, g, l: v.is_floating_point() and bool(v.isnan().any()),
    "gamma above 1": lambda r, v, m, g, l: is_number(g) and g > 1,
    "a negative lam": lambda r, v, m, g, l: below(l, 0),
    "gamma that is a bool": lambda r, v, m, g, l: is_bool(g),
    "lam that is None": lambda r, v, m, g, l: l is None,
    "gamma that is text": lambda r, v, m, g, l: isinstance(g, str),
    "rewards that are a list": lambda r, v, m, g, l: isinstance(r, list),
})

# %% hidden exercise=whiten_and_gate points=1 name=statistics_from_valid_tokens_only
# hint: the mean and the unbiased variance come from the valid positions; what sits at masked positions does not matter, and they are 0 afterwards.
_mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 0]])
_adv = torch.tensor([[1.0, 2.0, 3.0, 100.0], [4.0, -50.0, 5.0, 7.0]], dtype=torch.float64)
_out = whiten_and_gate(_adv, _mask.clone(), torch.zeros_like(_adv), 0.0, torch.ones(2, dtype=torch.float64))
_valid = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
assert math.isclose(_out["advantage_mean"], 3.0, rel_tol=1e-12)
assert math.isclose(_out["advantage_std"], math.sqrt(2.5), rel_tol=1e-12)
_expected = (_valid - 3.0) / math.sqrt(2.5 + 1e-8)
assert torch.allclose(_out["whitened"][_mask.bool()], _expected, rtol=1e-12, atol=1e-12)
assert float(_out["whitened"][~_mask.bool()].abs().max()) == 0.0
assert _out["reasons"] == [] and _out["decision"] == "accept"

# %% hidden exercise=whiten_and_gate points=1 name=epsilon_inside_the_square_root
# hint: whitened = (a - m) / sqrt(v + 1e-8): for advantages that barely differ, the epsilon keeps them small instead of blowing them up to +-0.7.
_adv = torch.tensor([[1.0, 1.0 + 1e-5]], dtype=torch.float64)
_out = whiten_and_gate(_adv, torch.ones(1, 2, dtype=torch.long), torch.zeros_like(_adv), 0.0, torch.tensor([1.0], dtype=torch.float64))
_v = 5e-11
assert math.isclose(float(_out["whitened"][0, 1]), 5e-6 / math.sqrt(_v + 1e-8), rel_tol=1e-6)
assert abs(float(_out["whitened"][0, 1])) < 0.1
assert _out["reasons"] == []

# %% hidden exercise=whiten_and_gate points=1 name=kl_share_limit_is_inclusive
# hint: share = P / (P + S) with P = kl_coef * sum|kl| over valid tokens and S = sum|scores|; a share equal to the limit passes, one above it is rejected.
_mask = torch.tensor([[1, 1, 0]])
_adv = torch.tensor([[0.5, -0.5, 0.0]], dtype=torch.float64)
_kl = torch.tensor([[0.25, -0.25, 40.0]], dtype=torch.float64)
_scores = torch.tensor([-1.0], dtype=torch.float64)
_at = whiten_and_gate(_adv, _mask, _kl, 2, _scores, max_kl_share=0.5)
assert _at["kl_share"] == 0.5 and _at["reasons"] == [] and _at["decision"] == "accept"
_above = whiten_and_gate(_adv, _mask, _kl, 2, _scores, max_kl_share=0.49)
assert _above["reasons"] == ["kl_dominated"] and _above["decision"] == "reject"
assert whiten_and_gate(_adv, _mask, _kl, 2, _scores, max_kl_share=1)["decision"] == "accept"

# %% hidden exercise=whiten_and_gate points=1 name=constant_signal_rejected_and_reasons_ordered
# hint: judge the raw valid advantages: all equal within 1e-6 * max(1, largest |advantage|) is "constant_advantages" (all 0 is one case); both reasons are listed, KL first; no mass at all is a share of 0.0.
_mask = torch.tensor([[1, 1, 1, 0]])
_zeros = torch.tensor([[0.0, 0.0, 0.0, 3.0]], dtype=torch.float64)
_none = whiten_and_gate(_zeros, _mask, torch.zeros_like(_zeros), 0.0, torch.zeros(1, dtype=torch.float64))
assert _none["kl_share"] == 0.0 and type(_none["kl_share"]) is float
assert _none["reasons"] == ["constant_advantages"] and _none["decision"] == "reject"
assert float(_none["whitened"].abs().max()) == 0.0
_both = whiten_and_gate(_zeros, _mask, torch.ones_like(_zeros), 1.0, torch.zeros(1, dtype=torch.float64))
assert _both["kl_share"] == 1.0 and _both["reasons"] == ["kl_dominated", "constant_advantages"]
_sevenths = whiten_and_gate(torch.tensor([[0.7, 0.7, 0.7, -4.0]], dtype=torch.float64), _mask, torch.zeros_like(_zeros), 0.0,
                            torch.ones(1, dtype=torch.float64))
assert _sevenths["reasons"] == ["constant_advantages"], "equal advantages that are not 0 carry no signal either"
_real = whiten_and_gate(torch.tensor([[0.0, 2e-6, 0.0, 0.0]], dtype=torch.float64), _mask, torch.zeros_like(_zeros), 0.0,
                        torch.ones(1, dtype=torch.float64))
assert _real["reasons"] == [] and _real["decision"] == "accept"

# %% hidden exercise=whiten_and_gate points=1 name=constant_tolerance_scales_with_the_largest_advantage
# hint: the tolerance is 1e-6 * max(1, largest |valid advantage|): below 1 it is 1e-6, for advantages near 1000 it is about 1e-3; the spread is max - min of the raw valid advantages.
_mask = torch.ones(1, 3, dtype=torch.long)
_zero_kl = torch.zeros(1, 3, dtype=torch.float64)
_one = torch.ones(1, dtype=torch.float64)
_cases = [([[0.0, 5e-7, 0.0]], ["constant_advantages"]), ([[0.0, 2e-6, 0.0]], []),
          ([[1000.0, 1000.0005, 1000.0]], ["constant_advantages"]), ([[1000.0, 1000.002, 1000.0]], []),
          ([[-3e-9, 3e-9, 0.0]], ["constant_advantages"]), ([[0.1 + 0.2, 0.3, 0.3]], ["constant_advantages"])]
for _index, (_values, _expected) in enumerate(_cases):
    _out = whiten_and_gate(torch.tensor(_values, dtype=torch.float64), _mask, _zero_kl, 0.0, _one)
    assert _out["reasons"] == _expected, (_index, _out["reasons"])

# %% hidden exercise=whiten_and_gate points=1 name=results_are_floats_and_keep_dtype
# hint: the statistics and the share are Python floats; the whitened tensor keeps the advantages' dtype.
_adv = torch.tensor([[0.5, -0.25], [1.0, 0.0]], dtype=torch.float32)
_out = whiten_and_gate(_adv, torch.tensor([[True, True], [True, False]]), torch.zeros_like(_adv), 0.1,
                       torch.tensor([1.0, 0.0], dtype=torch.float64), max_kl_share=0)
assert _out["whitened"].dtype == torch.float32 and _out["whitened"].shape == (2, 2)
assert all(type(_out[key]) is float for key in ("advantage_mean", "advantage_std", "kl_share"))
assert math.isclose(_out["advantage_mean"], (0.5 - 0.25 + 1.0) / 3, rel_tol=1e-6)
assert _out["decision"] == "accept", "a KL share of 0 is not above a limit of 0"

# %% hidden exercise=whiten_and_gate points=1 name=gate_invalid_inputs_refused_valid_ones_scored
# hint: validate the tensors, the mask (at least two valid tokens), finiteness and both numbers before whitening.
_a = torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64)
_m = torch.tensor([[1, 1, 0]])
_k = torch.zeros(1, 3, dtype=torch.float64)
_s = torch.tensor([1.0], dtype=torch.float64)
_good = whiten_and_gate(_a, _m, _k, 0.0, _s)
assert torch.allclose(_good["whitened"], torch.tensor([[-0.05, 0.05, 0.0]], dtype=torch.float64) / math.sqrt(0.005 + 1e-8))
_bad_calls = [
    (_a, torch.tensor([[1, 0, 0]]), _k, 0.0, _s, 0.5), (_a, _m.float(), _k, 0.0, _s, 0.5), (_a, _m + 1, _k, 0.0, _s, 0.5),
    (_a, _m, _k.float(), 0.0, _s, 0.5), (_a, _m, _k[:, :2], 0.0, _s, 0.5), (_a, _m, _k, 0.0, _s.repeat(2), 0.5),
    (_a, _m, _k, 0.0, torch.tensor([1]), 0.5), (_a.long(), _m, _k.long(), 0.0, _s, 0.5), (_a[0], _m[0], _k[0], 0.0, _s, 0.5),
    (_a, _m, _k, -1.0, _s, 0.5), (_a, _m, _k, True, _s, 0.5), (_a, _m, _k, 0.0, _s, 1.5), (_a, _m, _k, 0.0, _s, -0.1),
    (_a, _m, _k, 0.0, _s, False), (_a, _m, _k, 0.0, _s, float("nan")), (_a * float("nan"), _m, _k, 0.0, _s, 0.5),
    (_a, _m, _k + float("inf"), 0.0, _s, 0.5), (_a, _m, _k, 0.0, _s * float("inf"), 0.5),
]
for _args in _bad_calls:
    try:
        whiten_and_gate(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=whiten_and_gate points=2 name=gate_generated_signals_agree_with_reference
# hint: any advantages, mask, KL, coefficient, scores and limit: the same whitened tensor, statistics, share, reasons and decision.
from hypothesis import strategies as st


_GATE_KINDS = ("free", "zero", "constant", "near_inside", "near_beyond", "shared_below_limit", "free", "zero_with_kl")


@st.composite
def _gate_inputs(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(2, 6))
    rows = [draw(st.lists(st.integers(0, 1), min_size=time, max_size=time)) for _ in range(batch)]
    rows[0][0], rows[0][1] = 1, 1
    numbers = st.one_of(st.just(0.0), st.floats(-2.0, 2.0, allow_nan=False))
    grid = lambda: torch.tensor(draw(st.lists(st.lists(numbers, min_size=time, max_size=time), min_size=batch,
                                              max_size=batch)), dtype=torch.float64)
    kind = _GATE_KINDS[draw(st.integers(0, len(_GATE_KINDS) - 1))]
    advantages, kl = grid(), grid()
    scores = torch.tensor(draw(st.lists(numbers, min_size=batch, max_size=batch)), dtype=torch.float64)
    coefficient = draw(st.sampled_from([0.0, 0.1, 1, 5.0]))
    limit = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1]))
    if kind in ("zero", "zero_with_kl"):
        advantages = torch.zeros(batch, time, dtype=torch.float64)
    elif kind == "constant":  # equal and not 0, at any scale: whitening leaves rounding noise only
        advantages = torch.full((batch, time), draw(st.sampled_from([0.7, -2.5, 1000.0, 1e-9])), dtype=torch.float64)
    elif kind in ("near_inside", "near_beyond"):  # equal up to a spread just inside or just beyond the tolerance
        base = draw(st.sampled_from([0.3, 1000.0]))
        advantages = torch.full((batch, time), base, dtype=torch.float64)
        advantages[0, 1] = base + 1e-6 * max(1.0, base) * (0.5 if kind == "near_inside" else 2.0)
    elif kind == "shared_below_limit":  # some KL, under a limit below 1
        kl, coefficient, limit = torch.full((batch, time), 0.1, dtype=torch.float64), 0.1, draw(st.sampled_from([0.5, 0.9]))
        scores = torch.ones(batch, dtype=torch.float64)
    if kind == "zero_with_kl":  # no signal and a dominating KL: both reasons at once
        kl, coefficient, limit = kl.abs() + 0.5, 5.0, draw(st.sampled_from([0.0, 0.25]))
    return advantages, torch.tensor(rows, dtype=draw(st.sampled_from([torch.bool, torch.long]))), kl, coefficient, scores, limit


def _share(kl, mask, coef, scores):
    penalty = coef * float(kl[mask.bool()].abs().sum())
    total = penalty + float(scores.abs().sum())
    return penalty / total if total > 0 else 0.0


def _all_zero(advantages, mask):
    return bool((advantages[mask.bool()] == 0).all())


def _spread(advantages, mask):
    picked = advantages[mask.bool()].double()
    return float(picked.max() - picked.min()), 1e-6 * max(1.0, float(picked.abs().max()))


reference.agrees("whiten_and_gate", _gate_inputs(), cases=120, clauses={
    "all-zero advantages": lambda a, m, k, c, s, x: _all_zero(a, m),
    "equal advantages that are not 0": lambda a, m, k, c, s, x: _spread(a, m)[0] == 0 and not _all_zero(a, m),
    "a spread within the tolerance that is not 0": lambda a, m, k, c, s, x: 0 < _spread(a, m)[0] <= _spread(a, m)[1],
    "a spread just beyond the tolerance": lambda a, m, k, c, s, x: _spread(a, m)[1] < _spread(a, m)[0] <= 3 * _spread(a, m)[1],
    "a KL share above the limit": lambda a, m, k, c, s, x: _share(k, m, c, s) > x,
    "a KL share at or under a limit below 1": lambda a, m, k, c, s, x: 0 < _share(k, m, c, s) <= x < 1,
    "both reasons": lambda a, m, k, c, s, x: _spread(a, m)[0] <= _spread(a, m)[1] and _share(k, m, c, s) > x,
    "masked positions": lambda a, m, k, c, s, x: not bool(m.bool().all()),
    "a bool mask": lambda a, m, k, c, s, x: m.dtype == torch.bool,
    "a kl_coef of 0": lambda a, m, k, c, s, x: c == 0,
    "a limit of 0": lambda a, m, k, c, s, x: x == 0,
    "a kl_coef or limit given as an int": lambda a, m, k, c, s, x: type(c) is int or type(x) is int,
})

# %% hidden exercise=whiten_and_gate points=2 name=gate_generated_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (fewer than two valid tokens, dtype, shape, a non-finite value, a number out of range or a bool) is refused with ValueError.
from hypothesis import strategies as st

def _one_valid(args):
    mask = torch.zeros_like(args["response_mask"])
    mask[-1, -1] = 1
    return {**args, "response_mask": mask}


_defects = {
    "one_valid": _one_valid,
    "kl_dtype": lambda a: {**a, "kl": a["kl"].float()},
    "kl_shape": lambda a: {**a, "kl": a["kl"][:, :-1]},
    "scores_shape": lambda a: {**a, "scores": a["scores"][:-1] if len(a["scores"]) > 1 else a["scores"][None]},
    "mask_float": lambda a: {**a, "response_mask": a["response_mask"].double()},
    "nan_advantage": lambda a: {**a, "advantages": a["advantages"] + float("nan")},
    "inf_kl": lambda a: {**a, "kl": a["kl"] - float("inf")},
    "nan_advantage_masked": lambda a: {**a, "advantages": _put(a["advantages"], (0, 0), float("nan")),
                                       "response_mask": _put(a["response_mask"], (0, 0), 0)},
    "nan_kl_last": lambda a: {**a, "kl": _put(a["kl"], (-1, -1), float("nan"))},
    "inf_score_first": lambda a: {**a, "scores": _put(a["scores"], 0, float("inf"))},
    "coef_inf": lambda a: {**a, "kl_coef": float("inf")},
    "coef_negative": lambda a: {**a, "kl_coef": -0.01},
    "coef_bool": lambda a: {**a, "kl_coef": True},
    "limit_high": lambda a: {**a, "max_kl_share": 1.0001},
    "limit_bool": lambda a: {**a, "max_kl_share": True},
    "limit_none": lambda a: {**a, "max_kl_share": None},
}
from tools.course.grader.clauses import below, each_of, is_bool, is_number, not_finite


def _put(tensor, where, value):
    changed = tensor.clone()
    changed[where] = value
    return changed


def _broken(case, rng):
    batch, time = rng.randint(1, 3), rng.randint(3, 5)
    args = {"advantages": torch.linspace(-1, 1, batch * time, dtype=torch.float64).reshape(batch, time),
            "response_mask": torch.ones(batch, time, dtype=torch.long),
            "kl": torch.full((batch, time), 0.1, dtype=torch.float64), "kl_coef": 0.5,
            "scores": torch.ones(batch, dtype=torch.float64), "max_kl_share": 0.5}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return (args["advantages"], args["response_mask"], args["kl"], args["kl_coef"], args["scores"], args["max_kl_share"])


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("whiten_and_gate", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "fewer than two valid tokens": lambda a, m, k, c, s, x: not m.is_floating_point() and int(m.sum()) < 2,
    "kl of another dtype": lambda a, m, k, c, s, x: k.dtype != a.dtype,
    "kl of another shape": lambda a, m, k, c, s, x: k.shape != a.shape,
    "scores that are not [batch]": lambda a, m, k, c, s, x: tuple(s.shape) != (a.shape[0],),
    "a float mask": lambda a, m, k, c, s, x: m.is_floating_point(),
    "a NaN advantage": lambda a, m, k, c, s, x: bool(a.isnan().all()),
    "a NaN advantage on a masked token": lambda a, m, k, c, s, x: bool((a.isnan() & (m == 0)).any()),
    "an infinite KL": lambda a, m, k, c, s, x: bool(k.isinf().any()),
    "a NaN KL on the last token": lambda a, m, k, c, s, x: k.dim() == 2 and bool(k[-1, -1].isnan()),
    "an infinite first score": lambda a, m, k, c, s, x: s.dim() == 1 and bool(s[0].isinf()),
    "a kl_coef that is not finite": lambda a, m, k, c, s, x: not_finite(c),
    "a negative kl_coef": lambda a, m, k, c, s, x: below(c, 0),
    "a kl_coef that is a bool": lambda a, m, k, c, s, x: is_bool(c),
    "a limit above 1": lambda a, m, k, c, s, x: is_number(x) and x > 1,
    "a limit that is a bool": lambda a, m, k, c, s, x: is_bool(x),
    "a limit that is None": lambda a, m, k, c, s, x: x is None,
})
