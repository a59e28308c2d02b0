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
