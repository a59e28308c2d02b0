# %% hidden exercise=token_reverse_kl points=1 name=exact_kl_matches_kl_div_at_every_masked_position
# hint: at each masked-in position sum p_s * (log p_s - log p_t) over the whole vocabulary (the student's distribution first); every row of the batch is treated the same way.
torch.manual_seed(0)
_student = torch.randn(2, 4, 7, dtype=torch.float64) * 2
_teacher = torch.randn(2, 4, 7, dtype=torch.float64) * 2
_mask = torch.tensor([[True, True, False, True], [False, True, True, True]])
_log_q, _log_p = torch.log_softmax(_student, -1), torch.log_softmax(_teacher, -1)
_expected = torch.nn.functional.kl_div(_log_p, _log_q, reduction="none", log_target=True).sum(-1)
_result = token_reverse_kl(_student, _teacher, torch.zeros(2, 4, dtype=torch.long), _mask.clone())
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
    if garbage == 1:
        student[~mask] = float("nan")
        teacher[~mask] = float("inf")
        tokens[~mask] = vocab + 5
    elif garbage == 2:  # one vocabulary entry only (the first or the last), -inf in the teacher, negative ids
        entry = 0 if seed % 2 else vocab - 1
        student[..., entry] = torch.where(mask, student[..., entry], torch.full_like(student[..., entry], float("nan")))
        teacher[~mask] = -float("inf")
        tokens[~mask] = -1
    elif garbage == 3:  # the student is the teacher: every KL is exactly 0
        student = teacher.clone()
        student[~mask] = float("nan")
    return student, teacher, tokens, mask


_calls = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 6)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.integers(0, 10_000), st.sampled_from([0.5, 2.0, 8.0]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from([torch.float64, torch.float32]), st.sampled_from([torch.int64, torch.int32]), st.integers(0, 3),
).map(lambda drawn: _call(*drawn)))
reference.agrees("token_reverse_kl", _calls, cases=160, clauses={
    "float32 logits": lambda s, t, ids, m: s.dtype == torch.float32,
    "float64 logits": lambda s, t, ids, m: s.dtype == torch.float64,
    "int32 tokens": lambda s, t, ids, m: ids.dtype == torch.int32,
    "garbage (nan, inf, out-of-range ids) outside the mask": lambda s, t, ids, m: bool((~m).any())
        and not bool(torch.isfinite(s[~m]).all()),
    "a vocabulary of one": lambda s, t, ids, m: s.shape[-1] == 1,
    "large logits (scale 8)": lambda s, t, ids, m: float(s[m].abs().max()) > 8,
    "a masked-out position between masked-in ones": lambda s, t, ids, m: any(
        "10" in "".join("1" if v else "0" for v in row) and "1" in "".join("1" if v else "0" for v in row)[
            "".join("1" if v else "0" for v in row).index("10") + 1:] for row in m.tolist()),
    "-inf teacher logits outside the mask": lambda s, t, ids, m: bool((t[~m] == -float("inf")).any()),
    "a negative token id outside the mask": lambda s, t, ids, m: bool((ids[~m] < 0).any()),
    "nan in one vocabulary entry of a masked-out position only": lambda s, t, ids, m: bool((~m).any()) and bool(
        torch.isnan(s[~m]).any()) and not bool(torch.isnan(s[~m]).all()),
    "the student equal to the teacher (every KL exactly 0)": lambda s, t, ids, m: bool(torch.equal(s[m], t[m])),
    "a masked-out first position": lambda s, t, ids, m: bool((~m[:, 0]).any()),
})

# %% hidden exercise=token_reverse_kl points=1 name=generated_invalid_inputs_raise_as_the_reference
# hint: wrong dtypes or shapes, tokens out of range or of a non-integer dtype, and empty or non-bool masks each give a ValueError; valid inputs among them are computed.
import torch
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite


def _base(rng):
    batch, time, vocab = rng.randint(1, 3), rng.randint(1, 3), rng.randint(2, 5)
    dtype = rng.choice([torch.float32, torch.float64])
    generator = torch.Generator().manual_seed(rng.randrange(10 ** 6))
    student = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    teacher = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    mask = torch.rand(batch, time, generator=generator) < 0.6
    mask[:, 0] = True
    return student, teacher, mask


def _logits_defect(kind, student, teacher):
    """Break the logits in one way (the check every TODO shares)."""
    other = torch.float64 if student.dtype == torch.float32 else torch.float32
    return {"half": (student.half(), teacher.half()), "int": (student.long(), teacher.long()),
            "2-D": (student[:, :, 0], teacher[:, :, 0]), "empty vocabulary": (student[:, :, :0], teacher[:, :, :0]),
            "list": (student.tolist(), teacher), "teacher dtype": (student, teacher.to(other)),
            "teacher shape": (student, teacher[:, :, :1]), "teacher None": (student, None)}[kind]


_LOGITS = ("half", "int", "2-D", "empty vocabulary", "list", "teacher dtype", "teacher shape", "teacher None")


def _student_ok(student):
    return (isinstance(student, torch.Tensor) and student.dim() == 3 and student.dtype in (torch.float32, torch.float64)
            and student.shape[-1] >= 1)


def _logits_ok(student, teacher):
    return (_student_ok(student) and isinstance(teacher, torch.Tensor) and teacher.shape == student.shape
            and teacher.dtype == student.dtype)


def _mask_shaped(student, mask):
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == student.shape[:2]


def _break_mask(kind, mask, rng):
    if kind == "float":
        return mask.float()
    if kind == "int":
        return mask.int()
    if kind == "shape":
        return mask[:, :0] if mask.shape[1] == 1 else mask[:, :-1]
    if kind == "list":
        return mask.tolist()
    empty = mask.clone()
    if kind == "all False":
        empty[:] = False
    else:
        empty[rng.randrange(mask.shape[0])] = False
    return empty


_defects = ([("valid", n) for n in range(12)] + [("logits", kind) for kind in _LOGITS]
            + [("mask", kind) for kind in ("float", "int", "shape", "list", "all False")]
            + [("tokens", kind) for kind in ("float", "bool", "1-D", "list", "at vocab", "negative")])


def _one_defect(defect, rng):
    kind, bad = defect
    student, teacher, mask = _base(rng)
    generator = torch.Generator().manual_seed(rng.randrange(10 ** 6))
    tokens = torch.randint(0, student.shape[-1], mask.shape, generator=generator).to(rng.choice([torch.int64, torch.int32]))
    if kind == "logits":
        student, teacher = _logits_defect(bad, student, teacher)
    elif kind == "mask":
        mask = _break_mask(bad, mask, rng)
    elif kind == "tokens":
        row, column = rng.randrange(mask.shape[0]), 0
        broken = tokens.clone()
        broken[row, column] = student.shape[-1] if bad == "at vocab" else -1
        tokens = {"float": tokens.float(), "bool": tokens > 0, "1-D": tokens[0], "list": tokens.tolist(),
                  "at vocab": broken, "negative": broken}[bad]
    return student, teacher, tokens, mask


def _tokens_ok(s, ids, m):
    return (isinstance(ids, torch.Tensor) and ids.shape == m.shape and ids.dtype != torch.bool
            and not ids.is_floating_point() and not ids.is_complex())


reference.agrees("token_reverse_kl", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "student logits of a half or integer dtype": lambda s, t, ids, m: isinstance(s, torch.Tensor) and s.dim() == 3
        and s.dtype not in (torch.float32, torch.float64),
    "student logits not 3-D or not a tensor": lambda s, t, ids, m: not isinstance(s, torch.Tensor) or s.dim() != 3,
    "an empty vocabulary": lambda s, t, ids, m: isinstance(s, torch.Tensor) and s.dim() == 3 and s.shape[-1] == 0,
    "teacher logits of another dtype or shape, or not a tensor": lambda s, t, ids, m: _student_ok(s)
        and not _logits_ok(s, t),
    "a mask that is not a bool tensor [batch, time]": lambda s, t, ids, m: _logits_ok(s, t) and not _mask_shaped(s, m),
    "a mask without any True": lambda s, t, ids, m: _logits_ok(s, t) and _mask_shaped(s, m) and not bool(m.any()),
    "tokens of a float or bool dtype, another shape, or not a tensor": lambda s, t, ids, m: _logits_ok(s, t)
        and _mask_shaped(s, m) and bool(m.any()) and not _tokens_ok(s, ids, m),
    "a masked-in token outside [0, vocab)": lambda s, t, ids, m: _logits_ok(s, t) and _mask_shaped(s, m)
        and bool(m.any()) and _tokens_ok(s, ids, m) and bool(((ids < 0) | (ids >= s.shape[-1]))[m].any()),
    "a valid call": lambda s, t, ids, m: _logits_ok(s, t) and _mask_shaped(s, m) and bool(m.any())
        and _tokens_ok(s, ids, m) and not bool(((ids < 0) | (ids >= s.shape[-1]))[m].any()),
})

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
    _result = generalized_jsd(_student, _teacher, _mask.clone(), _beta)
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
    if seed % 3 == 0:
        teacher[~mask] = float("inf") if seed % 2 else -float("inf")
    if how == "default":
        return (student, teacher, mask), {}
    if how == "keyword":
        return (student, teacher, mask), {"beta": beta, "temperature": temperature}
    return (student, teacher, mask, beta, temperature), {}


_calls = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 6)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.integers(0, 10_000), st.sampled_from([0.5, 2.0, 6.0]),
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from([torch.float64, torch.float32]),
    st.sampled_from([0, 0.0, 0.1, 0.5, 0.9, 1, 1.0, 0.25, -0.0, 5e-324, 1 - 2 ** -53]),
    st.sampled_from([1.0, 1, 0.5, 2.0, 3, 0.01, 1e4]), st.sampled_from(["default", "keyword", "positional"]),
).map(lambda drawn: _call(*drawn)))


def _settings(student, teacher, mask, beta=0.5, temperature=1.0):
    return beta, temperature


reference.agrees("generalized_jsd", _calls, cases=120, clauses={
    "beta 0 (forward KL)": lambda *a, **k: _settings(*a, **k)[0] == 0,
    "beta 1 (reverse KL)": lambda *a, **k: _settings(*a, **k)[0] == 1,
    "beta inside (0, 1) other than 0.5": lambda *a, **k: 0 < _settings(*a, **k)[0] < 1 and _settings(*a, **k)[0] != 0.5,
    "an int beta at an end": lambda *a, **k: type(_settings(*a, **k)[0]) is int,
    "a temperature other than 1": lambda *a, **k: _settings(*a, **k)[1] != 1,
    "beta and temperature by default": lambda *a, **k: len(a) == 3 and not k,
    "beta and temperature by keyword": lambda *a, **k: bool(k),
    "float32 logits": lambda *a, **k: a[0].dtype == torch.float32,
    "nan outside the mask": lambda *a, **k: bool((~a[2]).any()),
    "beta -0.0 (equal to 0: the forward KL)": lambda *a, **k: _settings(*a, **k)[0] == 0
        and str(_settings(*a, **k)[0]) == "-0.0",
    "beta just inside (0, 1) next to an end (5e-324, 1 - 2**-53)": lambda *a, **k: _settings(*a, **k)[0] in (
        5e-324, 1 - 2 ** -53),
    "a temperature far from 1 (0.01, 1e4)": lambda *a, **k: _settings(*a, **k)[1] in (0.01, 1e4),
    "inf or -inf teacher logits outside the mask": lambda *a, **k: bool(torch.isinf(a[1][~a[2]]).any()),
})

# %% hidden exercise=generalized_jsd points=1 name=generated_invalid_settings_raise_as_the_reference
# hint: betas outside [0, 1], non-positive or infinite temperatures, bools or text as numbers, and the logits and masks TODO 1 refuses each give a ValueError; valid calls among them are computed.
import torch
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite


def _base(rng):
    batch, time, vocab = rng.randint(1, 3), rng.randint(1, 3), rng.randint(2, 5)
    dtype = rng.choice([torch.float32, torch.float64])
    generator = torch.Generator().manual_seed(rng.randrange(10 ** 6))
    student = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    teacher = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    mask = torch.rand(batch, time, generator=generator) < 0.6
    mask[:, 0] = True
    return student, teacher, mask


def _logits_defect(kind, student, teacher):
    """Break the logits in one way (the check every TODO shares)."""
    other = torch.float64 if student.dtype == torch.float32 else torch.float32
    return {"half": (student.half(), teacher.half()), "int": (student.long(), teacher.long()),
            "2-D": (student[:, :, 0], teacher[:, :, 0]), "empty vocabulary": (student[:, :, :0], teacher[:, :, :0]),
            "list": (student.tolist(), teacher), "teacher dtype": (student, teacher.to(other)),
            "teacher shape": (student, teacher[:, :, :1]), "teacher None": (student, None)}[kind]


_LOGITS = ("half", "int", "2-D", "empty vocabulary", "list", "teacher dtype", "teacher shape", "teacher None")


def _student_ok(student):
    return (isinstance(student, torch.Tensor) and student.dim() == 3 and student.dtype in (torch.float32, torch.float64)
            and student.shape[-1] >= 1)


def _logits_ok(student, teacher):
    return (_student_ok(student) and isinstance(teacher, torch.Tensor) and teacher.shape == student.shape
            and teacher.dtype == student.dtype)


def _mask_shaped(student, mask):
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == student.shape[:2]


def _break_mask(kind, mask, rng):
    if kind == "float":
        return mask.float()
    if kind == "int":
        return mask.int()
    if kind == "shape":
        return mask[:, :0] if mask.shape[1] == 1 else mask[:, :-1]
    if kind == "list":
        return mask.tolist()
    empty = mask.clone()
    if kind == "all False":
        empty[:] = False
    else:
        empty[rng.randrange(mask.shape[0])] = False
    return empty


_defects = ([("valid", n) for n in range(12)] + [("logits", kind) for kind in _LOGITS]
            + [("mask", kind) for kind in ("float", "int", "shape", "list", "all False")]
            + [("beta", bad) for bad in (-0.5, 1.01, 2, True, None, float("nan"), "0.5", -5e-324, 1 + 2 ** -52)]
            + [("temperature", bad) for bad in (0, -1.0, float("inf"), False, "1", None, float("nan"), -0.0, -5e-324)])


def _one_defect(defect, rng):
    kind, bad = defect
    student, teacher, mask = _base(rng)
    beta, temperature = rng.choice([0, 0.5, 1, 0.1, 1.0]), rng.choice([1.0, 2, 0.5])
    if kind == "logits":
        student, teacher = _logits_defect(bad, student, teacher)
    elif kind == "mask":
        mask = _break_mask(bad, mask, rng)
    elif kind == "beta":
        beta = bad
    elif kind == "temperature":
        temperature = bad
    return student, teacher, mask, beta, temperature


def _finite(value):
    return is_number(value) and not not_finite(value)


def _tensors_ok(s, t, m):
    return _logits_ok(s, t) and _mask_shaped(s, m) and bool(m.any())


reference.agrees("generalized_jsd", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "student logits of a half or integer dtype, not 3-D or not a tensor": lambda s, t, m, b, tau: not _student_ok(s)
        and not (isinstance(s, torch.Tensor) and s.dim() == 3 and s.shape[-1] == 0),
    "an empty vocabulary": lambda s, t, m, b, tau: isinstance(s, torch.Tensor) and s.dim() == 3 and s.shape[-1] == 0,
    "teacher logits of another dtype or shape, or not a tensor": lambda s, t, m, b, tau: _student_ok(s)
        and not _logits_ok(s, t),
    "a mask that is not a bool tensor [batch, time]": lambda s, t, m, b, tau: _logits_ok(s, t) and not _mask_shaped(s, m),
    "a mask without any True": lambda s, t, m, b, tau: _logits_ok(s, t) and _mask_shaped(s, m) and not bool(m.any()),
    "beta outside [0, 1]": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and _finite(b) and not 0 <= b <= 1,
    "beta that is a bool, nan, None or text": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and not _finite(b),
    "a temperature that is 0 or negative": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and _finite(b) and 0 <= b <= 1
        and _finite(tau) and tau <= 0,
    "a temperature that is a bool, inf, nan, None or text": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and _finite(b)
        and 0 <= b <= 1 and not _finite(tau),
    "a valid call": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and _finite(b) and 0 <= b <= 1 and _finite(tau)
        and tau > 0,
    "beta one float step outside [0, 1] (-5e-324, 1 + 2**-52)": lambda s, t, m, b, tau: _tensors_ok(s, t, m)
        and b in (-5e-324, 1 + 2 ** -52) and type(b) is float,
    "a temperature of -0.0 or the negative subnormal": lambda s, t, m, b, tau: _tensors_ok(s, t, m) and _finite(b)
        and 0 <= b <= 1 and tau in (-0.0, -5e-324) and type(tau) is float and str(tau).startswith("-"),
})

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
    teacher[~mask] = float("nan") if seed % 2 else -float("inf")
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
    st.sampled_from([0, 0.0, 0.25, 0.5, 1, 1.0, -0.0, 5e-324, 1 - 2 ** -53, 0.1]),
).map(lambda drawn: _call(*drawn)))
reference.agrees("mixed_distillation_loss", _calls, cases=150, clauses={
    "lam 0 (fixed trajectories only)": lambda s, t, m, flags, lam: lam == 0,
    "lam 1 (on-policy trajectories only)": lambda s, t, m, flags, lam: lam == 1,
    "lam inside (0, 1)": lambda s, t, m, flags, lam: 0 < lam < 1,
    "an int lam": lambda s, t, m, flags, lam: type(lam) is int,
    "a kind without sequences": lambda s, t, m, flags, lam: all(flags) or not any(flags),
    "several sequences of one kind": lambda s, t, m, flags, lam: sum(flags) >= 2 or len(flags) - sum(flags) >= 2,
    "rows with different masked-in counts": lambda s, t, m, flags, lam: len(set(m.sum(dim=1).tolist())) > 1,
    "float32 logits": lambda s, t, m, flags, lam: s.dtype == torch.float32,
    "lam just inside (0, 1) next to an end (5e-324, 1 - 2**-53)": lambda s, t, m, flags, lam: lam in (5e-324, 1 - 2 ** -53),
    "lam -0.0 (equal to 0)": lambda s, t, m, flags, lam: lam == 0 and str(lam) == "-0.0",
    "nan or -inf teacher logits outside the mask": lambda s, t, m, flags, lam: bool((~m).any())
        and not bool(torch.isfinite(t[~m]).all()),
    "a masked-out last position": lambda s, t, m, flags, lam: bool((~m[:, -1]).any()),
})

# %% hidden exercise=mixed_distillation_loss points=1 name=generated_invalid_batches_raise_as_the_reference
# hint: empty rows, wrong on_policy lists, lam out of range or not a number, a positive weight on a missing kind, and the logits TODO 1 refuses each give a ValueError; valid batches among them are mixed.
import torch
from tools.course.grader.clauses import each_of, is_bool, is_number, not_finite


def _base(rng):
    batch, time, vocab = rng.randint(1, 3), rng.randint(1, 3), rng.randint(2, 5)
    dtype = rng.choice([torch.float32, torch.float64])
    generator = torch.Generator().manual_seed(rng.randrange(10 ** 6))
    student = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    teacher = torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64).to(dtype)
    mask = torch.rand(batch, time, generator=generator) < 0.6
    mask[:, 0] = True
    return student, teacher, mask


def _logits_defect(kind, student, teacher):
    """Break the logits in one way (the check every TODO shares)."""
    other = torch.float64 if student.dtype == torch.float32 else torch.float32
    return {"half": (student.half(), teacher.half()), "int": (student.long(), teacher.long()),
            "2-D": (student[:, :, 0], teacher[:, :, 0]), "empty vocabulary": (student[:, :, :0], teacher[:, :, :0]),
            "list": (student.tolist(), teacher), "teacher dtype": (student, teacher.to(other)),
            "teacher shape": (student, teacher[:, :, :1]), "teacher None": (student, None)}[kind]


_LOGITS = ("half", "int", "2-D", "empty vocabulary", "list", "teacher dtype", "teacher shape", "teacher None")


def _student_ok(student):
    return (isinstance(student, torch.Tensor) and student.dim() == 3 and student.dtype in (torch.float32, torch.float64)
            and student.shape[-1] >= 1)


def _logits_ok(student, teacher):
    return (_student_ok(student) and isinstance(teacher, torch.Tensor) and teacher.shape == student.shape
            and teacher.dtype == student.dtype)


def _mask_shaped(student, mask):
    return isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == student.shape[:2]


def _break_mask(kind, mask, rng):
    if kind == "float":
        return mask.float()
    if kind == "int":
        return mask.int()
    if kind == "shape":
        return mask[:, :0] if mask.shape[1] == 1 else mask[:, :-1]
    if kind == "list":
        return mask.tolist()
    empty = mask.clone()
    if kind == "all False":
        empty[:] = False
    else:
        empty[rng.randrange(mask.shape[0])] = False
    return empty


_defects = ([("valid", n) for n in range(12)] + [("logits", kind) for kind in _LOGITS]
            + [("mask", kind) for kind in ("float", "int", "shape", "list", "all False", "an empty row")]
            + [("on_policy", kind) for kind in ("short", "long", "ints", "tuple", "None", "text")]
            + [("lam", bad) for bad in (-1, 1.5, 2, True, None, float("nan"), "0.5", -5e-324, 1 + 2 ** -52, float("inf"))]
            + [("kinds", kind) for kind in ("lam > 0 without on-policy rows", "lam < 1 without fixed rows")])


def _one_defect(defect, rng):
    kind, bad = defect
    student, teacher, mask = _base(rng)
    batch = mask.shape[0]
    if batch == 1:
        flags, lam = [rng.choice([True, False])], None
        lam = 1.0 if flags[0] else 0
    else:
        flags = [True] + [False] + [rng.choice([True, False]) for _ in range(batch - 2)]
        rng.shuffle(flags)
        lam = rng.choice([0, 0.25, 0.5, 1, 1.0])
    if kind == "logits":
        student, teacher = _logits_defect(bad, student, teacher)
    elif kind == "mask":
        mask = _break_mask(bad, mask, rng)
    elif kind == "on_policy":
        flags = {"short": flags[:-1], "long": flags + [True], "ints": [int(f) for f in flags], "tuple": tuple(flags),
                 "None": None, "text": "".join("T" if f else "F" for f in flags)}[bad]
    elif kind == "lam":
        lam = bad
    elif bad == "lam > 0 without on-policy rows":
        flags, lam = [False] * batch, rng.choice([0.5, 1, 0.01])
    elif kind == "kinds":
        flags, lam = [True] * batch, rng.choice([0, 0.5, 0.99])
    return student, teacher, mask, flags, lam


def _rows_ok(s, t, m):
    return _logits_ok(s, t) and _mask_shaped(s, m) and bool(m.any(dim=1).all())


def _flags_ok(m, flags):
    return isinstance(flags, list) and len(flags) == m.shape[0] and all(isinstance(f, bool) for f in flags)


def _lam_ok(lam):
    return not is_bool(lam) and isinstance(lam, (int, float)) and 0 <= lam <= 1


reference.agrees("mixed_distillation_loss", each_of(_defects, _one_defect, variants=2), cases=2 * len(_defects), clauses={
    "student logits of a half or integer dtype, not 3-D, empty or not a tensor": lambda s, t, m, f, lam: not _student_ok(s),
    "teacher logits of another dtype or shape, or not a tensor": lambda s, t, m, f, lam: _student_ok(s)
        and not _logits_ok(s, t),
    "a mask that is not a bool tensor [batch, time]": lambda s, t, m, f, lam: _logits_ok(s, t) and not _mask_shaped(s, m),
    "a row without a True in the mask": lambda s, t, m, f, lam: _logits_ok(s, t) and _mask_shaped(s, m)
        and not bool(m.any(dim=1).all()),
    "on_policy of another length, not a list, or not bools": lambda s, t, m, f, lam: _rows_ok(s, t, m)
        and not _flags_ok(m, f),
    "lam outside [0, 1]": lambda s, t, m, f, lam: _rows_ok(s, t, m) and _flags_ok(m, f) and is_number(lam)
        and not not_finite(lam) and not 0 <= lam <= 1,
    "lam that is a bool, nan, None or text": lambda s, t, m, f, lam: _rows_ok(s, t, m) and _flags_ok(m, f)
        and not (is_number(lam) and not not_finite(lam)),
    "lam > 0 and no on-policy sequence": lambda s, t, m, f, lam: _rows_ok(s, t, m) and _flags_ok(m, f) and _lam_ok(lam)
        and lam > 0 and not any(f),
    "lam < 1 and no fixed sequence": lambda s, t, m, f, lam: _rows_ok(s, t, m) and _flags_ok(m, f) and _lam_ok(lam)
        and lam < 1 and all(f),
    "lam one float step outside [0, 1] (-5e-324, 1 + 2**-52)": lambda s, t, m, f, lam: _rows_ok(s, t, m)
        and _flags_ok(m, f) and lam in (-5e-324, 1 + 2 ** -52) and type(lam) is float,
    "a valid call": lambda s, t, m, f, lam: _rows_ok(s, t, m) and _flags_ok(m, f) and _lam_ok(lam)
        and not (lam > 0 and not any(f)) and not (lam < 1 and all(f)),
})
