# %% hidden exercise=pairwise_reward_loss points=1 name=reads_last_token_for_left_right_and_inner_padding
# hint: the reward is the score at the last 1 of each mask row, wherever the padding sits; never the last column and never the count of ones minus one.
_chosen = torch.tensor([[0.5, 2.0, 9.0, 9.0], [9.0, 9.0, 0.1, 0.3], [0.2, 9.0, 0.4, 1.5]], dtype=torch.float64)
_chosen_mask = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 1]])
_rejected = torch.tensor([[0.1, 9.0, 9.0], [0.7, 0.2, -1.0], [8.0, 0.0, 0.0]], dtype=torch.float64)
_rejected_mask = torch.tensor([[True, False, False], [True, True, True], [True, False, False]])
_out = pairwise_reward_loss(_chosen, _chosen_mask, _rejected, _rejected_mask)
assert _out["positions"] == {"chosen": [1, 3, 3], "rejected": [0, 2, 0]}
assert all(type(position) is int for side in ("chosen", "rejected") for position in _out["positions"][side])
assert torch.equal(_out["chosen_rewards"], torch.tensor([2.0, 0.3, 1.5], dtype=torch.float64))
assert torch.equal(_out["rejected_rewards"], torch.tensor([0.1, -1.0, 8.0], dtype=torch.float64))
assert math.isclose(_out["accuracy"], 2 / 3)

# %% hidden exercise=pairwise_reward_loss points=1 name=loss_is_the_mean_negative_log_sigmoid
# hint: loss = mean over pairs of -log sigmoid(chosen reward - rejected reward), not a sum and not its opposite sign.
_chosen = torch.tensor([[1.0], [0.0], [-2.0], [3.0]], dtype=torch.float64)
_rejected = torch.tensor([[0.0], [0.5], [-2.0], [1.0]], dtype=torch.float64)
_ones = torch.ones(4, 1, dtype=torch.long)
_out = pairwise_reward_loss(_chosen, _ones, _rejected, _ones)
_expected = sum(math.log1p(math.exp(-d)) for d in (1.0, -0.5, 0.0, 2.0)) / 4
assert _out["loss"].dim() == 0 and _out["loss"].dtype == torch.float64
assert math.isclose(float(_out["loss"]), _expected, rel_tol=1e-12)
assert _out["accuracy"] == 0.5, "a tie is not a correct ranking"

# %% hidden exercise=pairwise_reward_loss points=1 name=margins_are_subtracted_and_ignored_by_accuracy
# hint: with margins the loss uses chosen - rejected - margin; the accuracy still compares the two rewards alone.
_chosen = torch.tensor([[0.0, 2.0], [0.0, 1.0]], dtype=torch.float32)
_rejected = torch.tensor([[1.0], [0.5]], dtype=torch.float32)
_mask_c = torch.tensor([[1, 1], [1, 1]])
_mask_r = torch.tensor([[1], [1]])
_out = pairwise_reward_loss(_chosen, _mask_c, _rejected, _mask_r, torch.tensor([1.5, -0.5]))
_expected = (math.log1p(math.exp(0.5)) + math.log1p(math.exp(-1.0))) / 2
assert math.isclose(float(_out["loss"]), _expected, rel_tol=1e-6)
assert _out["accuracy"] == 1.0 and _out["loss"].dtype == torch.float32
_plain = pairwise_reward_loss(_chosen, _mask_c, _rejected, _mask_r)
assert math.isclose(float(_plain["loss"]), (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-0.5))) / 2, rel_tol=1e-6)

# %% hidden exercise=pairwise_reward_loss points=1 name=extreme_differences_stay_finite
# hint: -log sigmoid(d) must be computed stably: a difference of -1000 gives a loss of 1000, and +1000 gives 0, in float32 too.
for _dtype in (torch.float32, torch.float64):
    _chosen = torch.tensor([[-1000.0], [1000.0]], dtype=_dtype)
    _rejected = torch.zeros(2, 1, dtype=_dtype)
    _out = pairwise_reward_loss(_chosen, torch.ones(2, 1, dtype=torch.long), _rejected, torch.ones(2, 1, dtype=torch.long))
    assert math.isfinite(float(_out["loss"])) and math.isclose(float(_out["loss"]), 500.0, rel_tol=1e-5)

# %% hidden exercise=pairwise_reward_loss points=1 name=gradient_reaches_only_the_read_positions
# hint: the loss keeps its graph to the scores: the read position gets -sigmoid(-d)/B (chosen) and +sigmoid(-d)/B (rejected), every other position 0.
from tools.course.grader.boundary import backward_through

_chosen = torch.tensor([[0.3, 1.0, 7.0], [5.0, 0.2, 0.4]], dtype=torch.float64, requires_grad=True)
_rejected = torch.tensor([[0.5, -0.5], [0.1, 6.0]], dtype=torch.float64, requires_grad=True)
_out = backward_through(pairwise_reward_loss, _chosen, torch.tensor([[1, 1, 0], [0, 1, 1]]), _rejected,
                        torch.tensor([[1, 1], [1, 0]]), select=["loss"], reduce=None)
_d = [1.0 - (-0.5), 0.4 - 0.1]
_expected_chosen = torch.zeros(2, 3, dtype=torch.float64)
_expected_chosen[0, 1], _expected_chosen[1, 2] = -1 / (1 + math.exp(_d[0])) / 2, -1 / (1 + math.exp(_d[1])) / 2
assert torch.allclose(_chosen.grad, _expected_chosen, atol=1e-12)
_expected_rejected = torch.zeros(2, 2, dtype=torch.float64)
_expected_rejected[0, 1], _expected_rejected[1, 0] = 1 / (1 + math.exp(_d[0])) / 2, 1 / (1 + math.exp(_d[1])) / 2
assert torch.allclose(_rejected.grad, _expected_rejected, atol=1e-12)

# %% hidden exercise=pairwise_reward_loss points=1 name=invariant_to_a_shared_shift_and_inputs_untouched
# hint: adding one constant to every score changes neither the loss nor the accuracy; the inputs are not modified.
_chosen = torch.tensor([[0.2, 0.9], [1.3, -0.4]], dtype=torch.float64)
_rejected = torch.tensor([[0.1, 0.4, 0.0], [0.8, 2.1, 2.0]], dtype=torch.float64)
_mc, _mr = torch.tensor([[1, 1], [1, 0]]), torch.tensor([[0, 1, 1], [1, 1, 0]])
_copies = [t.clone() for t in (_chosen, _rejected, _mc, _mr)]
_base = pairwise_reward_loss(_chosen, _mc, _rejected, _mr)
_shifted = pairwise_reward_loss(_chosen + 3.0, _mc, _rejected + 3.0, _mr)
assert math.isclose(float(_base["loss"]), (math.log1p(math.exp(-0.9)) + math.log1p(math.exp(0.8))) / 2, rel_tol=1e-12)
assert math.isclose(float(_base["loss"]), float(_shifted["loss"]), rel_tol=1e-12)
assert _base["accuracy"] == _shifted["accuracy"] == 0.5
assert all(torch.equal(a, b) for a, b in zip((_chosen, _rejected, _mc, _mr), _copies))

# %% hidden exercise=pairwise_reward_loss points=1 name=rm_invalid_inputs_refused_valid_ones_scored
# hint: check both score tensors (finite floats, same dtype and batch), both masks (0/1 bool or integer, a 1 in every row) and the margins before reading anything.
_c = torch.tensor([[0.5, 1.0]], dtype=torch.float64)
_r = torch.tensor([[0.0, 0.25, 0.75]], dtype=torch.float64)
_mc, _mr = torch.tensor([[1, 1]]), torch.tensor([[1, 1, 0]])
_good = pairwise_reward_loss(_c, _mc, _r, _mr)
assert torch.equal(_good["chosen_rewards"], torch.tensor([1.0], dtype=torch.float64)) and _good["accuracy"] == 1.0
_bad_calls = [
    (_c, _mc.float(), _r, _mr, None), (_c, _mc, _r, _mr * 3, None), (_c, torch.tensor([[0, 0]]), _r, _mr, None),
    (_c, _mc, _r, torch.tensor([[0, 0, 0]]), None), (_c, _mc[:, :1], _r, _mr, None), (_c, _mc, _r.float(), _mr, None),
    (_c, _mc, _r.repeat(2, 1), _mr.repeat(2, 1), None), (_c.long(), _mc, _r.long(), _mr, None), (_c[0], _mc[0], _r, _mr, None),
    (_c * float("nan"), _mc, _r, _mr, None), (_c, _mc, _r - float("inf"), _mr, None), (_c, _mc, _r, _mr, torch.tensor([1])),
    (_c, _mc, _r, _mr, torch.tensor([0.5, 0.5], dtype=torch.float64)), (_c, _mc, _r, _mr, torch.tensor([float("nan")])),
    (_c, _mc, _r, _mr, 0.5), (_c.tolist(), _mc, _r, _mr, None), (torch.zeros(1, 0, dtype=torch.float64), _mc[:, :0], _r, _mr, None),
]
for _args in _bad_calls:
    try:
        pairwise_reward_loss(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=pairwise_reward_loss points=2 name=rm_generated_pairs_agree_with_reference
# hint: any batch, lengths, padding side and margins: the same loss, rewards, accuracy and positions.
from hypothesis import strategies as st


@st.composite
def _pairs(draw):
    batch = draw(st.integers(1, 4))

    def side():
        time = draw(st.integers(1, 6))
        rows = []
        for _ in range(batch):
            length = draw(st.integers(1, time))
            start = draw(st.sampled_from([0, time - length, draw(st.integers(0, time - length))]))
            row = [1 if start <= t < start + length else 0 for t in range(time)]
            if length >= 3 and draw(st.booleans()):  # a gap inside the row: the read position is still its last 1
                row[start + 1] = 0
            rows.append(row)
        scores = draw(st.lists(st.lists(st.floats(-8.0, 8.0), min_size=time, max_size=time), min_size=batch,
                               max_size=batch))
        return torch.tensor(scores, dtype=torch.float64), torch.tensor(rows, dtype=draw(st.sampled_from([torch.long, torch.bool])))

    chosen, chosen_mask = side()
    rejected, rejected_mask = side()
    twist = draw(st.sampled_from(["none", "none", "tie", "far"]))
    read_c = [max(t for t, v in enumerate(row) if v) for row in chosen_mask.long().tolist()]
    read_r = [max(t for t, v in enumerate(row) if v) for row in rejected_mask.long().tolist()]
    if twist == "tie":  # equal rewards for the first pair: not a correct ranking
        chosen[0, read_c[0]] = rejected[0, read_r[0]]
    elif twist == "far":  # a difference of +-1000: the loss must stay finite
        chosen[0, read_c[0]] = draw(st.sampled_from([-1000.0, 1000.0]))
    margins = draw(st.one_of(st.none(), st.lists(st.floats(-2.0, 2.0), min_size=batch, max_size=batch).map(
        lambda values: torch.tensor(values, dtype=torch.float64))))
    return chosen, chosen_mask, rejected, rejected_mask, margins


def _read(scores, mask):
    return [float(scores[index, max(t for t, v in enumerate(row) if v)]) for index, row in enumerate(mask.long().tolist())]


def _padding(mask, side):
    rows = mask.long().tolist()
    return any(row[0] == 0 for row in rows) if side == "left" else any(row[-1] == 0 for row in rows)


reference.agrees("pairwise_reward_loss", _pairs(), cases=80, clauses={
    "padding on the left of a chosen row": lambda c, cm, r, rm, mg: _padding(cm, "left"),
    "padding on the right of a chosen row": lambda c, cm, r, rm, mg: _padding(cm, "right"),
    "padding on the left of a rejected row": lambda c, cm, r, rm, mg: _padding(rm, "left"),
    "padding on the right of a rejected row": lambda c, cm, r, rm, mg: _padding(rm, "right"),
    "chosen and rejected of different lengths": lambda c, cm, r, rm, mg: c.shape[1] != r.shape[1],
    "a bool mask": lambda c, cm, r, rm, mg: torch.bool in (cm.dtype, rm.dtype),
    "margins given": lambda c, cm, r, rm, mg: mg is not None,
    "no margins": lambda c, cm, r, rm, mg: mg is None,
    "a single pair": lambda c, cm, r, rm, mg: c.shape[0] == 1,
    "a gap inside a row": lambda c, cm, r, rm, mg: any(
        (lambda ones: ones[-1] - ones[0] + 1 > len(ones))([t for t, v in enumerate(row) if v]) for row in cm.long().tolist()),
    "a row read at its first column": lambda c, cm, r, rm, mg: any(row[1:] == [0] * (len(row) - 1)
                                                                 for row in rm.long().tolist()),
    "a tie between a chosen and a rejected reward": lambda c, cm, r, rm, mg: any(
        a == b for a, b in zip(_read(c, cm), _read(r, rm))),
    "a reward difference of 1000": lambda c, cm, r, rm, mg: any(abs(a - b) >= 990 for a, b in zip(_read(c, cm), _read(r, rm))),
})

# %% hidden exercise=pairwise_reward_loss points=2 name=rm_generated_defects_agree_with_reference
# hint: a valid batch gets the reference's result; a batch with one defect (a mask row without a 1, a float mask, a dtype or batch mismatch, a non-finite score, bad margins) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "empty_row": lambda a: {**a, "chosen_mask": torch.zeros_like(a["chosen_mask"])},
    "float_mask": lambda a: {**a, "rejected_mask": a["rejected_mask"].double()},
    "mask_two": lambda a: {**a, "chosen_mask": a["chosen_mask"] * 2},
    "mask_shape": lambda a: {**a, "rejected_mask": a["rejected_mask"][:, 1:]},
    "dtype": lambda a: {**a, "rejected": a["rejected"].float()},
    "batch": lambda a: {**a, "rejected": torch.cat([a["rejected"], a["rejected"]]),
                        "rejected_mask": torch.cat([a["rejected_mask"], a["rejected_mask"]])},
    "nan": lambda a: {**a, "chosen": a["chosen"] * float("nan")},
    "nan_on_padding": lambda a: {**a, "chosen": _put(a["chosen"], (0, 0), float("nan")),
                                 "chosen_mask": _put(a["chosen_mask"], (0, 0), 0)},
    "inf_on_read_position": lambda a: {**a, "rejected": _put(a["rejected"], (-1, -1), -float("inf"))},
    "nan_margin_last": lambda a: {**a, "margins": _put(torch.zeros(a["chosen"].shape[0], dtype=torch.float64), -1,
                                                       float("nan"))},
    "margins_shape": lambda a: {**a, "margins": torch.zeros(a["chosen"].shape[0] + 1, dtype=torch.float64)},
    "margins_inf": lambda a: {**a, "margins": torch.full((a["chosen"].shape[0],), float("inf"), dtype=torch.float64)},
    "int_scores": lambda a: {**a, "chosen": a["chosen"].long(), "rejected": a["rejected"].long()},
    "list_scores": lambda a: {**a, "chosen": a["chosen"].tolist()},
    "margins_list": lambda a: {**a, "margins": [0.0] * a["chosen"].shape[0]},
}
from tools.course.grader.clauses import each_of


def _tensor(value):
    return isinstance(value, torch.Tensor)


def _put(tensor, where, value):
    changed = tensor.clone()
    changed[where] = value
    return changed


def _broken(case, rng):
    batch, time = rng.randint(1, 3), rng.randint(2, 4)
    args = {"chosen": torch.linspace(-1, 2, batch * time, dtype=torch.float64).reshape(batch, time),
            "chosen_mask": torch.ones(batch, time, dtype=torch.long),
            "rejected": torch.linspace(1, -1, batch * time, dtype=torch.float64).reshape(batch, time),
            "rejected_mask": torch.ones(batch, time, dtype=torch.long), "margins": None}
    if case[0] == "valid" and case[1] % 2:  # valid margins too
        args["margins"] = torch.linspace(-0.5, 0.5, batch, dtype=torch.float64)
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["chosen"], args["chosen_mask"], args["rejected"], args["rejected_mask"], args["margins"]


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("pairwise_reward_loss", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "a mask row without a 1": lambda c, cm, r, rm, mg: bool((cm == 0).all(dim=1).any()),
    "a float mask": lambda c, cm, r, rm, mg: rm.is_floating_point(),
    "a mask value other than 0 and 1": lambda c, cm, r, rm, mg: bool(((cm != 0) & (cm != 1)).any()),
    "a mask of another shape than its scores": lambda c, cm, r, rm, mg: rm.shape != r.shape,
    "rejected scores of another dtype": lambda c, cm, r, rm, mg: c.is_floating_point() and r.dtype != c.dtype,
    "chosen and rejected batches that differ": lambda c, cm, r, rm, mg: r.shape[0] != c.shape[0],
    "a NaN score": lambda c, cm, r, rm, mg: bool(c.isnan().all()),
    "a NaN score on a padding position": lambda c, cm, r, rm, mg: bool((c.isnan() & (cm == 0)).any()),
    "a -inf score where the reward is read": lambda c, cm, r, rm, mg: bool(r.isinf()[-1, -1]),
    "a NaN margin for the last pair": lambda c, cm, r, rm, mg: _tensor(mg) and mg.dim() == 1 and bool(mg[-1].isnan()),
    "margins of another length": lambda c, cm, r, rm, mg: _tensor(mg) and tuple(mg.shape) != (c.shape[0],),
    "infinite margins": lambda c, cm, r, rm, mg: _tensor(mg) and bool(mg.isinf().all()),
    "integer scores": lambda c, cm, r, rm, mg: not c.is_floating_point(),
    "scores that are a list": lambda c, cm, r, rm, mg: isinstance(c, list),
    "margins that are a list": lambda c, cm, r, rm, mg: isinstance(mg, list),
})

# %% hidden exercise=calibrate_temperature points=1 name=fits_lowest_nll_with_smallest_on_ties
# hint: evaluate the NLL of every grid temperature and keep the lowest; when several are equally low, keep the smallest, whatever the grid's order.
_margins, _labels = [2.0, 1.0, -1.5, 3.0], [True, False, False, True]
_nll = lambda t: sum(math.log1p(math.exp(-m / t)) if y else math.log1p(math.exp(m / t)) for m, y in zip(_margins, _labels)) / 4
_grid = [4.0, 0.5, 2.0, 1.0, 3.0]
_best = min(sorted(_grid), key=_nll)
_out = calibrate_temperature(_margins, _labels, _grid)
assert _out["temperature"] == _best
assert math.isclose(_out["nll_after"], _nll(_out["temperature"]), rel_tol=1e-12)
assert math.isclose(_out["nll_before"], _nll(1.0), rel_tol=1e-12)
_tie = calibrate_temperature([0.0, 0.0, 0.0], [True, True, False], [2, 7.5, 0.25, 1])
assert _tie["temperature"] == 0.25 and type(_tie["temperature"]) is float

# %% hidden exercise=calibrate_temperature points=1 name=before_means_temperature_one
# hint: the "before" figures use temperature 1 even when 1 is not in the grid.
_out = calibrate_temperature([3.0, -2.0, 1.0], [False, False, True], [5.0], n_bins=2)
assert _out["temperature"] == 5.0
assert math.isclose(_out["nll_before"], (math.log1p(math.exp(3.0)) + math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 3,
                    rel_tol=1e-12)
_p = [1 / (1 + math.exp(-3.0)), 1 / (1 + math.exp(2.0)), 1 / (1 + math.exp(-1.0))]
_expected = (1 / 3) * abs(0 - _p[1]) + (2 / 3) * abs(0.5 - (_p[0] + _p[2]) / 2)
assert math.isclose(_out["ece_before"], _expected, rel_tol=1e-12)

# %% hidden exercise=calibrate_temperature points=1 name=ece_weights_bins_by_their_counts
# hint: ECE = sum over non-empty bins of (count / N) * |share of True - mean probability|; bins are equal-width and p = 1 falls in the last one.
_margins = [0.0, 0.0, 0.0, 0.0, 2.0, 1000.0]
_labels = [True, True, True, False, False, True]
_out = calibrate_temperature(_margins, _labels, [1.0], n_bins=4)
_p2 = 1 / (1 + math.exp(-2.0))
_expected = (4 / 6) * abs(0.75 - 0.5) + (2 / 6) * abs(0.5 - (_p2 + 1.0) / 2)
assert math.isclose(_out["ece_before"], _expected, rel_tol=1e-12) and _out["ece_before"] == _out["ece_after"]
_one_bin = calibrate_temperature(_margins, _labels, [1.0], n_bins=1)
assert math.isclose(_one_bin["ece_before"], abs(4 / 6 - (4 * 0.5 + _p2 + 1.0) / 6), rel_tol=1e-12)

# %% hidden exercise=calibrate_temperature points=1 name=no_overflow_at_extreme_margins
# hint: compute the sigmoid and the log-likelihood from exp of non-positive numbers only: margins of +-5000 must not overflow or give log(0).
_out = calibrate_temperature([5000.0, -5000.0, 4000.0], [True, False, False], [1.0, 10.0])
assert math.isfinite(_out["nll_before"]) and math.isclose(_out["nll_before"], 4000.0 / 3, rel_tol=1e-9)
assert _out["temperature"] == 10.0 and math.isclose(_out["nll_after"], 400.0 / 3, rel_tol=1e-9)
assert math.isclose(_out["ece_before"], 1 / 3, rel_tol=1e-9)

# %% hidden exercise=calibrate_temperature points=1 name=overconfident_model_gets_a_higher_temperature
# hint: a model whose confident margins are often wrong is fitted a temperature above 1, and its ECE falls.
_margins = [4.0, 5.0, -3.0, 6.0, -5.0, 3.5, 4.5, -4.0, 2.5, -2.0, 5.5, -6.0]
_labels = [True, True, True, False, False, True, False, True, True, False, True, False]
_out = calibrate_temperature(_margins, _labels, [0.5, 1.0, 2.0, 4.0, 8.0])
assert _out["temperature"] == 8.0 and _out["nll_after"] < _out["nll_before"] and _out["ece_after"] < _out["ece_before"]
_good = calibrate_temperature([3.0, -3.0, 2.0, -2.0], [True, False, True, False], [0.5, 1.0, 2.0])
assert _good["temperature"] == 0.5, "a model that is always right is pushed to be more confident"

# %% hidden exercise=calibrate_temperature points=1 name=rm_calibration_inputs_refused_valid_ones_scored
# hint: lists only; finite numbers that are not bools; labels that are bools (not 0/1) of the same length; temperatures > 0; n_bins an int >= 1.
_good = calibrate_temperature([1.0, -1], [True, False], [1, 2.0], n_bins=3)
assert _good["temperature"] == 1.0 and math.isclose(_good["nll_before"], math.log1p(math.exp(-1.0)), rel_tol=1e-12)
_bad_calls = [
    ([], [], [1.0], 5), ((1.0,), [True], [1.0], 5), ([1.0, True], [True, True], [1.0], 5), ([float("nan")], [True], [1.0], 5),
    ([float("inf")], [True], [1.0], 5), (["1.0"], [True], [1.0], 5), ([1.0], [1], [1.0], 5), ([1.0], [True, False], [1.0], 5),
    ([1.0], (True,), [1.0], 5), ([1.0], [True], [], 5), ([1.0], [True], [0.0], 5), ([1.0], [True], [-1.0], 5),
    ([1.0], [True], [float("inf")], 5), ([1.0], [True], [True], 5), ([1.0], [True], 1.0, 5), ([1.0], [True], [1.0], 0),
    ([1.0], [True], [1.0], 2.0), ([1.0], [True], [1.0], True),
]
for _args in _bad_calls:
    try:
        calibrate_temperature(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=calibrate_temperature points=2 name=rm_generated_calibration_sets_agree_with_reference
# hint: any margins, labels, grid and bin count: the same temperature, NLLs and ECEs.
from hypothesis import strategies as st


@st.composite
def _sets(draw):
    size = draw(st.integers(1, 10))
    margins = draw(st.lists(st.one_of(st.floats(-12.0, 12.0), st.integers(-5, 5), st.sampled_from([0.0, 0.5, -0.5]),
                                      st.sampled_from([800.0, -800.0, 40.0, -40.0])),
                            min_size=size, max_size=size))
    labels = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    grid = draw(st.lists(st.sampled_from([0.25, 0.5, 1, 1.0, 2.0, 3.0, 5.0, 10.0]), min_size=1, max_size=5))
    return margins, labels, grid, draw(st.sampled_from([1, 2, 3, 4, 5, 8]))


reference.agrees("calibrate_temperature", _sets(), cases=100, clauses={
    "a probability of exactly 1/2 on a bin edge (even n_bins)": lambda m, y, g, b: b % 2 == 0 and any(v == 0 for v in m),
    "a probability of exactly 1 (the last bin's closed end)": lambda m, y, g, b: any(v >= 800 for v in m),
    "a probability of exactly 0": lambda m, y, g, b: any(v <= -800 for v in m),
    "a margin that is an int": lambda m, y, g, b: any(type(v) is int for v in m),
    "a margin of 0": lambda m, y, g, b: any(v == 0 for v in m),
    "labels of one class only": lambda m, y, g, b: len(set(y)) == 1,
    "labels of both classes": lambda m, y, g, b: len(set(y)) == 2,
    "a temperature that is an int": lambda m, y, g, b: any(type(t) is int for t in g),
    "a grid without 1": lambda m, y, g, b: all(t != 1 for t in g),
    "a temperature listed twice": lambda m, y, g, b: len(set(g)) < len(g),
    "more bins than pairs": lambda m, y, g, b: b > len(m),
    "one bin": lambda m, y, g, b: b == 1,
    "a single pair": lambda m, y, g, b: len(m) == 1,
})

# %% hidden exercise=calibrate_temperature points=2 name=rm_generated_calibration_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (a bool or non-finite margin, int labels, a length mismatch, a temperature <= 0, a bad n_bins) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "bool_margin": lambda a: {**a, "margins": a["margins"][:-1] + [True]},
    "nan_margin": lambda a: {**a, "margins": a["margins"][:-1] + [float("nan")]},
    "inf_first_margin": lambda a: {**a, "margins": [float("inf")] + a["margins"][1:]},
    "nan_temperature": lambda a: {**a, "temperatures": [float("nan")] + a["temperatures"]},
    "inf_temperature_last": lambda a: {**a, "temperatures": a["temperatures"] + [float("inf")]},
    "int_labels": lambda a: {**a, "labels": [int(y) for y in a["labels"]]},
    "short_labels": lambda a: {**a, "labels": a["labels"][:-1]},
    "zero_temperature": lambda a: {**a, "temperatures": a["temperatures"] + [0.0]},
    "negative_temperature": lambda a: {**a, "temperatures": [-2.0]},
    "empty_grid": lambda a: {**a, "temperatures": []},
    "float_bins": lambda a: {**a, "n_bins": 5.0},
    "zero_bins": lambda a: {**a, "n_bins": 0},
    "tuple_margins": lambda a: {**a, "margins": tuple(a["margins"])},
    "bool_bins": lambda a: {**a, "n_bins": True},
    "text_margin": lambda a: {**a, "margins": a["margins"][:-1] + ["1.0"]},
}
from tools.course.grader.clauses import below, each_of, is_bool, not_finite


def _broken(case, rng):
    size = rng.randint(1, 5)
    args = {"margins": [float(i) - 2.0 for i in range(size)], "labels": [i % 2 == 0 for i in range(size)],
            "temperatures": [0.5, 1.0, 2.0], "n_bins": 3}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["margins"], args["labels"], args["temperatures"], args["n_bins"]


_cases = [("valid", n) for n in range(6)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("calibrate_temperature", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "a margin that is a bool": lambda m, y, g, b: any(is_bool(v) for v in m),
    "a NaN margin": lambda m, y, g, b: any(not_finite(v) and v != v for v in m),
    "an infinite first margin": lambda m, y, g, b: isinstance(m, list) and bool(m) and not_finite(m[0]) and m[0] == m[0],
    "a NaN temperature": lambda m, y, g, b: any(not_finite(v) and v != v for v in g),
    "an infinite last temperature": lambda m, y, g, b: bool(g) and not_finite(g[-1]) and g[-1] == g[-1],
    "a margin that is text": lambda m, y, g, b: any(isinstance(v, str) for v in m),
    "labels that are ints": lambda m, y, g, b: any(type(v) is int for v in y),
    "labels of another length": lambda m, y, g, b: len(y) != len(m),
    "a temperature of 0": lambda m, y, g, b: any(v == 0 for v in g),
    "a negative temperature": lambda m, y, g, b: any(below(v, 0) for v in g),
    "an empty grid": lambda m, y, g, b: g == [],
    "n_bins that is a float": lambda m, y, g, b: isinstance(b, float),
    "n_bins of 0": lambda m, y, g, b: type(b) is int and b == 0,
    "n_bins that is a bool": lambda m, y, g, b: is_bool(b),
    "margins that are a tuple": lambda m, y, g, b: isinstance(m, tuple),
})

# %% hidden exercise=reward_model_gate points=1 name=gap_equal_to_minimum_passes_despite_rounding
# hint: the gap is candidate minus control; a gap equal to min_gap passes even when the subtraction rounds a hair below it.
_control = {"hidden_accuracy": 0.45, "hidden_pairs": 20, "ece_after": 0.3}
_out = reward_model_gate({"hidden_accuracy": 0.7, "hidden_pairs": 20, "ece_after": 0.05}, _control)
assert _out["reasons"] == [] and _out["decision"] == "accept_mechanism" and math.isclose(_out["gap"], 0.25)
_below = reward_model_gate({"hidden_accuracy": 0.65, "hidden_pairs": 20, "ece_after": 0.05}, _control)
assert _below["reasons"] == ["no_gap_over_control"] and _below["decision"] == "reject"
assert type(_out["gap"]) is float

# %% hidden exercise=reward_model_gate points=1 name=noise_candidate_never_passes
# hint: a candidate that is no better than its control is rejected however high both accuracies are; a candidate worse than its control is rejected too.
_cand = {"hidden_accuracy": 0.75, "hidden_pairs": 8, "ece_after": 0.0}
for _control_accuracy in (0.75, 0.875, 1.0):
    _out = reward_model_gate(_cand, {"hidden_accuracy": _control_accuracy, "hidden_pairs": 8, "ece_after": 0.0})
    assert _out["decision"] == "reject" and _out["reasons"] == ["no_gap_over_control"]
    assert _out["gap"] <= 0

# %% hidden exercise=reward_model_gate points=1 name=chance_is_checked_on_the_candidate_itself
# hint: beating a control that fell below 0.5 is not enough: a candidate at or below 0.5 is rejected as not above chance.
_control = {"hidden_accuracy": 0.0, "hidden_pairs": 4, "ece_after": 0.5}
_half = reward_model_gate({"hidden_accuracy": 0.5, "hidden_pairs": 4, "ece_after": 0.01}, _control)
assert _half["reasons"] == ["not_above_chance"] and _half["decision"] == "reject" and _half["gap"] == 0.5
_above = reward_model_gate({"hidden_accuracy": 0.75, "hidden_pairs": 4, "ece_after": 0.01}, _control)
assert _above["decision"] == "accept_mechanism"

# %% hidden exercise=reward_model_gate points=1 name=calibration_asks_for_tuning_only
# hint: the candidate's calibrated ECE above max_ece adds "poorly_calibrated" and gives "tune", unless a rejecting reason applies; the control's ECE is not judged.
_control = {"hidden_accuracy": 0.5, "hidden_pairs": 6, "ece_after": 0.9}
assert reward_model_gate({"hidden_accuracy": 1.0, "hidden_pairs": 6, "ece_after": 0.1}, _control)["decision"] == "accept_mechanism"
_tune = reward_model_gate({"hidden_accuracy": 1.0, "hidden_pairs": 6, "ece_after": 0.11}, _control)
assert _tune == {"gap": 0.5, "reasons": ["poorly_calibrated"], "decision": "tune"}
_all = reward_model_gate({"hidden_accuracy": 0.5, "hidden_pairs": 6, "ece_after": 0.5}, _control, min_gap=0.1, max_ece=0.2)
assert _all["reasons"] == ["no_gap_over_control", "not_above_chance", "poorly_calibrated"] and _all["decision"] == "reject"

# %% hidden exercise=reward_model_gate points=1 name=thresholds_are_parameters
# hint: use min_gap and max_ece as given (0 and 1 are allowed), with extra keys in the results ignored.
_cand = {"hidden_accuracy": 0.6, "hidden_pairs": 10, "ece_after": 0.3, "label": "candidate"}
_control = {"hidden_accuracy": 0.6, "hidden_pairs": 10, "ece_after": 0.3, "train_accuracy": 1.0}
assert reward_model_gate(_cand, _control, min_gap=0, max_ece=1)["decision"] == "accept_mechanism"
assert reward_model_gate(_cand, _control, min_gap=0.05, max_ece=1)["decision"] == "reject"
assert reward_model_gate(_cand, _control, min_gap=0, max_ece=0.25)["decision"] == "tune"

# %% hidden exercise=reward_model_gate points=1 name=rm_gate_inputs_refused_valid_ones_scored
# hint: both results must be dicts with the three keys and values in range (no bools), measured on the same number of hidden pairs; both thresholds in [0, 1].
_cand = {"hidden_accuracy": 0.9, "hidden_pairs": 10, "ece_after": 0.05}
_control = {"hidden_accuracy": 0.4, "hidden_pairs": 10, "ece_after": 0.2}
assert reward_model_gate(_cand, _control)["decision"] == "accept_mechanism"
_bad_calls = [
    ([("hidden_accuracy", 0.9)], _control, 0.25, 0.1), (_cand, None, 0.25, 0.1),
    ({"hidden_accuracy": 0.9, "hidden_pairs": 10}, _control, 0.25, 0.1), ({**_cand, "hidden_accuracy": 1.2}, _control, 0.25, 0.1),
    ({**_cand, "hidden_accuracy": True}, _control, 0.25, 0.1), ({**_cand, "hidden_accuracy": float("nan")}, _control, 0.25, 0.1),
    ({**_cand, "hidden_pairs": 0}, _control, 0.25, 0.1), ({**_cand, "hidden_pairs": 10.0}, _control, 0.25, 0.1),
    ({**_cand, "hidden_pairs": True}, {**_control, "hidden_pairs": True}, 0.25, 0.1), ({**_cand, "ece_after": -0.1}, _control, 0.25, 0.1),
    (_cand, {**_control, "ece_after": "0.2"}, 0.25, 0.1), (_cand, {**_control, "hidden_pairs": 12}, 0.25, 0.1),
    (_cand, _control, 1.5, 0.1), (_cand, _control, -0.1, 0.1), (_cand, _control, True, 0.1), (_cand, _control, 0.25, 2),
    (_cand, _control, 0.25, None),
]
for _args in _bad_calls:
    try:
        reward_model_gate(*_args)
    except ValueError:
        continue
    raise AssertionError("an invalid input was accepted")

# %% hidden exercise=reward_model_gate points=2 name=rm_generated_gates_agree_with_reference
# hint: any accuracies on the same hidden set, any calibration errors and thresholds: the same gap, reasons and decision.
from hypothesis import strategies as st


@st.composite
def _results(draw):
    pairs = draw(st.integers(1, 12))
    accuracy = lambda: draw(st.integers(0, pairs)) / pairs
    ece = lambda: draw(st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.5, 1, 0]))
    candidate = {"hidden_accuracy": accuracy(), "hidden_pairs": pairs, "ece_after": ece()}
    control = {"hidden_accuracy": accuracy(), "hidden_pairs": pairs, "ece_after": ece()}
    max_ece = draw(st.sampled_from([0.0, 0.1, 0.2, 1.0]))
    edge = draw(st.sampled_from(["none", "none", "chance", "ece"]))
    if edge == "chance" and pairs % 2 == 0:  # a candidate exactly at 0.5: not above chance
        candidate["hidden_accuracy"] = 0.5
    elif edge == "ece":  # a calibration error exactly at the limit: no tuning asked
        candidate["ece_after"] = max_ece
    return candidate, control, draw(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1])), max_ece


def _gap(candidate, control):
    return candidate["hidden_accuracy"] - control["hidden_accuracy"]


reference.agrees("reward_model_gate", _results(), cases=80, clauses={
    "a gap equal to min_gap": lambda c, k, g, e: math.isclose(_gap(c, k), g, abs_tol=1e-12),
    "a gap below min_gap": lambda c, k, g, e: _gap(c, k) < g and not math.isclose(_gap(c, k), g, abs_tol=1e-12),
    "a candidate at or below chance": lambda c, k, g, e: c["hidden_accuracy"] <= 0.5,
    "a candidate worse than its control": lambda c, k, g, e: _gap(c, k) < 0,
    "a calibration error above max_ece": lambda c, k, g, e: c["ece_after"] > e,
    "a control calibration error above max_ece": lambda c, k, g, e: k["ece_after"] > e >= c["ece_after"],
    "an accepted candidate": lambda c, k, g, e: _gap(c, k) >= g and c["hidden_accuracy"] > 0.5 and c["ece_after"] <= e,
    "a threshold or error that is an int": lambda c, k, g, e: int in (type(g), type(c["ece_after"]), type(k["ece_after"])),
    "a candidate exactly at chance": lambda c, k, g, e: c["hidden_accuracy"] == 0.5,
    "a calibration error exactly at max_ece": lambda c, k, g, e: c["ece_after"] == e,
})

# %% hidden exercise=reward_model_gate points=2 name=rm_generated_gate_defects_agree_with_reference
# hint: a valid call gets the reference's result; a call with one defect (a missing key, a value out of range or a bool, different hidden sets, a bad threshold) is refused with ValueError.
from hypothesis import strategies as st

_defects = {
    "missing_key": lambda a: {**a, "control": {k: v for k, v in a["control"].items() if k != "ece_after"}},
    "accuracy_high": lambda a: {**a, "candidate": {**a["candidate"], "hidden_accuracy": 1.25}},
    "accuracy_bool": lambda a: {**a, "control": {**a["control"], "hidden_accuracy": False}},
    "pairs_float": lambda a: {**a, "candidate": {**a["candidate"], "hidden_pairs": 4.0}},
    "pairs_differ": lambda a: {**a, "control": {**a["control"], "hidden_pairs": a["control"]["hidden_pairs"] + 1}},
    "ece_negative": lambda a: {**a, "candidate": {**a["candidate"], "ece_after": -0.01}},
    "gap_high": lambda a: {**a, "min_gap": 1.01},
    "ece_bool": lambda a: {**a, "max_ece": True},
    "not_a_dict": lambda a: {**a, "candidate": list(a["candidate"].items())},
    "pairs_zero": lambda a: {**a, "candidate": {**a["candidate"], "hidden_pairs": 0}, "control": {**a["control"], "hidden_pairs": 0}},
    "gap_none": lambda a: {**a, "min_gap": None},
    "accuracy_nan": lambda a: {**a, "candidate": {**a["candidate"], "hidden_accuracy": float("nan")}},
    "ece_inf": lambda a: {**a, "control": {**a["control"], "ece_after": float("inf")}},
    "gap_nan": lambda a: {**a, "min_gap": float("nan")},
    "max_ece_inf": lambda a: {**a, "max_ece": float("inf")},
}
from tools.course.grader.clauses import below, each_of, is_bool, is_number, not_finite


def _field(result, key):
    return result[key] if isinstance(result, dict) and key in result else 0.5


def _broken(case, rng):
    pairs = rng.randint(1, 8)
    args = {"candidate": {"hidden_accuracy": rng.randint(0, pairs) / pairs, "hidden_pairs": pairs, "ece_after": 0.05},
            "control": {"hidden_accuracy": rng.randint(0, pairs) / pairs, "hidden_pairs": pairs, "ece_after": 0.2},
            "min_gap": 0.25, "max_ece": 0.1}
    if case[0] != "valid":  # the valid cases beside the defects: a body that only raises cannot pass
        args = _defects[case[0]](args)
    return args["candidate"], args["control"], args["min_gap"], args["max_ece"]


_cases = [("valid", n) for n in range(8)] + [(name, 0) for name in sorted(_defects)]
reference.agrees("reward_model_gate", each_of(_cases, _broken, variants=2), cases=2 * len(_cases), clauses={
    "a result without ece_after": lambda c, k, g, e: isinstance(k, dict) and "ece_after" not in k,
    "an accuracy above 1": lambda c, k, g, e: is_number(_field(c, "hidden_accuracy")) and _field(c, "hidden_accuracy") > 1,
    "an accuracy that is a bool": lambda c, k, g, e: is_bool(_field(k, "hidden_accuracy")),
    "hidden_pairs that is a float": lambda c, k, g, e: isinstance(_field(c, "hidden_pairs"), float),
    "hidden sets of different sizes": lambda c, k, g, e: isinstance(c, dict) and isinstance(k, dict) and type(
        c["hidden_pairs"]) is int and type(k["hidden_pairs"]) is int and c["hidden_pairs"] != k["hidden_pairs"],
    "hidden_pairs of 0": lambda c, k, g, e: _field(c, "hidden_pairs") == 0,
    "a negative calibration error": lambda c, k, g, e: below(_field(c, "ece_after"), 0),
    "min_gap above 1": lambda c, k, g, e: is_number(g) and g > 1,
    "min_gap that is None": lambda c, k, g, e: g is None,
    "max_ece that is a bool": lambda c, k, g, e: is_bool(e),
    "a candidate that is not a dict": lambda c, k, g, e: not isinstance(c, dict),
    "a NaN accuracy": lambda c, k, g, e: not_finite(_field(c, "hidden_accuracy")),
    "an infinite control calibration error": lambda c, k, g, e: not_finite(_field(k, "ece_after")),
    "min_gap that is NaN": lambda c, k, g, e: not_finite(g),
    "max_ece that is infinite": lambda c, k, g, e: not_finite(e),
})
