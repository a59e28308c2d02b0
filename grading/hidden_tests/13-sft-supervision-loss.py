# %% hidden exercise=build_sft_example points=1 name=headers_default_system_and_separators_are_masked
# hint: the template adds a default system turn and a "<|im_start|>role\n" header before every turn; none of these, nor the newline after <|im_end|>, is something the model should learn to generate.
_messages = [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "content": "The answer is 42."}]
_example = build_sft_example([dict(message) for message in _messages], TOKENIZER)
_ids, _labels = _example["input_ids"], _example["labels"]
_rendered = TOKENIZER.apply_chat_template(_messages, tokenize=False)
assert _ids == TOKENIZER(_rendered, add_special_tokens=False)["input_ids"]
_prompt_ids = TOKENIZER(TOKENIZER.apply_chat_template(_messages[:1], tokenize=False, add_generation_prompt=True),
                        add_special_tokens=False)["input_ids"]
assert _labels[:len(_prompt_ids)] == [-100] * len(_prompt_ids)
_kept = [token for token in _labels if token != -100]
assert TOKENIZER.decode(_kept) == "The answer is 42.<|im_end|>"
assert _labels[-1] == -100 and TOKENIZER.decode(_ids[-1:]) == "\n"
assert _example["assistant_spans"] == [[len(_prompt_ids), len(_ids) - 1]]

# %% hidden exercise=build_sft_example points=1 name=every_reply_of_a_long_dialogue_is_supervised
# hint: supervise every assistant turn, not only the last one, and nothing of the user turns between them; spans come in message order.
_messages = [{"role": "user", "content": "Compute 1 + 1."}, {"role": "assistant", "content": "2"},
             {"role": "user", "content": "Compute 2 + 2."}, {"role": "assistant", "content": "4"},
             {"role": "user", "content": "Compute 3 + 3."}, {"role": "assistant", "content": "6"}]
_example = build_sft_example(_messages, TOKENIZER)
_spans = _example["assistant_spans"]
assert [TOKENIZER.decode(_example["input_ids"][s:e]) for s, e in _spans] == ["2<|im_end|>", "4<|im_end|>", "6<|im_end|>"]
_inside = {position for s, e in _spans for position in range(s, e)}
assert all((_example["labels"][i] != -100) == (i in _inside) for i in range(len(_example["labels"])))
assert _example["supervised_tokens"] == 6
_user_text = TOKENIZER.decode([_example["input_ids"][i] for i in range(_spans[0][1], _spans[1][0])])
assert "Compute 2 + 2." in _user_text

# %% hidden exercise=build_sft_example points=1 name=empty_reply_still_teaches_to_stop
# hint: an assistant turn with empty content still ends with the end-of-turn token, and that token is exactly what teaches the model to stop.
_example = build_sft_example([{"role": "system", "content": "Say nothing."}, {"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": ""}], TOKENIZER)
_kept = [token for token in _example["labels"] if token != -100]
assert _kept == [TOKENIZER.eos_token_id]
assert _example["supervised_tokens"] == 1
_start, _end = _example["assistant_spans"][0]
assert _end - _start == 1

# %% hidden exercise=build_sft_example points=1 name=truncation_reports_the_lost_supervision
# hint: cut input_ids and labels to the same first max_length tokens; count supervision after the cut and report what the cut removed, while the spans still describe the full conversation.
_messages = [{"role": "user", "content": "Compute 12 + 30."}, {"role": "assistant", "content": "12 + 30 = 42."}]
_full = build_sft_example(_messages, TOKENIZER)
_start, _end = _full["assistant_spans"][0]
_cut = build_sft_example(_messages, TOKENIZER, max_length=_start + 3)
assert _cut["input_ids"] == _full["input_ids"][:_start + 3] and _cut["labels"] == _full["labels"][:_start + 3]
assert _cut["supervised_tokens"] == 3
assert _cut["truncated_supervised_tokens"] == _full["supervised_tokens"] - 3
assert _cut["assistant_spans"] == _full["assistant_spans"]
_long = build_sft_example(_messages, TOKENIZER, max_length=len(_full["input_ids"]) + 50)
assert _long["input_ids"] == _full["input_ids"] and _long["truncated_supervised_tokens"] == 0
_none = build_sft_example(_messages, TOKENIZER, max_length=_start)
assert _none["supervised_tokens"] == 0 and _none["truncated_supervised_tokens"] == _full["supervised_tokens"]

# %% hidden exercise=build_sft_example points=1 name=invalid_conversations_and_lengths_are_refused
# hint: check the roles, their order and the contents before rendering anything, and accept only None or a positive int as max_length.
_ok = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
_cases = [
    ([], None),
    ([{"role": "assistant", "content": "Hello"}], None),
    ([{"role": "system", "content": "S"}, {"role": "assistant", "content": "Hello"}], None),
    ([{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}, {"role": "assistant", "content": "Hello"}], None),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}], None),
    ([{"role": "user", "content": "Hi"}, {"role": "system", "content": "late"}, {"role": "assistant", "content": "Hello"}], None),
    ([{"role": "user", "content": "Hi"}, {"role": "user", "content": "Still there?"}], None),
    (_ok, 0),
    (_ok, True),
    (_ok, 2.5),
]
_valid = build_sft_example(_ok + [{"role": "user", "content": "Again"}, {"role": "assistant", "content": ""}], TOKENIZER)
assert len(_valid["assistant_spans"]) == 2 and _valid["truncated_supervised_tokens"] == 0, _valid  # a valid call
for _messages, _max_length in _cases:
    try:
        build_sft_example(_messages, TOKENIZER, max_length=_max_length)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: {_messages!r}, max_length={_max_length!r}")

# %% hidden exercise=shifted_token_nll points=1 name=batch_matches_cross_entropy_on_shifted_pairs
# hint: every row of the batch is shifted the same way: compare the logits of position t with the label of position t + 1, in every row.
torch.manual_seed(0)
_logits = torch.randn(2, 5, 7)
_labels = torch.tensor([[-100, 3, 4, -100, -100], [-100, -100, 6, 0, 2]])
_result = shifted_token_nll(_logits.clone(), _labels.clone())
_targets = _labels[:, 1:]
_expected = F.cross_entropy(_logits[:, :-1].reshape(-1, 7), _targets.reshape(-1), ignore_index=-100,
                            reduction="none").reshape(2, 4)
assert torch.allclose(_result["token_nll"], _expected, atol=1e-6)
assert _result["mask"].tolist() == [[True, True, False, False], [False, True, True, True]]
assert _result["supervised_tokens"] == 5 and _result["unpredicted_labels"] == 0

# %% hidden exercise=shifted_token_nll points=1 name=gradients_reach_only_predicting_positions
# hint: the result must stay differentiable, and only positions whose next token is supervised may receive a gradient; the last position predicts nothing.
from tools.course.grader.boundary import backward_through

_logits = torch.randn(1, 4, 5, requires_grad=True)
_result = backward_through(shifted_token_nll, _logits, torch.tensor([[-100, -100, 2, 4]]), select=["token_nll"],
                           reduce="sum")
assert _result["token_nll"].requires_grad
_norms = _logits.grad.abs().sum(dim=-1)[0]
assert _norms[0].item() == 0.0 and _norms[3].item() == 0.0
assert _norms[1].item() > 0.0 and _norms[2].item() > 0.0

# %% hidden exercise=shifted_token_nll points=1 name=low_precision_logits_are_scored_in_float32
# hint: half-precision logits are upcast before the softmax, and the per-token result is float32.
torch.manual_seed(1)
_logits32 = torch.randn(1, 6, 11) * 4
_labels = torch.tensor([[-100, 1, 2, 3, 4, 5]])
_reference = F.cross_entropy(_logits32.to(torch.bfloat16).float()[0, :-1], _labels[0, 1:], reduction="none")
_half = shifted_token_nll(_logits32.to(torch.bfloat16), _labels)
assert _half["token_nll"].dtype == torch.float32
assert torch.allclose(_half["token_nll"][0], _reference, atol=1e-5)

# %% hidden exercise=shifted_token_nll points=1 name=custom_ignore_index_and_column_zero_labels
# hint: the ignored value is a parameter; labels in the first column are counted separately because nothing predicts them, in every row.
_logits = torch.zeros(3, 3, 4)
_labels = torch.tensor([[1, -1, 2], [-1, 3, -1], [0, 0, 0]])
_result = shifted_token_nll(_logits, _labels, ignore_index=-1)
assert _result["mask"].tolist() == [[False, True], [True, False], [True, True]]
assert _result["supervised_tokens"] == 4 and _result["unpredicted_labels"] == 2
assert torch.allclose(_result["token_nll"][_result["mask"]], torch.full((4,), math.log(4.0)))
assert _result["token_nll"][0, 0].item() == 0.0

# %% hidden exercise=shifted_token_nll points=1 name=invalid_shapes_types_and_targets_are_refused
# hint: validate shapes and dtypes first, and refuse a supervised target that is not a valid vocabulary index.
_logits = torch.zeros(1, 4, 5)
_cases = [
    (torch.zeros(4, 5), torch.tensor([[1, 2, 3, 4]])),
    (_logits, torch.tensor([1, 2, 3, 4])),
    (_logits, torch.tensor([[1.0, 2.0, 3.0, 4.0]])),
    (_logits, torch.tensor([[1, 2, 3]])),
    (torch.zeros(2, 4, 5), torch.tensor([[1, 2, 3, 4]])),
    (torch.zeros(1, 4, 5, dtype=torch.long), torch.tensor([[1, 2, 3, 4]])),
    (_logits, torch.tensor([[-100, 5, 1, 1]])),
    (_logits, torch.tensor([[-100, -7, 1, 1]])),
]
_valid = shifted_token_nll(_logits, torch.tensor([[9, 4, -100, 0]]))  # a label in column 0 is never a target
assert _valid["supervised_tokens"] == 2 and _valid["unpredicted_labels"] == 1, _valid
for _bad_logits, _bad_labels in _cases:
    try:
        shifted_token_nll(_bad_logits, _bad_labels)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: logits {tuple(_bad_logits.shape)}, labels {_bad_labels.tolist()}")

# %% hidden exercise=reduce_sft_loss points=1 name=empty_samples_are_left_out_of_the_sample_mean
# hint: a sample without supervised tokens has no mean loss and no weight; the per-sample average is over the samples that have at least one token.
_nll = torch.tensor([[4.0, 2.0, 0.0], [9.0, 9.0, 9.0], [1.0, 0.0, 0.0]])
_mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
_result = reduce_sft_loss(_nll, _mask, "sample")
assert math.isclose(_result["loss"].item(), 2.0, rel_tol=1e-6)
assert _result["per_sample_loss"] == [3.0, None, 1.0]
assert _result["empty_samples"] == [1]
assert [round(w, 6) for w in _result["sample_weights"]] == [0.5, 0.0, 0.5]
_token = reduce_sft_loss(_nll, _mask, "token")
assert math.isclose(_token["loss"].item(), 7.0 / 3.0, rel_tol=1e-6) and _token["empty_samples"] == [1]

# %% hidden exercise=reduce_sft_loss points=1 name=masked_nan_and_inf_never_reach_the_loss
# hint: values outside the mask may be nan or inf; multiplying them by a zero weight is not enough, they have to be replaced before any arithmetic.
from tools.course.grader.boundary import backward_through

_nll = torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]], requires_grad=True)
_mask = torch.tensor([[True, False], [False, True]])
for _mode, _value in (("token", 2.0), ("sample", 2.0)):
    _result = reduce_sft_loss(_nll, _mask, _mode)
    assert math.isfinite(_result["loss"].item()) and math.isclose(_result["loss"].item(), _value, rel_tol=1e-6)
    assert _result["per_sample_loss"] == [1.0, 3.0]
backward_through(reduce_sft_loss, _nll, _mask, "sample", select=["loss"], reduce=None)
assert torch.isfinite(_nll.grad).all()

# %% hidden exercise=reduce_sft_loss points=1 name=weights_sum_to_one_and_reproduce_the_loss
# hint: the weights are zero outside the mask and sum to one in both modes, and the weighted sum of the masked losses is exactly the loss.
torch.manual_seed(2)
_nll = torch.rand(4, 6) * 5
_mask = torch.tensor([[True] * 6, [True, False, False, False, False, False], [False] * 3 + [True] * 3, [True, True] + [False] * 4])
for _mode in ("token", "sample"):
    _result = reduce_sft_loss(_nll.clone(), _mask.clone(), _mode)
    _weights = _result["token_weights"]
    assert tuple(_weights.shape) == (4, 6)
    assert torch.all(_weights[~_mask] == 0)
    assert math.isclose(float(_weights.sum()), 1.0, rel_tol=1e-5)
    assert math.isclose(float((_weights * torch.where(_mask, _nll, torch.zeros_like(_nll))).sum()),
                        _result["loss"].item(), rel_tol=1e-5)
    assert all(math.isclose(a, float(b), rel_tol=1e-5) for a, b in zip(_result["sample_weights"], _weights.sum(dim=1)))
assert math.isclose(reduce_sft_loss(_nll.clone(), _mask.clone(), "token")["loss"].item(), float(_nll[_mask].mean()),
                    rel_tol=1e-5)

# %% hidden exercise=reduce_sft_loss points=1 name=loss_keeps_its_gradient_in_token_mode
# hint: return a tensor that is still connected to the graph; the gradient of the per-token loss is one over the number of supervised tokens at every supervised position.
_nll = torch.tensor([[0.5, 1.5, 2.5], [3.5, 0.0, 0.0]], requires_grad=True)
_mask = torch.tensor([[True, True, True], [True, False, False]])
from tools.course.grader.boundary import backward_through

_result = backward_through(reduce_sft_loss, _nll, _mask, "token", select=["loss"], reduce=None)
assert isinstance(_result["loss"], torch.Tensor) and _result["loss"].dim() == 0 and _result["loss"].requires_grad
assert torch.allclose(_nll.grad, torch.tensor([[0.25, 0.25, 0.25], [0.25, 0.0, 0.0]]))

# %% hidden exercise=reduce_sft_loss points=1 name=invalid_modes_masks_and_shapes_are_refused
# hint: accept only the two documented modes, a bool mask of the same 2-D shape, and a batch with at least one supervised token.
_nll = torch.ones(2, 3)
_mask = torch.ones(2, 3, dtype=torch.bool)
_cases = [
    (_nll, _mask, "mean"),
    (_nll, _mask.float(), "token"),
    (_nll, _mask.long(), "sample"),
    (_nll, _mask[:, :2], "token"),
    (torch.ones(6), torch.ones(6, dtype=torch.bool), "token"),
    (_nll, torch.zeros(2, 3, dtype=torch.bool), "sample"),
]
_valid = reduce_sft_loss(_nll, torch.tensor([[True, False, False], [False, False, False]]), "sample")  # a valid call
assert _valid["empty_samples"] == [1] and _valid["sample_weights"] == [1.0, 0.0], _valid
for _bad_nll, _bad_mask, _mode in _cases:
    try:
        reduce_sft_loss(_bad_nll, _bad_mask, _mode)
    except ValueError:
        continue
    raise AssertionError(f"invalid input accepted: mode {_mode!r}, mask dtype {_bad_mask.dtype}, shape {tuple(_bad_mask.shape)}")

# %% hidden exercise=build_sft_example points=1 name=misaligned_template_prefix_is_refused
# hint: when a template glues the reply to its header so that the rendered prefix's tokens are not a prefix of the whole conversation's tokens, the boundary would be wrong: refuse with ValueError instead of returning shifted labels.
import copy
_glued = copy.deepcopy(TOKENIZER)
_glued.chat_template = ("{%- for message in messages -%}{{ '<|im_start|>' + message['role'] + message['content'] + "
                        "'<|im_end|>\\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant' }}{%- endif -%}")
try:
    build_sft_example([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "ed"}], _glued)
except ValueError:
    pass
else:
    raise AssertionError("a reply whose first token merges with the template's header was accepted")
_aligned = build_sft_example([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "5"}], _glued)
assert TOKENIZER.decode([t for t in _aligned["labels"] if t != -100]) == "5<|im_end|>"

# %% hidden exercise=build_sft_example points=1 name=messages_are_not_modified_and_types_are_plain
# hint: never write into the caller's messages; return plain Python lists of ints (not tensors, not tuples) and ints for the counts.
import copy
_messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 2 + 2."},
             {"role": "assistant", "content": "4", "name": "calc"}]
_snapshot = copy.deepcopy(_messages)
_example = build_sft_example(_messages, TOKENIZER, max_length=40)
assert _messages == _snapshot
_rendered = TOKENIZER(TOKENIZER.apply_chat_template(_snapshot, tokenize=False), add_special_tokens=False)["input_ids"]
assert _example["input_ids"] == list(_rendered[:40]), "the ids of this conversation, cut to max_length"
assert type(_example["input_ids"]) is list and type(_example["labels"]) is list
assert all(type(value) is int for value in _example["input_ids"] + _example["labels"])
assert type(_example["supervised_tokens"]) is int and type(_example["truncated_supervised_tokens"]) is int
assert all(type(span) is list and len(span) == 2 for span in _example["assistant_spans"])

# %% hidden exercise=build_sft_example points=1 name=generated_valid_conversations_match_the_reference
# hint: on any valid conversation (optional system turn, several user and assistant turns, empty replies, tabs, newlines, full-width text, ligatures, extra keys, any max_length) the ids, labels, spans and counts are exactly the reference's.
from hypothesis import strategies as st
_contents = st.one_of(
    st.sampled_from(["42", "", "Compute 12 + 30.", "The answer is 42.", "  spaced  ", "tab\there", "two\nlines", "\n",
                     "Ｆｕｌｌ ｗｉｄｔｈ １２", "ﬁne", "中文回答", "5 * 3 = 15", "ed"]),
    st.text(max_size=6).filter(lambda text: "<|" not in text))


def _conversation(has_system, middle, tail, contents, name):
    roles = (["system"] if has_system else []) + ["user"] + middle + ["assistant"] + tail
    messages = [{"role": role, "content": contents[index % len(contents)]} for index, role in enumerate(roles)]
    if name:
        messages[-1]["name"] = "calc"
    return messages


_conversations = st.tuples(st.booleans(), st.lists(st.sampled_from(["user", "assistant"]), max_size=3),
                           st.sampled_from([[], ["user"]]), st.lists(_contents, min_size=1, max_size=5),
                           st.booleans()).map(lambda drawn: _conversation(*drawn))
_lengths = st.one_of(st.none(), st.integers(1, 70))
_calls = st.one_of(st.tuples(_conversations, st.just(TOKENIZER), _lengths),
                   st.tuples(st.tuples(_conversations, st.just(TOKENIZER)), st.fixed_dictionaries({"max_length": _lengths})))
def _messages_of(*args, **kwargs):
    return args[0]


def _length_of(*args, **kwargs):
    return args[2] if len(args) > 2 else kwargs.get("max_length")


reference.agrees("build_sft_example", _calls, cases=50, check_inputs=False, clauses={
    "a system turn first": lambda *a, **k: _messages_of(*a, **k)[0]["role"] == "system",
    "several assistant replies": lambda *a, **k: sum(m["role"] == "assistant" for m in _messages_of(*a, **k)) > 1,
    "an empty reply": lambda *a, **k: any(m["role"] == "assistant" and m["content"] == "" for m in _messages_of(*a, **k)),
    "a user turn last": lambda *a, **k: _messages_of(*a, **k)[-1]["role"] == "user",
    "a max_length that cuts the conversation": lambda *a, **k: _length_of(*a, **k) is not None and _length_of(*a, **k) < 30,
    "no max_length": lambda *a, **k: _length_of(*a, **k) is None,
    "max_length by keyword": lambda *a, **k: "max_length" in k,
    "non-ASCII content": lambda *a, **k: any(not m["content"].isascii() for m in _messages_of(*a, **k)),
    "an extra message key": lambda *a, **k: any("name" in m for m in _messages_of(*a, **k)),
})

# %% hidden exercise=build_sft_example points=1 name=generated_invalid_conversations_raise_as_the_reference
# hint: check every message and every argument before rendering: non-list or empty conversations, non-dict messages, missing keys, unknown or miscased roles, non-text contents, a late system turn, an assistant or system turn first, no assistant turn, and a max_length that is not None or a positive int (bools, floats, text) each give a ValueError.
from hypothesis import strategies as st
_good = st.sampled_from([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                         {"role": "system", "content": "Be brief."}, {"role": "user", "content": "\tＴａｂ\n"}])
_bad = st.sampled_from([{"role": "tool", "content": "x"}, {"role": "User", "content": "x"}, {"role": "", "content": "x"},
                        {"role": None, "content": "x"}, {"role": ["user"], "content": "x"}, {"role": "user"},
                        {"content": "x"}, {"role": "user", "content": None}, {"role": "assistant", "content": 5},
                        {"role": "assistant", "content": ["a"]}, "user: hi", None, ("user", "hi")])
_valid = st.sampled_from([[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                          [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": ""}]])
_messages = st.one_of(st.lists(st.one_of(_good, _good, _good, _bad), max_size=4), _valid, _valid, st.none(),
                      st.just(()), st.tuples(_good, _good), st.just("user: hi"), st.just({"role": "user", "content": "Hi"}))
_lengths = st.one_of(st.none(), st.integers(-2, 30), st.booleans(), st.sampled_from([2.5, "8", 8.0, float("nan")]))
from tools.course.grader.clauses import dicts, is_bool


def _roles(messages):
    return [m.get("role") for m in dicts(messages)]


def _well_formed(messages):
    return isinstance(messages, list) and all(
        isinstance(m, dict) and m.get("role") in ("system", "user", "assistant") and isinstance(m.get("content"), str)
        for m in messages)


_orders = st.permutations([{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}])  # any turn order
reference.agrees("build_sft_example", st.one_of(st.tuples(_messages, st.just(TOKENIZER), _lengths),
                                                st.tuples(_orders, st.just(TOKENIZER), st.none())), cases=200,
                 check_inputs=False, clauses={
    "messages not a list (a tuple, a dict, a str, None)": lambda m, t, n: not isinstance(m, list),
    "no message": lambda m, t, n: isinstance(m, (list, tuple)) and len(m) == 0,
    "a message that is not a dict": lambda m, t, n: isinstance(m, list) and any(not isinstance(x, dict) for x in m),
    "a message without role or content": lambda m, t, n: any("role" not in x or "content" not in x for x in dicts(m)),
    "an unknown or miscased role": lambda m, t, n: any(
        "role" in x and x["role"] not in ("system", "user", "assistant") for x in dicts(m)),
    "content that is not a str": lambda m, t, n: any("content" in x and not isinstance(x["content"], str) for x in dicts(m)),
    "a system turn after the first position": lambda m, t, n: _well_formed(m) and "system" in _roles(m)[1:],
    "an assistant turn before any user turn": lambda m, t, n: _well_formed(m) and [r for r in _roles(m) if r != "system"][
        :1] == ["assistant"],
    "no assistant turn": lambda m, t, n: _well_formed(m) and bool(m) and "assistant" not in _roles(m),
    "a max_length that is a bool": lambda m, t, n: is_bool(n),
    "a max_length < 1": lambda m, t, n: type(n) is int and n < 1,
    "a max_length that is not an int": lambda m, t, n: n is not None and not isinstance(n, int),
})

# %% hidden exercise=shifted_token_nll points=1 name=generated_valid_logits_and_labels_match_the_reference
# hint: on any valid batch (float16, bfloat16, float32 or float64 logits, nan and infinities among them, int8 to int64 labels with ignored positions, a custom or default ignore_index, a vocabulary of one) the float32 losses, the bool mask and the two Python int counts are exactly the reference's.
import torch
from hypothesis import strategies as st
_specials = st.lists(st.tuples(st.integers(0, 31), st.sampled_from([float("nan"), float("inf"), -float("inf")])),
                     max_size=2)


def _call(dims, values, specials, targets, logits_dtype, labels_dtype, ignore, how, grad):
    batch, time, vocab = dims
    for position, special in specials:
        values[position % len(values)] = special
    logits = torch.tensor(values, dtype=torch.float32).reshape(batch, time, vocab).to(logits_dtype)
    logits.requires_grad_(grad)
    labels = torch.tensor([ignore if target is None else target for target in targets]).reshape(batch, time)
    labels = labels.to(labels_dtype)
    if how == "keyword":
        return (logits, labels), {"ignore_index": ignore}
    return ((logits, labels, ignore), {}) if how == "positional" or ignore != -100 else ((logits, labels), {})


_calls = st.tuples(st.integers(1, 2), st.integers(2, 4), st.integers(1, 4)).flatmap(lambda dims: st.tuples(
    st.just(dims),
    st.lists(st.floats(-1, 1, width=32), min_size=dims[0] * dims[1] * dims[2], max_size=dims[0] * dims[1] * dims[2]),
    _specials,
    st.lists(st.one_of(st.none(), st.integers(0, dims[2] - 1)), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]),
    st.sampled_from([torch.int64, torch.int32, torch.int16, torch.int8]),
    st.sampled_from([-100, -100, -1]), st.sampled_from(["default", "positional", "keyword"]), st.booleans(),
).map(lambda drawn: _call(*drawn)))
def _tensors(*args, **kwargs):
    ignore = args[2] if len(args) > 2 else kwargs.get("ignore_index", -100)
    return args[0], args[1], ignore


reference.agrees("shifted_token_nll", _calls, cases=100, clauses={
    "nan or inf in the logits": lambda *a, **k: not bool(torch.isfinite(_tensors(*a, **k)[0].float()).all()),
    "nan or inf at an ignored position": lambda *a, **k: any(
        not bool(torch.isfinite(_tensors(*a, **k)[0][b, t].float()).all())
        for b, t in (_tensors(*a, **k)[1][:, 1:] == _tensors(*a, **k)[2]).nonzero().tolist()),
    "a custom ignore_index": lambda *a, **k: _tensors(*a, **k)[2] != -100,
    "ignore_index by keyword": lambda *a, **k: "ignore_index" in k,
    "half-precision logits": lambda *a, **k: _tensors(*a, **k)[0].dtype in (torch.float16, torch.bfloat16),
    "narrow integer labels": lambda *a, **k: _tensors(*a, **k)[1].dtype in (torch.int8, torch.int16, torch.int32),
    "a vocabulary of one": lambda *a, **k: _tensors(*a, **k)[0].shape[-1] == 1,
    "a supervised label in column 0": lambda *a, **k: bool((_tensors(*a, **k)[1][:, 0] != _tensors(*a, **k)[2]).any()),
    "logits that require grad": lambda *a, **k: _tensors(*a, **k)[0].requires_grad,
})

# %% hidden exercise=shifted_token_nll points=1 name=generated_invalid_logits_and_labels_raise_as_the_reference
# hint: check both tensors and ignore_index before computing: logits that are not a 3-D floating tensor (integer, bool, complex, lists, 2-D or 4-D, an empty vocabulary), labels that are not a 2-D integer tensor (float, bool, lists), batch or time sizes that differ, a single position, a target outside the vocabulary, and an ignore_index that is a bool, a float or text each give a ValueError.
import torch
from hypothesis import strategies as st
_logits = st.sampled_from([torch.zeros(1, 3, 4), torch.zeros(1, 3, 4, dtype=torch.float64), torch.zeros(3, 4),
                           torch.zeros(1, 1, 3, 4), torch.zeros(1, 3, 4, dtype=torch.long),
                           torch.zeros(1, 3, 4, dtype=torch.bool), torch.zeros(1, 3, 4, dtype=torch.complex64),
                           torch.zeros(1, 3, 0), torch.zeros(2, 3, 4), torch.zeros(1, 1, 4), [[[0.0] * 4] * 3], None])
_labels = st.sampled_from([torch.tensor([[-100, 1, 2]]), torch.tensor([[-100, 1, 2]], dtype=torch.int32),
                           torch.tensor([[-100.0, 1.0, 2.0]]), torch.tensor([[True, False, True]]),
                           torch.tensor([-100, 1, 2]), torch.tensor([[[-100, 1, 2]]]), torch.tensor([[-100, 1]]),
                           torch.tensor([[-100, 4, 1]]), torch.tensor([[-100, -5, 1]]), torch.tensor([[-100]]),
                           torch.tensor([[-100, 1, 2], [0, 0, 0]]), [[-100, 1, 2]], None])
_ignore = st.sampled_from([-100, -100, -1, True, False, -100.0, "-100", None])
from tools.course.grader.clauses import is_bool


def _tensor(value):
    return isinstance(value, torch.Tensor)


def _good_logits(value):
    return _tensor(value) and value.dim() == 3 and value.is_floating_point() and value.shape[-1] >= 1


def _good_labels(value):
    return _tensor(value) and value.dim() == 2 and not value.is_floating_point() and value.dtype != torch.bool


_valid = st.tuples(st.sampled_from([torch.zeros(1, 3, 4), torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))]),
                   st.sampled_from([[[-100, 1, 3], [7, -100, 0]], [[2, 2, 2], [-100, -100, 1]]]), st.sampled_from([-100, 2])
                   ).map(lambda d: (d[0], torch.tensor(d[1])[:d[0].shape[0]], d[2]))
reference.agrees("shifted_token_nll", st.one_of(st.tuples(_logits, _labels, _ignore), _valid), cases=200, clauses={
    "logits not a tensor": lambda lg, lb, ig: not _tensor(lg),
    "logits not 3-D": lambda lg, lb, ig: _tensor(lg) and lg.dim() != 3,
    "logits of an integer, bool or complex dtype": lambda lg, lb, ig: _tensor(lg) and not lg.is_floating_point(),
    "an empty vocabulary": lambda lg, lb, ig: _tensor(lg) and lg.dim() == 3 and lg.shape[-1] == 0,
    "labels not a tensor": lambda lg, lb, ig: not _tensor(lb),
    "labels not 2-D": lambda lg, lb, ig: _tensor(lb) and lb.dim() != 2,
    "labels of a float or bool dtype": lambda lg, lb, ig: _tensor(lb) and (lb.is_floating_point() or lb.dtype == torch.bool),
    "batch or time sizes that differ": lambda lg, lb, ig: _good_logits(lg) and _good_labels(lb) and tuple(
        lg.shape[:2]) != tuple(lb.shape),
    "a single position": lambda lg, lb, ig: _good_labels(lb) and lb.shape[1] < 2,
    "a supervised target outside the vocabulary": lambda lg, lb, ig: _good_logits(lg) and _good_labels(lb) and tuple(
        lg.shape[:2]) == tuple(lb.shape) and bool(((lb[:, 1:] < 0) | (lb[:, 1:] >= lg.shape[-1]))[
        lb[:, 1:] != (ig if type(ig) is int else -100)].any()),
    "an ignore_index that is a bool": lambda lg, lb, ig: is_bool(ig),
    "an ignore_index that is not an int": lambda lg, lb, ig: not isinstance(ig, int),
})

# %% hidden exercise=reduce_sft_loss points=1 name=generated_valid_losses_and_masks_match_the_reference
# hint: on any valid float64 batch (nan or inf outside and inside the mask, empty samples, both modes given by position, by keyword or by default) the loss is a 0-dim tensor of the input's dtype, the weights a tensor, the sample weights and per-sample losses Python floats (or None), all exactly the reference's.
import torch
from hypothesis import strategies as st
_specials = st.lists(st.tuples(st.integers(0, 11), st.sampled_from([float("nan"), float("inf")])), max_size=2)


def _call(dims, values, specials, flags, mode, how, grad):
    batch, positions = dims
    for position, special in specials:
        values[position % len(values)] = special
    if not any(flags):
        flags = [True] + flags[1:]
    token_nll = torch.tensor(values, dtype=torch.float64).reshape(batch, positions).requires_grad_(grad)
    mask = torch.tensor(flags).reshape(batch, positions)
    if how == "keyword":
        return (token_nll, mask), {"mode": mode}
    return ((token_nll, mask, mode), {}) if how == "positional" or mode != "token" else ((token_nll, mask), {})


_calls = st.tuples(st.integers(1, 3), st.integers(1, 4)).flatmap(lambda dims: st.tuples(
    st.just(dims), st.lists(st.floats(0, 10), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]), _specials,
    st.lists(st.booleans(), min_size=dims[0] * dims[1], max_size=dims[0] * dims[1]),
    st.sampled_from(["token", "sample"]), st.sampled_from(["default", "positional", "keyword"]), st.booleans(),
).map(lambda drawn: _call(*drawn)))
def _parts(*args, **kwargs):
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "token")
    return args[0], args[1], mode


reference.agrees("reduce_sft_loss", _calls, cases=150, clauses={
    "sample mode": lambda *a, **k: _parts(*a, **k)[2] == "sample",
    "mode by keyword": lambda *a, **k: "mode" in k,
    "a sample without a supervised token": lambda *a, **k: bool((~_parts(*a, **k)[1]).all(dim=1).any()),
    "nan or inf outside the mask": lambda *a, **k: not bool(torch.isfinite(_parts(*a, **k)[0][~_parts(*a, **k)[1]]).all()),
    "nan or inf inside the mask": lambda *a, **k: not bool(torch.isfinite(_parts(*a, **k)[0][_parts(*a, **k)[1]]).all()),
    "samples with different supervised counts": lambda *a, **k: len(set(_parts(*a, **k)[1].sum(dim=1).tolist())) > 1,
    "a token_nll that requires grad": lambda *a, **k: _parts(*a, **k)[0].requires_grad,
})

# %% hidden exercise=reduce_sft_loss points=1 name=generated_invalid_losses_and_masks_raise_as_the_reference
# hint: check the mode and both tensors before computing: a mode other than exactly "token" or "sample" (case, spaces, None, bools, lists), a token_nll that is not a 2-D floating tensor (integer, bool, 1-D, 3-D, lists), a mask that is not a bool tensor of the same shape (float, int, uint8, lists), and a mask without any True each give a ValueError.
import torch
from hypothesis import strategies as st
_nll = st.sampled_from([torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.long),
                        torch.ones(2, 3, dtype=torch.bool), torch.ones(6, dtype=torch.float64),
                        torch.ones(1, 2, 3, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64),
                        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], None])
_mask = st.sampled_from([torch.tensor([[True, False, True], [False, False, True]]), torch.ones(2, 3, dtype=torch.bool),
                         torch.zeros(2, 3, dtype=torch.bool), torch.ones(2, 3), torch.ones(2, 3, dtype=torch.long),
                         torch.ones(2, 3, dtype=torch.uint8), torch.ones(2, 2, dtype=torch.bool),
                         [[True, False, True], [False, False, True]], None])
_mode = st.sampled_from(["token", "sample", "mean", "TOKEN", " token", "sample ", None, 0, True, ["token"]])
def _is_tensor(value):
    return isinstance(value, torch.Tensor)


_valid = st.tuples(st.sampled_from([torch.ones(2, 3, dtype=torch.float64), torch.arange(6.0).reshape(2, 3)]),
                   st.sampled_from([torch.tensor([[True, False, True], [False, False, True]]),
                                    torch.tensor([[False, False, False], [True, True, False]])]),
                   st.sampled_from(["token", "sample"]))
reference.agrees("reduce_sft_loss", st.one_of(st.tuples(_nll, _mask, _mode), _valid), cases=200, clauses={
    "a mode other than exactly token or sample": lambda nll, mask, mode: mode not in ("token", "sample"),
    "token_nll not a tensor": lambda nll, mask, mode: not _is_tensor(nll),
    "token_nll not 2-D": lambda nll, mask, mode: _is_tensor(nll) and nll.dim() != 2,
    "token_nll not floating": lambda nll, mask, mode: _is_tensor(nll) and not nll.is_floating_point(),
    "a mask that is not a tensor": lambda nll, mask, mode: not _is_tensor(mask),
    "a mask that is not bool": lambda nll, mask, mode: _is_tensor(mask) and mask.dtype != torch.bool,
    "shapes that differ": lambda nll, mask, mode: _is_tensor(nll) and _is_tensor(mask) and nll.shape != mask.shape,
    "a mask without any True": lambda nll, mask, mode: _is_tensor(mask) and mask.dtype == torch.bool and not bool(mask.any()),
})
