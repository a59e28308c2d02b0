# %% hidden exercise=pack_examples points=1 name=first_fit_fills_earlier_gaps
# hint: every example goes into the FIRST row that still has room for all of it, not only the last row; new rows open at the end.
_examples = [{"input_ids": [1] * 6, "labels": [1] * 6}, {"input_ids": [2] * 7, "labels": [2] * 7},
             {"input_ids": [3] * 3, "labels": [3] * 3}, {"input_ids": [4] * 2, "labels": [4] * 2},
             {"input_ids": [5] * 1, "labels": [5] * 1}, {"input_ids": [6] * 4, "labels": [6] * 4}]
_packed = pack_examples(_examples, 10, 0)
assert _packed["rows"] == [[0, 2, 4], [1, 3], [5]], _packed["rows"]
assert _packed["input_ids"][0] == [1] * 6 + [3] * 3 + [5]
assert _packed["input_ids"][1] == [2] * 7 + [4] * 2 + [0]
assert _packed["input_ids"][2] == [6] * 4 + [0] * 6

# %% hidden exercise=pack_examples points=1 name=every_example_starts_unsupervised_and_restarts_positions
# hint: the first label of every example (also the first in a row, also a supervised one) is -100, and its position_ids start again at 0.
_examples = [{"input_ids": [7, 8, 9], "labels": [7, 8, 9]}, {"input_ids": [10, 11], "labels": [10, 11]},
             {"input_ids": [12, 13, 14, 15], "labels": [-100, -100, 14, 15]}]
_packed = pack_examples(_examples, 9, 1)
assert _packed["rows"] == [[0, 1, 2]]
assert _packed["labels"] == [[-100, 8, 9, -100, 11, -100, -100, 14, 15]]
assert _packed["position_ids"] == [[0, 1, 2, 0, 1, 0, 1, 2, 3]]
assert _packed["attention_mask"] == [[1] * 9] and _packed["padded_tokens"] == 0

# %% hidden exercise=pack_examples points=1 name=padding_tail_layout
# hint: after the last example, pad with pad_id, label -100, attention 0 and positions counting 0, 1, ... from the first padding slot.
_packed = pack_examples([{"input_ids": [3, 4], "labels": [3, 4]}, {"input_ids": [5, 6, 7, 8, 9], "labels": [5, 6, 7, 8, 9]}], 6, 2)
assert _packed["rows"] == [[0], [1]]
assert _packed["input_ids"] == [[3, 4, 2, 2, 2, 2], [5, 6, 7, 8, 9, 2]]
assert _packed["labels"] == [[-100, 4, -100, -100, -100, -100], [-100, 6, 7, 8, 9, -100]]
assert _packed["position_ids"] == [[0, 1, 0, 1, 2, 3], [0, 1, 2, 3, 4, 0]]
assert _packed["attention_mask"] == [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]]

# %% hidden exercise=pack_examples points=1 name=exact_fit_and_single_token_examples
# hint: an example as long as the row fills it with no padding; a one-token example is allowed; row_length 1 works.
_packed = pack_examples([{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}, {"input_ids": [9], "labels": [9]}], 4, 0)
assert _packed["rows"] == [[0], [1]] and _packed["input_ids"] == [[1, 2, 3, 4], [9, 0, 0, 0]]
assert _packed["labels"] == [[-100, 2, 3, 4], [-100, -100, -100, -100]]
assert _packed["position_ids"] == [[0, 1, 2, 3], [0, 0, 1, 2]]
_single = pack_examples([{"input_ids": [5], "labels": [-100]}, {"input_ids": [6], "labels": [6]}], 1, 0)
assert _single["rows"] == [[0], [1]] and _single["position_ids"] == [[0], [0]] and _single["padded_tokens"] == 0

# %% hidden exercise=pack_examples points=1 name=counts_real_and_padded_tokens
# hint: real tokens are the examples' tokens; padded tokens are every other position of every row; both are ints.
_examples = [{"input_ids": list(range(1, n + 1)), "labels": list(range(1, n + 1))} for n in (5, 9, 2, 8, 3)]
_packed = pack_examples(_examples, 10, 0)
assert _packed["real_tokens"] == 27 and type(_packed["real_tokens"]) is int
assert _packed["padded_tokens"] == len(_packed["rows"]) * 10 - 27 and type(_packed["padded_tokens"]) is int
assert all(len(row) == 10 for key in ("input_ids", "labels", "position_ids", "attention_mask") for row in _packed[key])
assert sum(map(sum, _packed["attention_mask"])) == 27

# %% hidden exercise=pack_examples points=1 name=examples_not_modified
# hint: build new lists: write -100 into the packed labels, never into the example's own list.
_examples = [{"input_ids": [1, 2, 3], "labels": [1, 2, 3], "id": "a"}, {"input_ids": [4, 5], "labels": [4, 5], "id": "b"}]
import copy

_before = copy.deepcopy(_examples)
_packed = pack_examples(_examples, 8, 0)
assert _examples == _before, "pack_examples changed its input"
assert _packed["rows"] == [[0, 1]] and _packed["labels"] == [[-100, 2, 3, -100, 5, -100, -100, -100]], _packed
_packed["input_ids"][0][0] = 99
assert _examples[0]["input_ids"][0] == 1, "the packed rows share lists with the input"

# %% hidden exercise=pack_examples points=1 name=invalid_inputs_refused
# hint: check row_length and pad_id (ints, bools refused) and every example: dict, both keys, lists of one length, 1..row_length tokens, valid ids and labels.
_ok = {"input_ids": [1, 2], "labels": [-100, 2]}
_bad_calls = [
    lambda: pack_examples([], 4, 0), lambda: pack_examples((_ok,), 4, 0), lambda: pack_examples([_ok], 0, 0),
    lambda: pack_examples([_ok], True, 0), lambda: pack_examples([_ok], 4.0, 0), lambda: pack_examples([_ok], 4, -1),
    lambda: pack_examples([_ok], 4, False), lambda: pack_examples([_ok, {"input_ids": [1]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, 2], "labels": [1]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [], "labels": []}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1] * 5, "labels": [1] * 5}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, -1], "labels": [1, 1]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, 2], "labels": [1, -5]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, True], "labels": [1, 1]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": (1, 2), "labels": (1, 2)}], 4, 0),
    lambda: pack_examples([_ok, ["input_ids", "labels"]], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, 2.0], "labels": [1, 2]}], 4, 0),
    lambda: pack_examples([_ok, {"input_ids": [1, 2], "labels": [1, True]}], 4, 0),
]
_valid = pack_examples([_ok, {"input_ids": [3], "labels": [3]}, _ok], 4, 7)  # the valid call the cases above break
assert _valid["rows"] == [[0, 1], [2]] and _valid["input_ids"][1] == [1, 2, 7, 7], _valid
for _number, _call in enumerate(_bad_calls):
    try:
        _call()
    except ValueError:
        continue
    raise AssertionError(f"invalid input number {_number} was accepted")

# %% hidden exercise=pack_examples points=2 name=generated_examples_agree_with_reference
# hint: any list of valid examples and row length: the same rows, the same four tensors' lists, the same counts.
from hypothesis import strategies as st


@st.composite
def _packing_inputs(draw):
    row_length = draw(st.integers(1, 12))
    examples = []
    for _ in range(draw(st.integers(1, 7))):
        length = draw(st.integers(1, row_length))
        ids = draw(st.lists(st.integers(0, 30), min_size=length, max_size=length))
        labels = [token if draw(st.booleans()) else -100 for token in ids]
        examples.append({"input_ids": ids, "labels": labels})
    return examples, row_length, draw(st.integers(0, 5))


def _first_fit_rows(examples, row_length, pad_id):
    free, rows = [], 0
    for example in examples:
        length = len(example["input_ids"])
        for index, room in enumerate(free):
            if length <= room:
                free[index] -= length
                break
        else:
            free.append(row_length - length)
    return free


reference.agrees("pack_examples", _packing_inputs(), cases=150, clauses={
    "an example that fills an earlier gap": lambda examples, row_length, pad_id: any(
        len(e["input_ids"]) <= row_length - sum(len(x["input_ids"]) for x in examples[:i]) % row_length
        for i, e in enumerate(examples[2:], start=2)) and len(_first_fit_rows(examples, row_length, pad_id)) > 1,
    "an example as long as a row": lambda examples, row_length, pad_id: any(
        len(e["input_ids"]) == row_length for e in examples),
    "a row without padding": lambda *call: 0 in _first_fit_rows(*call),
    "a one-token example": lambda examples, row_length, pad_id: any(len(e["input_ids"]) == 1 for e in examples),
    "a pad_id other than 0": lambda examples, row_length, pad_id: pad_id != 0,
    "several rows": lambda *call: len(_first_fit_rows(*call)) > 1,
})

# %% hidden exercise=pack_examples points=2 name=generated_invalid_examples_agree_with_reference
# hint: one broken example anywhere, or a broken row_length or pad_id: ValueError, like the reference.
from hypothesis import strategies as st

_breaks = [("row_length", 0), ("row_length", -3), ("row_length", True), ("row_length", 2.5), ("row_length", None),
           ("pad_id", -1), ("pad_id", True), ("pad_id", "0"), ("ids", [1, None]), ("ids", [1, -2]), ("ids", [1, False]),
           ("labels", [1, -99]), ("labels", [1, 1.0]), ("labels", [1, True]), ("labels", [False, 1]),
           ("labels", [1, None]), ("ids", [1, 2.0]), ("length", 99), ("empty", None), ("keys", "labels"),
           ("keys", "input_ids"), ("type", "tuple"), ("lists", "tuple"), ("lengths", None), ("examples", "empty"),
           ("examples", "tuple")] + [("valid", n) for n in range(20)]


from tools.course.grader.clauses import each_of


def _broken_packing(entry, rng):
    """Valid examples, or ones with exactly this break."""
    kind, value = entry
    examples = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]} for _ in range(rng.randint(1, 4))]
    row_length, pad_id = 8, 0
    where = rng.randrange(len(examples))
    if kind == "valid":
        pass
    elif kind == "row_length":
        row_length = value
    elif kind == "pad_id":
        pad_id = value
    elif kind == "ids":
        examples[where] = {"input_ids": value, "labels": [1, 1]}
    elif kind == "labels":
        examples[where] = {"input_ids": [1, 1], "labels": value}
    elif kind == "length":
        examples[where] = {"input_ids": [1] * 9, "labels": [1] * 9}
    elif kind == "empty":
        examples[where] = {"input_ids": [], "labels": []}
    elif kind == "keys":
        examples[where] = {"input_ids": [1]} if value == "labels" else {"labels": [1]}
    elif kind == "type":
        examples[where] = tuple(examples[where].items())
    elif kind == "lists":
        examples[where] = {"input_ids": (1, 2), "labels": (1, 2)}
    elif kind == "lengths":
        examples[where] = {"input_ids": [1, 2], "labels": [1]}
    elif value == "empty":
        examples = []
    else:
        examples = tuple(examples)
    return examples, row_length, pad_id


from tools.course.grader.clauses import dicts, is_bool


def _examples(examples):
    return dicts(examples)


def _items(examples, key):
    return [v for e in _examples(examples) if isinstance(e.get(key), (list, tuple)) for v in e[key]]


reference.agrees("pack_examples", each_of(_breaks, _broken_packing, variants=2), cases=2 * len(_breaks), clauses={
    "examples not a list": lambda examples, r, p: not isinstance(examples, list),
    "no example": lambda examples, r, p: isinstance(examples, list) and not examples,
    "an example that is not a dict": lambda examples, r, p: isinstance(examples, list) and any(
        not isinstance(e, dict) for e in examples),
    "an example without input_ids or labels": lambda examples, r, p: any(
        "input_ids" not in e or "labels" not in e for e in _examples(examples)),
    "ids or labels that are not lists": lambda examples, r, p: any(
        isinstance(e.get("input_ids"), tuple) for e in _examples(examples)),
    "ids and labels of different lengths": lambda examples, r, p: any(
        isinstance(e.get("input_ids"), list) and isinstance(e.get("labels"), list) and len(e["input_ids"]) != len(
            e["labels"]) for e in _examples(examples)),
    "an empty example": lambda examples, r, p: any(e.get("input_ids") == [] for e in _examples(examples)),
    "an example longer than the row": lambda examples, r, p: type(r) is int and any(
        isinstance(e.get("input_ids"), list) and len(e["input_ids"]) > r for e in _examples(examples)),
    "an id that is a bool": lambda examples, r, p: any(is_bool(v) for v in _items(examples, "input_ids")),
    "an id that is a float or None": lambda examples, r, p: any(
        v is None or isinstance(v, float) for v in _items(examples, "input_ids")),
    "a negative id": lambda examples, r, p: any(type(v) is int and v < 0 for v in _items(examples, "input_ids")),
    "a label that is a bool": lambda examples, r, p: any(is_bool(v) for v in _items(examples, "labels")),
    "a label that is a float or None": lambda examples, r, p: any(
        v is None or isinstance(v, float) for v in _items(examples, "labels")),
    "a negative label other than -100": lambda examples, r, p: any(
        type(v) is int and v < 0 and v != -100 for v in _items(examples, "labels")),
    "a row_length that is a bool": lambda examples, r, p: is_bool(r),
    "a row_length that is not an int >= 1": lambda examples, r, p: not is_bool(r) and (not isinstance(r, int) or r < 1),
    "a pad_id that is a bool": lambda examples, r, p: is_bool(p),
    "a pad_id that is not an int >= 0": lambda examples, r, p: not is_bool(p) and (not isinstance(p, int) or p < 0),
})

# %% hidden exercise=block_causal_mask points=1 name=mask_matches_the_definition
# hint: True exactly when j <= i and no position in (j, i] restarts at 0; the padding tail is a segment of its own.
_positions = torch.tensor([[0, 1, 2, 0, 0, 1, 0, 1, 2, 3]])
_mask = block_causal_mask(_positions.clone())
for _i in range(10):
    for _j in range(10):
        _expected = _j <= _i and all(int(_positions[0, _k]) != 0 for _k in range(_j + 1, _i + 1))
        assert bool(_mask[0, 0, _i, _j]) == _expected, (_i, _j)

# %% hidden exercise=block_causal_mask points=1 name=packed_loss_equals_per_example_losses
# hint: with the block mask, each example in a packed row is computed exactly as if it were alone; a plain causal mask lets later examples see earlier ones.
_examples = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7], [9, 3]]
_ids = torch.tensor([[token for example in _examples for token in example] + [0, 0]])
_positions = torch.tensor([[p for example in _examples for p in range(len(example))] + [0, 1]])
_labels = torch.tensor([[label for example in _examples for label in [-100] + example[1:]] + [-100, -100]])
_model = ToyAttentionLM(seed=9)
with torch.no_grad():
    _packed = float(token_loss_sum(_model(input_ids=_ids, position_ids=_positions,
                                          attention_mask=block_causal_mask(_positions)).logits, _labels))
    _alone = sum(float(token_loss_sum(_model(input_ids=torch.tensor([example])).logits, torch.tensor([example])))
                 for example in _examples)
    _plain = float(token_loss_sum(_model(input_ids=_ids, position_ids=_positions).logits, _labels))
assert abs(_packed - _alone) < 1e-9, (_packed, _alone)
assert abs(_plain - _alone) > 1e-3, "the toy model should be able to tell a plain causal mask apart"

# %% hidden exercise=block_causal_mask points=1 name=rows_of_a_batch_are_independent
# hint: every row has its own segments; a restart in one row says nothing about another row.
_positions = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 1, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0]])
_mask = block_causal_mask(_positions)
assert tuple(_mask.shape) == (3, 1, 6, 6) and _mask.dtype == torch.bool
assert torch.equal(_mask[0, 0], torch.ones(6, 6, dtype=torch.bool).tril())
assert torch.equal(_mask[2, 0], torch.eye(6, dtype=torch.bool))
assert int(_mask[1, 0].sum()) == 9 and bool(_mask[1, 0, 3, 2]) and not bool(_mask[1, 0, 2, 1])

# %% hidden exercise=block_causal_mask points=1 name=shape_dtype_and_one_position
# hint: always a bool tensor [batch, 1, time, time]; one position gives [[True]]; any integer dtype is accepted.
_one = block_causal_mask(torch.tensor([[0]]))
assert tuple(_one.shape) == (1, 1, 1, 1) and _one.dtype == torch.bool and bool(_one[0, 0, 0, 0])
_int32 = block_causal_mask(torch.tensor([[0, 1, 0]], dtype=torch.int32))
assert _int32.dtype == torch.bool and torch.equal(_int32[0, 0], torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.bool))
_source = torch.tensor([[0, 1, 2, 0]])
block_causal_mask(_source)
assert torch.equal(_source, torch.tensor([[0, 1, 2, 0]])), "position_ids was modified"

# %% hidden exercise=block_causal_mask points=1 name=invalid_position_ids_refused
# hint: an integer tensor with two dimensions, at least one row and position; every row starts at 0 and only counts up by 1 or restarts at 0.
_bad = [[[0, 1, 2]], torch.tensor([0, 1, 2]), torch.tensor([[[0, 1]]]), torch.tensor([[0.0, 1.0]]),
        torch.tensor([[True, False]]), torch.zeros((0, 3), dtype=torch.long), torch.zeros((2, 0), dtype=torch.long),
        torch.tensor([[1, 2, 3]]), torch.tensor([[0, 1, 2], [1, 0, 1]]), torch.tensor([[0, 2, 3]]),
        torch.tensor([[0, 1, 1]]), torch.tensor([[0, 1, 2, 1]]), torch.tensor([[0, -1]]), None]
_valid = block_causal_mask(torch.tensor([[0, 1, 0]], dtype=torch.int32))  # a valid call beside the refused ones
assert _valid[0, 0].tolist() == [[True, False, False], [True, True, False], [False, False, True]], _valid
for _number, _value in enumerate(_bad):
    try:
        block_causal_mask(_value)
    except ValueError:
        continue
    raise AssertionError(f"invalid position_ids number {_number} was accepted")

# %% hidden exercise=block_causal_mask points=2 name=generated_positions_agree_with_reference
# hint: any valid packed layout (many rows, many segments, padding tails, int32 or int64): exactly the reference's mask.
from hypothesis import strategies as st


@st.composite
def _position_rows(draw):
    rows, width = draw(st.integers(1, 3)), draw(st.integers(1, 9))
    result = []
    for _ in range(rows):
        row = [0]
        for _ in range(width - 1):
            row.append(0 if draw(st.integers(0, 3)) == 0 else row[-1] + 1)
        result.append(row)
    return (torch.tensor(result, dtype=draw(st.sampled_from([torch.int64, torch.int32]))),)


reference.agrees("block_causal_mask", _position_rows(), cases=120, clauses={
    "several rows": lambda positions: positions.shape[0] > 1,
    "one position": lambda positions: positions.shape[1] == 1,
    "several segments in a row": lambda positions: bool((positions[:, 1:] == 0).any()),
    "two restarts in a row (a one-token segment)": lambda positions: positions.shape[1] > 2 and bool(
        ((positions[:, 1:-1] == 0) & (positions[:, 2:] == 0)).any()),
    "int32 positions": lambda positions: positions.dtype == torch.int32,
})

# %% hidden exercise=block_causal_mask points=2 name=generated_invalid_positions_agree_with_reference
# hint: any tensor of integers, valid or not (jumps, repeats, negative values, rows that do not start at 0), or another dtype: the same mask or ValueError.
from hypothesis import strategies as st


@st.composite
def _any_positions(draw):
    rows, width = draw(st.integers(0, 3)), draw(st.integers(0, 5))
    values = draw(st.lists(st.lists(st.integers(-1, 3), min_size=width, max_size=width), min_size=rows, max_size=rows))
    tensor = torch.tensor(values, dtype=torch.long).reshape(rows, width)
    kind = draw(st.sampled_from(["long", "float", "bool", "flat", "list"]))
    if kind == "float":
        tensor = tensor.double()
    elif kind == "bool":
        tensor = tensor > 0
    elif kind == "flat":
        tensor = tensor.reshape(-1)
    elif kind == "list":
        return (values,)
    return (tensor,)


def _valid_rows(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.dim() == 2 and not tensor.is_floating_point() and \
        tensor.dtype != torch.bool and tensor.numel() > 0


_segments = st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=3).filter(
    lambda rows: len({sum(row) for row in rows}) == 1)
_layouts = _segments.map(lambda rows: (torch.tensor([[p for length in row for p in range(length)] for row in rows]),))
reference.agrees("block_causal_mask", st.one_of(_any_positions(), _layouts), cases=160, clauses={
    "a valid layout": lambda p: _valid_rows(p) and bool((p[:, 0] == 0).all()) and bool(
        ((p[:, 1:] == 0) | (p[:, 1:] == p[:, :-1] + 1)).all()),
    "not a tensor": lambda p: not isinstance(p, torch.Tensor),
    "a float tensor": lambda p: isinstance(p, torch.Tensor) and p.is_floating_point(),
    "a bool tensor": lambda p: isinstance(p, torch.Tensor) and p.dtype == torch.bool,
    "not two dimensions": lambda p: isinstance(p, torch.Tensor) and p.dim() != 2,
    "no row or no position": lambda p: isinstance(p, torch.Tensor) and p.dim() == 2 and p.numel() == 0,
    "a row that does not start at 0": lambda p: _valid_rows(p) and bool((p[:, 0] != 0).any()),
    "a jump, a repeat or a negative value": lambda p: _valid_rows(p) and p.shape[1] > 1 and bool(
        ((p[:, 1:] != 0) & (p[:, 1:] != p[:, :-1] + 1)).any()),
})

# %% hidden exercise=waste_report points=1 name=rows_sorted_by_length_then_strategy
# hint: sort by max_length ascending; at one length "packed" comes before "padded", whatever the input order.
_runs = [{"strategy": s, "max_length": n, "real_tokens": 100, "token_slots": 100 + n, "seconds": 1.0}
         for s, n in (("padded", 512), ("packed", 64), ("padded", 64), ("packed", 512), ("padded", 128))]
_report = waste_report(_runs)
assert [(row["max_length"], row["strategy"]) for row in _report["rows"]] == [
    (64, "packed"), (64, "padded"), (128, "padded"), (512, "packed"), (512, "padded")]
assert list(_report["packing_gain"]) == [64, 128, 512]

# %% hidden exercise=waste_report points=1 name=padding_share_and_rates
# hint: padded tokens = slots - real; the share divides by all slots; rates divide by the seconds; every share and rate is a float.
_report = waste_report([{"strategy": "padded", "max_length": 256, "real_tokens": 300, "token_slots": 1200, "seconds": 3}])
_row = _report["rows"][0]
assert _row == {"strategy": "padded", "max_length": 256, "real_tokens": 300, "token_slots": 1200, "padded_tokens": 900,
                "padding_share": 0.75, "effective_tokens_per_s": 100.0, "slot_tokens_per_s": 400.0}
assert type(_row["padding_share"]) is float and type(_row["effective_tokens_per_s"]) is float
_none = waste_report([{"strategy": "packed", "max_length": 8, "real_tokens": 8, "token_slots": 8, "seconds": None}])["rows"][0]
assert _none["padding_share"] == 0.0 and type(_none["padding_share"]) is float
assert _none["effective_tokens_per_s"] is None and _none["slot_tokens_per_s"] is None

# %% hidden exercise=waste_report points=1 name=packing_gain_only_when_both_measured
# hint: the gain needs both strategies at that length, both measured, and a padded rate above 0; otherwise None, never 0 and never missing.
_base = {"real_tokens": 400, "token_slots": 800}
_report = waste_report([
    {**_base, "strategy": "padded", "max_length": 64, "seconds": 4.0}, {**_base, "strategy": "packed", "max_length": 64, "seconds": 1.0},
    {**_base, "strategy": "packed", "max_length": 128, "seconds": 1.0},
    {**_base, "strategy": "padded", "max_length": 256, "seconds": None}, {**_base, "strategy": "packed", "max_length": 256, "seconds": 2.0},
    {"strategy": "padded", "max_length": 512, "real_tokens": 0, "token_slots": 8, "seconds": 1.0},
    {"strategy": "packed", "max_length": 512, "real_tokens": 8, "token_slots": 8, "seconds": 1.0},
    {"strategy": "padded", "max_length": 1024, "real_tokens": 8, "token_slots": 8, "seconds": 1.0},
    {"strategy": "packed", "max_length": 1024, "real_tokens": 0, "token_slots": 8, "seconds": 1.0},
])
assert _report["packing_gain"] == {64: 4.0, 128: None, 256: None, 512: None, 1024: 0.0}

# %% hidden exercise=waste_report points=1 name=invalid_runs_refused
# hint: exactly the five keys; a known strategy; ints (not bools) with 0 <= real <= slots and slots >= 1; seconds None or finite > 0; no repeated pair.
_ok = {"strategy": "padded", "max_length": 64, "real_tokens": 10, "token_slots": 64, "seconds": 1.0}
_bad_runs = [[], (_ok,), [_ok, _ok], [{**_ok, "strategy": "wrapped"}], [{**_ok, "max_length": 0}],
             [{**_ok, "max_length": True}], [{**_ok, "real_tokens": 65}], [{**_ok, "real_tokens": -1}],
             [{**_ok, "real_tokens": 10.0}], [{**_ok, "token_slots": 0, "real_tokens": 0}], [{**_ok, "seconds": 0}],
             [{**_ok, "seconds": -1.0}], [{**_ok, "seconds": float("nan")}], [{**_ok, "seconds": float("inf")}],
             [{**_ok, "seconds": True}], [{**_ok, "seconds": "1"}], [{**_ok, "extra": 1}],
             [{key: value for key, value in _ok.items() if key != "seconds"}], [_ok, "run"], None,
             [{**_ok, "token_slots": True, "real_tokens": 0}]]
_valid = waste_report([_ok, {**_ok, "strategy": "packed", "real_tokens": 60, "seconds": None}])  # the call each case breaks
assert _valid["packing_gain"] == {64: None} and _valid["rows"][0]["strategy"] == "packed", _valid
for _number, _runs in enumerate(_bad_runs):
    try:
        waste_report(_runs)
    except ValueError:
        continue
    raise AssertionError(f"invalid runs number {_number} were accepted")

# %% hidden exercise=waste_report points=1 name=runs_not_modified
# hint: build new row dicts; sort a new list, not the caller's.
_runs = [{"strategy": "padded", "max_length": 128, "real_tokens": 50, "token_slots": 128, "seconds": 0.5},
         {"strategy": "packed", "max_length": 64, "real_tokens": 50, "token_slots": 64, "seconds": 0.25}]
import copy

_before = copy.deepcopy(_runs)
_report = waste_report(_runs)
assert _runs == _before, "waste_report changed its input"
assert [row["max_length"] for row in _report["rows"]] == [64, 128] and _report["packing_gain"] == {64: None, 128: None}
assert _report["rows"][0] is not _runs[1]

# %% hidden exercise=waste_report points=2 name=generated_runs_agree_with_reference
# hint: any set of valid runs (some lengths with one strategy only, unmeasured or integer seconds, no padding at all): the same report.
from hypothesis import strategies as st


@st.composite
def _run_lists(draw):
    pairs = draw(st.lists(st.tuples(st.sampled_from(["padded", "packed"]), st.sampled_from([16, 64, 128, 512])),
                          min_size=1, max_size=6, unique=True))
    runs = []
    for strategy, length in pairs:
        slots = draw(st.integers(1, 2048))
        runs.append({"strategy": strategy, "max_length": length, "real_tokens": draw(st.integers(0, slots)),
                     "token_slots": slots, "seconds": draw(st.one_of(st.none(), st.integers(1, 9),
                                                                     st.floats(1e-3, 100.0)))})
    return (runs,)


def _lengths_with_both(runs):
    by_length = {}
    for run in runs:
        by_length.setdefault(run["max_length"], []).append(run)
    return [group for group in by_length.values() if len(group) == 2]


reference.agrees("waste_report", _run_lists(), cases=150, clauses={
    "a length with one strategy only": lambda runs: any(
        sum(r["max_length"] == run["max_length"] for r in runs) == 1 for run in runs),
    "a length with both strategies measured": lambda runs: any(
        all(r["seconds"] is not None for r in group) for group in _lengths_with_both(runs)),
    "a length with both strategies, one unmeasured": lambda runs: any(
        any(r["seconds"] is None for r in group) for group in _lengths_with_both(runs)),
    "a padded run with no real token (gain None)": lambda runs: any(
        r["strategy"] == "padded" and r["real_tokens"] == 0 and r["seconds"] is not None for r in runs),
    "a run without padding": lambda runs: any(r["real_tokens"] == r["token_slots"] for r in runs),
    "int seconds": lambda runs: any(type(r["seconds"]) is int for r in runs),
    "runs not in sorted order": lambda runs: [(r["max_length"], r["strategy"]) for r in runs] != sorted(
        (r["max_length"], r["strategy"]) for r in runs),
})

# %% hidden exercise=waste_report points=2 name=generated_invalid_runs_agree_with_reference
# hint: one broken field in any run, or a repeated pair: ValueError, like the reference.
from hypothesis import strategies as st

_fields = {"strategy": ["", "Packed", None, 1], "max_length": [0, -8, True, 64.0, "64"], "real_tokens": [-1, 9999, 3.0, False],
           "token_slots": [0, -1, 2.5, None, True], "seconds": [0, -0.0, -0.5, float("nan"), float("inf"), True, "1.0"]}


from tools.course.grader.clauses import each_of

_breaks = ([(field, value) for field in sorted(_fields) for value in _fields[field]]
           + [("repeat", None), ("missing", None), ("extra", None), ("not_a_list", None), ("empty", None),
              ("not_a_dict", None)] + [("valid", n) for n in range(16)]
           + [("seconds", value, at) for value in (float("nan"), float("inf")) for at in (0, 1, 2)])


def _broken_runs(entry, rng):
    """Valid runs, or runs with exactly this break in the first, an inner or the last run (a token_slots of
    True comes with real_tokens 0)."""
    kind, value, *at = entry  # `at`: the run the break sits in, when the entry fixes it
    runs = [{"strategy": strategy, "max_length": length, "real_tokens": 32, "token_slots": 64,
             "seconds": rng.choice([1.0, None, 3])} for strategy, length in (("padded", 64), ("packed", 64), ("packed", 256))]
    where = at[0] if at else rng.randint(0, 2)
    if kind == "valid":
        runs[where]["max_length"] = rng.choice([16, 64, 128])
    elif kind == "not_a_list":
        return (tuple(runs),)
    elif kind == "empty":
        return ([],)
    elif kind == "not_a_dict":
        runs[where] = list(runs[where].items())
    elif kind == "repeat":
        runs.append(dict(runs[where]))
    elif kind == "missing":
        del runs[where]["seconds"]
    elif kind == "extra":
        runs[where]["rows"] = 1
    else:
        runs[where][kind] = value
        if kind == "token_slots" and value is True:
            runs[where]["real_tokens"] = 0
    return (runs,)


from tools.course.grader.clauses import is_bool, not_a_number, not_finite

_keys = {"strategy", "max_length", "real_tokens", "token_slots", "seconds"}


def _dict_runs(runs):
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, (list, tuple)) else []


def _field(runs, key, test):
    return any(key in r and test(r[key]) for r in _dict_runs(runs))


reference.agrees("waste_report", each_of(_breaks, _broken_runs, variants=2), cases=2 * len(_breaks), clauses={
    "runs not a list": lambda runs: not isinstance(runs, list),
    "no run": lambda runs: runs == [],
    "a run that is not a dict": lambda runs: isinstance(runs, list) and any(not isinstance(r, dict) for r in runs),
    "a missing or extra key": lambda runs: any(set(r) != _keys for r in _dict_runs(runs)),
    "an unknown strategy": lambda runs: _field(runs, "strategy", lambda v: v not in ("padded", "packed")),
    **{f"a {key} that is a bool": (lambda key: lambda runs: _field(runs, key, is_bool))(key)
       for key in ("max_length", "real_tokens", "token_slots", "seconds")},
    **{f"a {key} that is not an int": (lambda key: lambda runs: _field(runs, key, lambda v: not isinstance(v, int)))(key)
       for key in ("max_length", "real_tokens", "token_slots")},
    "a max_length < 1": lambda runs: _field(runs, "max_length", lambda v: type(v) is int and v < 1),
    "a negative real_tokens": lambda runs: _field(runs, "real_tokens", lambda v: type(v) is int and v < 0),
    "a token_slots < 1": lambda runs: _field(runs, "token_slots", lambda v: type(v) is int and v < 1),
    "real_tokens above token_slots": lambda runs: any(
        type(r.get("real_tokens")) is int and type(r.get("token_slots")) is int and r["real_tokens"] > r["token_slots"]
        for r in _dict_runs(runs)),
    "seconds <= 0": lambda runs: _field(runs, "seconds", lambda v: not is_bool(v) and isinstance(v, (int, float)) and v <= 0),
    "seconds not finite": lambda runs: _field(runs, "seconds", not_finite),
    "seconds not a number": lambda runs: _field(runs, "seconds", lambda v: v is not None and not_a_number(v)),
    "a repeated (strategy, max_length) pair": lambda runs: len(
        [(r.get("strategy"), r.get("max_length")) for r in _dict_runs(runs)]) > len(
        {(r.get("strategy"), repr(r.get("max_length"))) for r in _dict_runs(runs)}),
})
