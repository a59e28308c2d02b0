# %% hidden exercise=aggregate_loss points=1 name=grpo_is_a_mean_of_row_means_with_empty_rows_counted
# hint: grpo divides each row's masked sum by that row's token count (at least 1) and averages over every row, an empty row included as 0.
losses = torch.tensor([[2.0, 4.0, 6.0], [1.0, 5.0, 9.0], [8.0, 8.0, 8.0]])
mask = torch.tensor([[True, True, True], [False, True, False], [False, False, False]])
assert torch.allclose(aggregate_loss(losses, mask, "grpo"), torch.tensor((4.0 + 5.0 + 0.0) / 3)), "empty rows count"
full = torch.ones(3, 3, dtype=torch.bool)
assert torch.allclose(aggregate_loss(losses, full, "grpo"), torch.tensor((4.0 + 5.0 + 8.0) / 3))
assert torch.allclose(aggregate_loss(losses, full, "grpo"), aggregate_loss(losses, full, "bnpo")), "equal lengths"

# %% hidden exercise=aggregate_loss points=1 name=token_level_divisors_for_bnpo_dr_grpo_and_dapo
# hint: bnpo divides the masked sum by the masked token count, dr_grpo by rows * max_completion_length, dapo by num_items_in_batch.
losses = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
mask = torch.tensor([[True, True, False, False], [True, False, False, False]])
assert torch.allclose(aggregate_loss(losses, mask, "bnpo"), torch.tensor(13.0 / 3, dtype=torch.float64))
assert torch.allclose(aggregate_loss(losses, mask, "dr_grpo", max_completion_length=4), torch.tensor(13.0 / 8, dtype=torch.float64))
assert torch.allclose(aggregate_loss(losses, mask, "dr_grpo", max_completion_length=10), torch.tensor(13.0 / 20, dtype=torch.float64))
assert torch.allclose(aggregate_loss(losses, mask, "dapo", num_items_in_batch=3), torch.tensor(13.0 / 3, dtype=torch.float64))
assert torch.allclose(aggregate_loss(losses, mask, "dapo", num_items_in_batch=26), torch.tensor(0.5, dtype=torch.float64))
assert aggregate_loss(losses, mask, "bnpo").dtype == torch.float64

# %% hidden exercise=aggregate_loss points=1 name=values_outside_the_mask_and_the_graph
# hint: select the masked entries with torch.where (nan * 0 is nan); the gradient reaches each masked token with its weight and no other.
from tools.course.grader.boundary import backward_through

losses = torch.tensor([[1.0, float("nan"), 2.0], [float("inf"), 3.0, 4.0]], requires_grad=True)
mask = torch.tensor([[True, False, True], [False, True, True]])
assert torch.allclose(aggregate_loss(losses.detach(), mask, "bnpo"), torch.tensor(2.5))
backward_through(aggregate_loss, losses, mask, "grpo", reduce=None)
assert torch.allclose(losses.grad, torch.tensor([[0.25, 0.0, 0.25], [0.0, 0.25, 0.25]])), losses.grad
short = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], requires_grad=True)
backward_through(aggregate_loss, short, torch.tensor([[True, False, False], [True, True, True]]), "grpo", reduce=None)
assert torch.allclose(short.grad[0, 0], torch.tensor(0.5)) and torch.allclose(short.grad[1, 0], torch.tensor(1 / 6))

# %% hidden exercise=aggregate_loss points=1 name=each_setting_belongs_to_its_loss_type
# hint: max_completion_length is required by dr_grpo (an int >= the width) and refused elsewhere; num_items_in_batch is required by dapo (an int >= the masked tokens) and refused elsewhere.
losses, mask = torch.ones(2, 3), torch.tensor([[True, True, False], [True, False, False]])
assert aggregate_loss(losses, mask, "dr_grpo", max_completion_length=3).item() == 0.5
assert aggregate_loss(losses, mask, "dapo", num_items_in_batch=6).item() == 0.5
bad = [("dr_grpo", {}), ("dr_grpo", {"max_completion_length": 2}), ("dr_grpo", {"max_completion_length": 3.0}),
       ("dr_grpo", {"max_completion_length": True}), ("dr_grpo", {"max_completion_length": 5, "num_items_in_batch": 3}),
       ("dapo", {}), ("dapo", {"num_items_in_batch": 2}), ("dapo", {"num_items_in_batch": 3.0}),
       ("dapo", {"num_items_in_batch": True}), ("bnpo", {"num_items_in_batch": 3}), ("grpo", {"max_completion_length": 3}),
       ("GRPO", {}), ("mean", {}), (None, {})]
for index, (loss_type, settings) in enumerate(bad):
    try:
        aggregate_loss(losses, mask, loss_type, **settings)
    except ValueError:
        continue
    raise AssertionError(f"invalid setting {index} accepted: {loss_type} {settings}")

# %% hidden exercise=aggregate_loss points=2 name=agrees_with_reference_on_generated_inputs
# hint: any batch (float32 or float64, empty rows, nan outside the mask, every loss type with its own setting), or one thing wrong (a tensor, a mask, the loss type, a setting missing, out of range, a bool or given to another type): the same loss, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([(loss_type, n) for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo") for n in range(10)]
           + [(kind, None) for kind in ["list", "one_dim", "int", "half", "empty", "mask_int", "mask_shape", "mask_empty",
                                        "dr_missing", "dr_narrow", "dr_float", "dr_bool", "dapo_missing", "dapo_small",
                                        "dapo_float", "dapo_bool", "dr_on_bnpo", "items_on_grpo", "both_on_dr"]]
           + [("loss_type", bad) for bad in ["GRPO", "sequence", "token", None, "dapo "]])


def one_case(defect, rng):
    kind, n = defect
    dtype = rng.choice([torch.float32, torch.float64])
    rows, width = rng.randint(1, 4), rng.randint(1, 5)
    generator = torch.Generator().manual_seed(rng.randrange(10_000))
    losses = torch.randn(rows, width, generator=generator).to(dtype)
    mask = torch.rand(rows, width, generator=generator) < 0.6
    if rng.random() < 0.3:
        mask[rng.randrange(rows)] = False
    if not bool(mask.any()):
        mask[rng.randrange(rows), rng.randrange(width)] = True
    if rng.random() < 0.4:
        losses = torch.where(mask, losses, torch.full_like(losses, rng.choice([float("nan"), float("inf")])))
    tokens = int(mask.sum())
    loss_type, settings = rng.choice(["grpo", "bnpo", "dr_grpo", "dapo"]), {}
    if kind in ("grpo", "bnpo", "dr_grpo", "dapo"):
        loss_type = kind
    if loss_type == "dr_grpo":
        settings["max_completion_length"] = width + rng.choice([0, 0, 3])
    if loss_type == "dapo":
        settings["num_items_in_batch"] = tokens + rng.choice([0, 0, 7])
    if kind == "list":
        losses = losses.tolist()
    elif kind == "one_dim":
        losses, mask = losses[0], mask[0]
    elif kind == "int":
        losses = losses.nan_to_num(0.0, 0.0, 0.0).long()
    elif kind == "half":
        losses = losses.half()
    elif kind == "empty":
        losses, mask = losses[:0], mask[:0]
    elif kind == "mask_int":
        mask = mask.long()
    elif kind == "mask_shape":
        mask = torch.ones(rows, width + 1, dtype=torch.bool)
    elif kind == "mask_empty":
        mask = torch.zeros(rows, width, dtype=torch.bool)
    elif kind in ("dr_missing", "dr_narrow", "dr_float", "dr_bool", "both_on_dr", "dr_on_bnpo"):
        loss_type, settings = "dr_grpo", {}
        if kind == "dr_narrow":
            settings["max_completion_length"] = width - 1
        elif kind == "dr_float":
            settings["max_completion_length"] = float(width)
        elif kind == "dr_bool":
            settings["max_completion_length"] = True
        elif kind == "both_on_dr":
            settings = {"max_completion_length": width, "num_items_in_batch": tokens}
        if kind == "dr_on_bnpo":
            loss_type, settings = "bnpo", {"max_completion_length": width}
    elif kind in ("dapo_missing", "dapo_small", "dapo_float", "dapo_bool"):
        loss_type, settings = "dapo", {}
        if kind == "dapo_small":
            settings["num_items_in_batch"] = tokens - 1
        elif kind == "dapo_float":
            settings["num_items_in_batch"] = float(tokens)
        elif kind == "dapo_bool":
            settings["num_items_in_batch"] = True
    elif kind == "items_on_grpo":
        loss_type, settings = "grpo", {"num_items_in_batch": tokens}
    elif kind == "loss_type":
        loss_type = n
    return (losses, mask, loss_type), settings


def shaped(args, kwargs):
    losses, mask = args[0], args[1]
    return isinstance(losses, torch.Tensor) and losses.dim() == 2 and losses.numel() > 0 \
        and losses.dtype in (torch.float32, torch.float64) and isinstance(mask, torch.Tensor) \
        and mask.dtype == torch.bool and mask.shape == losses.shape and bool(mask.any())


def case(predicate):
    return lambda args, kwargs: predicate(args, kwargs)


reference.agrees("aggregate_loss", each_of(defects, one_case, variants=2), cases=2 * len(defects), clauses={
    "valid grpo": lambda *a, **k: a[2] == "grpo" and not k and shaped(a, k),
    "valid bnpo": lambda *a, **k: a[2] == "bnpo" and not k and shaped(a, k),
    "valid dr_grpo with a wider max_completion_length": lambda *a, **k: a[2] == "dr_grpo" and shaped(a, k)
        and set(k) == {"max_completion_length"} and type(k["max_completion_length"]) is int
        and k["max_completion_length"] > a[0].shape[1],
    "valid dapo with more items than masked tokens": lambda *a, **k: a[2] == "dapo" and shaped(a, k)
        and set(k) == {"num_items_in_batch"} and type(k["num_items_in_batch"]) is int
        and k["num_items_in_batch"] > int(a[1].sum()),
    "an empty row": lambda *a, **k: shaped(a, k) and not bool(a[1].any(dim=1).all()),
    "a value that is not finite outside the mask": lambda *a, **k: shaped(a, k) and bool((~torch.isfinite(a[0]) & ~a[1]).any()),
    "losses that are not a tensor": lambda *a, **k: not isinstance(a[0], torch.Tensor),
    "1-D losses": lambda *a, **k: isinstance(a[0], torch.Tensor) and a[0].dim() == 1,
    "integer or half losses": lambda *a, **k: isinstance(a[0], torch.Tensor) and a[0].dtype in (torch.int64, torch.float16),
    "no row": lambda *a, **k: isinstance(a[0], torch.Tensor) and a[0].dim() == 2 and a[0].numel() == 0,
    "an integer mask": lambda *a, **k: isinstance(a[1], torch.Tensor) and a[1].dtype != torch.bool,
    "a mask of another shape": lambda *a, **k: isinstance(a[1], torch.Tensor) and isinstance(a[0], torch.Tensor)
        and a[1].dtype == torch.bool and a[1].shape != a[0].shape,
    "a mask without a token": lambda *a, **k: isinstance(a[1], torch.Tensor) and isinstance(a[0], torch.Tensor)
        and a[1].dtype == torch.bool and a[1].shape == a[0].shape and a[0].numel() > 0 and not bool(a[1].any()),
    "an unknown loss type": lambda *a, **k: shaped(a, k) and a[2] not in ("grpo", "bnpo", "dr_grpo", "dapo"),
    "dr_grpo without max_completion_length": lambda *a, **k: shaped(a, k) and a[2] == "dr_grpo" and not k,
    "dr_grpo with a max_completion_length below the width": lambda *a, **k: shaped(a, k) and a[2] == "dr_grpo"
        and type(k.get("max_completion_length")) is int and k["max_completion_length"] < a[0].shape[1],
    "dr_grpo with a float or bool max_completion_length": lambda *a, **k: shaped(a, k) and a[2] == "dr_grpo"
        and type(k.get("max_completion_length")) in (float, bool),
    "dr_grpo given num_items_in_batch too": lambda *a, **k: shaped(a, k) and a[2] == "dr_grpo" and len(k) == 2,
    "dapo without num_items_in_batch": lambda *a, **k: shaped(a, k) and a[2] == "dapo" and not k,
    "dapo with fewer items than masked tokens": lambda *a, **k: shaped(a, k) and a[2] == "dapo"
        and type(k.get("num_items_in_batch")) is int and k["num_items_in_batch"] < int(a[1].sum()),
    "dapo with a float or bool num_items_in_batch": lambda *a, **k: shaped(a, k) and a[2] == "dapo"
        and type(k.get("num_items_in_batch")) in (float, bool),
    "max_completion_length given to bnpo": lambda *a, **k: shaped(a, k) and a[2] == "bnpo" and "max_completion_length" in k,
    "num_items_in_batch given to grpo": lambda *a, **k: shaped(a, k) and a[2] == "grpo" and "num_items_in_batch" in k,
})

# %% hidden exercise=clipped_token_losses points=1 name=asymmetric_clip_and_its_three_rates
# hint: clamp the ratio to [1 - epsilon_low, 1 + epsilon_high]; low clipping counts ratio < 1 - epsilon_low with A < 0, high clipping ratio > 1 + epsilon_high with A > 0, over the masked tokens.
ratios = torch.tensor([[1.1, 1.3, 1.5, 0.6], [0.85, 0.75, 1.4, 2.0]])
logprobs = torch.log(ratios)
old = torch.zeros(2, 4)
advantages = torch.tensor([2.0, -1.0])
mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
out = clipped_token_losses(logprobs, old, advantages, mask, 0.1, 0.35)
expected = torch.tensor([[-2.2, -2.6, -2.7, -1.2], [0.9, 0.9, 1.4, 0.0]])
assert torch.allclose(out["token_losses"], expected, atol=1e-6), out["token_losses"]
assert math.isclose(out["clip_high"], 1 / 7) and math.isclose(out["clip_low"], 2 / 7)
assert math.isclose(out["clip_region"], 3 / 7)
symmetric = clipped_token_losses(logprobs, old, advantages, mask, 0.2, 0.2)
assert math.isclose(symmetric["clip_high"], 2 / 7) and math.isclose(symmetric["clip_low"], 1 / 7)

# %% hidden exercise=clipped_token_losses points=1 name=delta_caps_only_the_unclipped_term
# hint: with delta the first term of the min uses min(ratio, delta): it bounds a negative-advantage token's loss and changes nothing where A > 0.
ratios = torch.tensor([[4.0, 1.6, 0.5], [4.0, 1.6, 0.5]], dtype=torch.float64)
logprobs, old = torch.log(ratios), torch.zeros(2, 3, dtype=torch.float64)
advantages = torch.tensor([-1.0, 1.0], dtype=torch.float64)
mask = torch.ones(2, 3, dtype=torch.bool)
plain = clipped_token_losses(logprobs, old, advantages, mask, 0.2, 0.2)
capped = clipped_token_losses(logprobs, old, advantages, mask, 0.2, 0.2, 2.5)
assert torch.allclose(plain["token_losses"][0], torch.tensor([4.0, 1.6, 0.8], dtype=torch.float64))
assert torch.allclose(capped["token_losses"][0], torch.tensor([2.5, 1.6, 0.8], dtype=torch.float64))
assert torch.equal(capped["token_losses"][1], plain["token_losses"][1])
for bad in (1.2, 1.0, 0.5, True, float("inf")):
    try:
        clipped_token_losses(logprobs, old, advantages, mask, 0.2, 0.2, bad)
    except ValueError:
        continue
    raise AssertionError(f"delta {bad!r} accepted")

# %% hidden exercise=clipped_token_losses points=1 name=kl_estimators_and_their_weight_in_the_loss
# hint: d = ref - logprobs on the mask: k1 = -d, k3 = exp(d) - d - 1; "kl" is detached and 0 outside the mask; beta * estimate joins the loss only when beta > 0.
logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -1.0, 7.0]])
ref = torch.tensor([[-1.5, -1.0, -0.5], [-0.5, -2.0, float("nan")]])
mask = torch.tensor([[True, True, True], [True, True, False]])
advantages, old = torch.zeros(2), logprobs.clone()
d = torch.tensor([[-0.5, 1.0, 0.0], [1.0, -1.0, 0.0]])
expected_k3 = torch.where(mask, torch.exp(d) - d - 1, torch.zeros(2, 3))
k1 = clipped_token_losses(logprobs, old, advantages, mask, ref_logprobs=ref, kl_estimator="k1")
k3 = clipped_token_losses(logprobs, old, advantages, mask, ref_logprobs=ref, beta=0.5)
assert torch.allclose(k1["kl"], -d) and torch.allclose(k1["token_losses"], torch.zeros(2, 3))
assert torch.allclose(k3["kl"], expected_k3) and not k3["kl"].requires_grad
assert torch.allclose(k3["token_losses"], 0.5 * expected_k3)
assert clipped_token_losses(logprobs, old, advantages, mask)["kl"] is None

# %% hidden exercise=clipped_token_losses points=1 name=gradients_flow_through_the_policy_only
# hint: detach old_logprobs and ref_logprobs; a clipped token gives no gradient; the KL term's gradient reaches logprobs.
from tools.course.grader.boundary import backward_through

logprobs = torch.log(torch.tensor([[1.0, 1.5], [0.5, 1.0]])).requires_grad_(True)
old = torch.zeros(2, 2, requires_grad=True)
ref = torch.zeros(2, 2, requires_grad=True)
advantages = torch.tensor([1.0, -1.0])
mask = torch.ones(2, 2, dtype=torch.bool)
backward_through(clipped_token_losses, logprobs, old, advantages, mask, 0.2, 0.2, None, ref, 0.0, select=["token_losses"],
                 reduce="sum")
assert old.grad is None and ref.grad is None, "old and reference log-probabilities are constants"
assert torch.allclose(logprobs.grad, torch.tensor([[-1.0, 0.0], [0.0, 1.0]])), logprobs.grad
with_kl = torch.zeros(1, 1, requires_grad=True)
backward_through(clipped_token_losses, with_kl, torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1, dtype=torch.bool),
                 0.2, 0.2, None, torch.full((1, 1), -1.0), 2.0, "k1", select=["token_losses"], reduce="sum")
assert torch.allclose(with_kl.grad, torch.tensor([[2.0]])), "d(beta * k1)/d logprob = beta"

# %% hidden exercise=clipped_token_losses points=1 name=values_outside_the_mask_and_invalid_settings
# hint: entries outside the mask (nan, inf) never reach a result; check every tensor, the epsilons, delta, beta (> 0 needs a reference) and the estimator before computing.
logprobs = torch.tensor([[-1.0, float("nan")], [float("inf"), -2.0]])
old = torch.tensor([[-1.0, 3.0], [float("-inf"), -2.0]])
mask = torch.tensor([[True, False], [False, True]])
out = clipped_token_losses(logprobs, old, torch.tensor([1.0, -1.0]), mask)
assert torch.equal(out["token_losses"], torch.tensor([[-1.0, 0.0], [0.0, 1.0]])) and out["clip_region"] == 0.0
lp, advantages, full = torch.zeros(2, 2), torch.ones(2), torch.ones(2, 2, dtype=torch.bool)
bad_calls = [lambda: clipped_token_losses(lp.tolist(), lp, advantages, full),
             lambda: clipped_token_losses(lp, lp.double(), advantages, full),
             lambda: clipped_token_losses(lp, lp, advantages[:1], full),
             lambda: clipped_token_losses(lp, lp, torch.tensor([1.0, float("nan")]), full),
             lambda: clipped_token_losses(lp, lp, advantages, full.long()),
             lambda: clipped_token_losses(lp, lp, advantages, torch.zeros(2, 2, dtype=torch.bool)),
             lambda: clipped_token_losses(lp, lp, advantages, full, 0.0), lambda: clipped_token_losses(lp, lp, advantages, full, 1.0),
             lambda: clipped_token_losses(lp, lp, advantages, full, 0.2, 0.0),
             lambda: clipped_token_losses(lp, lp, advantages, full, 0.2, True),
             lambda: clipped_token_losses(lp, lp, advantages, full, beta=0.1),
             lambda: clipped_token_losses(lp, lp, advantages, full, beta=-0.1, ref_logprobs=lp),
             lambda: clipped_token_losses(lp, lp, advantages, full, ref_logprobs=lp, kl_estimator="k2"),
             lambda: clipped_token_losses(lp, lp, advantages, full, ref_logprobs=lp[:1]),
             lambda: clipped_token_losses(torch.tensor([[float("nan"), 0.0], [0.0, 0.0]]), lp, advantages, full)]
for index, call in enumerate(bad_calls):
    try:
        call()
    except ValueError:
        continue
    raise AssertionError(f"invalid call {index} accepted")

# %% hidden exercise=clipped_token_losses points=2 name=agrees_with_reference_on_generated_batches
# hint: any batch (ratios on both sides of every bound, clip-higher, delta, k1 or k3 with or without beta, nan outside the mask) or one thing wrong: the same tensors and rates, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid", n) for n in range(40)]
           + [(kind, None) for kind in ["list", "shape", "dtype", "adv_shape", "adv_nan", "mask_int", "mask_empty",
                                        "nan_on_mask", "ref_nan_on_mask", "beta_without_ref"]]
           + [("eps_low", bad) for bad in [0, 1, -0.2, True, float("nan")]]
           + [("eps_high", bad) for bad in [0, -0.1, True, float("inf")]]
           + [("delta", bad) for bad in [1.1, 1.2, True, float("inf"), "2"]]
           + [("beta", bad) for bad in [-0.01, True, float("nan")]]
           + [("estimator", bad) for bad in ["k2", "K3", None]])


def one_batch(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    rows, width = rng.randint(1, 3), rng.randint(1, 4)
    generator = torch.Generator().manual_seed(rng.randrange(10_000))
    logprobs = (-2 * torch.rand(rows, width, generator=generator)).to(dtype)
    old = (logprobs + 0.6 * torch.randn(rows, width, generator=generator).to(dtype))
    advantages = torch.randn(rows, generator=generator).to(dtype)
    mask = torch.rand(rows, width, generator=generator) < 0.7
    mask[rng.randrange(rows), rng.randrange(width)] = True
    if rng.random() < 0.3:
        old = torch.where(mask, old, torch.full_like(old, float("nan")))
    eps_low, eps_high = rng.choice([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5), (0.3, 0.3)])
    delta = rng.choice([None, None, 1.8, 3])
    ref, beta, estimator = None, 0.0, "k3"
    if rng.random() < 0.6:
        ref = (logprobs + 0.4 * torch.randn(rows, width, generator=generator).to(dtype))
        beta, estimator = rng.choice([0.0, 0.04, 1]), rng.choice(["k1", "k3"])
    if kind == "list":
        logprobs = logprobs.tolist()
    elif kind == "shape":
        old = old[:, :0] if width > 1 else old[:0]
    elif kind == "dtype":
        old = old.to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "adv_shape":
        advantages = torch.cat([advantages, advantages[:1]])
    elif kind == "adv_nan":
        advantages[rng.randrange(rows)] = float("nan")
    elif kind == "mask_int":
        mask = mask.long()
    elif kind == "mask_empty":
        mask = torch.zeros_like(mask)
    elif kind == "nan_on_mask":
        index = mask.nonzero()[0]
        logprobs[index[0], index[1]] = float("nan")
    elif kind == "ref_nan_on_mask":
        ref = logprobs.clone()
        index = mask.nonzero()[0]
        ref[index[0], index[1]] = float("inf")
    elif kind == "beta_without_ref":
        ref, beta = None, 0.1
    elif kind == "eps_low":
        eps_low = bad
    elif kind == "eps_high":
        eps_high = bad
    elif kind == "delta":
        delta = bad
    elif kind == "beta":
        ref, beta = logprobs.clone(), bad
    elif kind == "estimator":
        ref, estimator = logprobs.clone(), bad
    return logprobs, old, advantages, mask, eps_low, eps_high, delta, ref, beta, estimator


def tensors_ok(*a):
    lp, old, adv, mask = a[:4]
    return isinstance(lp, torch.Tensor) and lp.dim() == 2 and lp.dtype in (torch.float32, torch.float64) \
        and isinstance(old, torch.Tensor) and old.shape == lp.shape and old.dtype == lp.dtype \
        and isinstance(mask, torch.Tensor) and mask.dtype == torch.bool and mask.shape == lp.shape and bool(mask.any()) \
        and isinstance(adv, torch.Tensor) and tuple(adv.shape) == (lp.shape[0],) and bool(torch.isfinite(adv).all()) \
        and bool(torch.isfinite(lp[mask]).all()) and (a[7] is None or bool(torch.isfinite(a[7][mask]).all()))


def ratios(*a):
    lp, old, adv, mask = a[:4]
    return torch.exp(torch.where(mask, lp - old, torch.zeros_like(lp))), adv.unsqueeze(1), mask


reference.agrees("clipped_token_losses", each_of(defects, one_batch, variants=3), cases=3 * len(defects), clauses={
    "a high-clipped token": lambda *a: tensors_ok(*a) and isinstance(a[5], float) and bool(
        ((ratios(*a)[0] > 1 + a[5]) & (ratios(*a)[1] > 0) & a[3]).any()),
    "a low-clipped token": lambda *a: tensors_ok(*a) and isinstance(a[4], float) and bool(
        ((ratios(*a)[0] < 1 - a[4]) & (ratios(*a)[1] < 0) & a[3]).any()),
    "a token capped by delta": lambda *a: tensors_ok(*a) and isinstance(a[6], (int, float)) and not isinstance(a[6], bool)
        and math.isfinite(a[6]) and bool(((ratios(*a)[0] > a[6]) & (ratios(*a)[1] < 0) & a[3]).any()),
    "clip-higher (eps_high > eps_low)": lambda *a: tensors_ok(*a) and isinstance(a[5], float) and a[5] > a[4],
    "k1 with beta > 0": lambda *a: tensors_ok(*a) and a[7] is not None and a[9] == "k1" and isinstance(a[8], (int, float))
        and not isinstance(a[8], bool) and a[8] > 0,
    "k3 with beta > 0": lambda *a: tensors_ok(*a) and a[7] is not None and a[9] == "k3" and isinstance(a[8], (int, float))
        and not isinstance(a[8], bool) and a[8] > 0,
    "a reference with beta 0 (KL reported, not in the loss)": lambda *a: tensors_ok(*a) and a[7] is not None and a[8] == 0,
    "nan outside the mask": lambda *a: tensors_ok(*a) and bool((~torch.isfinite(a[1]) & ~a[3]).any()),
    "logprobs that are not a tensor": lambda *a: not isinstance(a[0], torch.Tensor),
    "old_logprobs of another shape or dtype": lambda *a: isinstance(a[0], torch.Tensor) and isinstance(a[1], torch.Tensor)
        and (a[1].shape != a[0].shape or a[1].dtype != a[0].dtype),
    "advantages of another length or not finite": lambda *a: isinstance(a[0], torch.Tensor) and isinstance(a[2], torch.Tensor)
        and a[1].shape == a[0].shape and a[1].dtype == a[0].dtype and (
            tuple(a[2].shape) != (a[0].shape[0],) or not bool(torch.isfinite(a[2]).all())),
    "an integer mask": lambda *a: isinstance(a[3], torch.Tensor) and a[3].dtype != torch.bool,
    "an empty mask": lambda *a: isinstance(a[3], torch.Tensor) and a[3].dtype == torch.bool and not bool(a[3].any()),
    "a non-finite log-probability on the mask": lambda *a: isinstance(a[0], torch.Tensor) and isinstance(a[3], torch.Tensor)
        and a[3].dtype == torch.bool and a[3].shape == a[0].shape and not bool(torch.isfinite(a[0][a[3]]).all()),
    "a non-finite reference on the mask": lambda *a: isinstance(a[7], torch.Tensor) and a[7].shape == a[3].shape
        and a[3].dtype == torch.bool and not bool(torch.isfinite(a[7][a[3]]).all()),
    "epsilon_low out of (0, 1), a bool or nan": lambda *a: tensors_ok(*a) and (isinstance(a[4], bool) or not (
        isinstance(a[4], float) and 0 < a[4] < 1)),
    "epsilon_high <= 0, a bool or infinite": lambda *a: tensors_ok(*a) and isinstance(a[4], float) and 0 < a[4] < 1 and (
        isinstance(a[5], bool) or not math.isfinite(a[5]) or a[5] <= 0),
    "delta not above 1 + epsilon_high, a bool, infinite or a str": lambda *a: tensors_ok(*a) and a[6] is not None and (
        isinstance(a[6], (bool, str)) or not math.isfinite(a[6]) or a[6] <= 1 + a[5]),
    "beta > 0 without a reference": lambda *a: tensors_ok(*a) and a[7] is None and isinstance(a[8], float) and a[8] > 0,
    "beta negative, a bool or nan": lambda *a: tensors_ok(*a) and a[7] is not None and (
        isinstance(a[8], bool) or not math.isfinite(a[8]) or a[8] < 0),
    "an unknown estimator": lambda *a: tensors_ok(*a) and a[9] not in ("k1", "k3"),
})

# %% hidden exercise=fill_batch points=1 name=groups_are_kept_in_order_until_the_batch_is_full
# hint: walk the groups in draw order, keep a group whose rewards vary, and stop the moment target_groups are kept: later groups are not examined.
def _group(*rewards, truncated=()):
    return [{"reward": reward, "truncated": index in truncated} for index, reward in enumerate(rewards)]


groups = [_group(0, 1), _group(1, 1, 1), _group(0.5, 0.25), _group(0, 0), _group(1, 0), _group(0, 2)]
assert fill_batch(groups, 2, 6) == {"kept": [0, 2], "dropped": [1], "examined": 3, "full": True,
                                    "loss_masks": [[True, True], [True, True]]}
assert fill_batch(groups, 4, 6)["kept"] == [0, 2, 4, 5] and fill_batch(groups, 4, 6)["examined"] == 6
assert fill_batch(groups, 1, 1) == {"kept": [0], "dropped": [], "examined": 1, "full": True, "loss_masks": [[True, True]]}

# %% hidden exercise=fill_batch points=1 name=the_budget_or_the_groups_can_run_out
# hint: stop after max_groups examined groups, or at the end of the list; then full is False and examined says how many were read.
def _group(*rewards, truncated=()):
    return [{"reward": reward, "truncated": index in truncated} for index, reward in enumerate(rewards)]


groups = [_group(1, 1), _group(0, 0), _group(1, 0), _group(3), _group(2, 2)]
assert fill_batch(groups, 3, 4) == {"kept": [2], "dropped": [0, 1, 3], "examined": 4, "full": False,
                                    "loss_masks": [[True, True]]}
assert fill_batch(groups, 2, 10) == {"kept": [2], "dropped": [0, 1, 3, 4], "examined": 5, "full": False,
                                     "loss_masks": [[True, True]]}
assert fill_batch([], 1, 3) == {"kept": [], "dropped": [], "examined": 0, "full": False, "loss_masks": []}

# %% hidden exercise=fill_batch points=1 name=truncated_responses_lose_their_loss_mask_not_their_group
# hint: truncation never decides whether a group is kept (its reward still counts); with mask_truncated each truncated response of a kept group gets False.
def _group(*rewards, truncated=()):
    return [{"reward": reward, "truncated": index in truncated} for index, reward in enumerate(rewards)]


groups = [_group(0, 0, truncated=(0,)), _group(1, 0, 0, truncated=(1, 2)), _group(0, 1, truncated=(0, 1))]
masked = fill_batch(groups, 2, 3)
assert masked["kept"] == [1, 2] and masked["loss_masks"] == [[True, False, False], [False, False]]
plain = fill_batch(groups, 2, 3, False)
assert plain["kept"] == [1, 2] and plain["loss_masks"] == [[True, True, True], [True, True]]

# %% hidden exercise=fill_batch points=1 name=every_group_is_checked_before_any_selection
# hint: check the whole list (also groups after the batch fills) and the three settings before walking; rewards are finite numbers (not bools), truncated is a bool, each response has exactly the two keys.
def _group(*rewards, truncated=()):
    return [{"reward": reward, "truncated": index in truncated} for index, reward in enumerate(rewards)]


ok = [_group(0, 1), _group(1, 0)]
assert fill_batch(ok, 1, 2)["kept"] == [0]
bad_groups = [ok + [[]], ok + [[{"reward": 1.0}]], ok + [[{"reward": True, "truncated": False}]],
              ok + [[{"reward": float("nan"), "truncated": False}]], ok + [[{"reward": 1.0, "truncated": 0}]],
              ok + [[{"reward": "1", "truncated": False}]], ok + [[{"reward": 1.0, "truncated": False, "extra": 1}]],
              ok + [(({"reward": 1.0, "truncated": False}),)], ok + ["x"], tuple(ok)]
for index, groups in enumerate(bad_groups):
    try:
        fill_batch(groups, 1, 2)
    except ValueError:
        continue
    raise AssertionError(f"invalid groups {index} accepted")
for settings in ((0, 2), (3, 2), (1.0, 2), (True, 2), (1, 2.5), (1, True), (1, None)):
    try:
        fill_batch(ok, *settings)
    except ValueError:
        continue
    raise AssertionError(f"invalid settings {settings} accepted")
try:
    fill_batch(ok, 1, 2, 1)
except ValueError:
    pass
else:
    raise AssertionError("mask_truncated must be a bool")

# %% hidden exercise=fill_batch points=2 name=agrees_with_reference_on_generated_streams
# hint: any stream of groups (uniform, varying, single responses, truncated ones, int and float rewards) with any target and budget, or one defect anywhere in it: the same selection, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([("valid", n) for n in range(40)]
           + [(kind, None) for kind in ["empty_group", "missing_key", "extra_key", "bool_reward", "nan_reward",
                                        "inf_reward", "str_reward", "int_truncated", "tuple_group", "not_a_list",
                                        "dict_group", "late_defect"]]
           + [("target", bad) for bad in [0, -1, 1.0, True, None]]
           + [("budget", bad) for bad in ["below", 2.0, True]]
           + [("mask", bad) for bad in [1, None, "yes"]])


def one_stream(defect, rng):
    kind, bad = defect
    groups = []
    for _ in range(rng.randint(0, 7)):
        size = rng.choice([1, 2, 3, 4])
        uniform = rng.random() < 0.4
        value = rng.choice([0, 1, 0.0, 1.0, 0.5])
        groups.append([{"reward": value if uniform else rng.choice([0, 1, 0.5, 2, -1.0]),
                        "truncated": rng.random() < 0.25} for _ in range(size)])
    target = rng.randint(1, 4)
    budget = target + rng.choice([0, 0, 1, 3, 10])
    mask = rng.choice([True, False])
    where = rng.randrange(len(groups)) if groups else None
    if kind in ("empty_group", "missing_key", "extra_key", "bool_reward", "nan_reward", "inf_reward", "str_reward",
                "int_truncated", "tuple_group", "dict_group", "late_defect") and where is None:
        groups, where = [[{"reward": 1.0, "truncated": False}]], 0
    response = groups[where][0] if where is not None else None
    if kind == "empty_group":
        groups[where] = []
    elif kind == "missing_key":
        del response["truncated"]
    elif kind == "extra_key":
        response["weight"] = 1.0
    elif kind == "bool_reward":
        response["reward"] = rng.choice([True, False])
    elif kind == "nan_reward":
        response["reward"] = float("nan")
    elif kind == "inf_reward":
        response["reward"] = float("-inf")
    elif kind == "str_reward":
        response["reward"] = "1"
    elif kind == "int_truncated":
        response["truncated"] = rng.choice([0, 1])
    elif kind == "tuple_group":
        groups[where] = tuple(groups[where])
    elif kind == "dict_group":
        groups[where] = {"reward": 1.0, "truncated": False}
    elif kind == "not_a_list":
        groups = tuple(groups)
    elif kind == "late_defect":
        groups += [[{"reward": 1, "truncated": False}, {"reward": 0, "truncated": False}]] * target
        groups.append([{"reward": None, "truncated": False}])
    elif kind == "target":
        target = bad
    elif kind == "budget":
        budget = target - 1 if bad == "below" else bad
    elif kind == "mask":
        mask = bad
    return groups, target, budget, mask


def well_formed(groups):
    return isinstance(groups, list) and all(isinstance(g, list) and g and all(
        isinstance(r, dict) and set(r) == {"reward", "truncated"} and isinstance(r["truncated"], bool)
        and not isinstance(r["reward"], bool) and isinstance(r["reward"], (int, float)) and math.isfinite(r["reward"])
        for r in g) for g in groups)


def settings_ok(groups, target, budget, mask):
    return type(target) is int and target >= 1 and type(budget) is int and budget >= target and isinstance(mask, bool)


def varies(group):
    rewards = [response["reward"] for response in group]
    return max(rewards) != min(rewards)


reference.agrees("fill_batch", each_of(defects, one_stream, variants=3), cases=3 * len(defects), clauses={
    "a stream that fills the batch with groups left over": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m)
        and sum(varies(x) for x in g[:b]) >= t and len(g) > 1 + [i for i, x in enumerate(g) if varies(x)][t - 1],
    "a budget that runs out before the batch is full": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m)
        and len(g) > b and sum(varies(x) for x in g[:b]) < t,
    "a stream that ends before the batch is full": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m)
        and len(g) <= b and sum(varies(x) for x in g) < t,
    "an empty stream": lambda g, t, b, m: g == [] and settings_ok(g, t, b, m),
    "a group of one response": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m) and any(len(x) == 1 for x in g),
    "a kept group with a truncated response, masked": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m) and m
        and any(varies(x) and any(r["truncated"] for r in x) for x in g[:b]),
    "a kept group with a truncated response, not masked": lambda g, t, b, m: well_formed(g) and settings_ok(g, t, b, m)
        and not m and any(varies(x) and any(r["truncated"] for r in x) for x in g[:b]),
    "an empty group": lambda g, t, b, m: isinstance(g, list) and any(x == [] for x in g),
    "a response without exactly the two keys": lambda g, t, b, m: isinstance(g, list) and any(
        isinstance(x, list) and any(isinstance(r, dict) and set(r) != {"reward", "truncated"} for r in x) for x in g),
    "a reward that is a bool": lambda g, t, b, m: isinstance(g, list) and any(
        isinstance(x, list) and any(isinstance(r, dict) and isinstance(r.get("reward"), bool) for r in x) for x in g),
    "a reward that is not finite": lambda g, t, b, m: isinstance(g, list) and any(
        isinstance(x, list) and any(isinstance(r, dict) and isinstance(r.get("reward"), float)
                                    and not math.isfinite(r["reward"]) for r in x) for x in g),
    "a reward that is not a number": lambda g, t, b, m: isinstance(g, list) and any(
        isinstance(x, list) and any(isinstance(r, dict) and "reward" in r and not isinstance(r["reward"], (int, float))
                                    for r in x) for x in g),
    "truncated an int": lambda g, t, b, m: isinstance(g, list) and any(
        isinstance(x, list) and any(isinstance(r, dict) and type(r.get("truncated")) is int for r in x) for x in g),
    "a group that is not a list": lambda g, t, b, m: isinstance(g, list) and any(not isinstance(x, list) for x in g),
    "groups that are not a list": lambda g, t, b, m: not isinstance(g, list),
    "a defect after the batch would be full": lambda g, t, b, m: isinstance(g, list) and len(g) > 1
        and well_formed(g[:-1]) and not well_formed(g[-1:]),
    "target_groups below 1, a float, a bool or None": lambda g, t, b, m: well_formed(g) and not (type(t) is int and t >= 1),
    "max_groups below target_groups, a float or a bool": lambda g, t, b, m: well_formed(g) and type(t) is int and t >= 1
        and not (type(b) is int and b >= t),
    "mask_truncated not a bool": lambda g, t, b, m: well_formed(g) and type(t) is int and t >= 1 and type(b) is int
        and b >= t and not isinstance(m, bool),
})

# %% hidden exercise=importance_sampling_weights points=1 name=token_modes_truncate_or_zero_each_token
# hint: per token, exp(trainer - sampler); truncate clamps to [clip_min, clip_max], mask keeps a ratio within the bounds (ends included) and sets the rest to 0.
trainer = torch.tensor([[math.log(4.0), 0.0, math.log(0.25), math.log(1.5)]], dtype=torch.float64)
sampler = torch.zeros(1, 4, dtype=torch.float64)
mask = torch.ones(1, 4, dtype=torch.bool)
truncated = importance_sampling_weights(trainer, sampler, mask, "token_truncate", 2.0, 0.5)
assert torch.allclose(truncated["weights"], torch.tensor([[2.0, 1.0, 0.5, 1.5]], dtype=torch.float64))
assert math.isclose(truncated["changed"], 0.5)
masked = importance_sampling_weights(trainer, sampler, mask, "token_mask", 2.0, 0.5)
assert torch.allclose(masked["weights"], torch.tensor([[0.0, 1.0, 0.0, 1.5]], dtype=torch.float64))
on_bound = importance_sampling_weights(trainer, sampler, mask, "token_mask", 1.0, 0.5)
assert torch.allclose(on_bound["weights"], torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)), "a ratio of exactly 1.0 lies on the bound 1.0"
only_max = importance_sampling_weights(trainer, sampler, mask, "token_truncate", 3.0)
assert torch.allclose(only_max["weights"], torch.tensor([[3.0, 1.0, 0.25, 1.5]], dtype=torch.float64))
only_min = importance_sampling_weights(trainer, sampler, mask, "token_mask", None, 0.3)
assert torch.allclose(only_min["weights"], torch.tensor([[4.0, 1.0, 0.0, 1.5]], dtype=torch.float64))

# %% hidden exercise=importance_sampling_weights points=1 name=sequence_modes_use_the_row_product_on_the_mask
# hint: a row's ratio is exp of the sum of its masked differences; every masked token of the row gets it; entries outside the mask count nowhere and get 0.
trainer = torch.tensor([[-1.0, -1.0, 5.0], [-2.0, -0.5, -0.5]])
sampler = torch.tensor([[-1.5, -1.2, float("nan")], [-2.0, -1.25, -1.25]])
mask = torch.tensor([[True, True, False], [True, True, True]])
# row sums on the mask: 0.5 + 0.2 = 0.7 and 0 + 0.75 + 0.75 = 1.5; exp(1.5) is above 3
truncated = importance_sampling_weights(trainer, sampler, mask, "sequence_truncate", 3.0)
assert torch.allclose(truncated["weights"], torch.tensor([[math.exp(0.7), math.exp(0.7), 0.0], [3.0, 3.0, 3.0]]))
assert math.isclose(truncated["changed"], 3 / 5)
masked = importance_sampling_weights(trainer, sampler, mask, "sequence_mask", 3.0)
assert torch.allclose(masked["weights"], torch.tensor([[math.exp(0.7), math.exp(0.7), 0.0], [0.0, 0.0, 0.0]]))
assert not masked["weights"].requires_grad

# %% hidden exercise=importance_sampling_weights points=1 name=invalid_inputs_are_refused_valid_ones_weighted
# hint: check both tensors (2-D float32/float64, one shape and dtype, finite on the mask), the mask, the mode and the bounds (at least one; clip_max > 0; 0 <= clip_min < clip_max; no bools) before computing.
lp, mask = torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool)
assert importance_sampling_weights(lp, lp, mask, "token_mask")["changed"] == 0.0
bad_calls = [(lp.tolist(), lp, mask, "token_mask"), (lp, lp.double(), mask, "token_mask"), (lp, lp[:1], mask, "token_mask"),
             (lp, lp, mask.long(), "token_mask"), (lp, lp, torch.zeros(2, 2, dtype=torch.bool), "token_mask"),
             (torch.tensor([[float("nan"), 0.0], [0.0, 0.0]]), lp, mask, "token_mask"), (lp, lp, mask, "token"),
             (lp, lp, mask, "sequence_clip"), (lp, lp, mask, "token_mask", None, None), (lp, lp, mask, "token_mask", 0.0),
             (lp, lp, mask, "token_mask", -1.0), (lp, lp, mask, "token_mask", True), (lp, lp, mask, "token_mask", 2.0, 2.0),
             (lp, lp, mask, "token_mask", 2.0, -0.1), (lp, lp, mask, "token_mask", float("inf")),
             (lp, lp, mask, "token_mask", 2.0, True), (torch.zeros(2), torch.zeros(2), torch.ones(2, dtype=torch.bool), "token_mask")]
for index, call in enumerate(bad_calls):
    try:
        importance_sampling_weights(*call)
    except ValueError:
        continue
    raise AssertionError(f"invalid call {index} accepted")

# %% hidden exercise=importance_sampling_weights points=2 name=agrees_with_reference_on_generated_weightings
# hint: any batch (ratios on and beyond both bounds, one bound or two, nan outside the mask, every mode) or one thing wrong: the same weights and share, or the same ValueError.
from tools.course.grader.clauses import each_of

defects = ([(mode, n) for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask") for n in range(10)]
           + [(kind, None) for kind in ["list", "dtype", "shape", "one_dim", "mask_int", "mask_empty", "nan_on_mask",
                                        "no_bounds", "on_the_bound"]]
           + [("mode", bad) for bad in ["token", "TOKEN_MASK", None, "sequence"]]
           + [("clip_max", bad) for bad in [0, -1.0, True, float("inf")]]
           + [("clip_min", bad) for bad in [-0.5, "equal", "above", True, float("nan")]])


def one_weighting(defect, rng):
    kind, bad = defect
    dtype = rng.choice([torch.float32, torch.float64])
    rows, width = rng.randint(1, 3), rng.randint(1, 4)
    generator = torch.Generator().manual_seed(rng.randrange(10_000))
    trainer = (-2 * torch.rand(rows, width, generator=generator)).to(dtype)
    sampler = trainer + (0.8 * torch.randn(rows, width, generator=generator)).to(dtype)
    mask = torch.rand(rows, width, generator=generator) < 0.7
    mask[rng.randrange(rows), rng.randrange(width)] = True
    if rng.random() < 0.3:
        sampler = torch.where(mask, sampler, torch.full_like(sampler, float("nan")))
    mode = kind if kind in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask") else rng.choice(
        ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"])
    clip_max, clip_min = rng.choice([(2.0, None), (3, 0.5), (1.5, 0.8), (None, 0.6), (2.0, 0)])
    if kind == "list":
        trainer = trainer.tolist()
    elif kind == "dtype":
        sampler = sampler.to(torch.float64 if dtype == torch.float32 else torch.float32)
    elif kind == "shape":
        sampler = torch.cat([sampler, sampler], dim=1)
    elif kind == "one_dim":
        trainer, sampler, mask = trainer[0], sampler[0], mask[0]
    elif kind == "mask_int":
        mask = mask.long()
    elif kind == "mask_empty":
        mask = torch.zeros_like(mask)
    elif kind == "nan_on_mask":
        index = mask.nonzero()[0]
        trainer[index[0], index[1]] = float("nan")
    elif kind == "no_bounds":
        clip_max, clip_min = None, None
    elif kind == "on_the_bound":
        trainer, sampler = torch.zeros(rows, width, dtype=dtype), torch.zeros(rows, width, dtype=dtype)
        mode, clip_max, clip_min = "token_mask", 2.0, 1.0
    elif kind == "mode":
        mode = bad
    elif kind == "clip_max":
        clip_max = bad
    elif kind == "clip_min":
        clip_max = 2.0
        clip_min = {"equal": 2.0, "above": 3.0}.get(bad, bad) if isinstance(bad, str) else bad
    return trainer, sampler, mask, mode, clip_max, clip_min


def shaped(t, s, m, *rest):
    return isinstance(t, torch.Tensor) and t.dim() == 2 and t.dtype in (torch.float32, torch.float64) \
        and isinstance(s, torch.Tensor) and s.shape == t.shape and s.dtype == t.dtype and isinstance(m, torch.Tensor) \
        and m.dtype == torch.bool and m.shape == t.shape and bool(m.any()) and bool(torch.isfinite(t[m]).all()) \
        and bool(torch.isfinite(s[m]).all())


def raw(t, s, m, mode, *rest):
    d = torch.where(m, t - s, torch.zeros_like(t))
    if mode.startswith("sequence"):
        d = d.sum(dim=1, keepdim=True).expand_as(d)
    return torch.exp(d)


def bounds_ok(t, s, m, mode, high, low):
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return (high is not None or low is not None) and (high is None or (number(high) and high > 0)) and (
        low is None or (number(low) and low >= 0 and (high is None or low < high)))


reference.agrees("importance_sampling_weights", each_of(defects, one_weighting, variants=3), cases=3 * len(defects), clauses={
    "a ratio above clip_max": lambda *a: shaped(*a) and a[3] in ("token_truncate", "token_mask", "sequence_truncate",
                                                                   "sequence_mask") and bounds_ok(*a) and a[4] is not None
        and bool((raw(*a) > a[4])[a[2]].any()),
    "a ratio below clip_min": lambda *a: shaped(*a) and a[3] in ("token_truncate", "token_mask", "sequence_truncate",
                                                                   "sequence_mask") and bounds_ok(*a) and a[5] is not None
        and bool((raw(*a) < a[5])[a[2]].any()),
    "a ratio exactly on a bound": lambda *a: shaped(*a) and a[3] == "token_mask" and bounds_ok(*a) and a[4] is not None
        and bool((raw(*a) == a[4])[a[2]].any() or (raw(*a) == a[5])[a[2]].any()),
    "only clip_min": lambda *a: shaped(*a) and bounds_ok(*a) and a[4] is None,
    "nan outside the mask": lambda *a: shaped(*a) and bool((~torch.isfinite(a[1]) & ~a[2]).any()),
    "trainer_logps not a tensor or not 2-D": lambda *a: not (isinstance(a[0], torch.Tensor) and a[0].dim() == 2),
    "sampler_logps of another dtype or shape": lambda *a: isinstance(a[0], torch.Tensor) and a[0].dim() == 2
        and isinstance(a[1], torch.Tensor) and (a[1].dtype != a[0].dtype or a[1].shape != a[0].shape),
    "an integer mask": lambda *a: isinstance(a[2], torch.Tensor) and a[2].dtype != torch.bool,
    "an empty mask": lambda *a: isinstance(a[2], torch.Tensor) and a[2].dtype == torch.bool and not bool(a[2].any()),
    "a nan on the mask": lambda *a: isinstance(a[0], torch.Tensor) and isinstance(a[2], torch.Tensor)
        and a[2].dtype == torch.bool and a[2].shape == a[0].shape and not bool(torch.isfinite(a[0][a[2]]).all()),
    "an unknown mode": lambda *a: shaped(*a) and a[3] not in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
    "no bound": lambda *a: shaped(*a) and a[4] is None and a[5] is None,
    "clip_max 0, negative, a bool or infinite": lambda *a: shaped(*a) and a[3] in ("token_truncate", "token_mask",
        "sequence_truncate", "sequence_mask") and a[4] is not None and (isinstance(a[4], bool) or not math.isfinite(a[4])
                                                                         or a[4] <= 0),
    "clip_min negative, not below clip_max, a bool or nan": lambda *a: shaped(*a) and a[3] in ("token_truncate",
        "token_mask", "sequence_truncate", "sequence_mask") and a[4] == 2.0 and a[5] is not None and (
            isinstance(a[5], bool) or not math.isfinite(a[5]) or a[5] < 0 or a[5] >= a[4]),
})
