# %% hidden exercise=nf4_quantise points=1 name=code_is_the_nearest_level_of_value_over_block_absmax
# hint: divide each element by the absmax of its own block, then take the index of the nearest NF4 level.
_generator = torch.Generator().manual_seed(7)
_weight = torch.randn(6, 32, generator=_generator) * 0.05
_result = nf4_quantise(_weight.clone(), blocksize=16)
_levels = torch.tensor(NF4_LEVELS)
_blocks = _weight.reshape(-1, 16)
_absmax = _blocks.abs().amax(dim=1)
assert torch.equal(_result["absmax"], _absmax)
_scaled = (_blocks / _absmax.unsqueeze(1)).reshape(-1)
_distance = (_scaled.unsqueeze(1) - _levels).abs()
_nearest = _distance.argmin(dim=1)
_clear = (_distance.sort(dim=1).values[:, 1] - _distance.min(dim=1).values) > 1e-5  # away from a midpoint
assert _clear.sum() > 150
assert torch.equal(_result["codes"].reshape(-1).long()[_clear], _nearest[_clear])

# %% hidden exercise=nf4_quantise points=1 name=a_value_on_a_midpoint_takes_the_lower_index
# hint: at the float32 midpoint of two neighbouring levels the code is the lower index, on both sides of zero.
_half_up = float(torch.tensor(NF4_LEVELS[8], dtype=torch.float32) / 2)
_half_down = float(torch.tensor(NF4_LEVELS[6], dtype=torch.float32) / 2)
_result = nf4_quantise(torch.tensor([1.0, _half_up, _half_down, 0.0]), blocksize=4)
assert _result["codes"].tolist() == [15, 7, 6, 7]

# %% hidden exercise=nf4_quantise points=1 name=blocks_run_over_the_flattened_tensor_and_the_last_is_short
# hint: blocks are consecutive elements of weight.reshape(-1), crossing rows; the last block keeps the remainder.
_weight = torch.tensor([[1.0, 0.1, 0.2], [0.3, -4.0, 0.5], [0.6, 0.7, 0.0]])
_result = nf4_quantise(_weight, blocksize=4)
assert _result["absmax"].tolist() == [1.0, 4.0, 0.0]
assert tuple(_result["codes"].shape) == (3, 3) and _result["shape"] == (3, 3)
assert _result["codes"].reshape(-1).tolist()[4] == 0 and _result["codes"].reshape(-1).tolist()[8] == 7
_single = nf4_quantise(torch.tensor([-3.0]), blocksize=64)
assert _single["absmax"].tolist() == [3.0] and _single["codes"].tolist() == [0]

# %% hidden exercise=nf4_quantise points=1 name=half_precision_inputs_work_in_float32_and_are_not_changed
# hint: a bfloat16 or float16 weight is read as float32; absmax is float32, codes uint8, and the input is untouched.
_weight = (torch.randn(4, 16, generator=torch.Generator().manual_seed(3)) * 0.1).to(torch.bfloat16)
_copy = _weight.clone()
_result = nf4_quantise(_weight, blocksize=8)
assert torch.equal(_weight, _copy)
assert _result["absmax"].dtype == torch.float32 and _result["codes"].dtype == torch.uint8
assert torch.equal(_result["absmax"], _copy.float().reshape(-1, 8).abs().amax(dim=1))
assert _result["codes"].max() <= 15 and type(_result["shape"]) is tuple and _result["blocksize"] == 8
assert nf4_quantise(_weight.to(torch.float16), 8)["codes"].dtype == torch.uint8

# %% hidden exercise=nf4_quantise points=1 name=invalid_weights_and_blocksizes_are_refused
# hint: only float32, bfloat16 and float16 tensors with finite values; blocksize an int >= 1 and not a bool.
for _args in ((torch.tensor([1, 2]),), (torch.tensor([1.0], dtype=torch.float64),), (torch.zeros(0),),
              (torch.tensor([1.0, float("inf")]),), ([1.0, 2.0],), (torch.ones(4), 0), (torch.ones(4), True),
              (torch.ones(4), 2.0), (torch.ones(4), -64)):
    assert nf4_quantise(torch.tensor([-2.0, 0.0, 1.0]), 2)["absmax"].tolist() == [2.0, 1.0]  # a valid call
    try:
        nf4_quantise(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=nf4_quantise points=2 name=agrees_with_reference_on_generated_tensors
# hint: any tensor and blocksize, valid or not: the same codes and absmax, or the same error.
from hypothesis import strategies as st


@st.composite
def _weights(draw):
    rows, columns = draw(st.integers(1, 4)), draw(st.integers(0, 9))
    values = draw(st.lists(st.floats(-8, 8, width=32), min_size=rows * columns, max_size=rows * columns))
    tensor = torch.tensor(values, dtype=torch.float32).reshape(rows, columns)
    poison = draw(st.sampled_from([None, None, None, None, "nan", "inf", "-inf"]))
    if poison and tensor.numel():  # the first element, the last, or any other
        where = draw(st.sampled_from([0, tensor.numel() - 1, draw(st.integers(0, tensor.numel() - 1))]))
        tensor.view(-1)[where] = float(poison)
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.float64]))
    return tensor.to(dtype)


from tools.course.grader.clauses import is_bool

_others = st.sampled_from([torch.tensor([1, 2]), torch.tensor([True]), [1.0, 2.0], None, torch.tensor(3.5)])
_valid = st.tuples(_weights().filter(lambda w: w.numel() and w.dtype != torch.float64 and bool(torch.isfinite(w).all())),
                   st.integers(1, 5))


def _tensor(weight):
    return isinstance(weight, torch.Tensor)


def _blocks_of(weight, blocksize):
    return -(-weight.numel() // blocksize)


reference.agrees("nf4_quantise", st.one_of(
    st.tuples(st.one_of(_weights(), _others), st.one_of(st.integers(-1, 7), st.sampled_from([64, True, 2.0]))), _valid),
    cases=160, clauses={
    "a weight that is not a tensor": lambda w, b: not _tensor(w),
    "an integer or bool tensor": lambda w, b: _tensor(w) and not w.is_floating_point(),
    "a float64 tensor": lambda w, b: _tensor(w) and w.dtype == torch.float64,
    "an empty tensor": lambda w, b: _tensor(w) and w.numel() == 0,
    "a nan or inf element": lambda w, b: _tensor(w) and w.is_floating_point() and not bool(torch.isfinite(w).all()),
    "a nan or inf first element": lambda w, b: _tensor(w) and w.is_floating_point() and w.numel() > 1
                                               and not bool(torch.isfinite(w.reshape(-1)[0])),
    "a blocksize that is a bool": lambda w, b: is_bool(b),
    "a blocksize < 1": lambda w, b: type(b) is int and b < 1,
    "a float blocksize": lambda w, b: isinstance(b, float),
    "a 0-dim tensor": lambda w, b: _tensor(w) and w.dim() == 0,
    "a short last block": lambda w, b: _tensor(w) and type(b) is int and b >= 1 and w.numel() % b != 0,
    "a block of zeros": lambda w, b: _tensor(w) and w.is_floating_point() and type(b) is int and b >= 1 and any(
        not bool(w.reshape(-1)[i:i + b].any()) for i in range(0, w.numel(), b)),
    "half-precision weights": lambda w, b: _tensor(w) and w.dtype in (torch.bfloat16, torch.float16),
})

# %% hidden exercise=nf4_reconstruct points=1 name=dequantised_is_the_level_times_the_block_absmax
# hint: look up NF4_LEVELS by code and multiply by the absmax of the element's own block (repeat each absmax blocksize times, in order).
_codes = torch.tensor([[0, 15, 3], [8, 11, 7], [12, 1, 9]], dtype=torch.uint8)
_absmax = torch.tensor([2.0, 0.5, 4.0], dtype=torch.float32)
_expected = torch.tensor([NF4_LEVELS[c] for c in _codes.reshape(-1).tolist()]) * torch.tensor([2.0] * 4 + [0.5] * 4 + [4.0])
_result = nf4_reconstruct({"codes": _codes, "absmax": _absmax, "shape": (3, 3), "blocksize": 4}, torch.zeros(3, 3))
assert _result["dequantised"].dtype == torch.float32 and tuple(_result["dequantised"].shape) == (3, 3)
assert torch.allclose(_result["dequantised"].reshape(-1), _expected, rtol=0, atol=1e-7)

# %% hidden exercise=nf4_reconstruct points=1 name=errors_are_measured_in_float64_over_every_element
# hint: e = |x - x_hat| in float64; max, mean over all elements, and the ratio of the two Euclidean norms.
_weight = torch.randn(5, 13, generator=torch.Generator().manual_seed(11))
_quantised = reference("nf4_quantise")(_weight, 8)
_result = nf4_reconstruct({key: value.clone() if torch.is_tensor(value) else value for key, value in _quantised.items()},
                          _weight.clone())
_error = (_weight.double() - _result["dequantised"].double()).abs()
assert all(type(_result[key]) is float for key in ("max_abs_error", "mean_abs_error", "relative_error"))
assert _result["max_abs_error"] == float(_error.max())
assert math.isclose(_result["mean_abs_error"], float(_error.sum()) / 65, rel_tol=1e-12)
assert math.isclose(_result["relative_error"], float(_error.norm() / _weight.double().norm()), rel_tol=1e-12)
_bound = torch.tensor([max(b - a for a, b in zip(NF4_LEVELS, NF4_LEVELS[1:])) / 2])
assert bool((_error.reshape(-1) <= _bound.double() * _quantised["absmax"].double().repeat_interleave(8)[:65] + 1e-7).all())

# %% hidden exercise=nf4_reconstruct points=1 name=worst_block_is_the_first_block_with_the_largest_error
# hint: the block that holds the largest single error; on a tie, the lowest block index.
_codes = torch.tensor([7, 7, 7, 7, 7, 7], dtype=torch.uint8)
_quantised = {"codes": _codes, "absmax": torch.zeros(3), "shape": (6,), "blocksize": 2}
assert nf4_reconstruct(_quantised, torch.tensor([0.0, 0.1, 0.0, 0.3, 0.0, 0.3]))["worst_block"] == 1
assert nf4_reconstruct(_quantised, torch.zeros(6))["worst_block"] == 0
assert type(nf4_reconstruct(_quantised, torch.zeros(6))["worst_block"]) is int

# %% hidden exercise=nf4_reconstruct points=1 name=an_all_zero_weight_has_a_defined_relative_error
# hint: with a zero weight the ratio is 0.0 when nothing is lost and math.inf otherwise, never a division error or nan.
_zero = {"codes": torch.full((4,), 7, dtype=torch.uint8), "absmax": torch.zeros(1), "shape": (4,), "blocksize": 4}
assert nf4_reconstruct(_zero, torch.zeros(4))["relative_error"] == 0.0
_off = {**_zero, "codes": torch.tensor([7, 7, 15, 7], dtype=torch.uint8), "absmax": torch.tensor([0.5])}
_result = nf4_reconstruct(_off, torch.zeros(4))
assert _result["relative_error"] == math.inf and _result["max_abs_error"] == 0.5

# %% hidden exercise=nf4_reconstruct points=1 name=inconsistent_inputs_are_refused
# hint: check the keys, each part's type, dtype, shape and range, the number of absmax values, and the weight against them.
_good = {"codes": torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8), "absmax": torch.tensor([1.0, 2.0]),
         "shape": (2, 2), "blocksize": 2}
_bad_cases = [
    ({**_good, "absmax": torch.tensor([1.0])}, torch.ones(2, 2)),
    ({**_good, "absmax": torch.tensor([1.0, -2.0])}, torch.ones(2, 2)),
    ({**_good, "absmax": torch.tensor([1.0, 2.0], dtype=torch.float64)}, torch.ones(2, 2)),
    ({**_good, "codes": torch.tensor([[1, 2], [3, 16]], dtype=torch.uint8)}, torch.ones(2, 2)),
    ({**_good, "codes": torch.tensor([[1, 2], [3, 4]])}, torch.ones(2, 2)),
    ({**_good, "shape": [2, 2]}, torch.ones(2, 2)),
    ({**_good, "extra": 1}, torch.ones(2, 2)),
    ({key: value for key, value in _good.items() if key != "blocksize"}, torch.ones(2, 2)),
    ({**_good, "blocksize": True}, torch.ones(2, 2)),
    (_good, torch.ones(4)),
    (_good, torch.tensor([[1.0, float("nan")], [0.0, 0.0]])),
    (_good, torch.ones(2, 2, dtype=torch.float64)),
]
_valid = nf4_reconstruct(_good, torch.zeros(2, 2))  # the valid call every case above breaks in one place
assert _valid["relative_error"] == math.inf and _valid["worst_block"] == 1, _valid
for _quantised, _weight in _bad_cases:
    try:
        nf4_reconstruct(_quantised, _weight)
    except ValueError:
        continue
    raise AssertionError(f"accepted {_quantised!r} with weight {_weight!r}")

# %% hidden exercise=nf4_reconstruct points=2 name=agrees_with_reference_on_generated_quantisations
# hint: quantisations of generated tensors, some of them damaged: the same values and errors, or the same error class.
from hypothesis import strategies as st


from tools.course.grader.clauses import each_of

_damages = [None] * 12 + ["absmax_length", "code_range", "weight_shape", "zero_absmax", "codes_dtype", "blocksize",
                          "missing_key", "extra_key", "shape_list", "absmax_dtype", "negative_absmax", "weight_dtype",
                          "weight_nan", "not_a_dict", "weight_list", "absmax_not_finite"]


def _somewhere(count, rng):
    """The first, the last or an inner index of `count` items (a damage at every position, not only the last)."""
    return rng.choice([0, count - 1, rng.randrange(count)])


def _cases(damage, rng):
    """A quantisation of a random tensor (by the reference), valid or with this one damage."""
    count, blocksize = rng.randint(1, 20), rng.randint(1, 6)
    values = [rng.uniform(-5, 5) for _ in range(count)]
    weight = torch.tensor(values, dtype=torch.float32).reshape(rng.choice([(count,), (1, count)]))
    weight = weight.to(rng.choice([torch.float32, torch.bfloat16, torch.float16]))
    quantised = reference("nf4_quantise")(weight, blocksize)
    if damage == "absmax_length":
        quantised["absmax"] = torch.cat([quantised["absmax"], torch.ones(1)])
    elif damage == "code_range":
        quantised["codes"] = quantised["codes"].clone()
        quantised["codes"].view(-1)[_somewhere(quantised["codes"].numel(), rng)] = rng.choice([15, 16, 255])
    elif damage == "weight_shape":
        weight = weight.reshape(-1)[: max(count - 1, 1)] if count > 1 else weight.reshape(1, 1, 1)
    elif damage == "zero_absmax":
        quantised["absmax"] = torch.zeros_like(quantised["absmax"])
    elif damage == "codes_dtype":
        quantised["codes"] = quantised["codes"].to(torch.int32)
    elif damage == "blocksize":
        quantised["blocksize"] = rng.choice([0, blocksize + 1, True])
    elif damage == "missing_key":
        del quantised[rng.choice(sorted(quantised))]
    elif damage == "extra_key":
        quantised["dtype"] = "nf4"
    elif damage == "shape_list":
        quantised["shape"] = list(quantised["shape"])
    elif damage == "absmax_dtype":
        quantised["absmax"] = quantised["absmax"].double()
    elif damage == "negative_absmax":
        quantised["absmax"] = quantised["absmax"].clone()
        quantised["absmax"][_somewhere(quantised["absmax"].numel(), rng)] = -rng.choice([1.0, 0.5, 1e-30])
    elif damage == "absmax_not_finite":
        quantised["absmax"] = quantised["absmax"].clone()
        quantised["absmax"][_somewhere(quantised["absmax"].numel(), rng)] = rng.choice([float("nan"), float("inf")])
    elif damage == "weight_dtype":
        weight = weight.double()
    elif damage == "weight_nan":
        weight = weight.clone()
        weight.view(-1)[_somewhere(weight.numel(), rng)] = rng.choice([float("nan"), float("inf"), -float("inf")])
    elif damage == "not_a_dict":
        quantised = list(quantised.items())
    elif damage == "weight_list":
        weight = weight.tolist()
    return quantised, weight


_keys = {"codes", "absmax", "shape", "blocksize"}


def _whole(quantised):
    return isinstance(quantised, dict) and set(quantised) == _keys


reference.agrees("nf4_reconstruct", each_of(list(enumerate(_damages)), lambda entry, rng: _cases(entry[1], rng),
                                            variants=4), cases=4 * len(_damages), clauses={
    "quantised not a dict": lambda q, w: not isinstance(q, dict),
    "a missing key": lambda q, w: isinstance(q, dict) and bool(_keys - set(q)),
    "an extra key": lambda q, w: isinstance(q, dict) and bool(set(q) - _keys),
    "codes not uint8": lambda q, w: _whole(q) and q["codes"].dtype != torch.uint8,
    "a code above 15": lambda q, w: _whole(q) and bool((q["codes"].long() > 15).any()),
    "a shape given as a list": lambda q, w: _whole(q) and isinstance(q["shape"], list),
    "a blocksize that is a bool or < 1": lambda q, w: _whole(q) and (is_bool(q["blocksize"]) or q["blocksize"] < 1),
    "a blocksize that does not match the absmax count": lambda q, w: _whole(q) and not is_bool(q["blocksize"]) and q[
        "blocksize"] >= 1 and q["absmax"].numel() != -(-q["codes"].numel() // q["blocksize"]),
    "absmax not float32": lambda q, w: _whole(q) and q["absmax"].dtype != torch.float32,
    "a negative absmax": lambda q, w: _whole(q) and bool((q["absmax"] < 0).any()),
    "a non-finite absmax": lambda q, w: _whole(q) and not bool(torch.isfinite(q["absmax"]).all()),
    "a non-finite weight element before the last": lambda q, w: isinstance(w, torch.Tensor) and w.numel() > 1
                                                               and not bool(torch.isfinite(w.reshape(-1)[:-1]).all()),
    "an all-zero absmax (valid)": lambda q, w: _whole(q) and not bool(q["absmax"].any()),
    "a weight that is not a tensor": lambda q, w: not isinstance(w, torch.Tensor),
    "a weight of another shape": lambda q, w: _whole(q) and isinstance(w, torch.Tensor) and tuple(w.shape) != tuple(
        q["shape"]),
    "a float64 weight": lambda q, w: isinstance(w, torch.Tensor) and w.dtype == torch.float64,
    "a nan in the weight": lambda q, w: isinstance(w, torch.Tensor) and not bool(torch.isfinite(w).all()),
    "half-precision weights": lambda q, w: isinstance(w, torch.Tensor) and w.dtype in (torch.bfloat16, torch.float16),
})

# %% hidden exercise=nf4_memory_account points=1 name=codes_take_half_a_byte_rounded_up_per_tensor
# hint: ceil(n / 2) bytes of codes for each tensor on its own, and one float32 per block, the last block counted whole.
_result = nf4_memory_account([(3, 5), (1,), (2, 2, 2)], 7, blocksize=4)
assert _result["quantised_parameters"] == 15 + 1 + 8
assert _result["code_bytes"] == 8 + 1 + 4
assert _result["constant_bytes"] == 4 * (4 + 1 + 2)
assert _result["kept_bytes"] == 14 and _result["total_bytes"] == 13 + 28 + 14
assert all(type(_result[key]) is int for key in ("quantised_parameters", "code_bytes", "constant_bytes", "kept_bytes",
                                                  "total_bytes", "bf16_bytes"))

# %% hidden exercise=nf4_memory_account points=1 name=double_quantisation_counts_both_levels_and_the_offset
# hint: per tensor: one byte per block constant, a float32 per dq_blocksize constants (rounded up) and a float32 offset.
_plain = nf4_memory_account([(4864, 896), (128, 896)], 0)
_double = nf4_memory_account([(4864, 896), (128, 896)], 0, double_quant=True)
assert _plain["constant_bytes"] == 4 * 68096 + 4 * 1792
assert _double["constant_bytes"] == (68096 + 4 * 266 + 4) + (1792 + 4 * 7 + 4)
assert _double["code_bytes"] == _plain["code_bytes"]
assert nf4_memory_account([(10,)], 0, blocksize=2, double_quant=True, dq_blocksize=2)["constant_bytes"] == 5 + 4 * 3 + 4

# %% hidden exercise=nf4_memory_account points=1 name=qwen2_05b_base_bits_and_saving
# hint: bits per parameter average over the quantised parameters only; the saving compares with every parameter in bf16.
_shapes = [(896, 896), (128, 896), (128, 896), (896, 896), (4864, 896), (4864, 896), (896, 4864)] * 24
_plain = nf4_memory_account(_shapes, 136206208)
_double = nf4_memory_account(_shapes, 136206208, double_quant=True)
assert _plain["quantised_parameters"] == 357826560 and _plain["bits_per_parameter"] == 4.5
assert _plain["total_bytes"] == 473689856 and _plain["bf16_bytes"] == 988065536
assert _double["total_bytes"] == 457004768
assert math.isclose(_double["bits_per_parameter"], 8 * (178913280 + 5679072) / 357826560, rel_tol=1e-12)
assert math.isclose(_plain["saving"], 1 - 473689856 / 988065536, rel_tol=1e-12)

# %% hidden exercise=nf4_memory_account points=1 name=nothing_quantised_gives_none_not_zero
# hint: with no quantised tensor the bits per parameter are undefined (None); with no parameter at all, so is the saving.
_result = nf4_memory_account([], 1000)
assert _result["bits_per_parameter"] is None and _result["total_bytes"] == 2000 and _result["saving"] == 0.0
_empty = nf4_memory_account([], 0)
assert _empty["bits_per_parameter"] is None and _empty["saving"] is None and _empty["bf16_bytes"] == 0

# %% hidden exercise=nf4_memory_account points=1 name=invalid_arguments_are_refused
# hint: every int argument refuses bools and out-of-range values; shapes are non-empty tuples or lists of ints >= 1.
for _args, _kwargs in (((((3, 0),), 0), {}), ((((3, True),), 0), {}), (([()], 0), {}), (([(2.0, 3)], 0), {}),
                       ((((3, 3),), 0), {}), (([(3, 3)], -1), {}), (([(3, 3)], True), {}), (([(3, 3)], 1.0), {}),
                       (([(3, 3)], 0), {"blocksize": 0}), (([(3, 3)], 0), {"blocksize": False}),
                       (([(3, 3)], 0), {"double_quant": 1}), (([(3, 3)], 0), {"dq_blocksize": 0}),
                       (([9], 0), {})):
    assert nf4_memory_account([(3, 3)], 1, blocksize=4)["code_bytes"] == 5  # a valid call
    try:
        nf4_memory_account(*_args, **_kwargs)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} {_kwargs!r} accepted")

# %% hidden exercise=nf4_memory_account points=2 name=agrees_with_reference_on_generated_bases
# hint: any shapes and settings, valid or not: the same account (ints stay ints), or the same error.
from hypothesis import strategies as st

_dimension = st.one_of(st.integers(1, 5000), st.integers(1, 5000), st.sampled_from([0, -2, True, 3.0]))
_shape = st.one_of(st.tuples(_dimension), st.tuples(_dimension, _dimension), st.lists(_dimension, max_size=3))
_counts = st.one_of(st.integers(0, 10 ** 9), st.sampled_from([-1, True, 2.5]))
_settings = st.fixed_dictionaries({}, optional={"blocksize": st.one_of(st.integers(-1, 300), st.just(True)),
                                                "double_quant": st.sampled_from([False, True, 0, 1]),
                                                "dq_blocksize": st.one_of(st.integers(-1, 300), st.just(False))})
from tools.course.grader.clauses import is_bool


def _dims(shapes):
    return [d for shape in shapes for d in shape]


reference.agrees("nf4_memory_account", st.tuples(st.tuples(st.lists(_shape, max_size=4), _counts), _settings),
                 cases=150, clauses={
    "no quantised tensor": lambda shapes, kept, **k: shapes == [],
    "an empty shape": lambda shapes, kept, **k: any(len(shape) == 0 for shape in shapes),
    "a shape given as a list": lambda shapes, kept, **k: any(isinstance(shape, list) and shape for shape in shapes),
    "a dimension that is a bool": lambda shapes, kept, **k: any(is_bool(d) for d in _dims(shapes)),
    "a dimension < 1": lambda shapes, kept, **k: any(type(d) is int and d < 1 for d in _dims(shapes)),
    "a float dimension": lambda shapes, kept, **k: any(isinstance(d, float) for d in _dims(shapes)),
    "kept_parameters a bool": lambda shapes, kept, **k: is_bool(kept),
    "kept_parameters negative or a float": lambda shapes, kept, **k: not is_bool(kept) and (
        not isinstance(kept, int) or kept < 0),
    "a blocksize that is a bool or < 1": lambda shapes, kept, **k: "blocksize" in k and (
        is_bool(k["blocksize"]) or k["blocksize"] < 1),
    "double_quant given as 0 or 1": lambda shapes, kept, **k: "double_quant" in k and not is_bool(k["double_quant"]),
    "double quantisation": lambda shapes, kept, **k: k.get("double_quant") is True,
    "a bad dq_blocksize while double_quant is False": lambda shapes, kept, **k: "dq_blocksize" in k and k.get(
        "double_quant") is not True and (is_bool(k["dq_blocksize"]) or k["dq_blocksize"] < 1),
    "an odd element count (a half byte rounded up)": lambda shapes, kept, **k: any(
        all(type(d) is int and d >= 1 for d in shape) and shape and __import__("math").prod(shape) % 2 == 1
        for shape in shapes),
})

# %% hidden exercise=trainable_report points=1 name=groups_are_sorted_and_count_elements
# hint: three disjoint groups, names sorted; a scalar (empty shape) has one element; the share is a float.
_rows = [
    {"name": "z.lora_B.default.weight", "shape": (4, 2), "storage": "float32", "requires_grad": True},
    {"name": "a.lora_A.default.weight", "shape": [2, 4], "storage": "float32", "requires_grad": True},
    {"name": "m.weight", "shape": [4, 4], "storage": "nf4", "requires_grad": False},
    {"name": "b.weight", "shape": [4, 4], "storage": "nf4", "requires_grad": False},
    {"name": "scale", "shape": [], "storage": "bfloat16", "requires_grad": False},
]
_report = trainable_report(_rows, "float32")
assert _report["frozen_4bit"] == ["b.weight", "m.weight"] and _report["frozen"] == ["scale"]
assert _report["trainable"] == ["a.lora_A.default.weight", "z.lora_B.default.weight"]
assert _report["parameters"] == {"frozen_4bit": 32, "frozen": 1, "trainable": 16}
assert type(_report["trainable_share"]) is float and math.isclose(_report["trainable_share"], 16 / 49)
assert _report["compute_dtype"] == "float32" and _report["trainable_storage"] == ["float32"]

# %% hidden exercise=trainable_report points=1 name=every_problem_is_named_and_sorted
# hint: one entry per tensor and problem; a 4-bit base tensor that trains has two problems; sort by name, then problem.
_rows = [
    {"name": "q.lora_A.default.weight", "shape": [2, 4], "storage": "nf4", "requires_grad": True},
    {"name": "k.weight", "shape": [4, 4], "storage": "nf4", "requires_grad": True},
    {"name": "norm.weight", "shape": [4], "storage": "bfloat16", "requires_grad": True},
    {"name": "v.lora_B.default.weight", "shape": [4, 2], "storage": "nf4", "requires_grad": False},
]
_report = trainable_report(_rows, "bfloat16")
assert _report["problems"] == [
    {"name": "k.weight", "problem": "4bit_tensor_trains"},
    {"name": "k.weight", "problem": "base_tensor_trains"},
    {"name": "norm.weight", "problem": "base_tensor_trains"},
    {"name": "q.lora_A.default.weight", "problem": "4bit_tensor_trains"},
    {"name": "q.lora_A.default.weight", "problem": "adapter_in_4bit"},
    {"name": "v.lora_B.default.weight", "problem": "adapter_in_4bit"},
]
assert _report["verdict"] == "invalid" and _report["trainable_storage"] == ["bfloat16", "nf4"]

# %% hidden exercise=trainable_report points=1 name=verdicts_in_their_order
# hint: invalid first, then nothing_trains, then qlora when a tensor is frozen in 4-bit, else lora.
_base = {"name": "w", "shape": [2, 2], "storage": "nf4", "requires_grad": False}
_adapter = {"name": "w.lora_A.x", "shape": [1, 2], "storage": "bfloat16", "requires_grad": True}
assert trainable_report([_base], "bfloat16")["verdict"] == "nothing_trains"
assert trainable_report([_base, _adapter], "bfloat16")["verdict"] == "qlora"
assert trainable_report([{**_base, "storage": "float16"}, _adapter], "float16")["verdict"] == "lora"
assert trainable_report([_base, {**_adapter, "storage": "nf4"}], "bfloat16")["verdict"] == "invalid"
assert trainable_report([{**_base, "storage": "float32"}], "float32")["problems"] == []

# %% hidden exercise=trainable_report points=1 name=malformed_tables_are_refused
# hint: check compute_dtype, the list, every key and every value before any work; names must be unique.
_row = {"name": "w", "shape": [2], "storage": "nf4", "requires_grad": False}
for _args in (([_row], "fp16"), ([_row], None), ([], "bfloat16"), ((_row,), "bfloat16"),
              ([_row, dict(_row)], "bfloat16"), ([{**_row, "name": ""}], "bfloat16"),
              ([{**_row, "shape": [2, True]}], "bfloat16"), ([{**_row, "shape": [0]}], "bfloat16"),
              ([{**_row, "shape": 2}], "bfloat16"), ([{**_row, "storage": "int8"}], "bfloat16"),
              ([{**_row, "requires_grad": 0}], "bfloat16"), ([{**_row, "dtype": "nf4"}], "bfloat16"),
              ([{"name": "w", "shape": [2], "storage": "nf4"}], "bfloat16")):
    assert trainable_report([_row, {**_row, "name": "lora_A", "storage": "float32", "requires_grad": True}], "float16")[
        "verdict"] == "qlora"  # a valid call
    try:
        trainable_report(*_args)
    except ValueError:
        continue
    raise AssertionError(f"{_args!r} accepted")

# %% hidden exercise=trainable_report points=2 name=agrees_with_reference_on_generated_tables
# hint: any table, valid or not: the same report, or the same error; the rows are not changed.
from hypothesis import strategies as st

_names = st.sampled_from(["embed_tokens.weight", "layers.0.q_proj.base_layer.weight", "layers.0.q_proj.base_layer.bias",
                          "layers.0.q_proj.lora_A.default.weight", "layers.0.q_proj.lora_B.default.weight",
                          "layers.1.mlp.down_proj.weight", "norm.weight", "lm_head.lora_embedding_A"])
_rows = st.fixed_dictionaries({
    "name": _names,
    "shape": st.one_of(st.lists(st.integers(1, 6), max_size=2), st.tuples(st.integers(1, 6)),
                       st.lists(st.sampled_from([0, True, 2]), max_size=2)),
    "storage": st.sampled_from(["nf4", "nf4", "float32", "bfloat16", "float16", "int8"]),
    "requires_grad": st.sampled_from([True, False, False, 1]),
})
_malformed = st.sampled_from([{"name": "", "shape": [2], "storage": "nf4", "requires_grad": False},
                              {"name": 7, "shape": [2], "storage": "nf4", "requires_grad": False},
                              {"name": "w", "shape": [2], "storage": "nf4"},
                              {"name": "w", "shape": [2], "storage": "nf4", "requires_grad": False, "dtype": "nf4"},
                              {"name": "w", "shape": 2, "storage": "nf4", "requires_grad": False}, ("w", [2]), None])
_tables = st.one_of(st.lists(_rows, max_size=6), st.lists(st.one_of(_rows, _malformed), min_size=1, max_size=3),
                    st.lists(_rows, min_size=1, max_size=2).map(tuple))
reference.agrees("trainable_report", st.tuples(_tables, st.sampled_from(["bfloat16", "float32", "float16", "fp32"])),
                 cases=200, clauses={
    "an empty table": lambda rows, dtype: rows == [],
    "a table given as a tuple": lambda rows, dtype: isinstance(rows, tuple),
    "a row that is not a dict": lambda rows, dtype: any(not isinstance(r, dict) for r in rows),
    "a row with a missing or extra key": lambda rows, dtype: any(
        isinstance(r, dict) and set(r) != {"name", "shape", "storage", "requires_grad"} for r in rows),
    "an empty or non-str name": lambda rows, dtype: any(
        isinstance(r, dict) and (not isinstance(r.get("name"), str) or r.get("name") == "") for r in rows),
    "a repeated name": lambda rows, dtype: len([r.get("name") for r in rows if isinstance(r, dict)]) > len(
        {repr(r.get("name")) for r in rows if isinstance(r, dict)}),
    "a shape with a bool or a 0": lambda rows, dtype: any(
        isinstance(r, dict) and isinstance(r.get("shape"), (list, tuple)) and any(d is True or d == 0 for d in r["shape"])
        for r in rows),
    "a shape that is not a list or tuple": lambda rows, dtype: any(
        isinstance(r, dict) and "shape" in r and not isinstance(r["shape"], (list, tuple)) for r in rows),
    "a scalar (empty shape)": lambda rows, dtype: any(isinstance(r, dict) and r.get("shape") == [] for r in rows),
    "an unknown storage": lambda rows, dtype: any(isinstance(r, dict) and r.get("storage") == "int8" for r in rows),
    "requires_grad given as 1": lambda rows, dtype: any(isinstance(r, dict) and r.get("requires_grad") == 1 and not
                                                        isinstance(r.get("requires_grad"), bool) for r in rows),
    "an unknown compute dtype": lambda rows, dtype: dtype == "fp32",
    "a 4-bit tensor that trains": lambda rows, dtype: any(
        isinstance(r, dict) and r.get("storage") == "nf4" and r.get("requires_grad") is True for r in rows),
    "an adapter stored in 4 bits": lambda rows, dtype: any(
        isinstance(r, dict) and "lora_" in str(r.get("name")) and r.get("storage") == "nf4" for r in rows),
})
