# %% hidden exercise=kto_reference_point points=1 name=mismatched_entries_are_the_rotated_ones
# hint: prompt i takes the completion of example (i - 1) mod n: never the diagonal, and one entry per prompt.
n = 4
policy = torch.arange(16, dtype=torch.float64).reshape(4, 4) * -0.5
reference = torch.zeros(4, 4, dtype=torch.float64) - 8.0
picked = [policy[i, (i - 1) % n] - reference[i, (i - 1) % n] for i in range(n)]
point = kto_reference_point(policy, reference)
assert point["pairs"] == [[0, 3], [1, 0], [2, 1], [3, 2]]
assert math.isclose(point["raw_mean"], float(sum(picked) / n), rel_tol=1e-12)
assert point["z0"].dtype == torch.float64 and point["z0"].shape == ()
assert math.isclose(float(point["z0"]), float(sum(picked) / n), rel_tol=1e-12)

# %% hidden exercise=kto_reference_point points=1 name=the_diagonal_never_counts
# hint: the diagonal holds the batch's own examples; changing it must not move z0.
policy = torch.tensor([[0.0, -1.0, -2.0], [-3.0, 0.0, -1.0], [-2.0, -3.0, 0.0]])
reference = torch.full((3, 3), -2.0)
base = kto_reference_point(policy, reference)
assert math.isclose(base["raw_mean"], -2 / 3, rel_tol=1e-6), "entries (0, 2), (1, 0), (2, 1): 0, -1, -1"
changed = policy.clone()
changed.fill_diagonal_(50.0)
assert kto_reference_point(changed, reference)["raw_mean"] == base["raw_mean"]
others = policy.clone()
others[0, 1] = others[1, 2] = others[2, 0] = 30.0
assert kto_reference_point(others, reference)["raw_mean"] == base["raw_mean"], "only (i, i - 1) entries count"

# %% hidden exercise=kto_reference_point points=1 name=negative_means_clamp_to_zero
# hint: clamp from below at 0 (a KL is never negative), but report the mean before the clamp; a positive mean is kept as it is.
policy = torch.tensor([[-1.0, -5.0], [-6.0, -1.0]])
reference = torch.tensor([[-1.0, -4.0], [-4.0, -1.0]])
point = kto_reference_point(policy, reference)
assert point["raw_mean"] == -1.5 and float(point["z0"]) == 0.0 and point["z0"].dtype == torch.float32
flipped = kto_reference_point(reference, policy)
assert flipped["raw_mean"] == 1.5 and float(flipped["z0"]) == 1.5

# %% hidden exercise=kto_reference_point points=1 name=z0_is_detached_and_the_inputs_untouched
# hint: z0 carries no graph even when the policy's matrix does; the inputs keep their values and requires_grad.
policy = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]], requires_grad=True)
reference = torch.tensor([[-1.5, -2.5], [-3.5, -4.5]])
point = kto_reference_point(policy, reference)
assert point["raw_mean"] == 0.5 and float(point["z0"]) == 0.5
assert not point["z0"].requires_grad
assert policy.requires_grad
assert torch.equal(reference, torch.tensor([[-1.5, -2.5], [-3.5, -4.5]]))
assert type(point["raw_mean"]) is float and all(type(i) is int and type(j) is int for i, j in point["pairs"])

# %% hidden exercise=kto_reference_point points=1 name=invalid_matrices_raise
# hint: two finite, square float matrices of one shape and dtype, with at least two examples.
good = torch.zeros(3, 3)
assert float(kto_reference_point(good, good)["z0"]) == 0.0
bad_calls = [
    lambda: kto_reference_point(good.tolist(), good), lambda: kto_reference_point(good, good.double()),
    lambda: kto_reference_point(good.long(), good.long()), lambda: kto_reference_point(good.half(), good.half()),
    lambda: kto_reference_point(torch.zeros(3), torch.zeros(3)), lambda: kto_reference_point(torch.zeros(2, 3), torch.zeros(2, 3)),
    lambda: kto_reference_point(torch.zeros(1, 1), torch.zeros(1, 1)), lambda: kto_reference_point(good, torch.zeros(2, 2)),
    lambda: kto_reference_point(torch.zeros(0, 0), torch.zeros(0, 0)), lambda: kto_reference_point(torch.zeros(2, 2, 2), torch.zeros(2, 2, 2)),
    lambda: kto_reference_point(torch.tensor([[0.0, float("nan")], [0.0, 0.0]]), torch.zeros(2, 2)),
    lambda: kto_reference_point(torch.zeros(2, 2), torch.tensor([[0.0, 0.0], [float("-inf"), 0.0]])),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=kto_loss points=1 name=both_formulas_by_hand
# hint: desirable: w_D (1 - sigmoid(beta (r - z0))); undesirable: w_U (1 - sigmoid(beta (z0 - r))), with r = policy - reference.
policy = torch.tensor([-1.0, -1.0, -4.0, -0.5], dtype=torch.float64)
reference = torch.tensor([-2.0, -2.0, -3.0, -0.5], dtype=torch.float64)
desirable = torch.tensor([True, False, False, True])
z0 = torch.tensor(0.25, dtype=torch.float64)
result = kto_loss(policy, reference, desirable, z0, 0.5, desirable_weight=2.0, undesirable_weight=0.75)
r = torch.tensor([1.0, 1.0, -1.0, 0.0], dtype=torch.float64)
expected = torch.stack([2.0 * (1 - torch.sigmoid(0.5 * (r[0] - 0.25))), 0.75 * (1 - torch.sigmoid(0.5 * (0.25 - r[1]))),
                        0.75 * (1 - torch.sigmoid(0.5 * (0.25 - r[2]))), 2.0 * (1 - torch.sigmoid(0.5 * (r[3] - 0.25)))])
assert result["losses"].dtype == torch.float64 and torch.allclose(result["losses"], expected, atol=1e-12)
assert torch.allclose(result["loss"], expected.mean(), atol=1e-12) and result["loss"].shape == ()
assert torch.allclose(result["rewards"], 0.5 * r, atol=1e-12)

# %% hidden exercise=kto_loss points=1 name=one_mean_over_every_example
# hint: the loss is the mean of all n weighted losses together, not the mean of each class added up; one class alone is fine.
policy = torch.tensor([-1.0, -1.0, -1.0, -1.0])
reference = torch.tensor([-1.5, -1.0, -0.5, -2.0])
desirable = torch.tensor([True, False, False, False])
result = kto_loss(policy, reference, desirable, torch.tensor(0.0), 1.0)
assert torch.allclose(result["loss"], result["losses"].mean())
only_good = kto_loss(policy, reference, torch.ones(4, dtype=torch.bool), torch.tensor(0.0), 1.0)
expected = (1 - torch.sigmoid(torch.tensor([0.5, 0.0, -0.5, 1.0]))).mean()
assert torch.allclose(only_good["loss"], expected)

# %% hidden exercise=kto_loss points=1 name=directions_and_the_upper_bound
# hint: raising r lowers a desirable example's loss and raises an undesirable one's; no loss exceeds its class weight.
low = kto_loss(torch.tensor([-3.0, -3.0]), torch.tensor([-2.0, -2.0]), torch.tensor([True, False]), torch.tensor(0.0), 1.0,
               desirable_weight=3.0, undesirable_weight=0.5)
high = kto_loss(torch.tensor([-1.0, -1.0]), torch.tensor([-2.0, -2.0]), torch.tensor([True, False]), torch.tensor(0.0), 1.0,
                desirable_weight=3.0, undesirable_weight=0.5)
assert float(high["losses"][0]) < float(low["losses"][0]) and float(high["losses"][1]) > float(low["losses"][1])
extreme = kto_loss(torch.tensor([-500.0, 500.0]), torch.tensor([0.0, 0.0]), torch.tensor([True, False]), torch.tensor(0.0), 1.0,
                   desirable_weight=3.0, undesirable_weight=0.5)
assert torch.allclose(extreme["losses"], torch.tensor([3.0, 0.5])) and bool(torch.isfinite(extreme["loss"]))

# %% hidden exercise=kto_loss points=1 name=z0_shifts_the_reference_point
# hint: z0 is subtracted from r for desirable examples and r from z0 for undesirable ones; a larger z0 raises the bar for both.
policy, reference = torch.tensor([-1.0, -1.0]), torch.tensor([-1.0, -1.0])
labels = torch.tensor([True, False])
at_zero = kto_loss(policy, reference, labels, torch.tensor(0.0), 1.0)["losses"]
at_two = kto_loss(policy, reference, labels, torch.tensor(2.0), 1.0)["losses"]
assert torch.allclose(at_zero, torch.tensor([0.5, 0.5]))
assert torch.allclose(at_two, torch.tensor([1 - torch.sigmoid(torch.tensor(-2.0)), 1 - torch.sigmoid(torch.tensor(2.0))]))

# %% hidden exercise=kto_loss points=1 name=gradient_reaches_the_policy_only
# hint: detach the reference log-probabilities and z0; the gradient on each policy log-probability is the derivative of its own weighted term, divided by n.
from tools.course.grader.boundary import backward_through

policy = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
reference = torch.tensor([-1.5, -1.0, -0.5], requires_grad=True)
z0 = torch.tensor(0.2, requires_grad=True)
labels = torch.tensor([True, False, True])
backward_through(kto_loss, policy, reference, labels, z0, 2.0, desirable_weight=1.5, undesirable_weight=0.5,
                 select=["loss"], reduce=None)
assert reference.grad is None and z0.grad is None, "no gradient may reach the reference or the reference point"
r = (policy - reference).detach()
good = -1.5 * 2.0 * torch.sigmoid(2.0 * (r - 0.2)) * (1 - torch.sigmoid(2.0 * (r - 0.2))) / 3
bad = 0.5 * 2.0 * torch.sigmoid(2.0 * (0.2 - r)) * (1 - torch.sigmoid(2.0 * (0.2 - r))) / 3
assert torch.allclose(policy.grad, torch.where(labels, good, bad), atol=1e-6)

# %% hidden exercise=kto_loss points=1 name=invalid_inputs_raise
# hint: check both log-probability tensors, the labels (a bool tensor of the same shape), z0 (a finite 0-dim tensor >= 0 of the same dtype) and the three numbers.
p, r, d, z = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.5]), torch.tensor([True, False]), torch.tensor(0.1)
assert kto_loss(p, r, d, z, 0.1)["losses"].shape == (2,)
bad_calls = [
    lambda: kto_loss(p.tolist(), r, d, z, 0.1), lambda: kto_loss(p, r[:1], d, z, 0.1), lambda: kto_loss(p, r.double(), d, z, 0.1),
    lambda: kto_loss(p.long(), r.long(), d, z, 0.1), lambda: kto_loss(p[:0], r[:0], d[:0], z, 0.1),
    lambda: kto_loss(p.reshape(1, 2), r.reshape(1, 2), d.reshape(1, 2), z, 0.1),
    lambda: kto_loss(torch.tensor([float("nan"), -1.0]), r, d, z, 0.1), lambda: kto_loss(p, r, torch.tensor([1, 0]), z, 0.1),
    lambda: kto_loss(p, r, [True, False], z, 0.1), lambda: kto_loss(p, r, d[:1], z, 0.1), lambda: kto_loss(p, r, d, 0.1, 0.1),
    lambda: kto_loss(p, r, d, torch.tensor([0.1]), 0.1), lambda: kto_loss(p, r, d, torch.tensor(-0.1), 0.1),
    lambda: kto_loss(p, r, d, torch.tensor(0.1, dtype=torch.float64), 0.1), lambda: kto_loss(p, r, d, torch.tensor(float("inf")), 0.1),
    lambda: kto_loss(p, r, d, z, 0), lambda: kto_loss(p, r, d, z, True), lambda: kto_loss(p, r, d, z, 0.1, desirable_weight=0),
    lambda: kto_loss(p, r, d, z, 0.1, undesirable_weight=-1.0), lambda: kto_loss(p, r, d, z, 0.1, desirable_weight=float("nan")),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=kto_class_weights points=1 name=balanced_weight_and_its_range
# hint: with lambda_U fixed, the weight that makes the ratio exactly 1 is lambda_U n_U / n_D, and the range runs up to 4/3 of it.
result = kto_class_weights((True, False, False, False, True, False), undesirable_weight=2.0)
assert result == {"n_desirable": 2, "n_undesirable": 4, "desirable_weight": 4.0, "undesirable_weight": 2.0, "ratio": 1.0,
                  "desirable_range": [4.0, 4.0 * 4 / 3]}
assert type(result["desirable_weight"]) is float and type(result["undesirable_weight"]) is float
more_good = kto_class_weights([True] * 6 + [False] * 2)
assert more_good["desirable_weight"] == 2 / 6 and more_good["ratio"] == 1.0

# %% hidden exercise=kto_class_weights points=1 name=both_ends_included_despite_rounding
# hint: the range is closed; a ratio that floating point puts a hair above 4/3 or below 1 (within 1e-9) still counts as inside.
labels = [True] * 3 + [False] * 19
upper = kto_class_weights(labels, desirable_weight=4 / 3 * 19 / 3)
assert abs(upper["ratio"] - 4 / 3) < 1e-12
lower = kto_class_weights([True] * 11 + [False] * 15, desirable_weight=15 / 11)
assert abs(lower["ratio"] - 1) < 1e-12
for outside in (4 / 3 * 19 / 3 * 1.001, 19 / 3 * 0.999):
    try:
        kto_class_weights(labels, desirable_weight=outside)
    except ValueError:
        continue
    raise AssertionError(f"desirable_weight {outside} is outside the range")

# %% hidden exercise=kto_class_weights points=1 name=outside_the_range_raises_with_the_range
# hint: a desirable weight outside the range raises ValueError whose message names the ratio and the allowed desirable weights.
labels = [True] * 4 + [False] * 12
assert kto_class_weights(labels, desirable_weight=3.5)["ratio"] == 3.5 * 4 / 12
for weight in (1.0, 2.9, 4.1, 30.0):
    try:
        kto_class_weights(labels, desirable_weight=weight)
    except ValueError as error:
        assert "3" in str(error) and "4" in str(error), f"the message must name the range [3, 4]: {error}"
        continue
    raise AssertionError(f"desirable_weight {weight} is outside [3, 4]")

# %% hidden exercise=kto_class_weights points=1 name=invalid_labels_and_weights_raise
# hint: a list or tuple of bools with both classes present; weights finite and > 0; bools are not weights.
assert kto_class_weights([True, False])["desirable_weight"] == 1.0
bad_calls = [
    lambda: kto_class_weights([True, True]), lambda: kto_class_weights([False] * 3), lambda: kto_class_weights([]),
    lambda: kto_class_weights([1, 0]), lambda: kto_class_weights("TF"), lambda: kto_class_weights(None),
    lambda: kto_class_weights([True, False, None]), lambda: kto_class_weights({True, False}),
    lambda: kto_class_weights([True, False], undesirable_weight=0), lambda: kto_class_weights([True, False], undesirable_weight=True),
    lambda: kto_class_weights([True, False], undesirable_weight=float("inf")),
    lambda: kto_class_weights([True, False], desirable_weight=-1.0), lambda: kto_class_weights([True, False], desirable_weight="1"),
    lambda: kto_class_weights([True, False], desirable_weight=float("nan")), lambda: kto_class_weights([True, False], desirable_weight=True),
]
for bad_call in bad_calls:
    try:
        bad_call()
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=kto_reference_point points=2 name=agrees_with_reference_on_generated_valid_matrices
# hint: any finite square matrices of either float dtype, with positive or negative mismatched means: the same z0, raw mean and pairs.
from hypothesis import strategies as st

@st.composite
def valid_matrices(draw):
    n = draw(st.integers(2, 6))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    reference = (-5 * torch.rand(n, n, generator=generator)).to(dtype)
    shift = draw(st.sampled_from([-1.0, -0.1, 0.0, 0.1, 1.0]))
    policy = (reference + shift + 0.5 * torch.randn(n, n, generator=generator).to(dtype)).to(dtype)
    return policy, reference


def mismatched_mean(policy, reference):
    n = policy.shape[0]
    return float(sum(float(policy[i, (i - 1) % n] - reference[i, (i - 1) % n]) for i in range(n)) / n)


reference.agrees("kto_reference_point", valid_matrices(), cases=120, clauses={
    "float64 matrices": lambda policy, reference: policy.dtype == torch.float64,
    "float32 matrices": lambda policy, reference: policy.dtype == torch.float32,
    "two examples only": lambda policy, reference: policy.shape[0] == 2,
    "a negative mismatched mean (clamped to 0)": lambda policy, reference: mismatched_mean(policy, reference) < 0,
    "a positive mismatched mean": lambda policy, reference: mismatched_mean(policy, reference) > 0,
    "a diagonal that differs from the mismatched pairs": lambda policy, reference: abs(float(
        (policy - reference).diagonal().mean()) - mismatched_mean(policy, reference)) > 0.1,
})

# %% hidden exercise=kto_reference_point points=2 name=agrees_with_reference_on_generated_invalid_matrices
# hint: valid matrices, or one thing wrong (not a tensor, an integer or half dtype, not square, one example, different shapes or dtypes, NaN or infinity): the same result, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = [("valid", n) for n in range(20)] + [(kind, None) for kind in [
    "list", "int", "half", "vector", "rectangle", "one", "empty", "shape", "dtype", "nan", "inf"]]

def one_defect(defect, rng):
    """Valid 3 x 3 matrices, or with exactly this defect."""
    kind, _ = defect
    generator = torch.Generator().manual_seed(rng.randrange(1000))
    dtype = rng.choice([torch.float32, torch.float64])
    reference = (-3 * torch.rand(3, 3, generator=generator)).to(dtype)
    policy = (reference + rng.choice([-0.5, 0.5]) + 0.3 * torch.randn(3, 3, generator=generator)).to(dtype)
    which = rng.randrange(2)
    pair = [policy, reference]
    if kind == "list":
        pair[which] = pair[which].tolist()
    elif kind == "int":
        pair = [tensor.long() for tensor in pair]
    elif kind == "half":
        pair = [tensor.half() for tensor in pair]
    elif kind == "vector":
        pair = [tensor[0] for tensor in pair]
    elif kind == "rectangle":
        pair = [tensor[:2] for tensor in pair]
    elif kind == "one":
        pair = [tensor[:1, :1] for tensor in pair]
    elif kind == "empty":
        pair = [tensor[:0, :0] for tensor in pair]
    elif kind == "shape":
        pair[which] = torch.zeros(4, 4, dtype=dtype)
    elif kind == "dtype":
        pair[which] = pair[which].to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind in ("nan", "inf"):
        pair[which][rng.randrange(3), rng.randrange(3)] = float("nan") if kind == "nan" else float("inf")
    return tuple(pair)


def tensors(*pair):
    return all(isinstance(value, torch.Tensor) for value in pair)


def square(value):
    return value.dim() == 2 and value.shape[0] == value.shape[1]


reference.agrees("kto_reference_point", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a matrix that is not a tensor": lambda policy, reference: not tensors(policy, reference),
    "integer matrices": lambda policy, reference: tensors(policy, reference) and not policy.is_floating_point(),
    "half-precision matrices": lambda policy, reference: tensors(policy, reference) and policy.dtype == torch.float16,
    "a 1-D tensor": lambda policy, reference: tensors(policy, reference) and policy.dim() == 1,
    "a matrix that is not square": lambda policy, reference: tensors(policy, reference) and policy.dim() == 2 and not
        square(policy),
    "a single example": lambda policy, reference: tensors(policy, reference) and square(policy) and policy.shape[0] == 1,
    "no example": lambda policy, reference: tensors(policy, reference) and square(policy) and policy.shape[0] == 0,
    "shapes that differ": lambda policy, reference: tensors(policy, reference) and policy.shape != reference.shape,
    "dtypes that differ": lambda policy, reference: tensors(policy, reference) and policy.shape == reference.shape
        and policy.dtype != reference.dtype,
    "a NaN": lambda policy, reference: tensors(policy, reference) and policy.is_floating_point() and any(
        bool(value.isnan().any()) for value in (policy, reference)),
    "an infinity": lambda policy, reference: tensors(policy, reference) and policy.is_floating_point() and any(
        bool(value.isinf().any()) for value in (policy, reference)),
})

# %% hidden exercise=kto_loss points=2 name=agrees_with_reference_on_generated_valid_batches
# hint: any valid batch (one class or both, any z0 >= 0, any positive beta and weights, either float dtype): the same loss, losses and rewards.
from hypothesis import strategies as st

@st.composite
def valid_batches(draw):
    n = draw(st.integers(1, 6))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    policy = (-4 * torch.rand(n, generator=generator)).to(dtype)
    reference_logps = (-4 * torch.rand(n, generator=generator)).to(dtype)
    desirable = torch.tensor([draw(st.booleans()) for _ in range(n)])
    z0 = torch.tensor(draw(st.sampled_from([0.0, 0.3, 1.0, 2.5])), dtype=dtype)
    return ((policy, reference_logps, desirable, z0, draw(st.sampled_from([0.1, 0.5, 1, 2.0]))),
            {"desirable_weight": draw(st.sampled_from([1.0, 1.5, 3, 0.25])),
             "undesirable_weight": draw(st.sampled_from([1.0, 0.5, 2]))})


def labels(policy, reference_logps, desirable, *rest, **weights):
    return desirable


reference.agrees("kto_loss", valid_batches(), cases=120, clauses={
    "float64 log-probabilities": lambda policy, *a, **k: policy.dtype == torch.float64,
    "only desirable examples": lambda *a, **k: bool(labels(*a, **k).all()),
    "only undesirable examples": lambda *a, **k: not bool(labels(*a, **k).any()),
    "both classes": lambda *a, **k: bool(labels(*a, **k).any()) and not bool(labels(*a, **k).all()),
    "z0 at 0": lambda policy, reference_logps, desirable, z0, beta, **k: float(z0) == 0,
    "z0 above 0": lambda policy, reference_logps, desirable, z0, beta, **k: float(z0) > 0,
    "beta given as an int": lambda policy, reference_logps, desirable, z0, beta, **k: type(beta) is int,
    "class weights that differ": lambda *a, desirable_weight, undesirable_weight: desirable_weight != undesirable_weight,
    "a weight given as an int": lambda *a, desirable_weight, undesirable_weight: type(desirable_weight) is int
        or type(undesirable_weight) is int,
})

# %% hidden exercise=kto_loss points=2 name=agrees_with_reference_on_generated_invalid_batches
# hint: a valid batch, or one thing wrong (a shape, a dtype, integer labels, a negative or non-scalar z0, NaN, a bool or non-positive number): the same result, or the same ValueError.
from tools.course.grader.clauses import below, each_of, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(24)]
           + [(kind, None) for kind in ["list", "shape", "dtype", "nan", "labels_int", "labels_list", "labels_shape",
                                        "z0_float", "z0_vector", "z0_negative", "z0_dtype", "z0_nan"]]
           + [("beta", bad) for bad in [0, -1.0, True, None, "0.1", float("inf")]]
           + [(weight, bad) for weight in ("desirable_weight", "undesirable_weight")
              for bad in [0, -0.5, False, float("nan"), None]])

def one_defect(defect, rng):
    """A valid batch of three, or with exactly this defect."""
    kind, bad = defect
    args = [torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.2, -1.8, -0.5]),
            torch.tensor([rng.random() < 0.5 for _ in range(3)]), torch.tensor(rng.choice([0.0, 0.2])),
            rng.choice([0.1, 1])]
    kwargs = {"desirable_weight": rng.choice([1.0, 1.5]), "undesirable_weight": rng.choice([1.0, 2])}
    which = rng.randrange(2)
    if kind == "list":
        args[which] = args[which].tolist()
    elif kind == "shape":
        args[which] = args[which][:2]
    elif kind == "dtype":
        args[which] = args[which].double()
    elif kind == "nan":
        args[which][rng.randrange(3)] = float("nan")
    elif kind == "labels_int":
        args[2] = args[2].long()
    elif kind == "labels_list":
        args[2] = args[2].tolist()
    elif kind == "labels_shape":
        args[2] = args[2][:2]
    elif kind == "z0_float":
        args[3] = 0.2
    elif kind == "z0_vector":
        args[3] = torch.tensor([0.2])
    elif kind == "z0_negative":
        args[3] = torch.tensor(-0.01)
    elif kind == "z0_dtype":
        args[3] = torch.tensor(0.2, dtype=torch.float64)
    elif kind == "z0_nan":
        args[3] = torch.tensor(float("nan"))
    elif kind == "beta":
        args[4] = bad
    elif kind != "valid":
        kwargs[kind] = bad
    return tuple(args), kwargs


def is_tensor(value):
    return isinstance(value, torch.Tensor)


def logps_ok(policy, reference_logps):
    return (is_tensor(policy) and is_tensor(reference_logps) and policy.shape == reference_logps.shape == (3,)
            and policy.dtype == reference_logps.dtype == torch.float32
            and bool(policy.isfinite().all()) and bool(reference_logps.isfinite().all()))


def scalar_clauses(name, pick):
    return {
        f"{name} a bool": lambda *a, **k: is_bool(pick(*a, **k)),
        f"{name} not a number": lambda *a, **k: not_a_number(pick(*a, **k)),
        f"{name} not finite": lambda *a, **k: not_finite(pick(*a, **k)),
        f"{name} <= 0": lambda *a, **k: not is_bool(pick(*a, **k)) and below(pick(*a, **k), 0, or_equal=True),
    }


reference.agrees("kto_loss", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "log-probabilities that are not a tensor": lambda p, r, *a, **k: not (is_tensor(p) and is_tensor(r)),
    "log-probabilities of different shapes": lambda p, r, *a, **k: is_tensor(p) and is_tensor(r) and p.shape != r.shape,
    "log-probabilities of different dtypes": lambda p, r, *a, **k: is_tensor(p) and is_tensor(r) and p.shape == r.shape
        and p.dtype != r.dtype,
    "a NaN log-probability": lambda p, r, *a, **k: is_tensor(p) and is_tensor(r) and (
        bool(p.isnan().any()) or bool(r.isnan().any())),
    "integer labels": lambda p, r, d, *a, **k: is_tensor(d) and d.dtype != torch.bool,
    "labels that are a list": lambda p, r, d, *a, **k: isinstance(d, list),
    "labels of another shape": lambda p, r, d, *a, **k: logps_ok(p, r) and is_tensor(d) and d.dtype == torch.bool
        and d.shape != p.shape,
    "z0 a Python float": lambda p, r, d, z0, *a, **k: isinstance(z0, float),
    "z0 not 0-dim": lambda p, r, d, z0, *a, **k: is_tensor(z0) and z0.dim() != 0,
    "z0 negative": lambda p, r, d, z0, *a, **k: is_tensor(z0) and z0.dim() == 0 and z0.dtype == torch.float32
        and float(z0) < 0,
    "z0 of another dtype": lambda p, r, d, z0, *a, **k: logps_ok(p, r) and is_tensor(z0) and z0.dtype != p.dtype,
    "z0 NaN": lambda p, r, d, z0, *a, **k: is_tensor(z0) and z0.dim() == 0 and bool(z0.isnan()),
    **scalar_clauses("beta", lambda p, r, d, z0, beta, **k: beta),
    **scalar_clauses("desirable_weight", lambda *a, desirable_weight, undesirable_weight: desirable_weight),
    **scalar_clauses("undesirable_weight", lambda *a, desirable_weight, undesirable_weight: undesirable_weight),
})

# %% hidden exercise=kto_class_weights points=2 name=agrees_with_reference_on_generated_valid_sets
# hint: any labels with both classes and weights at, inside and just outside the ends of the range: the same weights and ratio, or the same ValueError.
from hypothesis import strategies as st

@st.composite
def valid_sets(draw):
    good, bad = draw(st.integers(1, 25)), draw(st.integers(1, 25))
    labels = [True] * good + [False] * bad
    order = draw(st.permutations(range(len(labels))))
    labels = [labels[index] for index in order]
    undesirable = draw(st.sampled_from([1.0, 1, 0.5, 2.5]))
    balanced = undesirable * bad / good
    desirable = draw(st.sampled_from([None, balanced, balanced * 4 / 3, balanced * 1.2, balanced * 0.99,
                                      balanced * 1.34, 1.0]))
    return (labels if draw(st.booleans()) else tuple(labels), undesirable, desirable)


def ratio(labels, undesirable, desirable):
    good = sum(labels)
    bad = len(labels) - good
    return (undesirable * bad / good if desirable is None else desirable) * good / (undesirable * bad)


reference.agrees("kto_class_weights", valid_sets(), cases=150, clauses={
    "labels a tuple": lambda labels, undesirable, desirable: isinstance(labels, tuple),
    "desirable_weight left to the function": lambda labels, undesirable, desirable: desirable is None,
    "a ratio exactly 1 (the balanced weight)": lambda labels, u, d: d is not None and ratio(labels, u, d) == 1,
    "a ratio inside (1, 4/3)": lambda labels, u, d: 1 < ratio(labels, u, d) < 4 / 3,
    "a ratio at 4/3 up to rounding": lambda labels, u, d: d is not None and abs(ratio(labels, u, d) - 4 / 3) < 1e-9,
    "a ratio just below 1 (refused)": lambda labels, u, d: 0.98 < ratio(labels, u, d) < 1 - 1e-9,
    "a ratio just above 4/3 (refused)": lambda labels, u, d: 4 / 3 + 1e-9 < ratio(labels, u, d) < 1.36,
    "more undesirable than desirable examples": lambda labels, u, d: sum(labels) < len(labels) - sum(labels),
    "undesirable_weight given as an int": lambda labels, u, d: type(u) is int,
})

# %% hidden exercise=kto_class_weights points=2 name=agrees_with_reference_on_generated_invalid_sets
# hint: valid labels, or one thing wrong (ints or None for labels, a missing class, a bool, zero, negative or NaN weight): the same weights, or the same ValueError.
from tools.course.grader.clauses import below, each_of, is_bool, not_a_number, not_finite

defects = ([("valid", n) for n in range(20)]
           + [("labels", bad) for bad in [None, "TFF", {True, False}, 3, [], ()]]
           + [("label", bad) for bad in [1, 0, None, "True", 1.0]]
           + [("one_class", value) for value in (True, False)]
           + [("undesirable", bad) for bad in [0, -1.0, True, None, "1", float("nan"), float("inf")]]
           + [("desirable", bad) for bad in [0, -1.0, True, False, "1.5", float("nan"), float("inf")]])

def one_defect(defect, rng):
    """Labels with both classes and valid weights, or with exactly this defect."""
    kind, bad = defect
    labels = [True, False] + [rng.random() < 0.4 for _ in range(rng.randint(1, 6))]
    rng.shuffle(labels)
    undesirable, desirable = rng.choice([1.0, 2]), None
    if kind == "valid" and rng.random() < 0.5:
        labels = tuple(labels)
    elif kind == "labels":
        labels = bad
    elif kind == "label":
        labels[rng.randrange(len(labels))] = bad
    elif kind == "one_class":
        labels = [bad] * rng.randint(1, 5)
    elif kind == "undesirable":
        undesirable = bad
    elif kind == "desirable":
        desirable = bad
    return (labels, undesirable, desirable)


def bool_labels(labels):
    return isinstance(labels, (list, tuple)) and all(isinstance(label, bool) for label in labels)


def both_classes(labels):
    return bool_labels(labels) and any(labels) and not all(labels)


def weight_clauses(name, pick):
    return {
        f"{name} a bool": lambda *a: both_classes(a[0]) and is_bool(pick(*a)),
        f"{name} not a number": lambda *a: both_classes(a[0]) and pick(*a) is not None and not_a_number(pick(*a)),
        f"{name} not finite": lambda *a: both_classes(a[0]) and not_finite(pick(*a)),
        f"{name} <= 0": lambda *a: both_classes(a[0]) and not is_bool(pick(*a)) and below(pick(*a), 0, or_equal=True),
    }


reference.agrees("kto_class_weights", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "labels not a list or tuple": lambda labels, u, d: not isinstance(labels, (list, tuple)),
    "no labels": lambda labels, u, d: isinstance(labels, (list, tuple)) and not labels,
    "a label 0 or 1": lambda labels, u, d: isinstance(labels, list) and any(
        label in (0, 1) and not is_bool(label) for label in labels),
    "a label that is not a bool or a number": lambda labels, u, d: isinstance(labels, list) and any(
        not_a_number(label) for label in labels),
    "only desirable labels": lambda labels, u, d: bool_labels(labels) and labels and all(labels),
    "only undesirable labels": lambda labels, u, d: bool_labels(labels) and labels and not any(labels),
    "undesirable_weight None": lambda labels, u, d: both_classes(labels) and u is None,
    **weight_clauses("undesirable_weight", lambda labels, u, d: u),
    **weight_clauses("desirable_weight", lambda labels, u, d: d),
})
