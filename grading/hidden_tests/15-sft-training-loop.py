# %% hidden exercise=accumulate_gradients points=1 name=equals_one_large_batch_for_uneven_micro_batches
# hint: each micro-batch contributes its summed token loss divided by the supervised tokens of the whole global batch; a mean per micro-batch weights tokens differently.
_model = ToyCausalLM(seed=11)
_parts = [make_batch([[1, 2, 3, 4, 5, 6]], [1]), make_batch([[7, 8, 9], [3, 3, 3]], [2, 2]),
          make_batch([[2, 4, 6, 8, 10, 12, 1, 3]], [6])]
_split = accumulate_gradients(_model, _parts)
_large = accumulate_gradients(_model, [concat_batches(_parts)])
assert _split["micro_batch_tokens"] == [5, 2, 2] and _split["supervised_tokens"] == 9
assert abs(_split["loss"] - _large["loss"]) < 1e-12
assert list(_split["gradients"]) == [name for name, _ in _model.named_parameters()]
for _name, _grad in _large["gradients"].items():
    assert torch.allclose(_split["gradients"][_name], _grad, rtol=0, atol=1e-12), _name

# %% hidden exercise=accumulate_gradients points=1 name=micro_batch_without_supervision_adds_nothing
# hint: a micro-batch with no supervised token adds 0 to the sum and 0 to N; nothing is divided by its own count.
_model = ToyCausalLM(seed=12)
_useful = make_batch([[1, 2, 3, 4]], [1])
_empty = make_batch([[5, 6, 7], [8, 9, 10]], [3, 3])
_with = accumulate_gradients(_model, [_useful, _empty])
_without = accumulate_gradients(_model, [_useful])
assert _with["micro_batch_tokens"] == [3, 0] and math.isfinite(_with["loss"])
assert abs(_with["loss"] - _without["loss"]) < 1e-12
for _name, _grad in _without["gradients"].items():
    assert torch.isfinite(_with["gradients"][_name]).all() and torch.allclose(_with["gradients"][_name], _grad, atol=1e-12)

# %% hidden exercise=accumulate_gradients points=1 name=counts_supervised_positions_after_the_shift
# hint: position t predicts labels[:, t + 1], so a label in the first column is never predicted and never counted.
_model = ToyCausalLM(seed=13)
_batch = make_batch([[4, 5, 6], [7, 8, 9]], [0, 1])
_logits = _model(input_ids=_batch["input_ids"]).logits.detach()
_expected = F.cross_entropy(_logits[:, :-1].reshape(-1, 13), _batch["labels"][:, 1:].reshape(-1), reduction="sum") / 4
_result = accumulate_gradients(_model, [_batch])
assert _result["supervised_tokens"] == 4 and _result["micro_batch_tokens"] == [4]
assert abs(_result["loss"] - float(_expected)) < 1e-12

# %% hidden exercise=accumulate_gradients points=1 name=old_gradients_are_discarded
# hint: backward adds to .grad; the previous step's gradient must be gone before the first backward of this one.
_model = ToyCausalLM(seed=14)
_batch = make_batch([[1, 3, 5, 7, 9]], [2])
_fresh = accumulate_gradients(_model, [_batch])
for _parameter in _model.parameters():
    _parameter.grad = torch.full_like(_parameter, 5.0)
_again = accumulate_gradients(_model, [_batch])
for _name, _parameter in _model.named_parameters():
    assert torch.allclose(_again["gradients"][_name], _fresh["gradients"][_name], atol=1e-12), _name
    assert torch.allclose(_parameter.grad, _fresh["gradients"][_name], atol=1e-12), _name

# %% hidden exercise=accumulate_gradients points=1 name=invalid_input_refused_before_any_backward
# hint: validate every micro-batch (and count N) before the first forward pass; a refused call leaves .grad as it was.
_model = ToyCausalLM(seed=15)
_good = make_batch([[1, 2, 3]], [1])
_bad_inputs = [
    [], (_good,), [_good, "batch"], [{**_good, "extra": _good["labels"]}],
    [{key: value for key, value in _good.items() if key != "labels"}],
    [_good, {**_good, "labels": _good["labels"].float()}], [_good, {**_good, "input_ids": _good["input_ids"].bool()}],
    [_good, {**_good, "attention_mask": _good["attention_mask"][:, :2]}], [{**_good, "labels": _good["labels"].tolist()}],
    [_good, {key: value[:, :1] for key, value in _good.items()}], [{key: value[:0] for key, value in _good.items()}],
    [{key: value[0] for key, value in _good.items()}], [make_batch([[1, 2, 3]], [3]), make_batch([[4, 5]], [2])],
]
for _parameter in _model.parameters():
    _parameter.grad = torch.full_like(_parameter, 7.0)
for _bad in _bad_inputs:
    try:
        accumulate_gradients(_model, _bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"accepted an invalid micro-batch list ({len(_bad) if hasattr(_bad, '__len__') else _bad})")
    assert all(_parameter.grad is not None and bool((_parameter.grad == 7.0).all()) for _parameter in _model.parameters()), (
        "a refused call changed .grad: validate before the first backward")
_valid = accumulate_gradients(_model, [_good, make_batch([[4, 5, 6, 7]], [1])])  # the valid call the cases above break
assert _valid["micro_batch_tokens"] == [2, 3] and _valid["supervised_tokens"] == 5, _valid
assert not all(bool((_parameter.grad == 7.0).all()) for _parameter in _model.parameters()), "the old .grad was kept"

# %% hidden exercise=accumulate_gradients points=1 name=inputs_mode_and_frozen_parameters_respected
# hint: do not write into the batches, do not switch train/eval mode, and report only parameters that require gradients.
_model = ToyCausalLM(seed=16, dtype=torch.float32)
_model.mix.requires_grad_(False)
_model.eval()
_batch = make_batch([[1, 2, 3, 4, 5], [6, 7, 8]], [1, 2])
_copy = {key: value.clone() for key, value in _batch.items()}
_result = accumulate_gradients(_model, [_batch])
assert not _model.training, "the model's mode changed"
assert all(torch.equal(_batch[key], _copy[key]) for key in _copy), "the micro-batch was modified"
assert list(_result["gradients"]) == ["embed", "head"] and _model.mix.grad is None
assert type(_result["loss"]) is float and type(_result["supervised_tokens"]) is int
assert all(type(count) is int for count in _result["micro_batch_tokens"])
assert _result["gradients"]["head"].dtype == torch.float32

# %% hidden exercise=accumulate_gradients points=2 name=generated_micro_batches_agree_with_reference
# hint: any split of any batch (rows and widths differ, some micro-batches unsupervised): the same loss, counts and gradients.
from hypothesis import strategies as st


@st.composite
def _micro_batch_lists(draw):
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        rows, width = draw(st.integers(1, 3)), draw(st.integers(2, 6))
        ids = torch.tensor(draw(st.lists(st.lists(st.integers(0, 12), min_size=width, max_size=width),
                                         min_size=rows, max_size=rows)), dtype=torch.long)
        keep = torch.tensor(draw(st.lists(st.lists(st.booleans(), min_size=width, max_size=width),
                                          min_size=rows, max_size=rows)))
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "labels": torch.where(keep, ids, torch.full_like(ids, -100))})
    return batches


def _supervised(batch):
    return int((batch["labels"][:, 1:] != -100).sum())


reference.agrees("accumulate_gradients",
                 st.tuples(st.integers(0, 30).map(lambda seed: ToyCausalLM(seed=seed)), _micro_batch_lists()),
                 cases=60, check_inputs=False, clauses={
    "several micro-batches": lambda model, batches: len(batches) > 1,
    "micro-batches of different widths": lambda model, batches: len({b["input_ids"].shape[1] for b in batches}) > 1,
    "micro-batches with different supervised counts": lambda model, batches: len(set(map(_supervised, batches))) > 1,
    "a micro-batch without supervision": lambda model, batches: any(_supervised(b) == 0 for b in batches),
    "a supervised label in column 0": lambda model, batches: any(bool((b["labels"][:, 0] != -100).any()) for b in batches),
})

# %% hidden exercise=accumulate_gradients points=2 name=generated_invalid_micro_batches_agree_with_reference
# hint: every broken micro-batch list is refused with ValueError, whichever micro-batch is broken and however.
from hypothesis import strategies as st

_defects = {
    "float_labels": lambda batch: {**batch, "labels": batch["labels"].double()},
    "bool_ids": lambda batch: {**batch, "input_ids": batch["input_ids"] > 3},
    "missing_mask": lambda batch: {key: value for key, value in batch.items() if key != "attention_mask"},
    "extra_key": lambda batch: {**batch, "position_ids": batch["input_ids"]},
    "short_mask": lambda batch: {**batch, "attention_mask": batch["attention_mask"][:, 1:]},
    "one_position": lambda batch: {key: value[:, :1] for key, value in batch.items()},
    "no_rows": lambda batch: {key: value[:0] for key, value in batch.items()},
    "one_dimensional": lambda batch: {key: value[0] for key, value in batch.items()},
    "list_labels": lambda batch: {**batch, "labels": batch["labels"].tolist()},
    "not_a_dict": lambda batch: list(batch.values()),
    "unsupervised": lambda batch: {**batch, "labels": torch.full_like(batch["labels"], -100)},
    "valid": lambda batch: batch,
}


from tools.course.grader.clauses import each_of


def _broken(kind, rng):
    """Valid micro-batches, or ones where one (or, for "unsupervised", every) micro-batch has this defect."""
    batches = [make_batch([[1, 2, 3, 4], [5, 6, 7, 8]], [1, 2]) for _ in range(rng.randint(1, 3))]
    where = rng.randrange(len(batches))
    if kind == "unsupervised":
        batches = [_defects[kind](batch) for batch in batches]
    else:
        batches[where] = _defects[kind](batches[where])
    return _MODEL, batches if rng.random() < 0.9 or kind == "valid" else tuple(batches)


_MODEL = ToyCausalLM(seed=3)


def _dict_batches(batches):
    return [b for b in batches if isinstance(b, dict)]


def _bad_tensor(batch, key):
    value = batch.get(key)
    return not isinstance(value, torch.Tensor) or value.is_floating_point() or value.dtype == torch.bool


reference.agrees("accumulate_gradients", each_of(sorted(_defects), _broken, variants=6), cases=6 * len(_defects),
                 check_inputs=False, clauses={
    "micro_batches a tuple": lambda model, batches: isinstance(batches, tuple),
    "a micro-batch that is not a dict": lambda model, batches: any(not isinstance(b, dict) for b in batches),
    "a missing key": lambda model, batches: any(
        set(b) < {"input_ids", "attention_mask", "labels"} for b in _dict_batches(batches)),
    "an extra key": lambda model, batches: any(set(b) - {"input_ids", "attention_mask", "labels"} for b in _dict_batches(
        batches)),
    "float labels": lambda model, batches: any(isinstance(b.get("labels"), torch.Tensor) and b["labels"].is_floating_point()
                                               for b in _dict_batches(batches)),
    "bool input_ids": lambda model, batches: any(isinstance(b.get("input_ids"), torch.Tensor) and b[
        "input_ids"].dtype == torch.bool for b in _dict_batches(batches)),
    "labels that are not a tensor": lambda model, batches: any(
        "labels" in b and not isinstance(b["labels"], torch.Tensor) for b in _dict_batches(batches)),
    "a mask of another shape": lambda model, batches: any(isinstance(b.get("attention_mask"), torch.Tensor) and b[
        "attention_mask"].shape != b["input_ids"].shape for b in _dict_batches(batches)),
    "fewer than two positions": lambda model, batches: any(
        b["input_ids"].dim() == 2 and b["input_ids"].shape[1] < 2 for b in _dict_batches(batches)),
    "no row": lambda model, batches: any(b["input_ids"].shape[0] == 0 for b in _dict_batches(batches)),
    "one-dimensional tensors": lambda model, batches: any(b["input_ids"].dim() == 1 for b in _dict_batches(batches)),
    "no supervised token in the whole batch (N == 0)": lambda model, batches: isinstance(batches, list) and all(
        isinstance(b, dict) and isinstance(b.get("labels"), torch.Tensor) and b["labels"].dim() == 2
        and not bool((b["labels"][:, 1:] != -100).any()) for b in batches),
    "the defect in a later micro-batch": lambda model, batches: isinstance(batches, list) and len(batches) > 1 and (
        not isinstance(batches[-1], dict) or set(batches[-1]) != {"input_ids", "attention_mask", "labels"}
        or _bad_tensor(batches[-1], "labels") or _bad_tensor(batches[-1], "input_ids")
        or batches[-1]["input_ids"].shape != batches[0]["input_ids"].shape),
})

# %% hidden exercise=effective_update_check points=1 name=every_failure_reported_once_in_order
# hint: keep every code that applies, in the documented order, each once, however many steps fail.
_observation = {"sha256_before": "same", "sha256_after": "same", "grad_norms": [0.0, float("nan"), 0.0, float("inf")],
                "loss_before": 1.0, "loss_after": 1.0, "planned_lr": [0.1, 0.1, 0.1, 0.1], "applied_lr": [0.1]}
_result = effective_update_check(_observation)
assert _result["failures"] == ["parameters_unchanged", "grad_norm_not_finite", "grad_norm_zero", "loss_not_lower",
                               "lr_schedule_not_applied"]
assert _result["effective"] is False and _result["steps"] == 4 and _result["loss_decrease"] == 0.0

# %% hidden exercise=effective_update_check points=1 name=changed_fingerprint_alone_is_not_an_update
# hint: weight decay changes tensors without any gradient: a new fingerprint with zero gradient norms and a flat loss is not an update.
_observation = {"sha256_before": "a1", "sha256_after": "b2", "grad_norms": [0.0, 0.0, 0.0], "loss_before": 3.0,
                "loss_after": 2.9999, "planned_lr": [0.01, 0.01, 0.01], "applied_lr": [0.01, 0.01, 0.01]}
_result = effective_update_check(_observation)
assert _result["failures"] == ["grad_norm_zero", "loss_not_lower"] and _result["effective"] is False
_real = effective_update_check({**_observation, "grad_norms": [0.3, 0.2, 0.1], "loss_after": 2.5})
assert _real == {"effective": True, "failures": [], "loss_decrease": 0.5, "steps": 3}

# %% hidden exercise=effective_update_check points=1 name=loss_threshold_is_inclusive
# hint: a decrease exactly equal to min_loss_decrease counts; anything less (including a rise) does not.
_base = {"sha256_before": "a", "sha256_after": "b", "grad_norms": [1.0], "planned_lr": [0.5], "applied_lr": [0.5]}
assert effective_update_check({**_base, "loss_before": 2.0, "loss_after": 1.75}, min_loss_decrease=0.25)["effective"]
assert effective_update_check({**_base, "loss_before": 2.0, "loss_after": 1.75}, min_loss_decrease=0.2500001)["failures"] == ["loss_not_lower"]
assert effective_update_check({**_base, "loss_before": 2.0, "loss_after": 2.5}, min_loss_decrease=0.25)["failures"] == ["loss_not_lower"]
assert effective_update_check({**_base, "loss_before": 5, "loss_after": 4})["loss_decrease"] == 1.0
assert type(effective_update_check({**_base, "loss_before": 5, "loss_after": 4})["loss_decrease"]) is float

# %% hidden exercise=effective_update_check points=1 name=non_finite_losses_never_count_as_lower
# hint: nan compares false with everything and inf minus a number is inf: check that both losses are finite.
_base = {"sha256_before": "a", "sha256_after": "b", "grad_norms": [1.0], "planned_lr": [0.5], "applied_lr": [0.5]}
for _before, _after in ((float("inf"), 2.0), (float("nan"), 2.0), (3.0, float("nan")), (3.0, float("-inf")),
                        (float("inf"), float("inf"))):
    _result = effective_update_check({**_base, "loss_before": _before, "loss_after": _after})
    assert _result["failures"] == ["loss_not_lower"], (_before, _after)

# %% hidden exercise=effective_update_check points=1 name=every_step_norm_is_checked
# hint: one bad step among good ones is enough; look at every gradient norm, not the first or the last.
_base = {"sha256_before": "a", "sha256_after": "b", "loss_before": 2.0, "loss_after": 1.0}
_rates = {"planned_lr": [0.1] * 4, "applied_lr": [0.1] * 4}
assert effective_update_check({**_base, **_rates, "grad_norms": [0.5, 0.0, 0.5, 0.5]})["failures"] == ["grad_norm_zero"]
assert effective_update_check({**_base, **_rates, "grad_norms": [0.5, float("nan"), 0.5, 0.5]})["failures"] == ["grad_norm_not_finite"]
assert effective_update_check({**_base, **_rates, "grad_norms": [0, 1, 2, 3]})["failures"] == ["grad_norm_zero"]
assert effective_update_check({**_base, **_rates, "grad_norms": [1, 2, 3, 4]})["effective"] is True

# %% hidden exercise=effective_update_check points=1 name=learning_rates_compared_with_relative_tolerance
# hint: a scheduler's arithmetic is not bit-exact: compare each step with math.isclose(rel_tol=1e-9); a missing or extra step is a mismatch.
_base = {"sha256_before": "a", "sha256_after": "b", "grad_norms": [1.0, 1.0], "loss_before": 2.0, "loss_after": 1.0}
assert effective_update_check({**_base, "planned_lr": [0.3, 0.6], "applied_lr": [0.1 + 0.2, 0.2 + 0.4]})["effective"] is True
assert effective_update_check({**_base, "planned_lr": [0.3, 0.6], "applied_lr": [0.3, 0.6 * (1 + 1e-6)]})["failures"] == ["lr_schedule_not_applied"]
assert effective_update_check({**_base, "planned_lr": [0.3, 0.6], "applied_lr": [0.3, 0.6, 0.6]})["failures"] == ["lr_schedule_not_applied"]
assert effective_update_check({**_base, "planned_lr": [0.0, 0.0], "applied_lr": [0.0, 1e-300]})["failures"] == ["lr_schedule_not_applied"]
assert effective_update_check({**_base, "planned_lr": [0.3, 0.6], "applied_lr": []})["failures"] == ["lr_schedule_not_applied"]

# %% hidden exercise=effective_update_check points=1 name=invalid_observations_refused
# hint: check every key and every value (bools are not numbers), the length of planned_lr and the threshold, before judging.
_good = {"sha256_before": "a", "sha256_after": "b", "grad_norms": [1.0], "loss_before": 2.0, "loss_after": 1.0,
         "planned_lr": [0.1], "applied_lr": [0.1]}
_bad_calls = [
    lambda: effective_update_check([("sha256_before", "a")]),
    lambda: effective_update_check({key: value for key, value in _good.items() if key != "applied_lr"}),
    lambda: effective_update_check({**_good, "sha256_before": ""}),
    lambda: effective_update_check({**_good, "sha256_after": 7}),
    lambda: effective_update_check({**_good, "grad_norms": []}),
    lambda: effective_update_check({**_good, "grad_norms": (1.0,)}),
    lambda: effective_update_check({**_good, "grad_norms": [True]}),
    lambda: effective_update_check({**_good, "grad_norms": ["1.0"]}),
    lambda: effective_update_check({**_good, "loss_before": None}),
    lambda: effective_update_check({**_good, "loss_after": False}),
    lambda: effective_update_check({**_good, "planned_lr": [0.1, 0.1]}),
    lambda: effective_update_check({**_good, "planned_lr": [-0.1]}),
    lambda: effective_update_check({**_good, "applied_lr": [float("nan")]}),
    lambda: effective_update_check({**_good, "applied_lr": [True]}),
    lambda: effective_update_check({**_good, "applied_lr": 0.1}),
    lambda: effective_update_check(_good, min_loss_decrease=0),
    lambda: effective_update_check(_good, min_loss_decrease=-1e-3),
    lambda: effective_update_check(_good, min_loss_decrease=float("inf")),
    lambda: effective_update_check(_good, min_loss_decrease=True),
    lambda: effective_update_check(_good, min_loss_decrease="0.001"),
]
_valid = effective_update_check({**_good, "loss_after": 1.9995}, min_loss_decrease=1e-3)  # the call the cases above break
assert _valid["failures"] == ["loss_not_lower"] and _valid["steps"] == 1, _valid
for _number, _call in enumerate(_bad_calls):
    try:
        _call()
    except ValueError:
        continue
    raise AssertionError(f"invalid input number {_number} was accepted")

# %% hidden exercise=effective_update_check points=2 name=generated_observations_agree_with_reference
# hint: any valid observation (ints or floats, nan or inf norms and losses, rates that drift slightly, lists of other lengths): the same verdict.
from hypothesis import strategies as st

_numbers = st.one_of(st.integers(-3, 3), st.floats(-4, 4, allow_nan=False), st.sampled_from([0.0, float("nan"), float("inf")]))
_rates = st.one_of(st.sampled_from([0.0, 0.1, 0.3, 0.1 + 0.2, 1e-3, 1e-3 * (1 + 1e-12), 1e-4, 1e-4 * (1 + 1e-6), 1e-12]),
                   st.integers(0, 2))


@st.composite
def _observations(draw):
    steps = draw(st.integers(1, 4))
    planned = draw(st.lists(_rates, min_size=steps, max_size=steps))
    drift = draw(st.sampled_from([1e-12, 1e-6]))
    applied = draw(st.one_of(st.just(list(planned)), st.lists(_rates, min_size=0, max_size=5),
                             st.just([rate * (1 + drift) if rate else 1e-12 * drift for rate in planned])))
    observation = {"sha256_before": draw(st.sampled_from(["a", "b"])), "sha256_after": draw(st.sampled_from(["a", "b"])),
                   "grad_norms": draw(st.lists(_numbers, min_size=steps, max_size=steps)),
                   "loss_before": draw(_numbers), "loss_after": draw(_numbers), "planned_lr": planned, "applied_lr": applied}
    if draw(st.booleans()):
        return (observation,)
    return (observation, draw(st.sampled_from([1e-3, 0.5, 1, 2.0, 1e-9])))


def _pairs(observation, *threshold):
    return list(zip(observation["applied_lr"], observation["planned_lr"]))


reference.agrees("effective_update_check", _observations(), cases=200, clauses={
    "a rate equal to its plan only within rounding": lambda *call: any(
        a != p and math.isclose(a, p, rel_tol=1e-9, abs_tol=0.0) for a, p in _pairs(*call)),
    "a rate off its plan by under 1e-9 absolutely but beyond 1e-9 relatively": lambda *call: any(
        abs(a - p) <= 1e-9 and not math.isclose(a, p, rel_tol=1e-9, abs_tol=0.0) for a, p in _pairs(*call)),
    "applied rates of another length": lambda o, *t: len(o["applied_lr"]) != len(o["planned_lr"]),
    "a NaN or infinite norm": lambda o, *t: any(not math.isfinite(n) for n in o["grad_norms"]),
    "a zero norm": lambda o, *t: any(n == 0 for n in o["grad_norms"]),
    "a NaN or infinite loss": lambda o, *t: not (math.isfinite(o["loss_before"]) and math.isfinite(o["loss_after"])),
    "unchanged fingerprints": lambda o, *t: o["sha256_before"] == o["sha256_after"],
    "a custom min_loss_decrease": lambda o, *t: bool(t),
    "int losses and norms": lambda o, *t: type(o["loss_before"]) is int and any(type(n) is int for n in o["grad_norms"]),
})

# %% hidden exercise=effective_update_check points=2 name=generated_invalid_observations_agree_with_reference
# hint: one broken field anywhere (a bool, a string, a missing key, a wrong length, a bad threshold, a bad rate at any step, not only the last): ValueError, like the reference.
from hypothesis import strategies as st

_fields = {"sha256_before": ["", None, 1, True], "sha256_after": ["", b"ab", 0], "grad_norms": [[], None, [True], ["x"], (1.0,), 1.0],
           "loss_before": [None, True, "1", [1.0]], "loss_after": [False, "nan", None],
           "planned_lr": [[-1.0], [True], [float("inf")], [0.1, 0.1, 0.1], None, [float("nan"), 0.2], [-0.1, 0.2]],
           "applied_lr": [[float("nan")], [-0.5], ["0.1"], 0.1, None, [True, 0.2], [0.1, float("inf")],
                          [float("inf"), 0.1, 0.2], [0.1, -1.0, 0.2], [float("nan"), 0.2]],
           "min_loss_decrease": [0, -1, True, float("nan"), float("inf"), "1e-3", None], "valid": [None]}


@st.composite
def _broken_observation(draw):
    observation = {"sha256_before": "a", "sha256_after": "b", "grad_norms": [1.0, 2.0], "loss_before": 2.0,
                   "loss_after": 1.0, "planned_lr": [0.1, 0.2], "applied_lr": [0.1, 0.2]}
    field = draw(st.sampled_from(sorted(_fields)))
    value = draw(st.sampled_from(_fields[field]))
    if field == "valid":
        return (observation,) if draw(st.booleans()) else (observation, draw(st.sampled_from([1e-3, 0.5, 2])))
    if field == "min_loss_decrease":
        return (observation, value)
    if draw(st.integers(0, 5)) == 0:
        del observation[field]
    else:
        observation[field] = value
    return (observation,)


from tools.course.grader.clauses import is_bool, not_a_number, not_finite, values

_keys = ["sha256_before", "sha256_after", "grad_norms", "loss_before", "loss_after", "planned_lr", "applied_lr"]


def _bad_rates(rates):
    return not isinstance(rates, list) or any(is_bool(r) or not_a_number(r) or not_finite(r) or r < 0 for r in rates)


reference.agrees("effective_update_check", _broken_observation(), cases=150, clauses={
    "a missing key": lambda o, *t: any(k not in o for k in _keys),
    "a bad fingerprint": lambda o, *t: any(k in o and (not isinstance(o[k], str) or not o[k]) for k in _keys[:2]),
    "grad_norms not a non-empty list of numbers": lambda o, *t: "grad_norms" in o and (
        not isinstance(o["grad_norms"], list) or not o["grad_norms"] or any(
            is_bool(n) or not_a_number(n) for n in o["grad_norms"])),
    "a loss that is a bool": lambda o, *t: any(is_bool(o.get(k)) for k in ("loss_before", "loss_after")),
    "a loss that is not a number": lambda o, *t: any(k in o and not_a_number(o[k]) for k in ("loss_before", "loss_after")),
    "a bad planned rate list": lambda o, *t: "planned_lr" in o and _bad_rates(o["planned_lr"]),
    "a bad applied rate list": lambda o, *t: "applied_lr" in o and _bad_rates(o["applied_lr"]),
    "a bool applied rate": lambda o, *t: any(is_bool(r) for r in values(o.get("applied_lr"))),
    "a bad rate before the last step": lambda o, *t: any(
        isinstance(o.get(k), list) and _bad_rates(o[k][:-1]) for k in ("planned_lr", "applied_lr")),
    "an infinite applied rate": lambda o, *t: any(not_finite(r) and r > 0 for r in values(o.get("applied_lr"))
                                                  if not is_bool(r) and not not_a_number(r)),
    "planned_lr of another length than grad_norms": lambda o, *t: isinstance(o.get("planned_lr"), list) and isinstance(
        o.get("grad_norms"), list) and len(o["planned_lr"]) != len(o["grad_norms"]),
    "a min_loss_decrease that is a bool": lambda o, *t: bool(t) and is_bool(t[0]),
    "a min_loss_decrease <= 0": lambda o, *t: bool(t) and not is_bool(t[0]) and isinstance(t[0], (int, float)) and t[0] <= 0,
    "an infinite min_loss_decrease": lambda o, *t: bool(t) and not_finite(t[0]) and t[0] == t[0],
    "a NaN min_loss_decrease": lambda o, *t: bool(t) and not_finite(t[0]) and t[0] != t[0],
    "a min_loss_decrease that is not a number": lambda o, *t: bool(t) and not_a_number(t[0]),
})

# %% hidden exercise=isolated_evaluation points=1 name=forward_runs_in_eval_mode_without_gradients
# hint: call model.eval() and run every forward pass under torch.no_grad().
_model = ToyCausalLM(seed=21, count_modes=True)  # modes[training, grad enabled] counts the forward passes
_model.train()
isolated_evaluation(_model, [make_batch([[1, 2, 3]], [1]), make_batch([[4, 5, 6, 7]], [2])],
                    torch.optim.SGD(_model.parameters(), lr=0.1), ["x"], ["y"])
assert _model.modes.tolist() == [[2, 0], [0, 0]], _model.modes.tolist()

# %% hidden exercise=isolated_evaluation points=1 name=mode_is_restored_either_way
# hint: remember model.training before switching to eval mode and restore exactly that afterwards.
_batches = [make_batch([[1, 2, 3, 4]], [1])]
_model = ToyCausalLM(seed=22)
_optimizer = torch.optim.SGD(_model.parameters(), lr=0.1)
_model.train()
_result = isolated_evaluation(_model, _batches, _optimizer, [], ["x"])
assert _model.training is True, "a model evaluated during training must go back to train mode"
assert _result["supervised_tokens"] == 3 and _result["state_unchanged"] is True, _result
_model.eval()
isolated_evaluation(_model, _batches, _optimizer, [], [])
assert _model.training is False, "a model that was in eval mode must stay in eval mode"

# %% hidden exercise=isolated_evaluation points=1 name=loss_is_token_weighted_over_all_batches
# hint: add the summed token losses of all batches and divide once by the total supervised tokens; do not average batch means.
_model = ToyCausalLM(seed=23, dropout=0.4)
_model.train()
_batches = [make_batch([[1, 2, 3, 4, 5, 6, 7, 8]], [1]), make_batch([[9, 10, 11]], [2])]
_expected = mean_token_loss(_model, concat_batches(_batches))
_result = isolated_evaluation(_model, _batches, torch.optim.SGD(_model.parameters(), lr=0.1), [], [])
assert _result["supervised_tokens"] == 8
assert abs(_result["loss"] - _expected) < 1e-12
assert type(_result["loss"]) is float and type(_result["supervised_tokens"]) is int

# %% hidden exercise=isolated_evaluation points=1 name=side_effects_of_the_forward_pass_are_reported
# hint: compare full snapshots taken before and after (deep copies: the optimizer updates its tensors in place); buffers are model state, learning rates and moments are optimizer state.
_batches = [make_batch([[1, 2, 3, 4]], [1])]
_counting = ToyCausalLM(seed=24, count_calls=True)
_result = isolated_evaluation(_counting, _batches, torch.optim.SGD(_counting.parameters(), lr=0.1), [], [])
assert _result["state_unchanged"] is False and _result["optimizer_unchanged"] is True and _result["isolated"] is False
_plain = ToyCausalLM(seed=24)
_optimizer = torch.optim.AdamW(_plain.parameters(), lr=0.1)
_plain.on_forward = SchedulerInForward(_optimizer)
_result = isolated_evaluation(_plain, _batches, _optimizer, [], [])
assert _result["optimizer_unchanged"] is False and _result["state_unchanged"] is True and _result["isolated"] is False
from tools.chapters.sft_training_loop import OptimizerStepInForward

_stepping = ToyCausalLM(seed=24)
_optimizer = torch.optim.AdamW(_stepping.parameters(), lr=0.1)
_logits = _stepping(input_ids=torch.tensor([[1, 2, 3, 4]])).logits
F.cross_entropy(_logits[0, :-1], torch.tensor([2, 3, 4])).backward()
_optimizer.step()
_stepping.on_forward = OptimizerStepInForward(_optimizer)
_result = isolated_evaluation(_stepping, _batches, _optimizer, [], [])
assert _result["optimizer_unchanged"] is False and _result["state_unchanged"] is False, (
    "an optimizer step hidden in the forward pass changes parameters and moments in place")
_stat = ToyCausalLM(seed=24, running_stat=True)
_stat.train()
_result = isolated_evaluation(_stat, _batches, torch.optim.SGD(_stat.parameters(), lr=0.1), [], [])
assert _result == {**_result, "state_unchanged": True, "optimizer_unchanged": True, "leaked": [], "isolated": True}
assert not bool(_stat.stat.abs().sum()), "an eval-mode forward must not update training statistics"

# %% hidden exercise=isolated_evaluation points=1 name=gradients_and_optimizer_state_left_as_found
# hint: evaluation neither clears nor adds gradients, and the optimizer's step counts and moments stay bit-identical.
_model = ToyCausalLM(seed=25)
_optimizer = torch.optim.AdamW(_model.parameters(), lr=0.05)
_train = make_batch([[1, 2, 3, 4, 5]], [1])
_logits = _model(input_ids=_train["input_ids"]).logits
F.cross_entropy(_logits[:, :-1].reshape(-1, 13), _train["labels"][:, 1:].reshape(-1)).backward()
_optimizer.step()
_model.mix.grad = None
_grads = {name: None if p.grad is None else p.grad.clone() for name, p in _model.named_parameters()}
_state = copy.deepcopy(_optimizer.state_dict())
_result = isolated_evaluation(_model, [make_batch([[6, 7, 8]], [1])], _optimizer, ["t"], ["e"])
assert _result["state_unchanged"] is True and _result["optimizer_unchanged"] is True and _result["isolated"] is True
for _name, _parameter in _model.named_parameters():
    assert (_grads[_name] is None and _parameter.grad is None) or torch.equal(_grads[_name], _parameter.grad), _name
assert all(torch.equal(_state["state"][key]["exp_avg"], value["exp_avg"])
           for key, value in _optimizer.state_dict()["state"].items())

# %% hidden exercise=isolated_evaluation points=1 name=leak_audit_is_distinct_and_sorted
# hint: the leaked hashes are the set intersection of the two lists, each once, sorted; empty lists are allowed.
_model = ToyCausalLM(seed=26)
_optimizer = torch.optim.SGD(_model.parameters(), lr=0.1)
_batches = [make_batch([[1, 2, 3]], [1])]
_train = ["f3", "a1", "c9", "a1", "f3", "zz"]
_eval = ["c9", "f3", "f3", "b0", "a1"]
_result = isolated_evaluation(_model, _batches, _optimizer, _train, _eval)
assert _result["leaked"] == ["a1", "c9", "f3"] and _result["isolated"] is False
assert _train == ["f3", "a1", "c9", "a1", "f3", "zz"] and _eval == ["c9", "f3", "f3", "b0", "a1"]
assert isolated_evaluation(_model, _batches, _optimizer, [], ["c9"])["leaked"] == []
assert isolated_evaluation(_model, _batches, _optimizer, ["C9"], ["c9"])["isolated"] is True

# %% hidden exercise=isolated_evaluation points=1 name=invalid_inputs_refused_before_evaluating
# hint: check the batches, the optimizer and both hash lists before the first forward pass.
_model = ToyCausalLM(seed=27, count_calls=True)  # the buffer `calls` counts the forward passes
_optimizer = torch.optim.SGD(_model.parameters(), lr=0.1)
_good = make_batch([[1, 2, 3]], [1])
_bad_calls = [
    lambda: isolated_evaluation(_model, [], _optimizer, [], []),
    lambda: isolated_evaluation(_model, [_good, make_batch([[1, 2, 3]], [3])][1:], _optimizer, [], []),
    lambda: isolated_evaluation(_model, [_good, {**_good, "labels": _good["labels"].float()}], _optimizer, [], []),
    lambda: isolated_evaluation(_model, [_good, {**_good, "attention_mask": None}], _optimizer, [], []),
    lambda: isolated_evaluation(_model, (_good,), _optimizer, [], []),
    lambda: isolated_evaluation(_model, [_good], None, [], []),
    lambda: isolated_evaluation(_model, [_good], {"lr": 0.1}, [], []),
    lambda: isolated_evaluation(_model, [_good], _optimizer, ["a", ""], []),
    lambda: isolated_evaluation(_model, [_good], _optimizer, [], ["a", 1]),
    lambda: isolated_evaluation(_model, [_good], _optimizer, "abc", []),
    lambda: isolated_evaluation(_model, [_good], _optimizer, [], ("a",)),
]
for _number, _call in enumerate(_bad_calls):
    try:
        _call()
    except ValueError:
        continue
    raise AssertionError(f"invalid input number {_number} was accepted")
assert int(_model.calls) == 0, "a refused call ran the model: validate everything first"
_valid = isolated_evaluation(_model, [_good], _optimizer, ["b", "a"], ["a", "c", "b"])  # the call the cases above break
assert _valid["leaked"] == ["a", "b"] and _valid["isolated"] is False and _valid["supervised_tokens"] == 2, _valid

# %% hidden exercise=isolated_evaluation points=2 name=generated_evaluations_agree_with_reference
# hint: any model (with or without dropout, trained a step or not), batches and hash lists, valid or not: the same report or the same error.
from hypothesis import strategies as st


@st.composite
def _evaluations(draw):
    model = ToyCausalLM(seed=draw(st.integers(0, 20)), dropout=draw(st.sampled_from([0.0, 0.3])))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    if draw(st.booleans()):
        model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
        optimizer.step()
    model.train(draw(st.booleans()))
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        rows, width = draw(st.integers(1, 3)), draw(st.integers(2, 5))
        ids = torch.tensor(draw(st.lists(st.lists(st.integers(0, 12), min_size=width, max_size=width),
                                         min_size=rows, max_size=rows)), dtype=torch.long)
        keep = torch.tensor(draw(st.lists(st.lists(st.booleans(), min_size=width, max_size=width),
                                          min_size=rows, max_size=rows)))
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "labels": torch.where(keep, ids, torch.full_like(ids, -100))})
    hashes = st.lists(st.sampled_from(["a", "b", "c", "d", ""]), max_size=5)
    return model, batches, optimizer, draw(hashes), draw(hashes)


reference.agrees("isolated_evaluation", _evaluations(), cases=60, check_inputs=False, clauses={
    "a model in eval mode": lambda model, *rest: not model.training,
    "a model with dropout in train mode": lambda model, *rest: model.training and any(
        isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()),
    "an optimizer with state": lambda model, batches, optimizer, *rest: bool(optimizer.state),
    "a leaked hash": lambda model, batches, optimizer, train, evaluated: bool(set(train) & set(evaluated) - {""}),
    "an empty hash (refused)": lambda model, batches, optimizer, train, evaluated: "" in train + evaluated,
    "no supervised position at all (refused)": lambda model, batches, *rest: all(
        not bool((b["labels"][:, 1:] != -100).any()) for b in batches),
    "several batches": lambda model, batches, *rest: len(batches) > 1,
})
