# %% hidden exercise=build_sft_example points=1 name=headers_default_system_and_separators_are_masked
# hint: the template adds a default system turn and a "<|im_start|>role\n" header before every turn; none of these, nor the newline after <|im_end|>, is something the model should learn to generate.
_messages = [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "content": "The answer is 42."}]
_example = build_sft_example(_messages, TOKENIZER)
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
_result = shifted_token_nll(_logits, _labels)
_targets = _labels[:, 1:]
_expected = F.cross_entropy(_logits[:, :-1].reshape(-1, 7), _targets.reshape(-1), ignore_index=-100,
                            reduction="none").reshape(2, 4)
assert torch.allclose(_result["token_nll"], _expected, atol=1e-6)
assert _result["mask"].tolist() == [[True, True, False, False], [False, True, True, True]]
assert _result["supervised_tokens"] == 5 and _result["unpredicted_labels"] == 0

# %% hidden exercise=shifted_token_nll points=1 name=gradients_reach_only_predicting_positions
# hint: the result must stay differentiable, and only positions whose next token is supervised may receive a gradient; the last position predicts nothing.
_logits = torch.randn(1, 4, 5, requires_grad=True)
_result = shifted_token_nll(_logits, torch.tensor([[-100, -100, 2, 4]]))
assert _result["token_nll"].requires_grad
_result["token_nll"].sum().backward()
_norms = _logits.grad.abs().sum(dim=-1)[0]
assert _norms[0].item() == 0.0 and _norms[3].item() == 0.0
assert _norms[1].item() > 0.0 and _norms[2].item() > 0.0

# %% hidden exercise=shifted_token_nll points=1 name=low_precision_logits_are_scored_in_float32
# hint: half-precision logits are upcast before the softmax, and the per-token result is float32.
torch.manual_seed(1)
_logits32 = torch.randn(1, 6, 11) * 4
_labels = torch.tensor([[-100, 1, 2, 3, 4, 5]])
_half = shifted_token_nll(_logits32.to(torch.bfloat16), _labels)
assert _half["token_nll"].dtype == torch.float32
_reference = F.cross_entropy(_logits32.to(torch.bfloat16).float()[0, :-1], _labels[0, 1:], reduction="none")
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
_nll = torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]], requires_grad=True)
_mask = torch.tensor([[True, False], [False, True]])
for _mode, _value in (("token", 2.0), ("sample", 2.0)):
    _result = reduce_sft_loss(_nll, _mask, _mode)
    assert math.isfinite(_result["loss"].item()) and math.isclose(_result["loss"].item(), _value, rel_tol=1e-6)
    assert _result["per_sample_loss"] == [1.0, 3.0]
_result["loss"].backward()
assert torch.isfinite(_nll.grad).all()

# %% hidden exercise=reduce_sft_loss points=1 name=weights_sum_to_one_and_reproduce_the_loss
# hint: the weights are zero outside the mask and sum to one in both modes, and the weighted sum of the masked losses is exactly the loss.
torch.manual_seed(2)
_nll = torch.rand(4, 6) * 5
_mask = torch.tensor([[True] * 6, [True, False, False, False, False, False], [False] * 3 + [True] * 3, [True, True] + [False] * 4])
for _mode in ("token", "sample"):
    _result = reduce_sft_loss(_nll, _mask, _mode)
    _weights = _result["token_weights"]
    assert tuple(_weights.shape) == (4, 6)
    assert torch.all(_weights[~_mask] == 0)
    assert math.isclose(float(_weights.sum()), 1.0, rel_tol=1e-5)
    assert math.isclose(float((_weights * torch.where(_mask, _nll, torch.zeros_like(_nll))).sum()),
                        _result["loss"].item(), rel_tol=1e-5)
    assert all(math.isclose(a, float(b), rel_tol=1e-5) for a, b in zip(_result["sample_weights"], _weights.sum(dim=1)))
assert math.isclose(reduce_sft_loss(_nll, _mask, "token")["loss"].item(), float(_nll[_mask].mean()), rel_tol=1e-5)

# %% hidden exercise=reduce_sft_loss points=1 name=loss_keeps_its_gradient_in_token_mode
# hint: return a tensor that is still connected to the graph; the gradient of the per-token loss is one over the number of supervised tokens at every supervised position.
_nll = torch.tensor([[0.5, 1.5, 2.5], [3.5, 0.0, 0.0]], requires_grad=True)
_mask = torch.tensor([[True, True, True], [True, False, False]])
_result = reduce_sft_loss(_nll, _mask, "token")
assert isinstance(_result["loss"], torch.Tensor) and _result["loss"].dim() == 0 and _result["loss"].requires_grad
_result["loss"].backward()
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
assert _glued.decode([t for t in _aligned["labels"] if t != -100]) == "5<|im_end|>"

# %% hidden exercise=build_sft_example points=1 name=messages_are_not_modified_and_types_are_plain
# hint: never write into the caller's messages; return plain Python lists of ints (not tensors, not tuples) and ints for the counts.
import copy
_messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Compute 2 + 2."},
             {"role": "assistant", "content": "4", "name": "calc"}]
_snapshot = copy.deepcopy(_messages)
_example = build_sft_example(_messages, TOKENIZER, max_length=40)
assert _messages == _snapshot
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
reference.agrees("build_sft_example", _calls, cases=50, check_inputs=False)

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
reference.agrees("build_sft_example", st.tuples(_messages, st.just(TOKENIZER), _lengths), cases=150, check_inputs=False)

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
reference.agrees("shifted_token_nll", _calls, cases=100)

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
reference.agrees("shifted_token_nll", st.tuples(_logits, _labels, _ignore), cases=150)

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
reference.agrees("reduce_sft_loss", _calls, cases=150)

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
reference.agrees("reduce_sft_loss", st.tuples(_nll, _mask, _mode), cases=150)
