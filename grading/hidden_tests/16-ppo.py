# %% hidden exercise=ppo_policy_loss points=1 name=pessimistic_maximum_for_both_signs
# hint: per token the loss is max(-A r, -A clip(r)): a positive advantage stops paying above 1 + eps, a negative one below 1 - eps, and the worse side is never clipped.
_old = torch.zeros(1, 4, dtype=torch.float64)
_new = torch.log(torch.tensor([[1.5, 0.5, 1.5, 0.5]], dtype=torch.float64))
_adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
_out = ppo_policy_loss(_new, _old, _adv, torch.ones(1, 4, dtype=torch.long), 0.2)
_expected = (-1.2 - 0.5 + 1.5 + 0.8) / 4
assert math.isclose(float(_out["loss"]), _expected, rel_tol=1e-12)
assert math.isclose(_out["clip_fraction"], 0.5), "tokens 0 and 3 are clipped, tokens 1 and 2 are not"

# %% hidden exercise=ppo_policy_loss points=1 name=token_mean_over_valid_tokens_of_the_batch
# hint: divide the summed per-token loss by the valid tokens of the whole batch, not by every position and not per sequence first.
_old = torch.zeros(2, 4, dtype=torch.float64)
_adv = torch.tensor([[1.0, 1.0, 1.0, 50.0], [4.0, -30.0, -30.0, -30.0]], dtype=torch.float64)
_mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
_out = ppo_policy_loss(_old.clone(), _old, _adv, _mask)
assert math.isclose(float(_out["loss"]), -(1.0 + 1.0 + 1.0 + 4.0) / 4, rel_tol=1e-12)
assert _out["clip_fraction"] == 0.0 and _out["approx_kl"] == 0.0

# %% hidden exercise=ppo_policy_loss points=1 name=clip_fraction_and_approx_kl_are_exact
# hint: clip_fraction counts valid tokens where the clipped loss is strictly larger; approx_kl is the mean of old - new over valid tokens; both are Python floats.
_old = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]], dtype=torch.float64)
_new = _old + torch.tensor([[0.5, -0.5, 0.1, 0.0, 3.0]], dtype=torch.float64)
_adv = torch.tensor([[2.0, 2.0, -1.0, 0.0, 5.0]], dtype=torch.float64)
_out = ppo_policy_loss(_new, _old, _adv, torch.tensor([[1, 1, 1, 1, 0]]), 0.2)
assert type(_out["clip_fraction"]) is float and type(_out["approx_kl"]) is float
assert math.isclose(_out["clip_fraction"], 1 / 4), "only the first token is clipped; a zero advantage is a tie"
assert math.isclose(_out["approx_kl"], -(0.5 - 0.5 + 0.1 + 0.0) / 4, rel_tol=1e-12)

# %% hidden exercise=ppo_policy_loss points=1 name=clip_ratio_is_used_as_given
# hint: the clip range is [1 - clip_ratio, 1 + clip_ratio] with the epsilon passed in, not a fixed 0.2.
_new = torch.log(torch.tensor([[1.25, 0.6]], dtype=torch.float32))
_old = torch.zeros(1, 2)
_adv = torch.tensor([[1.0, -1.0]])
_wide = ppo_policy_loss(_new, _old, _adv, torch.ones(1, 2, dtype=torch.long), 0.5)
assert math.isclose(float(_wide["loss"]), (-1.25 + 0.6) / 2, rel_tol=1e-6) and _wide["clip_fraction"] == 0.0
_narrow = ppo_policy_loss(_new, _old, _adv, torch.ones(1, 2, dtype=torch.long), 0.1)
assert math.isclose(float(_narrow["loss"]), (-1.1 + 0.9) / 2, rel_tol=1e-6) and _narrow["clip_fraction"] == 1.0
assert _narrow["loss"].dtype == torch.float32

# %% hidden exercise=ppo_policy_loss points=1 name=policy_gradient_only_through_unclipped_tokens
# hint: the loss keeps its graph to log_probs: a clipped token gets gradient 0, an unclipped one -A * r / N; old_log_probs gets none.
from tools.course.grader.boundary import backward_through

_old = torch.zeros(1, 3, dtype=torch.float64)
_new = torch.log(torch.tensor([[1.5, 1.1, 0.9]], dtype=torch.float64)).requires_grad_(True)
_adv = torch.tensor([[1.0, 2.0, -1.0]], dtype=torch.float64)
_out = backward_through(ppo_policy_loss, _new, _old, _adv, torch.ones(1, 3, dtype=torch.long), 0.2, select=["loss"],
                        reduce=None)
assert torch.allclose(_new.grad, torch.tensor([[0.0, -2.0 * 1.1 / 3, 0.9 / 3]], dtype=torch.float64), atol=1e-12)

# %% hidden exercise=ppo_policy_loss points=1 name=far_moved_tokens_are_clamped_like_verl
# hint: clamp log_probs - old_log_probs to [-20, 20] before exp (verl's bound): a log-ratio of 90 in float32 must not become inf, and 0 * inf is NaN; approx_kl uses the clamped log-ratio too.
_old = torch.zeros(1, 4)
_new = torch.tensor([[90.0, -90.0, 25.0, 0.1]])
_adv = torch.tensor([[0.0, 1.0, -2.0, 1.0]])
_out = ppo_policy_loss(_new, _old, _adv, torch.ones(1, 4, dtype=torch.long), 0.2)
_expected = (0.0 + -math.exp(-20.0) + 2.0 * math.exp(20.0) + -1.1 * 1.0) / 4
assert math.isfinite(float(_out["loss"])), "a log-ratio of 90 with a zero advantage must not give NaN"
assert math.isclose(float(_out["loss"]), _expected, rel_tol=1e-5)
assert math.isclose(_out["approx_kl"], -(20.0 - 20.0 + 20.0 + 0.1) / 4, rel_tol=1e-5)
_same = ppo_policy_loss(_old.clone(), _old, _adv, torch.ones(1, 4, dtype=torch.long), 0.2)
assert math.isclose(float(_same["loss"]), -sum([0.0, 1.0, -2.0, 1.0]) / 4, rel_tol=1e-6)

# %% hidden exercise=ppo_policy_loss points=1 name=ppo_policy_invalid_inputs_refused_valid_ones_scored
# hint: check the three tensors (finite floats, same dtype and shape), the mask (0/1, at least one valid token) and 0 < clip_ratio < 1 before computing.
_lp = torch.tensor([[-0.5, -1.0]], dtype=torch.float64)
_old = torch.tensor([[-0.5, -1.0]], dtype=torch.float64)
_adv = torch.tensor([[1.0, -3.0]], dtype=torch.float64)
_m = torch.tensor([[1, 1]])
assert math.isclose(float(ppo_policy_loss(_lp, _old, _adv, _m)["loss"]), 1.0, rel_tol=1e-12)
_bad_calls = [
    (_lp, _old.float(), _adv, _m, 0.2), (_lp, _old, _adv[:, :1], _m, 0.2), (_lp, _old, _adv, _m.float(), 0.2),
    (_lp, _old, _adv, _m * 2, 0.2), (_lp, _old, _adv, torch.zeros(1, 2, dtype=torch.long), 0.2), (_lp, _old, _adv, _m, 0.0),
    (_lp, _old, _adv, _m, 1.0), (_lp, _old, _adv, _m, -0.2), (_lp, _old, _adv, _m, True), (_lp, _old, _adv, _m, float("nan")),
    (_lp * float("nan"), _old, _adv, _m, 0.2), (_lp, _old, _adv + float("inf"), _m, 0.2), (_lp.long(), _old.long(), _adv.long(), _m, 0.2),
    (_lp[0], _old[0], _adv[0], _m[0], 0.2), (_lp.tolist(), _old, _adv, _m, 0.2),
]
for _args in _bad_calls:
    try:
        ppo_policy_loss(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=ppo_policy_loss points=2 name=ppo_policy_generated_batches_agree_with_reference
# hint: any log-probabilities, advantages, mask and epsilon: the same loss, clip fraction and approximate KL.
from hypothesis import strategies as st


@st.composite
def _policy_batches(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    grid = lambda low, high: torch.tensor(draw(st.lists(st.lists(st.floats(low, high), min_size=time, max_size=time),
                                                        min_size=batch, max_size=batch)), dtype=torch.float64)
    old = grid(-4.0, 0.0)
    shift = grid(-0.6, 0.6)
    for _ in range(draw(st.integers(0, 2))):  # tokens that moved far since sampling, at any position (valid or masked)
        shift[draw(st.integers(0, batch - 1)), draw(st.integers(0, time - 1))] = draw(st.sampled_from([-90.0, -25.0, 25.0, 90.0]))
    new = old + shift
    rows = [draw(st.lists(st.integers(0, 1), min_size=time, max_size=time)) for _ in range(batch)]
    rows[0][0] = 1
    mask = torch.tensor(rows, dtype=draw(st.sampled_from([torch.long, torch.bool])))
    advantages = grid(-2.0, 2.0)
    if draw(st.booleans()):  # a zero advantage somewhere (with a far-moved token it is the 0 * inf case)
        advantages[draw(st.integers(0, batch - 1)), draw(st.integers(0, time - 1))] = 0.0
    return new, old, advantages, mask, draw(st.sampled_from([0.1, 0.2, 0.3, 0.5]))


def _clipped(new, old, adv, mask, eps, sign):
    ratio = (new - old).exp()
    hit = (ratio > 1 + eps) & (adv > 0) if sign > 0 else (ratio < 1 - eps) & (adv < 0)
    return bool(hit[mask.bool()].any())


reference.agrees("ppo_policy_loss", _policy_batches(), cases=80, clauses={
    "a clipped token with a positive advantage": lambda n, o, a, m, e: _clipped(n, o, a, m, e, 1),
    "a clipped token with a negative advantage": lambda n, o, a, m, e: _clipped(n, o, a, m, e, -1),
    "a ratio outside the range whose side is not clipped": lambda n, o, a, m, e: bool((
        (((n - o).exp() > 1 + e) & (a < 0)) | (((n - o).exp() < 1 - e) & (a > 0)))[m.bool()].any()),
    "masked positions": lambda n, o, a, m, e: not bool(m.bool().all()),
    "a bool mask": lambda n, o, a, m, e: m.dtype == torch.bool,
    "responses with different valid counts": lambda n, o, a, m, e: len(set(m.long().sum(dim=1).tolist())) > 1,
    "a response of one token": lambda n, o, a, m, e: n.shape[1] == 1,
    "a valid token whose log-ratio is above +20": lambda n, o, a, m, e: bool(((n - o) > 20)[m.bool()].any()),
    "a valid token whose log-ratio is below -20": lambda n, o, a, m, e: bool(((n - o) < -20)[m.bool()].any()),
    "a far-moved valid token with a zero advantage": lambda n, o, a, m, e: bool((((n - o).abs() > 20) & (a == 0))[m.bool()].any()),
    "a far-moved masked token": lambda n, o, a, m, e: bool(((n - o).abs() > 20)[~m.bool()].any()),
})

# %% hidden exercise=ppo_policy_loss points=2 name=ppo_policy_generated_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (dtype or shape mismatch, a float or empty mask, a non-finite value, epsilon out of (0, 1)) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "old_dtype": lambda a: {**a, "old": a["old"].float()},
    "adv_shape": lambda a: {**a, "adv": a["adv"][:, :-1]},
    "float_mask": lambda a: {**a, "mask": a["mask"].double()},
    "empty_mask": lambda a: {**a, "mask": torch.zeros_like(a["mask"])},
    "mask_minus": lambda a: {**a, "mask": -a["mask"]},
    "nan": lambda a: {**a, "new": a["new"] * float("nan")},
    "nan_one_token": lambda a: {**a, "new": _put(a["new"], (0, -1), float("nan"))},
    "inf_old_masked": lambda a: {**a, "old": _put(a["old"], (0, -1), float("inf")),
                                 "mask": _put(a["mask"], (0, -1), 0)},
    "minus_inf_adv_first": lambda a: {**a, "adv": _put(a["adv"], (0, 0), -float("inf"))},
    "nan_adv_masked": lambda a: {**a, "adv": _put(a["adv"], (-1, 1), float("nan")), "mask": _put(a["mask"], (-1, 1), 0)},
    "eps_inf": lambda a: {**a, "eps": float("inf")},
    "eps_nan": lambda a: {**a, "eps": float("nan")},
    "eps_one": lambda a: {**a, "eps": 1},
    "eps_zero": lambda a: {**a, "eps": 0.0},
    "eps_bool": lambda a: {**a, "eps": False},
    "one_dim": lambda a: {**a, "new": a["new"][0], "old": a["old"][0], "adv": a["adv"][0], "mask": a["mask"][0]},
    "eps_text": lambda a: {**a, "eps": "0.2"},
    "list_adv": lambda a: {**a, "adv": a["adv"].tolist()},
}
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite


def _put(tensor, where, value):
    changed = tensor.clone()
    changed[where] = value
    return changed


def _broken(case, rng):
    batch, time = rng.randint(1, 3), rng.randint(2, 5)
    old = -torch.linspace(0.1, 2.0, batch * time, dtype=torch.float64).reshape(batch, time)
    args = {"new": old + 0.3, "old": old, "adv": torch.linspace(-1, 1, batch * time, dtype=torch.float64).reshape(batch, time),
            "mask": torch.ones(batch, time, dtype=torch.long), "eps": 0.2}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["new"], args["old"], args["adv"], args["mask"], args["eps"]


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("ppo_policy_loss", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "old log-probs of another dtype": lambda n, o, a, m, e: o.dtype != n.dtype,
    "advantages of another shape": lambda n, o, a, m, e: isinstance(a, torch.Tensor) and a.shape != n.shape,
    "a float mask": lambda n, o, a, m, e: m.is_floating_point(),
    "a mask without a valid token": lambda n, o, a, m, e: not m.is_floating_point() and not bool(m.any()),
    "a negative mask value": lambda n, o, a, m, e: bool((m < 0).any()),
    "a NaN log-probability": lambda n, o, a, m, e: bool(n.isnan().all()),
    "one NaN log-probability on a valid token": lambda n, o, a, m, e: bool(n.isnan().any()) and not bool(n.isnan().all()),
    "an infinite old log-probability on a masked token": lambda n, o, a, m, e: bool((o.isinf() & ~m.bool()).any()),
    "a -inf advantage on the first token": lambda n, o, a, m, e: isinstance(a, torch.Tensor) and a.dim() == 2 and bool(a[0, 0].isinf()),
    "a NaN advantage on a masked token": lambda n, o, a, m, e: isinstance(a, torch.Tensor) and bool((a.isnan() & ~m.bool()).any()),
    "a clip ratio that is not finite": lambda n, o, a, m, e: not_finite(e),
    "a clip ratio of 1": lambda n, o, a, m, e: is_number(e) and e >= 1,
    "a clip ratio of 0": lambda n, o, a, m, e: is_number(e) and e <= 0,
    "a clip ratio that is a bool": lambda n, o, a, m, e: is_bool(e),
    "a clip ratio that is text": lambda n, o, a, m, e: isinstance(e, str),
    "1-D tensors": lambda n, o, a, m, e: n.dim() == 1,
    "advantages that are a list": lambda n, o, a, m, e: isinstance(a, list),
})

# %% hidden exercise=ppo_value_loss points=1 name=larger_squared_error_around_old_values
# hint: clip the new value to old +- c, square both errors against the return, keep the larger, and halve the mean.
_old = torch.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
_new = torch.tensor([[0.5, -0.5, 0.1, 0.5]], dtype=torch.float64)
_ret = torch.tensor([[1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
_out = ppo_value_loss(_new, _old, _ret, torch.ones(1, 4, dtype=torch.long), 0.2)
_per = [max(0.25, 0.64), max(2.25, 1.44), max(0.01, 0.01), max(0.25, 0.64)]
assert math.isclose(float(_out["loss"]), 0.5 * sum(_per) / 4, rel_tol=1e-12)
assert math.isclose(_out["clip_fraction"], 2 / 4)

# %% hidden exercise=ppo_value_loss points=1 name=padding_ignored_and_token_mean
# hint: only valid tokens count, in the numerator and in the denominator, whatever the padding holds.
_old = torch.zeros(2, 3, dtype=torch.float64)
_new = torch.tensor([[0.1, 0.2, 40.0], [0.1, -30.0, 9.0]], dtype=torch.float64)
_ret = torch.tensor([[0.3, 0.2, -40.0], [0.0, 30.0, 9.0]], dtype=torch.float64)
_out = ppo_value_loss(_new, _old, _ret, torch.tensor([[1, 1, 0], [1, 0, 0]]), 0.5)
assert math.isclose(float(_out["loss"]), 0.5 * (0.04 + 0.0 + 0.01) / 3, rel_tol=1e-12)
assert _out["clip_fraction"] == 0.0 and _out["loss"].dtype == torch.float64

# %% hidden exercise=ppo_value_loss points=1 name=clip_range_is_used_as_given
# hint: the clip range is the c passed in (any finite number > 0); with a huge c nothing is clipped.
_old = torch.zeros(1, 2)
_new = torch.tensor([[2.0, -1.0]])
_ret = torch.tensor([[2.0, -1.0]])
_loose = ppo_value_loss(_new, _old, _ret, torch.ones(1, 2, dtype=torch.long), 100)
assert float(_loose["loss"]) == 0.0 and _loose["clip_fraction"] == 0.0
_tight = ppo_value_loss(_new, _old, _ret, torch.ones(1, 2, dtype=torch.long), 0.5)
assert math.isclose(float(_tight["loss"]), 0.5 * (1.5 ** 2 + 0.5 ** 2) / 2, rel_tol=1e-6) and _tight["clip_fraction"] == 1.0
assert _tight["loss"].dtype == torch.float32

# %% hidden exercise=ppo_value_loss points=1 name=value_gradient_through_the_larger_error
# hint: the loss keeps its graph to values: where the clipped error wins, the gradient is 0; elsewhere (v - R) / N.
from tools.course.grader.boundary import backward_through

_new = torch.tensor([[0.5, 0.1, -0.5]], dtype=torch.float64, requires_grad=True)
_out = backward_through(ppo_value_loss, _new, torch.zeros(1, 3, dtype=torch.float64),
                        torch.tensor([[1.0, 0.0, 1.0]], dtype=torch.float64), torch.ones(1, 3, dtype=torch.long), 0.2,
                        select=["loss"], reduce=None)
assert torch.allclose(_new.grad, torch.tensor([[0.0, 0.1 / 3, -1.5 / 3]], dtype=torch.float64), atol=1e-12)

# %% hidden exercise=ppo_value_loss points=1 name=ppo_value_invalid_inputs_refused_valid_ones_scored
# hint: check the three tensors, the mask (0/1, at least one valid token) and c > 0 (not a bool) before computing.
_v = torch.tensor([[0.5, 0.0]], dtype=torch.float64)
_o = torch.tensor([[0.5, 0.0]], dtype=torch.float64)
_r = torch.tensor([[1.5, 0.0]], dtype=torch.float64)
_m = torch.tensor([[1, 1]])
assert math.isclose(float(ppo_value_loss(_v, _o, _r, _m)["loss"]), 0.25, rel_tol=1e-12)
_bad_calls = [
    (_v, _o.float(), _r, _m, 0.2), (_v, _o, _r[:, :1], _m, 0.2), (_v, _o, _r, _m.double(), 0.2), (_v, _o, _r, _m + 1, 0.2),
    (_v, _o, _r, torch.zeros(1, 2, dtype=torch.bool), 0.2), (_v, _o, _r, _m, 0), (_v, _o, _r, _m, -1.0), (_v, _o, _r, _m, True),
    (_v, _o, _r, _m, float("inf")), (_v - float("inf"), _o, _r, _m, 0.2), (_v, _o * float("nan"), _r, _m, 0.2),
    (_v.long(), _o.long(), _r.long(), _m, 0.2), (_v[0], _o[0], _r[0], _m[0], 0.2), (_v, _o, _r.tolist(), _m, 0.2),
]
for _args in _bad_calls:
    try:
        ppo_value_loss(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=ppo_value_loss points=2 name=ppo_value_generated_batches_agree_with_reference
# hint: any values, old values, returns, mask and clip range: the same loss and clip fraction.
from hypothesis import strategies as st


@st.composite
def _value_batches(draw):
    batch, time = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    grid = lambda: torch.tensor(draw(st.lists(st.lists(st.floats(-2.0, 2.0), min_size=time, max_size=time),
                                              min_size=batch, max_size=batch)), dtype=torch.float64)
    rows = [draw(st.lists(st.integers(0, 1), min_size=time, max_size=time)) for _ in range(batch)]
    rows[-1][-1] = 1
    mask = torch.tensor(rows, dtype=draw(st.sampled_from([torch.long, torch.bool, torch.int32])))
    c = draw(st.sampled_from([0.05, 0.2, 0.5, 1, 3.0]))
    new, old = grid(), grid()
    edge = draw(st.sampled_from(["none", "exact", "inexact"]))
    row, column = draw(st.integers(0, batch - 1)), draw(st.integers(0, time - 1))
    if edge == "exact":  # the new value exactly c away from the old one: a tie, not clipped
        old[row, column], new[row, column] = 0.5, 0.5 + c
    elif edge == "inexact":  # 0.3 - 0.1 is 0.19999999999999998 in float64: just inside a clip range of 0.2
        old[row, column], new[row, column] = 0.1, 0.1 + 0.2 if c == 0.2 else 0.1 + c
    return new, old, grid(), mask, c


from tools.course.grader.clauses import near_but_not_equal


def _value_cases(new, old, ret, mask, c):
    clipped = old + (new - old).clamp(-c, c)
    valid = mask.bool()
    return {"moved": bool(((new - old).abs() > c)[valid].any()),
            "clipped_larger": bool((((clipped - ret) ** 2) > ((new - ret) ** 2))[valid].any())}


reference.agrees("ppo_value_loss", _value_batches(), cases=80, clauses={
    "a value moved beyond the clip range": lambda n, o, r, m, c: _value_cases(n, o, r, m, c)["moved"],
    "a token where the clipped error is the larger": lambda n, o, r, m, c: _value_cases(n, o, r, m, c)["clipped_larger"],
    "masked positions": lambda n, o, r, m, c: not bool(m.bool().all()),
    "a bool mask": lambda n, o, r, m, c: m.dtype == torch.bool,
    "an int32 mask": lambda n, o, r, m, c: m.dtype == torch.int32,
    "a clip range that is an int": lambda n, o, r, m, c: type(c) is int,
    "a response of one token": lambda n, o, r, m, c: n.shape[1] == 1,
    "a valid value exactly at the clip edge": lambda n, o, r, m, c: bool(((n - o).abs() == c)[m.bool()].any()),
    "a value a rounding error from the clip edge": lambda n, o, r, m, c: any(
        near_but_not_equal(abs(float(x)), float(c)) for x in (n - o)[m.bool()]),
})

# %% hidden exercise=ppo_value_loss points=2 name=ppo_value_generated_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (dtype or shape mismatch, a float or empty mask, a non-finite value, a clip range <= 0 or a bool) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "old_dtype": lambda a: {**a, "old": a["old"].float()},
    "ret_shape": lambda a: {**a, "ret": a["ret"][:1, :1].expand(a["ret"].shape[0] + 1, 1)},
    "float_mask": lambda a: {**a, "mask": a["mask"].float()},
    "empty_mask": lambda a: {**a, "mask": torch.zeros_like(a["mask"])},
    "inf": lambda a: {**a, "ret": a["ret"] + float("inf")},
    "nan_value_masked": lambda a: {**a, "new": _put(a["new"], (0, 0), float("nan")), "mask": _put(a["mask"], (0, 0), 0)},
    "inf_old_last": lambda a: {**a, "old": _put(a["old"], (-1, -1), -float("inf"))},
    "nan_c": lambda a: {**a, "c": float("nan")},
    "zero_c": lambda a: {**a, "c": 0.0},
    "bool_c": lambda a: {**a, "c": True},
    "none_c": lambda a: {**a, "c": None},
    "int_values": lambda a: {**a, "new": a["new"].long(), "old": a["old"].long(), "ret": a["ret"].long()},
    "negative_c": lambda a: {**a, "c": -0.2},
    "one_dim": lambda a: {**a, "new": a["new"][0], "old": a["old"][0], "ret": a["ret"][0], "mask": a["mask"][0]},
}
from tools.course.grader.clauses import below, each_of, is_bool, not_finite


def _put(tensor, where, value):
    changed = tensor.clone()
    changed[where] = value
    return changed


def _broken(case, rng):
    batch, time = rng.randint(1, 3), rng.randint(2, 5)
    base = torch.linspace(-1, 1, batch * time, dtype=torch.float64).reshape(batch, time)
    args = {"new": base * 2, "old": base, "ret": base + 0.5, "mask": torch.ones(batch, time, dtype=torch.long), "c": 0.2}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["new"], args["old"], args["ret"], args["mask"], args["c"]


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("ppo_value_loss", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "old values of another dtype": lambda n, o, r, m, c: n.is_floating_point() and o.dtype != n.dtype,
    "returns of another shape": lambda n, o, r, m, c: r.shape != n.shape,
    "a float mask": lambda n, o, r, m, c: m.is_floating_point(),
    "a mask without a valid token": lambda n, o, r, m, c: not m.is_floating_point() and not bool(m.any()),
    "an infinite return": lambda n, o, r, m, c: r.is_floating_point() and bool(r.isinf().any()),
    "a NaN value on a masked token": lambda n, o, r, m, c: n.is_floating_point() and bool((n.isnan() & ~m.bool()).any()),
    "a -inf old value on the last token": lambda n, o, r, m, c: o.is_floating_point() and n.dim() == 2 and bool(o[-1, -1].isinf()),
    "a clip range that is NaN": lambda n, o, r, m, c: not_finite(c),
    "a clip range of 0": lambda n, o, r, m, c: c == 0 and not is_bool(c),
    "a negative clip range": lambda n, o, r, m, c: below(c, 0),
    "a clip range that is a bool": lambda n, o, r, m, c: is_bool(c),
    "a clip range that is None": lambda n, o, r, m, c: c is None,
    "integer values": lambda n, o, r, m, c: not n.is_floating_point(),
    "1-D tensors": lambda n, o, r, m, c: n.dim() == 1,
})

# %% hidden exercise=ppo_resident_memory points=1 name=parameter_counts_of_qwen2_shapes
# hint: q carries a bias of d, k and v biases of g*e each, o none; norms 2d per layer and d at the end; an untied output head adds V*d; the scalar model adds d.
_small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True, "model_type": "qwen2"}
_setup = {"finetune": "full", "shared_reference": False, "weight_bytes": 2, "batch_tokens": 1}
_layer = 64 * 64 + 64 + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
_tied = ppo_resident_memory(_small, _setup, 1)["parameters"]
assert _tied == {"causal_lm": 512 * 64 + 2 * _layer + 64, "scalar_model": 512 * 64 + 2 * _layer + 128, "lora": 0}
_untied = ppo_resident_memory({**_small, "tie_word_embeddings": False}, _setup, 1)["parameters"]
assert _untied["causal_lm"] == _tied["causal_lm"] + 512 * 64 and _untied["scalar_model"] == _tied["scalar_model"]

# %% hidden exercise=ppo_resident_memory points=1 name=lora_counts_every_target_shape
# hint: each target adds rank * (in + out) per layer: k and v project to g*e, gate and up to f, down from f.
_small = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
          "num_key_value_heads": 1, "vocab_size": 100, "tie_word_embeddings": True}
_setup = {"finetune": "lora", "lora_rank": 2, "lora_targets": list(PROJECTIONS), "shared_reference": False,
          "weight_bytes": 4, "batch_tokens": 10}
_out = ppo_resident_memory(_small, _setup, 1)
_per_layer = 2 * ((64 + 64) + (64 + 16) + (64 + 16) + (64 + 64) + (64 + 128) + (64 + 128) + (128 + 64))
assert _out["parameters"]["lora"] == 3 * _per_layer
_k_only = ppo_resident_memory(_small, {**_setup, "lora_targets": ["k_proj"]}, 1)["parameters"]["lora"]
assert _k_only == 3 * 2 * (64 + 16)

# %% hidden exercise=ppo_resident_memory points=1 name=roles_keep_the_right_states
# hint: only trained roles keep gradients (W per trained parameter), optimizer state (8 per trained parameter with 4-byte weights) and activations (tokens * L * d * 17 * W); with LoRA the weights still include the whole base.
_small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "vocab_size": 50, "tie_word_embeddings": False}
_setup = {"finetune": "lora", "lora_rank": 4, "lora_targets": ["q_proj"], "shared_reference": False, "weight_bytes": 4,
          "batch_tokens": 7}
_out = ppo_resident_memory(_small, _setup, 1)
_counts = _out["parameters"]
_acts = 7 * 2 * 32 * 17 * 4
assert _out["roles"]["policy"] == {"weights": 4 * (_counts["causal_lm"] + _counts["lora"]), "gradients": 4 * _counts["lora"],
                                   "optimizer": 8 * _counts["lora"], "activations": _acts,
                                   "total": 4 * (_counts["causal_lm"] + 2 * _counts["lora"]) + 8 * _counts["lora"] + _acts}
assert _out["roles"]["value"]["gradients"] == 4 * (_counts["lora"] + 32)
assert _out["roles"]["reference"] == {"weights": 4 * _counts["causal_lm"], "gradients": 0, "optimizer": 0,
                                      "activations": 0, "total": 4 * _counts["causal_lm"]}
assert _out["roles"]["reward"]["activations"] == 0 and _out["roles"]["reward"]["weights"] == 4 * _counts["scalar_model"]

# %% hidden exercise=ppo_resident_memory points=1 name=mixed_precision_keeps_fp32_master_weights
# hint: with 2-byte weights AdamW updates an fp32 master copy of the trained weights (4 bytes) beside its two fp32 moments (8 bytes): 12 bytes per trained parameter; with 4-byte weights, 8.
_small = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "vocab_size": 50, "tie_word_embeddings": True}
_full = {"finetune": "full", "shared_reference": False, "weight_bytes": 2, "batch_tokens": 5}
_half = ppo_resident_memory(_small, _full, 1)
_single = ppo_resident_memory(_small, {**_full, "weight_bytes": 4}, 1)
_counts = _half["parameters"]
assert _half["roles"]["policy"]["optimizer"] == 12 * _counts["causal_lm"]
assert _half["roles"]["value"]["optimizer"] == 12 * _counts["scalar_model"]
assert _single["roles"]["policy"]["optimizer"] == 8 * _counts["causal_lm"]
_lora = ppo_resident_memory(_small, {**_full, "finetune": "lora", "lora_rank": 2, "lora_targets": ["v_proj"]}, 1)
assert _lora["roles"]["value"]["optimizer"] == 12 * (_lora["parameters"]["lora"] + 32)
assert _lora["roles"]["reward"]["optimizer"] == 0 and _lora["roles"]["reference"]["optimizer"] == 0

# %% hidden exercise=ppo_resident_memory points=1 name=weight_bytes_are_the_ints_2_or_4
# hint: bytes are whole numbers: weight_bytes is the int 2 or 4; 2.0, 4.0, True, 3 and "2" are refused.
_small = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
          "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True}
_setup = {"finetune": "full", "shared_reference": False, "weight_bytes": 4, "batch_tokens": 2}
_valid = ppo_resident_memory(_small, _setup, 1)
assert type(_valid["total_bytes"]) is int and type(_valid["roles"]["policy"]["weights"]) is int
for _bad in (2.0, 4.0, True, 3, "2", None):
    try:
        ppo_resident_memory(_small, {**_setup, "weight_bytes": _bad}, 1)
    except ValueError:
        continue
    raise AssertionError(f"weight_bytes {_bad!r} was accepted")

# %% hidden exercise=ppo_resident_memory points=1 name=shared_reference_only_with_lora
# hint: sharing the reference removes its weights; with a full fine-tune it is refused, because the base weights change.
_setup = {"finetune": "lora", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"], "shared_reference": True,
          "weight_bytes": 2, "batch_tokens": 16}
_shared = ppo_resident_memory(QWEN25_05B_CONFIG, _setup, 40)
_separate = ppo_resident_memory(QWEN25_05B_CONFIG, {**_setup, "shared_reference": False}, 40)
assert _shared["roles"]["reference"]["total"] == 0
assert _separate["total_bytes"] - _shared["total_bytes"] == 2 * 494032768
try:
    ppo_resident_memory(QWEN25_05B_CONFIG, {"finetune": "full", "shared_reference": True, "weight_bytes": 2,
                                            "batch_tokens": 16}, 40)
except ValueError:
    pass
else:
    raise AssertionError("a full fine-tune cannot share its reference")

# %% hidden exercise=ppo_resident_memory points=1 name=fits_in_binary_gib_inclusive
# hint: the GPU holds gpu_gib * 2**30 bytes (GiB, not GB), and a total exactly equal to it fits; total_gib is a float.
_tiny = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
         "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True}
_setup = {"finetune": "full", "shared_reference": False, "weight_bytes": 2, "batch_tokens": 3}
_total = ppo_resident_memory(_tiny, _setup, 1)["total_bytes"]
assert type(_total) is int
_exact = ppo_resident_memory(_tiny, _setup, _total / 2 ** 30)
assert _exact["fits"] is True and type(_exact["total_gib"]) is float and math.isclose(_exact["total_gib"], _total / 2 ** 30)
assert ppo_resident_memory(_tiny, _setup, (_total - 1) / 2 ** 30)["fits"] is False
_full = ppo_resident_memory(QWEN25_05B_CONFIG, {**_setup, "batch_tokens": 4096}, 22.2)
assert _full["fits"] is True and ppo_resident_memory(QWEN25_05B_CONFIG, {**_setup, "batch_tokens": 4096}, 22.2e9 / 2 ** 30)["fits"] is False

# %% hidden exercise=ppo_resident_memory points=1 name=ppo_memory_invalid_inputs_refused_valid_ones_scored
# hint: validate every config and setup value (ints not bools, divisibility, the finetune kind, LoRA rank and targets, weight bytes 2 or 4) and gpu_gib > 0.
_cfg = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "vocab_size": 10, "tie_word_embeddings": True}
_lora = {"finetune": "lora", "lora_rank": 2, "lora_targets": ["q_proj"], "shared_reference": True, "weight_bytes": 2,
         "batch_tokens": 4}
assert ppo_resident_memory(_cfg, _lora, 1)["parameters"]["lora"] == 2 * (8 + 8)
_bad_calls = [
    ({**_cfg, "hidden_size": 0}, _lora, 1), ({**_cfg, "hidden_size": 8.0}, _lora, 1), ({**_cfg, "vocab_size": True}, _lora, 1),
    ({**_cfg, "num_key_value_heads": 3}, _lora, 1), ({**_cfg, "hidden_size": 9}, _lora, 1),
    ({**_cfg, "tie_word_embeddings": 1}, _lora, 1), ({k: v for k, v in _cfg.items() if k != "vocab_size"}, _lora, 1),
    (_cfg, {**_lora, "finetune": "qlora"}, 1), (_cfg, {**_lora, "lora_rank": 0}, 1), (_cfg, {**_lora, "lora_rank": None}, 1),
    (_cfg, {**_lora, "lora_targets": []}, 1), (_cfg, {**_lora, "lora_targets": ["q_proj", "q_proj"]}, 1),
    (_cfg, {**_lora, "lora_targets": ["lm_head"]}, 1), (_cfg, {**_lora, "lora_targets": "q_proj"}, 1),
    (_cfg, {**_lora, "weight_bytes": 1}, 1), (_cfg, {**_lora, "weight_bytes": True}, 1), (_cfg, {**_lora, "batch_tokens": 0}, 1),
    (_cfg, {**_lora, "shared_reference": "yes"}, 1), (_cfg, {k: v for k, v in _lora.items() if k != "batch_tokens"}, 1),
    (_cfg, _lora, 0), (_cfg, _lora, -1.0), (_cfg, _lora, float("inf")), (_cfg, _lora, True), (list(_cfg.items()), _lora, 1),
]
for _args in _bad_calls:
    try:
        ppo_resident_memory(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=ppo_resident_memory points=2 name=ppo_memory_generated_setups_agree_with_reference
# hint: any Qwen2-shaped config, fine-tuning setup and GPU size: the same counts, bytes per role and verdict.
from hypothesis import strategies as st


@st.composite
def _accounts(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    kv = draw(st.sampled_from([g for g in (1, 2, 4, 8) if heads % g == 0]))
    config = {"hidden_size": heads * draw(st.integers(1, 16)), "intermediate_size": draw(st.integers(1, 300)),
              "num_hidden_layers": draw(st.integers(1, 30)), "num_attention_heads": heads, "num_key_value_heads": kv,
              "vocab_size": draw(st.integers(1, 5000)), "tie_word_embeddings": draw(st.booleans())}
    lora = draw(st.booleans())
    setup = {"finetune": "lora" if lora else "full", "shared_reference": lora and draw(st.booleans()),
             "weight_bytes": draw(st.sampled_from([2, 4])), "batch_tokens": draw(st.integers(1, 5000))}
    if lora:
        setup["lora_rank"] = draw(st.integers(1, 64))
        setup["lora_targets"] = draw(st.lists(st.sampled_from(PROJECTIONS), min_size=1, max_size=7, unique=True))
    gpu = draw(st.sampled_from([0.001, 0.01, 0.1, 1, 24.0, "exact"]))
    if gpu == "exact":  # exactly the account's total: the inclusive edge of "fits"
        gpu = reference("ppo_resident_memory")(config, setup, 1)["total_bytes"] / 2 ** 30
    return config, setup, gpu


def _fits(config, setup, gpu):
    return reference("ppo_resident_memory")(config, setup, gpu)["fits"]


reference.agrees("ppo_resident_memory", _accounts(), cases=80, clauses={
    "a full fine-tune": lambda c, s, g: s["finetune"] == "full",
    "LoRA with a separate reference": lambda c, s, g: s["finetune"] == "lora" and not s["shared_reference"],
    "LoRA with a shared reference": lambda c, s, g: s["finetune"] == "lora" and s["shared_reference"],
    "several LoRA targets": lambda c, s, g: len(s.get("lora_targets", [])) >= 2,
    "untied embeddings": lambda c, s, g: not c["tie_word_embeddings"],
    "grouped key-value heads": lambda c, s, g: c["num_key_value_heads"] < c["num_attention_heads"],
    "4-byte weights": lambda c, s, g: s["weight_bytes"] == 4,
    "a setup that fits the GPU": lambda c, s, g: _fits(c, s, g),
    "a setup that does not fit": lambda c, s, g: not _fits(c, s, g),
    "a GPU size that is an int": lambda c, s, g: type(g) is int,
    "a GPU exactly as large as the total": lambda c, s, g: reference("ppo_resident_memory")(c, s, g)["total_bytes"] == g * 2 ** 30,
})

# %% hidden exercise=ppo_resident_memory points=2 name=ppo_memory_generated_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect in the config, the setup or the GPU size is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "float_hidden": lambda a: {**a, "config": {**a["config"], "hidden_size": float(a["config"]["hidden_size"])}},
    "zero_layers": lambda a: {**a, "config": {**a["config"], "num_hidden_layers": 0}},
    "bad_heads": lambda a: {**a, "config": {**a["config"], "num_attention_heads": 3}},
    "tie_int": lambda a: {**a, "config": {**a["config"], "tie_word_embeddings": 0}},
    "full_shared": lambda a: {**a, "setup": {"finetune": "full", "shared_reference": True, "weight_bytes": 2, "batch_tokens": 8}},
    "unknown_target": lambda a: {**a, "setup": {**a["setup"], "lora_targets": ["qkv_proj"]}},
    "rank_bool": lambda a: {**a, "setup": {**a["setup"], "lora_rank": True}},
    "bytes_three": lambda a: {**a, "setup": {**a["setup"], "weight_bytes": 3}},
    "bytes_float_two": lambda a: {**a, "setup": {**a["setup"], "weight_bytes": 2.0}},
    "bytes_float_four": lambda a: {**a, "setup": {**a["setup"], "weight_bytes": 4.0}},
    "bytes_bool": lambda a: {**a, "setup": {**a["setup"], "weight_bytes": True}},
    "gpu_inf": lambda a: {**a, "gpu": float("inf")},
    "tokens_float": lambda a: {**a, "setup": {**a["setup"], "batch_tokens": 8.0}},
    "gpu_zero": lambda a: {**a, "gpu": 0.0},
    "gpu_nan": lambda a: {**a, "gpu": float("nan")},
    "gpu_bool": lambda a: {**a, "gpu": True},
    "missing_vocab": lambda a: {**a, "config": {k: v for k, v in a["config"].items() if k != "vocab_size"}},
    "rank_zero": lambda a: {**a, "setup": {**a["setup"], "lora_rank": 0}},
    "targets_repeated": lambda a: {**a, "setup": {**a["setup"], "lora_targets": ["q_proj", "q_proj"]}},
}
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite


def _broken(case, rng):
    config = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 40, "tie_word_embeddings": True}
    setup = {"finetune": "lora", "lora_rank": 2, "lora_targets": ["q_proj", "v_proj"], "shared_reference": False,
             "weight_bytes": 2, "batch_tokens": rng.randint(1, 64)}
    args = {"config": config, "setup": setup, "gpu": rng.choice([0.001, 1.0])}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["config"], args["setup"], args["gpu"]


_cases = [("valid", n) for n in range(8)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("ppo_resident_memory", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "a hidden size that is a float": lambda c, s, g: isinstance(c["hidden_size"], float),
    "zero layers": lambda c, s, g: c["num_hidden_layers"] == 0,
    "heads that do not divide the hidden size": lambda c, s, g: c["hidden_size"] % c["num_attention_heads"] != 0,
    "tie_word_embeddings that is not a bool": lambda c, s, g: not isinstance(c["tie_word_embeddings"], bool),
    "a config without vocab_size": lambda c, s, g: "vocab_size" not in c,
    "a full fine-tune sharing its reference": lambda c, s, g: s["finetune"] == "full" and s["shared_reference"],
    "an unknown LoRA target": lambda c, s, g: any(t not in PROJECTIONS for t in s.get("lora_targets", [])),
    "a LoRA target listed twice": lambda c, s, g: len(set(s.get("lora_targets", []))) < len(s.get("lora_targets", [])),
    "a LoRA rank that is a bool": lambda c, s, g: is_bool(s.get("lora_rank")),
    "a LoRA rank of 0": lambda c, s, g: s.get("lora_rank") == 0 and not is_bool(s.get("lora_rank")),
    "weight bytes of 3": lambda c, s, g: s["weight_bytes"] == 3,
    "weight bytes of 2.0": lambda c, s, g: type(s["weight_bytes"]) is float and s["weight_bytes"] == 2,
    "weight bytes of 4.0": lambda c, s, g: type(s["weight_bytes"]) is float and s["weight_bytes"] == 4,
    "weight bytes that are a bool": lambda c, s, g: is_bool(s["weight_bytes"]),
    "batch tokens that are a float": lambda c, s, g: isinstance(s["batch_tokens"], float),
    "a GPU size that is infinite": lambda c, s, g: is_number(g) and g == float("inf"),
    "a GPU size of 0": lambda c, s, g: is_number(g) and g == 0,
    "a GPU size that is NaN": lambda c, s, g: is_number(g) and g != g,
    "a GPU size that is a bool": lambda c, s, g: is_bool(g),
})
