# %% hidden exercise=length_desensitised_logps points=1 name=masked_sums_ignore_everything_outside_the_mask
# hint: replace the entries outside the mask before adding (nan * 0 is nan); left padding, right padding and gaps in the mask all count only the True entries.
chosen = torch.tensor([[float("nan"), -1.0, -2.0, float("inf")], [-0.5, float("-inf"), -1.5, -1.0]])
rejected = torch.tensor([[-3.0, float("nan"), -1.0], [-2.0, -1.0, 7.0]])
chosen_mask = torch.tensor([[False, True, True, False], [True, False, True, True]])
rejected_mask = torch.tensor([[True, False, True], [True, True, False]])
result = length_desensitised_logps(chosen, rejected, chosen_mask, rejected_mask)
assert torch.equal(result["chosen"], torch.tensor([-3.0, -3.0])), result["chosen"]
assert torch.equal(result["rejected"], torch.tensor([-4.0, -3.0])), result["rejected"]
assert result["chosen_lengths"].tolist() == [2, 3] and result["rejected_lengths"].tolist() == [2, 2]
assert result["chosen_lengths"].dtype == torch.int64 and result["rejected_lengths"].dtype == torch.int64

# %% hidden exercise=length_desensitised_logps points=1 name=only_tokens_past_the_shared_length_weigh_ld_alpha
# hint: number the response tokens of a row 1, 2, 3, ... in mask order; those numbered above min(n_chosen, n_rejected) of their pair weigh ld_alpha, every other token weighs 1.
chosen = torch.tensor([[0.0, -1.0, -2.0, -4.0, -8.0], [-1.0, -1.0, -1.0, 0.0, 0.0]], dtype=torch.float64)
rejected = torch.tensor([[-16.0, -32.0, 0.0], [-2.0, -4.0, -8.0]], dtype=torch.float64)
chosen_mask = torch.tensor([[False, True, True, True, True], [True, True, True, False, False]])
rejected_mask = torch.tensor([[True, True, False], [True, True, True]])
for alpha, expected_chosen, expected_rejected in ((0, [-3.0, -3.0], [-48.0, -14.0]),
                                                  (0.25, [-6.0, -3.0], [-48.0, -14.0]),
                                                  (1, [-15.0, -3.0], [-48.0, -14.0]),
                                                  (None, [-15.0, -3.0], [-48.0, -14.0])):
    result = length_desensitised_logps(chosen, rejected, chosen_mask, rejected_mask, alpha)
    assert torch.equal(result["chosen"], torch.tensor(expected_chosen, dtype=torch.float64)), (alpha, result["chosen"])
    assert torch.equal(result["rejected"], torch.tensor(expected_rejected, dtype=torch.float64)), (alpha, result["rejected"])
longer_rejected = length_desensitised_logps(rejected, chosen, rejected_mask, chosen_mask, 0.5)
assert torch.equal(longer_rejected["rejected"], torch.tensor([-9.0, -3.0], dtype=torch.float64)), longer_rejected

# %% hidden exercise=length_desensitised_logps points=1 name=gradients_reach_each_masked_token_with_its_weight
# hint: keep the graph: the gradient of a sum on each token is its weight (1 or ld_alpha), and 0 outside the mask.
from tools.course.grader.boundary import backward_through

chosen = torch.tensor([[-1.0, -2.0, -3.0, -4.0]], requires_grad=True)
rejected = torch.tensor([[-1.0, -1.0, 5.0]], requires_grad=True)
chosen_mask = torch.tensor([[True, True, True, False]])
rejected_mask = torch.tensor([[False, True, True]])
backward_through(length_desensitised_logps, chosen, rejected, chosen_mask, rejected_mask, 0.5, select=["chosen"],
                 reduce="sum")
assert torch.equal(chosen.grad, torch.tensor([[1.0, 1.0, 0.5, 0.0]])), chosen.grad
assert rejected.grad is None or float(rejected.grad.abs().sum()) == 0.0
result = length_desensitised_logps(chosen.detach(), rejected.detach(), chosen_mask, rejected_mask, 0.5)
assert torch.equal(result["chosen"], torch.tensor([-4.5])) and torch.equal(result["rejected"], torch.tensor([4.0]))

# %% hidden exercise=length_desensitised_logps points=1 name=invalid_inputs_are_refused_valid_ones_summed
# hint: check both tables (2-D float32/float64, non-empty, one dtype, one row per pair), both masks (bool, the table's shape, a True in every row) and ld_alpha (None or a number in [0, 1], bools refused).
table = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
mask = torch.tensor([[True, True], [True, False]])
assert length_desensitised_logps(table, table, mask, mask, 0.5)["chosen"].tolist() == [-3.0, -3.0]
cases = [(table.tolist(), table, mask, mask, None), (table, table.double(), mask, mask, None),
         (table[0], table[0], mask[0], mask[0], None), (table.half(), table.half(), mask, mask, None),
         (table, table[:1], mask, mask[:1], None), (table, table, mask.long(), mask, None),
         (table, table, mask, mask[:, :1], None), (table, table, torch.tensor([[True, True], [False, False]]), mask, None),
         (table, table, mask, mask, 1.5), (table, table, mask, mask, -0.1), (table, table, mask, mask, True),
         (table, table, mask, mask, float("nan")), (table, table, mask, mask, "0.5"), (table[:0], table[:0], mask[:0], mask[:0], None)]
for index, case in enumerate(cases):
    try:
        length_desensitised_logps(*case)
    except ValueError:
        continue
    raise AssertionError(f"invalid case {index} accepted")

# %% hidden exercise=length_desensitised_logps points=2 name=agrees_with_reference_on_generated_valid_pairs
# hint: any well-formed pairs (float32 or float64, left or right padding, gaps, nan or inf outside the mask, chosen or rejected longer, ld_alpha None, 0, 1 or between): the same sums and lengths.
from hypothesis import strategies as st


@st.composite
def valid_tables(draw):
    pairs = draw(st.integers(1, 3))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    tables, masks = [], []
    for side in range(2):
        width = draw(st.integers(1, 6))
        table = (-3 * torch.rand(pairs, width, generator=generator)).to(dtype)
        rows = []
        for _ in range(pairs):
            row = [draw(st.booleans()) for _ in range(width)]
            if not any(row):
                row[draw(st.integers(0, width - 1))] = True
            rows.append(row)
        mask = torch.tensor(rows)
        if draw(st.booleans()):
            table = torch.where(mask, table, torch.full_like(table, draw(st.sampled_from(
                [float("nan"), float("inf"), float("-inf"), 1e30]))))
        tables.append(table)
        masks.append(mask)
    alpha = draw(st.sampled_from([None, 0, 0.0, 0.5, 0.25, 1, 1.0]))
    return tables[0], tables[1], masks[0], masks[1], alpha


def lengths_of(chosen, rejected, chosen_mask, rejected_mask, alpha=None):
    return chosen_mask.sum(dim=1), rejected_mask.sum(dim=1)


reference.agrees("length_desensitised_logps", valid_tables(), cases=120, clauses={
    "float64 tables": lambda c, r, cm, rm, a: c.dtype == torch.float64,
    "ld_alpha None": lambda c, r, cm, rm, a: a is None,
    "ld_alpha 0": lambda c, r, cm, rm, a: a == 0,
    "ld_alpha between 0 and 1": lambda c, r, cm, rm, a: a is not None and 0 < a < 1,
    "ld_alpha 1": lambda c, r, cm, rm, a: a == 1,
    "a chosen response longer than its rejected one": lambda *x: bool((lengths_of(*x)[0] > lengths_of(*x)[1]).any()),
    "a rejected response longer than its chosen one": lambda *x: bool((lengths_of(*x)[1] > lengths_of(*x)[0]).any()),
    "a pair of equal lengths": lambda *x: bool((lengths_of(*x)[0] == lengths_of(*x)[1]).any()),
    "tables of different widths": lambda c, r, cm, rm, a: c.shape[1] != r.shape[1],
    "a value that is not finite outside the mask": lambda c, r, cm, rm, a: bool(
        (~torch.isfinite(c) & ~cm).any() or (~torch.isfinite(r) & ~rm).any()),
    "a gap inside a mask row": lambda c, r, cm, rm, a: any(
        "101" in "".join(str(int(v)) for v in row) for row in torch.cat([cm, rm], dim=1)),
    "left padding (a row whose first entry is masked out)": lambda c, r, cm, rm, a: bool((~cm[:, 0]).any()),
})

# %% hidden exercise=length_desensitised_logps points=2 name=agrees_with_reference_on_generated_invalid_inputs
# hint: valid inputs, or one thing wrong (a table's type, dtype, shape or emptiness, a mask's type, shape or empty row, an ld_alpha out of range, a bool or not a number): the same result, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid", n) for n in range(20)]
           + [(kind, None) for kind in ["list_table", "half", "int_table", "one_dim", "dtype_mismatch", "pairs_mismatch",
                                        "empty_pairs", "empty_width", "int_mask", "mask_shape", "empty_row", "list_mask"]]
           + [("alpha", bad) for bad in [1.5, -0.01, True, False, float("nan"), float("inf"), "0.5", [0.5]]])


def one_defect(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    generator = torch.Generator().manual_seed(rng.randrange(1000))
    chosen, rejected = (-2 * torch.rand(2, 3, generator=generator)).to(dtype), (-2 * torch.rand(2, 4, generator=generator)).to(dtype)
    chosen_mask = torch.tensor([[True, True, False], [False, True, True]])
    rejected_mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    alpha = rng.choice([None, 0.5, 1])
    side = rng.randrange(2)
    tables, masks = [chosen, rejected], [chosen_mask, rejected_mask]
    if kind == "list_table":
        tables[side] = tables[side].tolist()
    elif kind == "half":
        tables = [table.half() for table in tables]
    elif kind == "int_table":
        tables = [table.long() for table in tables]
    elif kind == "one_dim":
        tables[side], masks[side] = tables[side][0], masks[side][0]
    elif kind == "dtype_mismatch":
        tables[side] = tables[side].to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "pairs_mismatch":
        tables[side], masks[side] = tables[side][:1], masks[side][:1]
    elif kind == "empty_pairs":
        tables, masks = [table[:0] for table in tables], [mask[:0] for mask in masks]
    elif kind == "empty_width":
        tables[side], masks[side] = tables[side][:, :0], masks[side][:, :0]
    elif kind == "int_mask":
        masks[side] = masks[side].long()
    elif kind == "mask_shape":
        masks[side] = masks[side][:, :2]
    elif kind == "empty_row":
        masks[side] = masks[side].clone()
        masks[side][rng.randrange(2)] = False
    elif kind == "list_mask":
        masks[side] = masks[side].tolist()
    elif kind == "alpha":
        alpha = bad
    return tables[0], tables[1], masks[0], masks[1], alpha


def tensors(*args):
    return all(isinstance(value, torch.Tensor) for value in args[:4])


def good_tables(c, r, cm, rm, a):
    return tensors(c, r, cm, rm) and c.dim() == 2 and r.dim() == 2 and c.dtype == r.dtype \
        and c.dtype in (torch.float32, torch.float64) and c.shape[0] == r.shape[0] and c.numel() > 0 and r.numel() > 0


def good_masks(c, r, cm, rm, a):
    return good_tables(c, r, cm, rm, a) and cm.dtype == torch.bool and rm.dtype == torch.bool \
        and cm.shape == c.shape and rm.shape == r.shape


reference.agrees("length_desensitised_logps", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a table that is not a tensor": lambda c, r, cm, rm, a: not isinstance(c, torch.Tensor) or not isinstance(r, torch.Tensor),
    "half-precision tables": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and c.dtype == torch.float16,
    "integer tables": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and not c.is_floating_point(),
    "a 1-D table": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and (c.dim() == 1 or r.dim() == 1),
    "tables of different dtypes": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and c.dim() == r.dim() == 2
        and c.dtype != r.dtype,
    "tables with different pair counts": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and c.dim() == r.dim() == 2
        and c.dtype == r.dtype and c.shape[0] != r.shape[0],
    "no pair": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and c.dim() == 2 and c.shape[0] == 0,
    "a table of width 0": lambda c, r, cm, rm, a: tensors(c, r, cm, rm) and c.dim() == r.dim() == 2 and c.shape[0] > 0
        and (c.shape[1] == 0 or r.shape[1] == 0),
    "an integer mask": lambda c, r, cm, rm, a: good_tables(c, r, cm, rm, a) and isinstance(cm, torch.Tensor)
        and isinstance(rm, torch.Tensor) and (cm.dtype != torch.bool or rm.dtype != torch.bool),
    "a mask that is not a tensor": lambda c, r, cm, rm, a: isinstance(c, torch.Tensor) and not (
        isinstance(cm, torch.Tensor) and isinstance(rm, torch.Tensor)),
    "a mask of another shape": lambda c, r, cm, rm, a: good_tables(c, r, cm, rm, a) and cm.dtype == rm.dtype == torch.bool
        and (cm.shape != c.shape or rm.shape != r.shape),
    "a mask row without a token": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and not (
        bool(cm.any(dim=1).all()) and bool(rm.any(dim=1).all())),
    "ld_alpha above 1": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and isinstance(a, float) and a > 1 and a != float("inf"),
    "ld_alpha below 0": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and isinstance(a, float) and a < 0,
    "ld_alpha a bool": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and isinstance(a, bool),
    "ld_alpha not finite": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and isinstance(a, float) and not math.isfinite(a),
    "ld_alpha not a number": lambda c, r, cm, rm, a: good_masks(c, r, cm, rm, a) and a is not None
        and not isinstance(a, (int, float)),
})

# %% hidden exercise=dpo_family_loss points=1 name=every_loss_type_follows_its_formula
# hint: with h = (pc - rc) - (pr - rr): sigmoid -logsigmoid(beta h), hinge relu(1 - beta h), robust and cdpo as the docstring writes them; loss is the mean of the pair losses.
import torch.nn.functional as F

pc, pr = torch.tensor([-1.0, -2.0, -4.0], dtype=torch.float64), torch.tensor([-3.0, -1.0, -4.0], dtype=torch.float64)
rc, rr = torch.tensor([-2.0, -2.5, -3.0], dtype=torch.float64), torch.tensor([-2.0, -1.5, -5.0], dtype=torch.float64)
lengths = torch.tensor([1, 2, 3])
margins = (pc - rc) - (pr - rr)
z = 0.7 * margins
e = 0.3
expected = {"sigmoid": -F.logsigmoid(z), "hinge": torch.relu(1 - z),
            "robust": (-(1 - e) * F.logsigmoid(z) + e * F.logsigmoid(-z)) / (1 - 2 * e),
            "cdpo": -(1 - e) * F.logsigmoid(z) - e * F.logsigmoid(-z)}
for loss_type, values in expected.items():
    smoothing = e if loss_type in ("robust", "cdpo") else 0.0
    result = dpo_family_loss(pc, pr, rc, rr, lengths, lengths, loss_type, 0.7, smoothing)
    assert torch.allclose(result["pair_losses"], values, rtol=1e-12), loss_type
    assert torch.allclose(result["loss"], values.mean(), rtol=1e-12), loss_type
    assert torch.equal(result["margins"], margins) and result["sft_loss"] is None

# %% hidden exercise=dpo_family_loss points=1 name=ipo_compares_per_token_means_with_one_over_two_beta
# hint: IPO divides each log-ratio by its own response's token count before taking the difference, and squares the distance to 1 / (2 beta).
pc, pr = torch.tensor([-2.0, -6.0]), torch.tensor([-9.0, -1.0])
rc, rr = torch.tensor([-4.0, -3.0]), torch.tensor([-3.0, -3.0])
chosen_lengths, rejected_lengths = torch.tensor([2, 3]), torch.tensor([3, 1])
result = dpo_family_loss(pc, pr, rc, rr, chosen_lengths, rejected_lengths, "ipo", 0.25)
# per-token margins: 2/2 - (-6)/3 = 3 and -3/3 - 2/1 = -3; target 2
assert torch.allclose(result["pair_losses"], torch.tensor([1.0, 25.0])), result["pair_losses"]
assert torch.allclose(result["loss"], torch.tensor(13.0))
assert torch.equal(result["margins"], torch.tensor([8.0, -5.0])), "margins stay the summed h"

# %% hidden exercise=dpo_family_loss points=1 name=label_smoothing_belongs_to_robust_and_cdpo
# hint: at label_smoothing 0 robust and cdpo are the sigmoid loss; a non-zero label_smoothing with sigmoid, hinge or ipo is a configuration error, not ignored.
pc, pr, rc, rr = (torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.0]), torch.tensor([-1.5, -1.5]), torch.tensor([-1.5, -1.5]))
lengths = torch.tensor([1, 1])
plain = dpo_family_loss(pc, pr, rc, rr, lengths, lengths, "sigmoid", 1.0)["pair_losses"]
for loss_type in ("robust", "cdpo"):
    assert torch.allclose(dpo_family_loss(pc, pr, rc, rr, lengths, lengths, loss_type, 1.0, 0.0)["pair_losses"], plain)
    assert not torch.allclose(dpo_family_loss(pc, pr, rc, rr, lengths, lengths, loss_type, 1.0, 0.2)["pair_losses"], plain)
for loss_type in ("sigmoid", "hinge", "ipo"):
    try:
        dpo_family_loss(pc, pr, rc, rr, lengths, lengths, loss_type, 1.0, 0.2)
    except ValueError:
        continue
    raise AssertionError(f"label_smoothing accepted by {loss_type}")
for bad in (0.5, 0.7, -0.1, True):
    try:
        dpo_family_loss(pc, pr, rc, rr, lengths, lengths, "cdpo", 1.0, bad)
    except ValueError:
        continue
    raise AssertionError(f"label_smoothing {bad!r} accepted")

# %% hidden exercise=dpo_family_loss points=1 name=references_are_constants_and_margins_detached
# hint: detach the reference log-probabilities: no gradient reaches them, and the policy's gradient is the loss's own (for sigmoid -beta sigmoid(-beta h) / pairs on the chosen side).
from tools.course.grader.boundary import backward_through

pc = torch.tensor([-1.0, -3.0, -2.0], requires_grad=True)
pr = torch.tensor([-2.0, -1.0, -2.0], requires_grad=True)
rc = torch.tensor([-1.2, -2.0, -2.5], requires_grad=True)
rr = torch.tensor([-1.8, -1.5, -2.0], requires_grad=True)
lengths = torch.tensor([2, 2, 2])
backward_through(dpo_family_loss, pc, pr, rc, rr, lengths, lengths, "sigmoid", 0.5, select=["loss"], reduce=None)
h = (pc - rc - pr + rr).detach()
weight = -0.5 * torch.sigmoid(-0.5 * h) / 3
assert rc.grad is None and rr.grad is None, "no gradient may reach the reference"
assert torch.allclose(pc.grad, weight, atol=1e-6) and torch.allclose(pr.grad, -weight, atol=1e-6)
result = dpo_family_loss(pc, pr, rc, rr, lengths, lengths, "hinge", 0.5)
assert not result["margins"].requires_grad and result["pair_losses"].requires_grad

# %% hidden exercise=dpo_family_loss points=1 name=rpo_adds_the_token_mean_nll_of_every_chosen_token
# hint: the SFT term is -(sum of policy_chosen) / (sum of chosen_lengths) over the whole batch, weighted by rpo_alpha and added to the mean pair loss; rpo_alpha 0 gives sft_loss None.
pc, pr = torch.tensor([-2.0, -10.0]), torch.tensor([-3.0, -11.0])
rc, rr = torch.tensor([-2.0, -10.0]), torch.tensor([-3.0, -11.0])
chosen_lengths, rejected_lengths = torch.tensor([1, 4]), torch.tensor([1, 1])
result = dpo_family_loss(pc, pr, rc, rr, chosen_lengths, rejected_lengths, "sigmoid", 0.1, 0.0, 0.5)
assert torch.allclose(result["sft_loss"], torch.tensor(12.0 / 5)), "token mean over the batch, not a mean of row means"
assert torch.allclose(result["loss"], torch.tensor(math.log(2) + 0.5 * 12.0 / 5))
assert dpo_family_loss(pc, pr, rc, rr, chosen_lengths, rejected_lengths, "sigmoid", 0.1)["sft_loss"] is None

# %% hidden exercise=dpo_family_loss points=2 name=agrees_with_reference_on_generated_valid_batches
# hint: any finite batch, every loss type, beta and smoothing (ints or floats, huge margins, unequal lengths, float64), with and without the SFT term: the same tensors.
from hypothesis import strategies as st


@st.composite
def valid_batches(draw):
    pairs = draw(st.integers(1, 5))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    scale = draw(st.sampled_from([0.5, 5.0, 400.0]))
    pc, pr, rc, rr = [(-scale * torch.rand(pairs, generator=generator)).to(dtype) for _ in range(4)]
    chosen_lengths = torch.randint(1, 6, (pairs,), generator=generator)
    rejected_lengths = torch.randint(1, 6, (pairs,), generator=generator)
    loss_type = draw(st.sampled_from(["sigmoid", "hinge", "ipo", "robust", "cdpo"]))
    beta = draw(st.sampled_from([0.1, 1, 2.5, 0.05]))
    smoothing = draw(st.sampled_from([0.0, 0.1, 0.49, 0])) if loss_type in ("robust", "cdpo") else draw(st.sampled_from([0.0, 0]))
    alpha = draw(st.sampled_from([0.0, 0, 0.5, 1, 2.0]))
    return pc, pr, rc, rr, chosen_lengths, rejected_lengths, loss_type, beta, smoothing, alpha


def margin(pc, pr, rc, rr, *rest):
    return (pc - rc) - (pr - rr)


reference.agrees("dpo_family_loss", valid_batches(), cases=150, clauses={
    "sigmoid": lambda *a: a[6] == "sigmoid", "hinge": lambda *a: a[6] == "hinge", "ipo": lambda *a: a[6] == "ipo",
    "robust with smoothing": lambda *a: a[6] == "robust" and a[8] > 0,
    "cdpo with smoothing": lambda *a: a[6] == "cdpo" and a[8] > 0,
    "smoothing close to 0.5": lambda *a: a[8] == 0.49,
    "an SFT term": lambda *a: a[9] > 0,
    "unequal lengths within a pair": lambda *a: bool((a[4] != a[5]).any()),
    "float64": lambda *a: a[0].dtype == torch.float64,
    "a margin beyond a naive log(sigmoid)": lambda *a: bool((a[7] * margin(*a).abs() > 100).any()),
    "a hinge pair past its boundary": lambda *a: a[6] == "hinge" and bool((a[7] * margin(*a) >= 1).any()),
    "beta given as an int": lambda *a: type(a[7]) is int,
})

# %% hidden exercise=dpo_family_loss points=2 name=agrees_with_reference_on_generated_invalid_batches
# hint: valid batches, or one thing wrong (a tensor's type, dtype, shape, emptiness or finiteness, lengths that are not int64 counts >= 1, an unknown loss type, beta, smoothing or rpo_alpha out of range or a bool, smoothing given to a loss that does not take it): the same result, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid", n) for n in range(24)]
           + [(kind, None) for kind in ["list", "shape", "dtype", "int", "two_dim", "empty", "nan", "inf",
                                        "lengths_int32", "lengths_zero", "lengths_shape", "lengths_list",
                                        "smoothing_for_sigmoid", "smoothing_for_hinge", "smoothing_for_ipo"]]
           + [("loss_type", bad) for bad in ["dpo", "SIGMOID", "simpo", None, "sigmoid "]]
           + [("beta", bad) for bad in [0, -1.0, True, None, float("nan"), float("inf")]]
           + [("smoothing", bad) for bad in [0.5, -0.01, True, float("nan"), "0.1"]]
           + [("rpo_alpha", bad) for bad in [-0.5, True, float("inf"), None]])


def one_defect(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    tensors = [torch.tensor([-rng.uniform(0.1, 3) for _ in range(3)], dtype=dtype) for _ in range(4)]
    lengths = [torch.tensor([rng.randint(1, 4) for _ in range(3)]) for _ in range(2)]
    loss_type = rng.choice(["sigmoid", "hinge", "ipo", "robust", "cdpo"])
    beta, smoothing, alpha = rng.choice([0.1, 1.0]), 0.0, rng.choice([0.0, 1.0])
    if loss_type in ("robust", "cdpo"):
        smoothing = rng.choice([0.0, 0.2])
    where, side = rng.randrange(4), rng.randrange(2)
    if kind == "list":
        tensors[where] = tensors[where].tolist()
    elif kind == "shape":
        tensors[where] = tensors[where][:2]
    elif kind == "dtype":
        tensors[where] = tensors[where].to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "int":
        tensors = [tensor.long() for tensor in tensors]
    elif kind == "two_dim":
        tensors = [tensor.reshape(1, 3) for tensor in tensors]
        lengths = [length.reshape(1, 3) for length in lengths]
    elif kind == "empty":
        tensors, lengths = [tensor[:0] for tensor in tensors], [length[:0] for length in lengths]
    elif kind == "nan":
        tensors[where][rng.randrange(3)] = float("nan")
    elif kind == "inf":
        tensors[where][rng.randrange(3)] = rng.choice([float("inf"), float("-inf")])
    elif kind == "lengths_int32":
        lengths[side] = lengths[side].int()
    elif kind == "lengths_zero":
        lengths[side][rng.randrange(3)] = rng.choice([0, -1])
    elif kind == "lengths_shape":
        lengths[side] = lengths[side][:2]
    elif kind == "lengths_list":
        lengths[side] = lengths[side].tolist()
    elif kind.startswith("smoothing_for_"):
        loss_type, smoothing = kind.split("_")[-1], rng.choice([0.1, 0.3])
    elif kind == "loss_type":
        loss_type = bad
    elif kind == "beta":
        beta = bad
    elif kind == "smoothing":
        loss_type, smoothing = rng.choice(["robust", "cdpo"]), bad
    elif kind == "rpo_alpha":
        alpha = bad
    return (*tensors, *lengths, loss_type, beta, smoothing, alpha)


def all_tensors(*a):
    return all(isinstance(value, torch.Tensor) for value in a[:6])


def good_sequences(*a):
    first = a[0]
    return all(isinstance(value, torch.Tensor) for value in a[:4]) and all(value.dim() == 1 and value.numel() > 0 and value.shape == first.shape
                                   and value.dtype == first.dtype and value.dtype in (torch.float32, torch.float64)
                                   for value in a[:4])


def good_lengths(*a):
    return all_tensors(*a) and good_sequences(*a) and all(value.dtype == torch.int64 and value.shape == a[0].shape
                                      and bool((value >= 1).all()) for value in a[4:6])


def good_numbers(*a):
    return good_lengths(*a) and a[6] in ("sigmoid", "hinge", "ipo", "robust", "cdpo") and isinstance(a[7], float)


reference.agrees("dpo_family_loss", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a log-probability that is not a tensor": lambda *a: not isinstance(a[0], torch.Tensor) or not all(
        isinstance(v, torch.Tensor) for v in a[:4]),
    "shapes that differ": lambda *a: all_tensors(*a) and len({tuple(v.shape) for v in a[:4]}) > 1,
    "dtypes that differ": lambda *a: all_tensors(*a) and len({tuple(v.shape) for v in a[:4]}) == 1
        and len({v.dtype for v in a[:4]}) > 1,
    "integer log-probabilities": lambda *a: all_tensors(*a) and not a[0].is_floating_point(),
    "2-D log-probabilities": lambda *a: all_tensors(*a) and a[0].dim() == 2,
    "no pair": lambda *a: all_tensors(*a) and a[0].numel() == 0,
    "a NaN": lambda *a: good_sequences(*a) and any(bool(v.isnan().any()) for v in a[:4]),
    "an infinity": lambda *a: good_sequences(*a) and any(bool(v.isinf().any()) for v in a[:4]),
    "int32 lengths": lambda *a: all_tensors(*a) and good_sequences(*a) and any(v.dtype == torch.int32 for v in a[4:6]),
    "a length below 1": lambda *a: all_tensors(*a) and good_sequences(*a) and all(v.dtype == torch.int64 and v.shape == a[0].shape for v in a[4:6])
        and any(bool((v < 1).any()) for v in a[4:6]),
    "lengths of another shape": lambda *a: all_tensors(*a) and good_sequences(*a) and any(
        v.shape != a[0].shape for v in a[4:6]),
    "lengths that are not a tensor": lambda *a: good_sequences(*a) and not all(isinstance(v, torch.Tensor) for v in a[4:6]),
    "an unknown loss type": lambda *a: good_lengths(*a) and a[6] not in ("sigmoid", "hinge", "ipo", "robust", "cdpo"),
    "beta a bool": lambda *a: good_lengths(*a) and isinstance(a[7], bool),
    "beta <= 0 or not finite or missing": lambda *a: good_lengths(*a) and a[6] in ("sigmoid", "hinge", "ipo", "robust", "cdpo")
        and not isinstance(a[7], bool) and (a[7] is None or not math.isfinite(a[7]) or a[7] <= 0),
    "smoothing 0.5 or more": lambda *a: good_numbers(*a) and isinstance(a[8], float) and a[8] >= 0.5,
    "negative smoothing": lambda *a: good_numbers(*a) and isinstance(a[8], float) and a[8] < 0,
    "smoothing a bool": lambda *a: good_numbers(*a) and isinstance(a[8], bool),
    "smoothing not a number": lambda *a: good_numbers(*a) and isinstance(a[8], str),
    "smoothing for sigmoid": lambda *a: good_numbers(*a) and a[6] == "sigmoid" and a[8] not in (0, 0.0),
    "smoothing for hinge": lambda *a: good_numbers(*a) and a[6] == "hinge" and a[8] not in (0, 0.0),
    "smoothing for ipo": lambda *a: good_numbers(*a) and a[6] == "ipo" and a[8] not in (0, 0.0),
    "rpo_alpha negative, a bool, infinite or missing": lambda *a: good_numbers(*a) and a[8] in (0, 0.0)
        and (a[9] is None or isinstance(a[9], bool) or not math.isfinite(a[9]) or a[9] < 0),
})

# %% hidden exercise=reference_free_loss points=1 name=simpo_compares_per_token_means_minus_gamma
# hint: divide each sum by its own length, then -logsigmoid(beta * (mean_chosen - mean_rejected) - gamma); gamma is subtracted after beta multiplies.
pc, pr = torch.tensor([-3.0, -8.0]), torch.tensor([-2.0, -6.0])
chosen_lengths, rejected_lengths = torch.tensor([3, 4]), torch.tensor([1, 2])
result = reference_free_loss(pc, pr, chosen_lengths, rejected_lengths, "simpo", 2.0, 0.5)
# means: chosen [-1, -2], rejected [-2, -3] -> differences [1, 1]; 2 * 1 - 0.5 = 1.5
assert torch.allclose(result["pair_losses"], -F.logsigmoid(torch.tensor([1.5, 1.5])))
assert torch.equal(result["margins"], torch.tensor([1.0, 1.0])) and result["sft_loss"] is None
doubled = reference_free_loss(2 * pc, 2 * pr, 2 * chosen_lengths, 2 * rejected_lengths, "simpo", 2.0, 0.5)
assert torch.allclose(doubled["loss"], result["loss"]), "a length-normalised margin does not change when a response is repeated"
assert not torch.allclose(reference_free_loss(pc, pr, chosen_lengths, rejected_lengths, "simpo", 2.0, 0.0)["loss"], result["loss"])

# %% hidden exercise=reference_free_loss points=1 name=orpo_log_odds_stay_finite_near_zero_and_far_below
# hint: compute log(1 - exp(x)) in two branches (log(-expm1(x)) above -log 2, log1p(-exp(x)) below): means of -1e-12 and of -60 must give finite, accurate values.
pc = torch.tensor([-1e-12, -60.0, -1.0], dtype=torch.float64)
pr = torch.tensor([-1.0, -61.0, -1.0], dtype=torch.float64)
lengths = torch.tensor([1, 1, 1])
result = reference_free_loss(pc, pr, lengths, lengths, "orpo", 0.1)
odds = result["margins"]
assert bool(torch.isfinite(odds).all()) and bool(torch.isfinite(result["loss"])), odds
assert abs(odds[0].item() - (1 - 1e-12 - math.log(1e-12) + math.log(1 - math.exp(-1)))) < 1e-6, odds[0]
assert abs(odds[1].item() - 1.0) < 1e-12 and odds[2].item() == 0.0, odds

# %% hidden exercise=reference_free_loss points=1 name=orpo_adds_the_sft_term_to_the_mean_odds_ratio_loss
# hint: sft_loss = -(sum of policy_chosen) / (sum of chosen_lengths); each pair loss is -beta * logsigmoid(log odds ratio); loss = sft_loss + their mean.
pc, pr = torch.tensor([-2.0, -6.0]), torch.tensor([-4.0, -2.0])
chosen_lengths, rejected_lengths = torch.tensor([2, 2]), torch.tensor([2, 1])
result = reference_free_loss(pc, pr, chosen_lengths, rejected_lengths, "orpo", 0.5)
assert torch.allclose(result["sft_loss"], torch.tensor(2.0)), "8 nats over 4 chosen tokens"


def log_odds(mean):
    return mean - math.log(1 - math.exp(mean))


ratios = [log_odds(-1.0) - log_odds(-2.0), log_odds(-3.0) - log_odds(-2.0)]
pair = [-0.5 * math.log(1 / (1 + math.exp(-value))) for value in ratios]
assert torch.allclose(result["pair_losses"], torch.tensor(pair)), result["pair_losses"]
assert math.isclose(result["loss"].item(), 2.0 + sum(pair) / 2, rel_tol=1e-6)

# %% hidden exercise=reference_free_loss points=1 name=invalid_inputs_are_refused_valid_ones_scored
# hint: check the sums (finite 1-D float tensors of one shape and dtype), the lengths (int64 counts >= 1), the loss type, beta > 0, gamma >= 0 and 0 for orpo, and for orpo every per-token mean below 0.
pc, pr, lengths = torch.tensor([-1.0, -2.0]), torch.tensor([-2.0, -1.0]), torch.tensor([1, 2])
assert reference_free_loss(pc, pr, lengths, lengths, "simpo", 1.0, 0.5)["sft_loss"] is None
assert reference_free_loss(pc, pr, lengths, lengths, "orpo", 1.0)["sft_loss"] is not None
cases = [(pc.tolist(), pr, lengths, lengths, "simpo", 1.0), (pc, pr[:1], lengths, lengths, "simpo", 1.0),
         (pc, pr.double(), lengths, lengths, "simpo", 1.0), (pc, pr, lengths.int(), lengths, "simpo", 1.0),
         (pc, pr, torch.tensor([0, 1]), lengths, "orpo", 1.0), (pc, pr, lengths, lengths, "dpo", 1.0),
         (pc, pr, lengths, lengths, "simpo", 0.0), (pc, pr, lengths, lengths, "simpo", True),
         (pc, pr, lengths, lengths, "simpo", 1.0, -0.5), (pc, pr, lengths, lengths, "orpo", 1.0, 0.5),
         (torch.tensor([0.0, -2.0]), pr, lengths, lengths, "orpo", 1.0), (pc, torch.tensor([-2.0, 0.5]), lengths, lengths, "orpo", 1.0),
         (torch.tensor([float("nan"), -1.0]), pr, lengths, lengths, "simpo", 1.0), (pc, pr, lengths, lengths, "simpo", 1.0, True)]
for index, case in enumerate(cases):
    try:
        reference_free_loss(*case)
    except ValueError:
        continue
    raise AssertionError(f"invalid case {index} accepted")

# %% hidden exercise=reference_free_loss points=2 name=agrees_with_reference_on_generated_inputs
# hint: valid SimPO and ORPO batches (means near 0 and far below, unequal lengths, float64, gamma 0 or not), or one thing wrong (a tensor, lengths, the loss type, beta, gamma, a mean at or above 0 for orpo): the same result, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid_simpo", n) for n in range(16)] + [("valid_orpo", n) for n in range(16)]
           + [("near_zero", n) for n in range(4)] + [("far_below", n) for n in range(4)]
           + [(kind, None) for kind in ["list", "shape", "dtype", "two_dim", "empty", "nan", "inf", "lengths_int32",
                                        "lengths_zero", "lengths_shape", "zero_mean_orpo", "positive_mean_orpo",
                                        "zero_mean_simpo", "gamma_for_orpo"]]
           + [("loss_type", bad) for bad in ["ipo", "SimPO", None]]
           + [("beta", bad) for bad in [0, -0.1, True, float("nan"), None]]
           + [("gamma", bad) for bad in [-0.1, True, float("inf"), "1"]])


def one_defect(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    lengths = [torch.tensor([rng.randint(1, 5) for _ in range(3)]) for _ in range(2)]
    sums = [torch.tensor([-rng.uniform(0.2, 4) * n for n in length.tolist()], dtype=dtype) for length in lengths]
    loss_type = "orpo" if kind in ("valid_orpo", "near_zero", "far_below", "zero_mean_orpo", "positive_mean_orpo",
                                   "gamma_for_orpo") else rng.choice(["simpo", "orpo"])
    if kind in ("valid_simpo", "zero_mean_simpo"):
        loss_type = "simpo"
    beta = rng.choice([0.1, 2.0, 1])
    gamma = rng.choice([0.0, 0.5, 1]) if loss_type == "simpo" else 0.0
    where = rng.randrange(2)
    if kind == "near_zero":
        sums[where] = sums[where].new_tensor([-1e-7 * n for n in lengths[where].tolist()])
    elif kind == "far_below":
        sums[where] = sums[where].new_tensor([-70.0 * n for n in lengths[where].tolist()])
    elif kind == "list":
        sums[where] = sums[where].tolist()
    elif kind == "shape":
        sums[where] = sums[where][:2]
    elif kind == "dtype":
        sums[where] = sums[where].to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "two_dim":
        sums, lengths = [value.reshape(1, 3) for value in sums], [value.reshape(1, 3) for value in lengths]
    elif kind == "empty":
        sums, lengths = [value[:0] for value in sums], [value[:0] for value in lengths]
    elif kind == "nan":
        sums[where][rng.randrange(3)] = float("nan")
    elif kind == "inf":
        sums[where][rng.randrange(3)] = float("-inf")
    elif kind == "lengths_int32":
        lengths[where] = lengths[where].int()
    elif kind == "lengths_zero":
        lengths[where][rng.randrange(3)] = 0
    elif kind == "lengths_shape":
        lengths[where] = lengths[where][:2]
    elif kind in ("zero_mean_orpo", "zero_mean_simpo"):
        sums[where][rng.randrange(3)] = 0.0
    elif kind == "positive_mean_orpo":
        sums[where][rng.randrange(3)] = rng.uniform(0.1, 2)
    elif kind == "gamma_for_orpo":
        gamma = rng.choice([0.5, 1.0])
    elif kind == "loss_type":
        loss_type = bad
    elif kind == "beta":
        beta = bad
    elif kind == "gamma":
        loss_type, gamma = "simpo", bad
    return sums[0], sums[1], lengths[0], lengths[1], loss_type, beta, gamma


def well_formed(*a):
    return all(isinstance(value, torch.Tensor) for value in a[:4]) and a[0].dim() == 1 and a[0].numel() > 0 \
        and a[1].shape == a[0].shape and a[1].dtype == a[0].dtype and a[0].dtype in (torch.float32, torch.float64) \
        and bool(torch.isfinite(a[0]).all() and torch.isfinite(a[1]).all()) and all(
            value.dtype == torch.int64 and value.shape == a[0].shape and bool((value >= 1).all()) for value in a[2:4])


def settings_ok(*a):
    return well_formed(*a) and a[4] in ("simpo", "orpo") and isinstance(a[5], (int, float)) \
        and not isinstance(a[5], bool) and math.isfinite(a[5]) and a[5] > 0 and isinstance(a[6], (int, float)) \
        and not isinstance(a[6], bool) and math.isfinite(a[6]) and a[6] >= 0


def means(*a):
    return a[0] / a[2], a[1] / a[3]


reference.agrees("reference_free_loss", each_of(defects, one_defect, variants=2), cases=2 * len(defects), clauses={
    "a valid simpo batch": lambda *a: settings_ok(*a) and a[4] == "simpo",
    "a valid simpo batch with gamma > 0": lambda *a: settings_ok(*a) and a[4] == "simpo" and a[6] > 0,
    "a valid orpo batch": lambda *a: settings_ok(*a) and a[4] == "orpo" and a[6] == 0 and bool(
        (means(*a)[0] < 0).all() and (means(*a)[1] < 0).all()),
    "an orpo mean within 1e-6 of 0": lambda *a: settings_ok(*a) and a[4] == "orpo" and bool(
        (torch.cat(means(*a)) > -1e-6).any() and (torch.cat(means(*a)) < 0).all()),
    "an orpo mean below -60": lambda *a: settings_ok(*a) and a[4] == "orpo" and bool((torch.cat(means(*a)) < -60).any()),
    "a sum that is not a tensor": lambda *a: not all(isinstance(value, torch.Tensor) for value in a[:2]),
    "sums of another shape or dtype": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:2])
        and (a[0].shape != a[1].shape or a[0].dtype != a[1].dtype),
    "2-D sums": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:2]) and a[0].dim() == 2,
    "no pair": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:2]) and a[0].numel() == 0,
    "a sum that is not finite": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:4]) and a[0].dim() == 1
        and a[0].shape == a[1].shape and a[0].dtype == a[1].dtype and not bool(torch.isfinite(torch.cat(a[:2])).all()),
    "int32 lengths": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:4]) and any(
        value.dtype == torch.int32 for value in a[2:4]),
    "a length of 0": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:4]) and a[0].dim() == 1 and all(
        value.dtype == torch.int64 and value.shape == a[0].shape for value in a[2:4]) and any(
        bool((value < 1).any()) for value in a[2:4]),
    "lengths of another shape": lambda *a: all(isinstance(value, torch.Tensor) for value in a[:4]) and a[0].dim() == 1
        and any(value.shape != a[0].shape for value in a[2:4]),
    "an unknown loss type": lambda *a: well_formed(*a) and a[4] not in ("simpo", "orpo"),
    "beta a bool, <= 0, not finite or missing": lambda *a: well_formed(*a) and a[4] in ("simpo", "orpo") and (
        a[5] is None or isinstance(a[5], bool) or not math.isfinite(a[5]) or a[5] <= 0),
    "gamma negative, a bool, infinite or a str": lambda *a: well_formed(*a) and a[4] == "simpo" and isinstance(a[5], float)
        and (isinstance(a[6], (bool, str)) or not math.isfinite(a[6]) or a[6] < 0),
    "gamma given to orpo": lambda *a: settings_ok(*a) and a[4] == "orpo" and a[6] != 0,
    "an orpo mean at or above 0": lambda *a: settings_ok(*a) and a[4] == "orpo" and a[6] == 0 and bool(
        (torch.cat(means(*a)) >= 0).any()),
    "a simpo mean at 0 (allowed)": lambda *a: settings_ok(*a) and a[4] == "simpo" and bool((torch.cat(means(*a)) == 0).any()),
})
