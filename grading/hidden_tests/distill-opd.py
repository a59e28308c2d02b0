# %% hidden exercise=token_reverse_kl points=1 name=exact_kl_matches_kl_div_at_every_masked_position
# hint: at each masked-in position sum p_s * (log p_s - log p_t) over the whole vocabulary (the student's distribution first); every row of the batch is treated the same way.
torch.manual_seed(0)
_student = torch.randn(2, 4, 7, dtype=torch.float64) * 2
_teacher = torch.randn(2, 4, 7, dtype=torch.float64) * 2
_mask = torch.tensor([[True, True, False, True], [False, True, True, True]])
_result = token_reverse_kl(_student, _teacher, torch.zeros(2, 4, dtype=torch.long), _mask)
_log_q, _log_p = torch.log_softmax(_student, -1), torch.log_softmax(_teacher, -1)
_expected = torch.nn.functional.kl_div(_log_p, _log_q, reduction="none", log_target=True).sum(-1)
assert torch.allclose(_result["token_kl"][_mask], _expected[_mask], atol=1e-12)
assert torch.all(_result["token_kl"][~_mask] == 0) and _result["tokens"] == 6 and type(_result["tokens"]) is int
assert math.isclose(_result["mean_kl"].item(), float(_expected[_mask].mean()), rel_tol=1e-12)

# %% hidden exercise=token_reverse_kl points=1 name=sampled_log_ratio_is_an_unbiased_one_sample_estimate
# hint: at each masked-in position take log p_s(token) - log p_t(token) for the sampled token; its expectation under the student is the exact KL.
_student = torch.log(torch.tensor([[[0.7, 0.2, 0.1]]], dtype=torch.float64)).repeat(1, 3, 1)
_teacher = torch.log(torch.tensor([[[0.2, 0.3, 0.5]]], dtype=torch.float64)).repeat(1, 3, 1)
_result = token_reverse_kl(_student, _teacher, torch.tensor([[0, 1, 2]]), torch.ones(1, 3, dtype=torch.bool))
_ratios = [math.log(0.7 / 0.2), math.log(0.2 / 0.3), math.log(0.1 / 0.5)]
assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(_result["sampled_log_ratio"][0].tolist(), _ratios))
_weighted = sum(p * r for p, r in zip((0.7, 0.2, 0.1), _ratios))
assert all(math.isclose(value, _weighted, rel_tol=1e-9) for value in _result["token_kl"][0].tolist())

# %% hidden exercise=token_reverse_kl points=1 name=masked_out_garbage_never_reaches_a_result
# hint: replace masked-out logits before the softmax (nan and inf anywhere in a row poison its normalisation), and never index the vocabulary with a masked-out token.
_student = torch.tensor([[[1.0, 2.0, 3.0], [float("nan"), 0.0, float("inf")]]])
_teacher = torch.tensor([[[3.0, 2.0, 1.0], [float("-inf"), float("nan"), 1.0]]])
_result = token_reverse_kl(_student, _teacher, torch.tensor([[2, 999]]), torch.tensor([[True, False]]))
assert torch.isfinite(_result["token_kl"]).all() and torch.isfinite(_result["sampled_log_ratio"]).all()
assert _result["token_kl"][0, 1].item() == 0.0 and _result["sampled_log_ratio"][0, 1].item() == 0.0
_clean = token_reverse_kl(_student[:, :1], _teacher[:, :1], torch.tensor([[2]]), torch.tensor([[True]]))
assert math.isclose(_result["mean_kl"].item(), _clean["mean_kl"].item(), rel_tol=1e-6) and _result["mean_kl"].dtype == torch.float32
assert math.isclose(_result["sampled_log_ratio"][0, 0].item(), 2.0, rel_tol=1e-5), "(3 - L) - (1 - L)"

# %% hidden exercise=token_reverse_kl points=1 name=kl_gradient_reaches_the_student_and_never_the_teacher
# hint: keep the result differentiable with respect to the student's logits and detach the teacher's: a backward pass must leave the teacher without a gradient.
from tools.course.grader.boundary import backward_through

_student = torch.randn(1, 3, 5, dtype=torch.float64, requires_grad=True)
_teacher = torch.randn(1, 3, 5, dtype=torch.float64, requires_grad=True)
_result = backward_through(token_reverse_kl, _student, _teacher, torch.zeros(1, 3, dtype=torch.long),
                           torch.tensor([[True, False, True]]), select=["mean_kl"], reduce=None)
assert _teacher.grad is None or float(_teacher.grad.abs().sum()) == 0.0
assert float(_student.grad[0, 0].abs().sum()) > 0 and float(_student.grad[0, 1].abs().sum()) == 0.0

# %% hidden exercise=token_reverse_kl points=1 name=invalid_inputs_are_refused_valid_ones_computed
# hint: check both logits (3-D float32 or float64, same shape and dtype), the tokens (an integer tensor of the mask's shape, in range where the mask is on) and the mask (bool, same batch and time, not empty) before computing.
_s = torch.zeros(1, 2, 3)
_t = torch.zeros(1, 2, 3)
_ids = torch.tensor([[0, 2]])
_m = torch.tensor([[True, True]])
assert token_reverse_kl(_s, _t, _ids, _m)["tokens"] == 2
for _case in ((_s.double(), _t, _ids, _m), (_s.half(), _t.half(), _ids, _m), (_s.long(), _t.long(), _ids, _m),
              (_s[0], _t[0], _ids, _m), (_s, _t[:, :1], _ids, _m), (_s[..., :0], _t[..., :0], _ids, _m),
              (_s, _t, _ids.float(), _m), (_s, _t, _ids.bool(), _m), (_s, _t, _ids[:, :1], _m),
              (_s, _t, torch.tensor([[0, 3]]), _m), (_s, _t, torch.tensor([[-1, 0]]), _m), (_s, _t, _ids, _m.long()),
              (_s, _t, _ids, torch.zeros(1, 2, dtype=torch.bool)), (_s, _t, _ids, _m[0]), (_s.tolist(), _t, _ids, _m)):
    try:
        token_reverse_kl(*_case)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {[getattr(item, 'dtype', type(item).__name__) for item in _case]}")

# %% hidden exercise=token_reverse_kl points=1 name=generated_logits_match_the_reference
# hint: on any valid batch (float32 or float64 logits, large and small values, masks of any shape, garbage outside the mask, any integer dtype for the tokens) the tensors and the count are exactly the reference's.
import torch
from hypothesis import strategies as st


def _call(dims, seed, scale, flags, dtype, id_dtype, garbage):
    batch, time, vocab = dims
    generator = torch.Generator().manual_seed(seed)
    student = (torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64) * scale).to(dtype)
    teacher = (torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64) * scale).to(dtype)
    mask = torch.tensor(flags).reshape(batch, time)
    if not mask.any():
        mask[0, 0] = True
    tokens = torch.randint(0, vocab, (batch, time), generator=generator).to(id_dtype)
    if garbage:
        student[~mask] = float("nan")
        teacher[~mask] = float("inf")
        tokens[~mask] = vocab + 5
    return student, teacher, tokens, mask


_calls = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 6)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.integers(0, 10_000), st.sampled_from([0.5, 2.0, 8.0]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from([torch.float64, torch.float32]), st.sampled_from([torch.int64, torch.int32]), st.booleans(),
).map(lambda drawn: _call(*drawn)))
reference.agrees("token_reverse_kl", _calls, cases=120)

# %% hidden exercise=token_reverse_kl points=1 name=generated_invalid_inputs_raise_as_the_reference
# hint: wrong dtypes or shapes, tokens out of range or of a non-integer dtype, and empty or non-bool masks each give a ValueError; valid inputs among them are computed.
import torch
from hypothesis import strategies as st
_s = st.sampled_from([torch.zeros(1, 2, 3), torch.zeros(1, 2, 3, dtype=torch.float64), torch.zeros(1, 2, 3, dtype=torch.bfloat16),
                      torch.zeros(2, 3), torch.zeros(1, 2, 0), None])
_t = st.sampled_from([torch.zeros(1, 2, 3), torch.zeros(1, 2, 3, dtype=torch.float64), torch.zeros(1, 3, 3)])
_ids = st.sampled_from([torch.tensor([[0, 1]]), torch.tensor([[0, 3]]), torch.tensor([[0.0, 1.0]]), torch.tensor([[True, False]]),
                        torch.tensor([0, 1]), [[0, 1]]])
_m = st.sampled_from([torch.tensor([[True, False]]), torch.tensor([[False, False]]), torch.tensor([[1, 0]]), torch.ones(2, 1, dtype=torch.bool)])
reference.agrees("token_reverse_kl", st.tuples(_s, _t, _ids, _m), cases=150)

# %% hidden exercise=generalized_jsd points=1 name=the_two_ends_are_the_forward_and_reverse_kl
# hint: beta == 0 is KL(teacher || student) and beta == 1 is KL(student || teacher), each summed over the vocabulary and averaged over the masked-in positions.
torch.manual_seed(3)
_student = torch.randn(2, 3, 5, dtype=torch.float64)
_teacher = torch.randn(2, 3, 5, dtype=torch.float64)
_mask = torch.tensor([[True, False, True], [True, True, True]])
_log_q, _log_p = torch.log_softmax(_student, -1), torch.log_softmax(_teacher, -1)
_forward = (_log_p.exp() * (_log_p - _log_q)).sum(-1)
_reverse = (_log_q.exp() * (_log_q - _log_p)).sum(-1)
for _beta, _expected in ((0, _forward), (0.0, _forward), (1, _reverse), (1.0, _reverse)):
    _result = generalized_jsd(_student, _teacher, _mask, _beta)
    assert torch.allclose(_result["token_divergence"][_mask], _expected[_mask], atol=1e-12)
    assert math.isclose(_result["loss"].item(), float(_expected[_mask].mean()), rel_tol=1e-12)
    assert torch.all(_result["token_divergence"][~_mask] == 0)

# %% hidden exercise=generalized_jsd points=1 name=the_mixture_weighs_the_teacher_by_beta
# hint: M = beta * P + (1 - beta) * Q with P the teacher and Q the student, and JSD = beta * KL(P || M) + (1 - beta) * KL(Q || M): swapping the roles of beta and 1 - beta gives another number.
_p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
_q = torch.tensor([0.1, 0.3, 0.6], dtype=torch.float64)
for _beta in (0.1, 0.3, 0.9):
    _m = _beta * _p + (1 - _beta) * _q
    _expected = _beta * float((_p * (_p / _m).log()).sum()) + (1 - _beta) * float((_q * (_q / _m).log()).sum())
    _result = generalized_jsd(_q.log().view(1, 1, 3), _p.log().view(1, 1, 3), torch.tensor([[True]]), _beta)
    assert math.isclose(_result["loss"].item(), _expected, rel_tol=1e-9), _beta
_swapped = generalized_jsd(_p.log().view(1, 1, 3), _q.log().view(1, 1, 3), torch.tensor([[True]]), 0.1)["loss"].item()
assert not math.isclose(_swapped, generalized_jsd(_q.log().view(1, 1, 3), _p.log().view(1, 1, 3), torch.tensor([[True]]), 0.1)["loss"].item(), rel_tol=1e-3)

# %% hidden exercise=generalized_jsd points=1 name=temperature_divides_both_logits
# hint: divide the student's and the teacher's logits by the temperature before the softmax; a temperature of 1 changes nothing.
torch.manual_seed(4)
_student = torch.randn(1, 2, 6, dtype=torch.float64) * 3
_teacher = torch.randn(1, 2, 6, dtype=torch.float64) * 3
_mask = torch.ones(1, 2, dtype=torch.bool)
for _temperature in (0.5, 2, 4.0):
    for _beta in (0.0, 0.5, 1.0):
        _hot = generalized_jsd(_student, _teacher, _mask, _beta, _temperature)["loss"].item()
        _scaled = generalized_jsd(_student / _temperature, _teacher / _temperature, _mask, _beta, 1.0)["loss"].item()
        assert math.isclose(_hot, _scaled, rel_tol=1e-9), (_beta, _temperature)
assert generalized_jsd(_student, _teacher, _mask, 0.5, 4.0)["loss"].item() < generalized_jsd(_student, _teacher, _mask, 0.5)["loss"].item()

# %% hidden exercise=generalized_jsd points=1 name=jsd_gradient_reaches_the_student_and_never_the_teacher
# hint: for every beta the loss must stay differentiable with respect to the student's logits and leave the teacher's without a gradient.
from tools.course.grader.boundary import backward_through

for _beta in (0.0, 0.5, 1.0):
    _student = torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
    _teacher = torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
    backward_through(generalized_jsd, _student, _teacher, torch.tensor([[True, False]]), _beta, select=["loss"],
                     reduce=None)
    assert _teacher.grad is None or float(_teacher.grad.abs().sum()) == 0.0, _beta
    assert float(_student.grad[0, 0].abs().sum()) > 0 and float(_student.grad[0, 1].abs().sum()) == 0.0

# %% hidden exercise=generalized_jsd points=1 name=invalid_betas_and_temperatures_are_refused
# hint: beta must be a number in [0, 1] and the temperature a finite number > 0 (bools are not numbers here); the logits and the mask are checked as in TODO 1.
_s = torch.zeros(1, 2, 3)
_m = torch.tensor([[True, False]])
assert generalized_jsd(_s, _s.clone(), _m, 0.5, 2)["loss"].item() == 0.0
for _args in ((_s, _s, _m, -0.1), (_s, _s, _m, 1.01), (_s, _s, _m, True), (_s, _s, _m, None), (_s, _s, _m, float("nan")),
              (_s, _s, _m, "0.5"), (_s, _s, _m, 0.5, 0), (_s, _s, _m, 0.5, -1.0), (_s, _s, _m, 0.5, float("inf")),
              (_s, _s, _m, 0.5, True), (_s, _s.double(), _m, 0.5), (_s, _s, _m.float(), 0.5),
              (_s, _s, torch.zeros(1, 2, dtype=torch.bool), 0.5), (_s.half(), _s.half(), _m, 0.5)):
    try:
        generalized_jsd(*_args)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {[getattr(item, 'dtype', item) for item in _args]}")

# %% hidden exercise=generalized_jsd points=1 name=generated_divergences_match_the_reference
# hint: on any valid batch (float32 or float64, large and small logits, garbage outside the mask, beta at the ends or inside, any positive temperature, by position, keyword or default) the loss and the per-position divergences are exactly the reference's.
import torch
from hypothesis import strategies as st


def _call(dims, seed, scale, flags, dtype, beta, temperature, how):
    batch, time, vocab = dims
    generator = torch.Generator().manual_seed(seed)
    student = (torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64) * scale).to(dtype)
    teacher = (torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64) * scale).to(dtype)
    mask = torch.tensor(flags).reshape(batch, time)
    if not mask.any():
        mask[-1, -1] = True
    student[~mask] = float("nan")
    if how == "default":
        return (student, teacher, mask), {}
    if how == "keyword":
        return (student, teacher, mask), {"beta": beta, "temperature": temperature}
    return (student, teacher, mask, beta, temperature), {}


_calls = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 6)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.integers(0, 10_000), st.sampled_from([0.5, 2.0, 6.0]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from([torch.float64, torch.float32]), st.sampled_from([0, 0.0, 0.1, 0.5, 0.9, 1, 1.0, 0.25]),
    st.sampled_from([1.0, 1, 0.5, 2.0, 3]), st.sampled_from(["default", "keyword", "positional"]),
).map(lambda drawn: _call(*drawn)))
reference.agrees("generalized_jsd", _calls, cases=120)

# %% hidden exercise=generalized_jsd points=1 name=generated_invalid_settings_raise_as_the_reference
# hint: betas outside [0, 1], non-positive or infinite temperatures, bools or text as numbers, and the logits and masks TODO 1 refuses each give a ValueError; valid calls among them are computed.
import torch
from hypothesis import strategies as st
_s = st.sampled_from([torch.zeros(1, 2, 3), torch.zeros(1, 2, 3, dtype=torch.float64), torch.zeros(1, 2, 3, dtype=torch.int64), torch.zeros(2, 3)])
_t = st.sampled_from([torch.zeros(1, 2, 3), torch.ones(1, 2, 3, dtype=torch.float64)])
_m = st.sampled_from([torch.tensor([[True, False]]), torch.tensor([[False, False]]), torch.tensor([[1.0, 0.0]])])
_beta = st.sampled_from([0, 0.5, 1, -0.5, 2, True, None, float("nan")])
_temperature = st.sampled_from([1.0, 2, 0, -1.0, float("inf"), False, "1"])
reference.agrees("generalized_jsd", st.tuples(_s, _t, _m, _beta, _temperature), cases=150)

# %% hidden exercise=mixed_distillation_loss points=1 name=lam_weighs_the_kinds_not_the_sequences
# hint: average the reverse KL over each sequence's masked-in positions, then over the sequences of each kind, and only then weigh the two kinds by lam and 1 - lam.
torch.manual_seed(5)
_student = torch.randn(4, 3, 5, dtype=torch.float64)
_teacher = torch.randn(4, 3, 5, dtype=torch.float64)
_mask = torch.tensor([[True, True, True], [True, False, False], [True, True, False], [False, True, True]])
_log_q, _log_p = torch.log_softmax(_student, -1), torch.log_softmax(_teacher, -1)
_token = (_log_q.exp() * (_log_q - _log_p)).sum(-1)
_sequence = [float(_token[row][_mask[row]].mean()) for row in range(4)]
_flags = [True, False, False, False]
for _lam in (0.0, 0.3, 1):
    _result = mixed_distillation_loss(_student, _teacher, _mask, _flags, _lam)
    _expected = _lam * _sequence[0] + (1 - _lam) * sum(_sequence[1:]) / 3
    assert math.isclose(_result["loss"].item(), _expected, rel_tol=1e-9), _lam
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(_result["sequence_kl"], _sequence))
    assert math.isclose(_result["on_policy_kl"], _sequence[0], rel_tol=1e-9)
    assert math.isclose(_result["fixed_kl"], sum(_sequence[1:]) / 3, rel_tol=1e-9)

# %% hidden exercise=mixed_distillation_loss points=1 name=a_kind_without_sequences_is_none_and_needs_zero_weight
# hint: report the mean of a kind without any sequence as None, leave a kind with weight 0 out of the loss, and refuse a positive weight on a kind without sequences.
_student = torch.zeros(2, 2, 3, dtype=torch.float64)
_student[:, :, 0] = 2.0
_teacher = torch.zeros(2, 2, 3, dtype=torch.float64)
_mask = torch.ones(2, 2, dtype=torch.bool)
_all_on = mixed_distillation_loss(_student, _teacher, _mask, [True, True], 1.0)
assert _all_on["fixed_kl"] is None and math.isclose(_all_on["loss"].item(), _all_on["on_policy_kl"], rel_tol=1e-12)
_all_fixed = mixed_distillation_loss(_student, _teacher, _mask, [False, False], 0)
assert _all_fixed["on_policy_kl"] is None and type(_all_fixed["fixed_kl"]) is float
for _flags, _lam in (([True, True], 0.5), ([False, False], 0.01), ([True, True], 0.0), ([False, False], 1)):
    try:
        mixed_distillation_loss(_student, _teacher, _mask, _flags, _lam)
    except ValueError:
        continue
    raise AssertionError(f"a positive weight on a missing kind was accepted: {_flags}, lam={_lam}")

# %% hidden exercise=mixed_distillation_loss points=1 name=mixed_loss_gradient_never_reaches_the_teacher
# hint: the teacher's logits may arrive with requires_grad=True; detach them, so that a backward pass fills the student's gradient and leaves the teacher's empty.
from tools.course.grader.boundary import backward_through

_student = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
_teacher = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
_result = mixed_distillation_loss(_student, _teacher, torch.tensor([[True, True], [True, False], [True, True]]),
                                  [True, False, True], 0.5)
assert _result["loss"].requires_grad
backward_through(mixed_distillation_loss, _student, _teacher, torch.tensor([[True, True], [True, False], [True, True]]),
                 [True, False, True], 0.5, select=["loss"], reduce=None)
assert _teacher.grad is None or float(_teacher.grad.abs().sum()) == 0.0
assert float(_student.grad[1, 0].abs().sum()) > 0 and float(_student.grad[1, 1].abs().sum()) == 0.0

# %% hidden exercise=mixed_distillation_loss points=1 name=invalid_batches_and_settings_are_refused_valid_ones_mixed
# hint: check the logits, a mask with a True in every row, on_policy (a list of bools of the batch's length) and lam (a number in [0, 1], not a bool) before computing.
_s = torch.zeros(2, 2, 3)
_m = torch.ones(2, 2, dtype=torch.bool)
assert mixed_distillation_loss(_s, _s.clone(), _m, [True, False], 0.5)["sequence_kl"] == [0.0, 0.0]
for _args in ((_s, _s, torch.tensor([[True, True], [False, False]]), [True, False], 0.5), (_s, _s, _m, [True], 0.5),
              (_s, _s, _m, [True, False, True], 0.5), (_s, _s, _m, [1, 0], 0.5), (_s, _s, _m, (True, False), 0.5),
              (_s, _s, _m, "TF", 0.5), (_s, _s, _m, [True, False], -0.1), (_s, _s, _m, [True, False], 1.5),
              (_s, _s, _m, [True, False], True), (_s, _s, _m, [True, False], None), (_s, _s, _m, [True, False], float("nan")),
              (_s, _s.double(), _m, [True, False], 0.5), (_s.long(), _s.long(), _m, [True, False], 0.5), (_s, _s, _m.int(), [True, False], 0.5)):
    try:
        mixed_distillation_loss(*_args)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {[getattr(item, 'dtype', item) for item in _args]}")

# %% hidden exercise=mixed_distillation_loss points=1 name=generated_batches_match_the_reference
# hint: on any valid batch (float32 or float64, ragged masks with garbage outside them, any mix of on-policy and fixed sequences and any allowed lam) the loss, the per-sequence means and the two kind means are exactly the reference's.
import torch
from hypothesis import strategies as st


def _call(dims, seed, flags, kinds, dtype, lam):
    batch, time, vocab = dims
    generator = torch.Generator().manual_seed(seed)
    student = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype) * 2
    teacher = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype) * 2
    mask = torch.tensor(flags).reshape(batch, time)
    mask[:, 0] = mask[:, 0] | ~mask.any(dim=1)
    student[~mask] = float("inf")
    if lam > 0 and not any(kinds):
        kinds = [True] + kinds[1:]
    if lam < 1 and all(kinds):
        if batch > 1:
            kinds = kinds[:-1] + [False]
        else:
            lam = 1.0
    return student, teacher, mask, kinds, lam


_calls = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.integers(0, 10_000), st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.lists(st.booleans(), min_size=dims[0], max_size=dims[0]), st.sampled_from([torch.float64, torch.float32]),
    st.sampled_from([0, 0.0, 0.25, 0.5, 1, 1.0]),
).map(lambda drawn: _call(*drawn)))
reference.agrees("mixed_distillation_loss", _calls, cases=120)

# %% hidden exercise=mixed_distillation_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: empty rows, wrong on_policy lists, lam out of range or not a number, a positive weight on a missing kind, and the logits TODO 1 refuses each give a ValueError; valid batches among them are mixed.
import torch
from hypothesis import strategies as st
_s = st.sampled_from([torch.zeros(2, 2, 3), torch.zeros(2, 2, 3, dtype=torch.float64), torch.zeros(2, 2)])
_t = st.sampled_from([torch.ones(2, 2, 3), torch.ones(2, 2, 3, dtype=torch.float64)])
_m = st.sampled_from([torch.ones(2, 2, dtype=torch.bool), torch.tensor([[True, False], [False, False]]), torch.ones(2, 2)])
_flags = st.sampled_from([[True, False], [True, True], [False, False], [True], [1, 0], None])
_lam = st.sampled_from([0, 0.5, 1, 1.0, -1, 2, True, "0.5"])
reference.agrees("mixed_distillation_loss", st.tuples(_s, _t, _m, _flags, _lam), cases=150)
