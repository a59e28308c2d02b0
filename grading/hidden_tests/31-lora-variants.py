# Hidden tests of chapter 31 (LoRA variants). Each block is one nbgrader grade cell.

# %% hidden exercise=adapter_scaling points=1 name=rslora_divides_by_the_square_root_of_the_rank
# hint: rsLoRA's scaling is alpha / sqrt(rank), at every rank and for float alphas too.
for _rank, _expected in ((1, 12.5), (4, 6.25), (25, 2.5), (2, 12.5 / math.sqrt(2))):
    _result = adapter_scaling("rslora", 12.5, _rank)
    assert math.isclose(_result["scaling"], _expected, rel_tol=1e-12), _result
    assert math.isclose(_result["relative_update_size"], 1.0, rel_tol=1e-12), _result

# %% hidden exercise=adapter_scaling points=1 name=dora_scales_like_lora
# hint: DoRA's update uses LoRA's alpha / rank (peft's default); its magnitude vector rescales rows afterwards.
for _rank in (1, 3, 8, 64):
    assert adapter_scaling("dora", 16, _rank) == adapter_scaling("lora", 16, _rank)
    assert math.isclose(adapter_scaling("dora", 16, _rank)["scaling"], 16 / _rank, rel_tol=1e-12)

# %% hidden exercise=adapter_scaling points=1 name=lora_update_shrinks_like_one_over_root_rank
# hint: relative_update_size = scaling * sqrt(rank) / alpha: 1 / sqrt(rank) for LoRA, 1 for rsLoRA.
assert math.isclose(adapter_scaling("lora", 16, 64)["relative_update_size"], 0.125, rel_tol=1e-12)
assert math.isclose(adapter_scaling("lora", 3, 9)["relative_update_size"], 1 / 3, rel_tol=1e-12)
assert math.isclose(adapter_scaling("rslora", 3, 9)["relative_update_size"], 1.0, rel_tol=1e-12)
assert adapter_scaling("lora", 7, 1)["relative_update_size"] == 1.0

# %% hidden exercise=adapter_scaling points=1 name=returns_floats_for_whole_numbers
# hint: both values are floats even when alpha and rank are ints and the division is exact.
for _method in METHODS:
    _result = adapter_scaling(_method, 16, 4)
    assert type(_result["scaling"]) is float and type(_result["relative_update_size"]) is float, _result
assert adapter_scaling("lora", 16, 3)["scaling"] == 16 / 3

# %% hidden exercise=adapter_scaling points=1 name=refuses_bad_methods_alphas_and_ranks
# hint: exact method names only; alpha a finite number > 0, rank an int >= 1, bools refused for both.
for _args in (("LoRA", 16, 8), ("lora ", 16, 8), ("qlora", 16, 8), (None, 16, 8), ("lora", 0, 8), ("lora", -1.0, 8),
              ("lora", float("nan"), 8), ("lora", True, 8), ("lora", "16", 8), ("lora", 16, 0), ("lora", 16, -3),
              ("lora", 16, 2.0), ("lora", 16, False), ("rslora", 16, True)):
    assert adapter_scaling("rslora", 3, 9) == {"scaling": 1.0, "relative_update_size": 1.0}  # a valid call
    try:
        adapter_scaling(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=adapter_scaling points=2 name=agrees_with_reference_on_generated_variants
# hint: any method, int or float alpha and rank: the same two floats.
from hypothesis import strategies as st
_alphas = st.one_of(st.integers(1, 256), st.floats(1e-3, 512, allow_nan=False, allow_infinity=False))
reference.agrees("adapter_scaling", st.tuples(st.sampled_from(METHODS), _alphas, st.integers(1, 1024)), cases=150,
                 clauses={
    **{f"method {method}": (lambda method: lambda m, a, r: m == method)(method) for method in METHODS},
    "an int alpha": lambda m, a, r: type(a) is int,
    "a float alpha": lambda m, a, r: type(a) is float,
    "rank 1": lambda m, a, r: r == 1,
    "a rank that is not a perfect square": lambda m, a, r: int(r ** 0.5) ** 2 != r,
})

# %% hidden exercise=adapter_scaling points=1 name=agrees_with_reference_on_generated_invalid_variants
# hint: wrong method names, non-positive, non-finite, bool or text alphas and ranks that are not ints >= 1: the same ValueError.
from hypothesis import strategies as st
_methods = st.sampled_from(METHODS + ("LORA", "dora ", "", None, "lora_plus"))
_alphas = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from([float("nan"), float("inf"), "8", None, 0.0, 2.5]))
_ranks = st.one_of(st.integers(-2, 4), st.booleans(), st.sampled_from([1.0, "4", None]))
from tools.course.grader.clauses import below, is_bool, not_a_number, not_finite

_valid = st.tuples(st.sampled_from(METHODS), st.integers(1, 64), st.integers(1, 64))
reference.agrees("adapter_scaling", st.one_of(st.tuples(_methods, _alphas, _ranks), _valid), cases=200, clauses={
    "an unknown or miscased method": lambda m, a, r: m not in METHODS,
    "an alpha that is a bool": lambda m, a, r: is_bool(a),
    "an alpha <= 0": lambda m, a, r: below(a, 0, or_equal=True),
    "an alpha that is not finite": lambda m, a, r: not_finite(a),
    "an alpha that is not a number": lambda m, a, r: not_a_number(a),
    "a rank that is a bool": lambda m, a, r: is_bool(r),
    "a rank < 1": lambda m, a, r: type(r) is int and r < 1,
    "a rank that is not an int": lambda m, a, r: not isinstance(r, int),
})

# %% hidden exercise=dora_forward points=1 name=starts_as_the_base_layer
# hint: with lora_B = 0 and magnitude = the row norms of weight, the output is exactly x @ weight.T + bias.
_gen = torch.Generator().manual_seed(11)
_w, _a = torch.randn(5, 3, generator=_gen, dtype=torch.float64), torch.randn(2, 3, generator=_gen, dtype=torch.float64)
_b, _bias = torch.zeros(5, 2, dtype=torch.float64), torch.randn(5, generator=_gen, dtype=torch.float64)
_x = torch.randn(4, 3, generator=_gen, dtype=torch.float64)
_expected = _x @ _w.T + _bias
_y = dora_forward(_x, _w, _a, _b, _w.norm(dim=1), 2.0, _bias)
assert torch.allclose(_y, _expected, atol=1e-12), _y

# %% hidden exercise=dora_forward points=1 name=normalises_each_output_row_of_the_adapted_weight
# hint: one norm per output (dim=1 of the out x in weight) of weight + scaling * lora_B @ lora_A, scaling included.
_w = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
_a = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
_b = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
_x = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
# W = [[3, 4, 3], [0, 0, 2]] with scaling 3: row norms sqrt(34) and 2; W x = [10, 2]
_y = dora_forward(_x, _w, _a, _b, torch.tensor([1.0, 1.0], dtype=torch.float64), 3.0)
assert torch.allclose(_y, torch.tensor([[10 / math.sqrt(34.0), 1.0]], dtype=torch.float64)), _y

# %% hidden exercise=dora_forward points=1 name=bias_is_added_after_the_rescaling
# hint: magnitude / row_norm multiplies the matrix product only; the bias is added afterwards, unscaled.
_w = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
_y = dora_forward(torch.tensor([1.0, 5.0], dtype=torch.float64), _w, torch.zeros(1, 2, dtype=torch.float64),
                  torch.zeros(1, 1, dtype=torch.float64), torch.tensor([4.0], dtype=torch.float64), 1.0,
                  torch.tensor([10.0], dtype=torch.float64))
assert _y.shape == (1,) and torch.allclose(_y, torch.tensor([14.0], dtype=torch.float64)), _y

# %% hidden exercise=dora_forward points=1 name=row_norm_is_detached_from_autograd
# hint: gradients flow through the magnitude and the numerator, not through the row norm (DoRA paper section 4.3, peft).
from tools.course.grader.boundary import backward_through

_gen = torch.Generator().manual_seed(5)
_w = torch.randn(4, 3, generator=_gen, dtype=torch.float64)
_a = torch.randn(2, 3, generator=_gen, dtype=torch.float64).requires_grad_(True)
_b = torch.randn(4, 2, generator=_gen, dtype=torch.float64).requires_grad_(True)
_m = torch.rand(4, generator=_gen, dtype=torch.float64).add(0.5).requires_grad_(True)
_x = torch.randn(6, 3, generator=_gen, dtype=torch.float64)
backward_through(dora_forward, _x, _w, _a, _b, _m, 0.7, reduce="sum")
_grads = [_a.grad, _b.grad, _m.grad]
_norm = (_w + 0.7 * _b @ _a).norm(dim=1).detach()
_expected = torch.autograd.grad(((_x @ _w.T + 0.7 * (_x @ _a.T) @ _b.T) * (_m / _norm)).sum(), [_a, _b, _m])
for _name, _got, _want in zip(("lora_A", "lora_B", "magnitude"), _grads, _expected):
    assert torch.allclose(_got, _want, atol=1e-10), f"gradient of {_name} flows through the row norm"

# %% hidden exercise=dora_forward points=1 name=keeps_leading_dimensions_and_dtype
# hint: x may be 1-D or have several leading dimensions; the result has shape x.shape[:-1] + (out,) and x's dtype.
_gen = torch.Generator().manual_seed(8)
for _dtype in (torch.float32, torch.float64):
    _w, _a = torch.randn(3, 4, generator=_gen).to(_dtype), torch.randn(1, 4, generator=_gen).to(_dtype)
    _b, _m = torch.randn(3, 1, generator=_gen).to(_dtype), torch.rand(3, generator=_gen).to(_dtype)
    for _shape in ((4,), (2, 4), (2, 5, 4), (0, 4)):
        _y = dora_forward(torch.randn(*_shape, generator=_gen).to(_dtype), _w, _a, _b, _m, 1.5)
        assert tuple(_y.shape) == _shape[:-1] + (3,) and _y.dtype == _dtype, (_shape, _y.shape, _y.dtype)

# %% hidden exercise=dora_forward points=1 name=refuses_bad_shapes_dtypes_and_scalings
# hint: check every tensor, dtype, shape and the scaling before computing.
_w, _a, _b, _m, _x = torch.ones(3, 4), torch.ones(2, 4), torch.ones(3, 2), torch.ones(3), torch.ones(5, 4)
_cases = [(_x, _w, _a, _b, torch.ones(4), 1.0), (_x, _w, _a, torch.ones(4, 2), _m, 1.0), (_x, _w, torch.ones(2, 3), _b, _m, 1.0),
          (torch.ones(5, 3), _w, _a, _b, _m, 1.0), (_x, _w, _a, _b, _m, 1.0, torch.ones(4)),
          (_x, _w.double(), _a, _b, _m, 1.0), (_x.long(), _w, _a, _b, _m, 1.0), (_x, _w, _a, _b, _m, True),
          (_x, _w, _a, _b, _m, float("nan")), (_x, _w, _a, _b, _m, "1"), (_x, _w, torch.ones(0, 4), torch.ones(3, 0), _m, 1.0),
          (_x, _w.reshape(12), _a, _b, _m, 1.0), ([[1.0] * 4], _w, _a, _b, _m, 1.0), (_x, _w, _a, _b, _m.reshape(3, 1), 1.0),
          (_x, _w, _a, _b, _m, 1.0, torch.ones(3, dtype=torch.float64)), (_x, _w, _a, _b, _m.double(), 1.0),
          (torch.tensor(1.0), _w, _a, _b, _m, 1.0)]
_valid = dora_forward(_x, _w, _a, _b, _m * 3, 0)  # the valid call every case above breaks in one place
assert torch.allclose(_valid, torch.full((5, 3), 6.0)), _valid  # 4 / |row| = 2, times magnitude 3
for _number, _case in enumerate(_cases):  # by position: comparing tuples of tensors with == would raise
    try:
        dora_forward(*_case)
    except ValueError:
        continue
    raise AssertionError(f"case {_number} accepted")

# %% hidden exercise=dora_forward points=1 name=matches_peft_on_a_narrow_layer_with_bias
# hint: framework check: on the tiny model's v_proj (64 -> 32, with a bias), your output equals peft's DoRA layer within 1e-5 of the output scale.
_layer = lora.with_adapter(TINY, ("v_proj",), 6, "dora", alpha=24).base_model.model.model.layers[1].self_attn.v_proj
with torch.no_grad():
    _layer.lora_B["default"].weight.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(9))
    _layer.lora_magnitude_vector["default"].weight.mul_(1.3)
    _inputs = torch.randn(2, 7, 64, generator=torch.Generator().manual_seed(10))
    _theirs = _layer(_inputs)
    _base = _layer.get_base_layer()
    _ours = dora_forward(_inputs, _base.weight, _layer.lora_A["default"].weight, _layer.lora_B["default"].weight,
                         _layer.lora_magnitude_vector["default"].weight, _layer.scaling["default"], _base.bias)
assert _ours.shape == _theirs.shape, (_ours.shape, _theirs.shape)
assert float((_ours - _theirs).abs().max()) <= 1e-5 * max(1.0, float(_theirs.abs().max())), float((_ours - _theirs).abs().max())

# %% hidden exercise=dora_forward points=2 name=agrees_with_reference_on_generated_layers
# hint: on generated float64 layers (any out, in and rank, leading dimensions, with or without bias, any finite scaling) the same output.
from hypothesis import strategies as st


def _layer_call(out_features, in_features, rank, leading, seed, with_bias, scaling, how):
    generator = torch.Generator().manual_seed(seed)
    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)
    args = [draw(*leading, in_features), draw(out_features, in_features), draw(rank, in_features),
            draw(out_features, rank), draw(out_features).abs() + 0.1, scaling]
    if with_bias and how == "keyword":
        return tuple(args), {"bias": draw(out_features)}
    return (tuple(args + [draw(out_features)]) if with_bias else tuple(args)), {}


_calls = st.builds(_layer_call, st.integers(1, 5), st.integers(1, 5), st.integers(1, 3),
                   st.sampled_from([(), (1,), (3,), (2, 2)]), st.integers(0, 10 ** 6), st.booleans(),
                   st.one_of(st.integers(-4, 8), st.floats(-3, 3, allow_nan=False)), st.sampled_from(["positional", "keyword"]))
reference.agrees("dora_forward", _calls, cases=120, clauses={
    "a bias": lambda *a, **k: len(a) > 6 or "bias" in k,
    "the bias by keyword": lambda *a, **k: "bias" in k,
    "a 1-D x": lambda *a, **k: a[0].dim() == 1,
    "two leading dimensions": lambda *a, **k: a[0].dim() == 3,
    "a zero scaling (the base layer)": lambda *a, **k: a[5] == 0,
    "a negative scaling": lambda *a, **k: a[5] < 0,
    "an int scaling": lambda *a, **k: type(a[5]) is int,
    "rank 1": lambda *a, **k: a[2].shape[0] == 1,
    "one output feature": lambda *a, **k: a[1].shape[0] == 1,
})

# %% hidden exercise=dora_forward points=1 name=agrees_with_reference_on_generated_invalid_layers
# hint: wrong shapes, integer or mixed dtypes, non-tensors and bad scalings: the same ValueError.
from hypothesis import strategies as st
_x = st.sampled_from([torch.ones(2, 4), torch.ones(4), torch.ones(2, 3), torch.ones(2, 4, dtype=torch.float64),
                      torch.ones(2, 4, dtype=torch.long), [[1.0] * 4], torch.tensor(1.0)])
_w = st.sampled_from([torch.ones(3, 4), torch.ones(4, 3), torch.ones(3, 4, dtype=torch.float64), torch.ones(12), None])
_a = st.sampled_from([torch.ones(2, 4), torch.ones(2, 3), torch.ones(0, 4), torch.ones(2, 4, dtype=torch.int32)])
_b = st.sampled_from([torch.ones(3, 2), torch.ones(2, 3), torch.ones(3, 1), torch.ones(3, 2, dtype=torch.float16),
                      torch.ones(3, 2, dtype=torch.long), [[1.0, 1.0]] * 3])
_m = st.sampled_from([torch.ones(3), torch.ones(4), torch.ones(3, 1), 1.0, torch.ones(3, dtype=torch.float64)])
_s = st.sampled_from([1.0, 2, True, float("inf"), float("nan"), "2", None, -0.5])
_bias = st.sampled_from([None, torch.ones(3), torch.ones(4), torch.ones(3, dtype=torch.float64)])
from tools.course.grader.clauses import is_bool, not_finite

_valid = st.tuples(st.just(torch.ones(2, 4)), st.just(torch.ones(3, 4)), st.just(torch.ones(2, 4)), st.just(torch.ones(3, 2)),
                   st.sampled_from([torch.ones(3), torch.arange(3.0) + 1, torch.ones(3, dtype=torch.float64)]),
                   st.sampled_from([1.0, 2, -0.5]),
                   st.sampled_from([None, torch.ones(3)]))
_names = ["x", "weight", "lora_A", "lora_B", "magnitude"]


def _tensors(call):
    return dict(zip(_names + ["bias"], call[:5] + (call[6:7] if call[6] is not None else ())))


def _all_floating(call):
    return all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in _tensors(call).values())


reference.agrees("dora_forward", st.one_of(st.tuples(_x, _w, _a, _b, _m, _s, _bias), _valid), cases=250, clauses={
    **{f"{name} not a floating tensor": (lambda name: lambda *call: not (
        isinstance(_tensors(call).get(name), torch.Tensor) and _tensors(call)[name].is_floating_point()))(name)
       for name in _names},
    "the bias not of the inputs' dtype": lambda *call: call[6] is not None and _all_floating(call) and call[
        6].dtype != call[0].dtype,
    **{f"{name} of another dtype than x": (lambda name: lambda *call: _all_floating(call) and _tensors(call)[
        name].dtype != call[0].dtype)(name) for name in _names[1:]},
    "a 0-dim x": lambda *call: isinstance(call[0], torch.Tensor) and call[0].dim() == 0,
    "a weight that is not 2-D": lambda *call: isinstance(call[1], torch.Tensor) and call[1].dim() != 2,
    "a magnitude that is not 1-D": lambda *call: isinstance(call[4], torch.Tensor) and call[4].dim() != 1,
    "rank 0": lambda *call: isinstance(call[2], torch.Tensor) and call[2].shape[0] == 0,
    "shapes that do not fit": lambda *call: _all_floating(call) and len({t.dtype for t in _tensors(call).values()}) == 1 and (
        call[1].dim() == 2 and (call[0].shape[-1:] != call[1].shape[1:] or call[2].shape[1:] != call[1].shape[1:]
                                or call[3].shape != (call[1].shape[0], call[2].shape[0]))),
    "a bias of another shape": lambda *call: isinstance(call[6], torch.Tensor) and tuple(call[6].shape) != (3,),
    "a scaling that is a bool": lambda *call: is_bool(call[5]),
    "a scaling that is not finite": lambda *call: not_finite(call[5]),
    "a scaling that is not a number": lambda *call: not isinstance(call[5], (int, float)),
})

# %% hidden exercise=largest_rank_within_budget points=1 name=dora_pays_its_magnitude_once_per_layer
# hint: DoRA adds out_features per adapted layer, once, whatever the rank: r * sum(in + out) + sum(out).
_shapes = [(10, 6), (10, 2)]
assert largest_rank_within_budget(8 * 28 + 8, _shapes, "dora") == {"rank": 8, "parameters": 232, "unused": 0}
assert largest_rank_within_budget(8 * 28 + 7, _shapes, "dora") == {"rank": 7, "parameters": 204, "unused": 27}
assert largest_rank_within_budget(8 * 28 + 7, _shapes, "lora") == {"rank": 8, "parameters": 224, "unused": 7}

# %% hidden exercise=largest_rank_within_budget points=1 name=an_exact_budget_is_usable
# hint: a budget equal to the parameters of rank r gives rank r with nothing unused (the bound is inclusive).
for _rank in (1, 2, 13):
    _result = largest_rank_within_budget(_rank * 12 + 6, [(4, 4), (2, 2)], "dora")
    assert _result == {"rank": _rank, "parameters": _rank * 12 + 6, "unused": 0}, _result

# %% hidden exercise=largest_rank_within_budget points=1 name=a_budget_below_rank_one_is_refused
# hint: when even rank 1 does not fit, raise ValueError instead of returning rank 0.
for _budget, _method in ((27, "lora"), (33, "dora"), (1, "rslora")):
    try:
        largest_rank_within_budget(_budget, [(10, 6), (10, 2)], _method)
    except ValueError:
        continue
    raise AssertionError(f"budget {_budget} ({_method}) accepted")
assert largest_rank_within_budget(36, [(10, 6), (10, 2)], "dora")["rank"] == 1

# %% hidden exercise=largest_rank_within_budget points=1 name=rslora_counts_like_lora
# hint: rsLoRA changes the scaling only: its parameters and ranks are LoRA's.
for _budget in (100, 1000, 4321):
    assert largest_rank_within_budget(_budget, [(7, 3), (5, 5)], "rslora") == largest_rank_within_budget(_budget, [(7, 3), (5, 5)])
assert largest_rank_within_budget(109, [(7, 3), (5, 5)], "rslora") == {"rank": 5, "parameters": 100, "unused": 9}

# %% hidden exercise=largest_rank_within_budget points=1 name=never_over_budget_and_never_leaves_a_rank_unused
# hint: parameters <= budget, and one rank more would exceed it, for every method and budget.
_shapes = [(896, 896), (896, 128)] * 3
_sum, _out = sum(a + b for a, b in _shapes), sum(b for _, b in _shapes)
for _method in METHODS:
    for _budget in range(_sum + _out, 20 * _sum, 997):
        _extra = _out if _method == "dora" else 0
        _result = largest_rank_within_budget(_budget, _shapes, _method)
        assert _result["parameters"] == _result["rank"] * _sum + _extra <= _budget, (_method, _budget, _result)
        assert (_result["rank"] + 1) * _sum + _extra > _budget, (_method, _budget, _result)
        assert _result["unused"] == _budget - _result["parameters"], (_method, _budget, _result)

# %% hidden exercise=largest_rank_within_budget points=1 name=refuses_bad_budgets_shapes_and_methods
# hint: budget an int >= 1, shapes a non-empty list or tuple of (in, out) pairs of ints >= 1, method one of the three; bools refused.
for _args in ((True, [(4, 4)]), (0, [(4, 4)]), (100.0, [(4, 4)]), (100, []), (100, [(4, 4, 4)]), (100, [(4, 0)]),
              (100, [(4, True)]), (100, [4, 4]), (100, [(4.0, 4)]), (100, "4x4"), (100, {(4, 4)}), (100, [(4, 4)], "qlora"),
              (100, [(4, 4)], None), (100, [(4, 4)], "DoRA")):
    assert largest_rank_within_budget(100, ([4, 4],), "dora") == {"rank": 12, "parameters": 100, "unused": 0}  # valid
    try:
        largest_rank_within_budget(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=largest_rank_within_budget points=2 name=generated_budgets_agree_with_the_reference
# hint: any budget, layer list (lists or tuples) and method: the same rank, parameters and unused, or the same error.
from hypothesis import strategies as st
_pairs = st.tuples(st.integers(1, 900), st.integers(1, 900), st.sampled_from([tuple, list])).map(lambda p: p[2](p[:2]))
_calls = st.one_of(
    st.tuples(st.integers(1, 200000), st.lists(_pairs, min_size=1, max_size=6), st.sampled_from(METHODS)),
    st.tuples(st.integers(1, 200000), st.tuples(_pairs, _pairs)))
def _per_rank(shapes):
    return sum(a + b for a, b in shapes)


reference.agrees("largest_rank_within_budget", _calls, cases=200, clauses={
    **{f"method {method}": (lambda method: lambda *call: (call[2] if len(call) > 2 else "lora") == method)(method)
       for method in METHODS},
    "the default method": lambda *call: len(call) == 2,
    "shapes as a tuple": lambda *call: isinstance(call[1], tuple),
    "a pair given as a list": lambda *call: any(isinstance(pair, list) for pair in call[1]),
    "a budget too small for rank 1 (refused)": lambda *call: call[0] < _per_rank(call[1]) + (
        sum(b for _, b in call[1]) if len(call) > 2 and call[2] == "dora" else 0),
    "a budget used exactly": lambda *call: len(call) > 2 and call[2] != "dora" and call[0] % _per_rank(call[1]) == 0,
})

# %% hidden exercise=largest_rank_within_budget points=1 name=invalid_budgets_agree_with_the_reference
# hint: non-int or non-positive budgets and sizes, bools, malformed pairs and unknown methods: the same ValueError.
from hypothesis import strategies as st
_sizes = st.one_of(st.integers(-1, 5), st.booleans(), st.sampled_from([2.0, "3", None, float("nan"), float("inf"), -0.0]))
_pairs = st.one_of(st.tuples(_sizes, _sizes), st.lists(_sizes, max_size=3), st.sampled_from([4, None, "4"]))
_budgets = st.one_of(st.integers(-5, 60), st.booleans(),
                    st.sampled_from([50.0, "50", None, float("nan"), float("inf"), -0.0, 50.1]))
_shape_lists = st.one_of(st.lists(_pairs, max_size=3), st.sampled_from([None, "layers", ()]))
_methods = st.sampled_from(METHODS + ("LoRA", "", None))
from tools.course.grader.clauses import is_bool, not_finite

_valid = st.tuples(st.integers(40, 400), st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=3),
                   st.sampled_from(METHODS))


def _pairs_of(shapes):
    return list(shapes) if isinstance(shapes, (list, tuple)) else []


def _sizes_of(shapes):
    return [s for pair in _pairs_of(shapes) if isinstance(pair, (list, tuple)) for s in pair]


_non_finite_size = st.tuples(st.integers(40, 400), st.lists(st.tuples(st.integers(1, 5), st.sampled_from(
    [float("nan"), float("inf"), 3.0])).map(lambda pair: pair if pair[0] % 2 else pair[::-1]), min_size=1, max_size=3),
    st.sampled_from(METHODS))
reference.agrees("largest_rank_within_budget", st.one_of(st.tuples(_budgets, _shape_lists, _methods), _valid, _non_finite_size),
                 cases=250,
                 clauses={
    "a budget that is a bool": lambda b, s, m: is_bool(b),
    "a budget that is not an int": lambda b, s, m: not isinstance(b, int),
    "a budget < 1": lambda b, s, m: type(b) is int and b < 1,
    "a budget that is not finite": lambda b, s, m: isinstance(b, float) and not_finite(b),
    "a size that is not finite": lambda b, s, m: any(isinstance(x, float) and not_finite(x) for x in _sizes_of(s)),
    "shapes not a list or tuple": lambda b, s, m: not isinstance(s, (list, tuple)),
    "no shape": lambda b, s, m: isinstance(s, (list, tuple)) and not s,
    "a pair that is not a list or tuple": lambda b, s, m: any(not isinstance(p, (list, tuple)) for p in _pairs_of(s)),
    "a pair of another length": lambda b, s, m: any(isinstance(p, (list, tuple)) and len(p) != 2 for p in _pairs_of(s)),
    "a size that is a bool": lambda b, s, m: any(is_bool(x) for x in _sizes_of(s)),
    "a size < 1": lambda b, s, m: any(type(x) is int and x < 1 for x in _sizes_of(s)),
    "a size that is not an int": lambda b, s, m: any(not isinstance(x, int) for x in _sizes_of(s)),
    "an unknown method": lambda b, s, m: m not in METHODS,
})
