"""Chapter 13's library: the tokenizer through the model cache, the fixed batch and the framework check."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT
from tools.chapters import sft_supervision_loss as chapter
from tools.core.catalog import find_chapter
from tools.core.environment import installed_version
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.data.arithmetic import build_task_pool
from tools.errors import ConfigError

EXERCISES = ("build_sft_example", "shifted_token_nll", "reduce_sft_loss")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the names the notebook's setup cell imports."""
    notebook = read_notebook(find_chapter("13", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch, "F": F}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    return tiny_tokenizer


@pytest.fixture(scope="module")
def step5_model():
    """`(model, tokenizer, identity)` as the chapter's Step 5 loads them (what these tests check)."""
    return chapter.load_step5_model("tiny", "local", "cpu")


def test_tokenizer_comes_from_the_cache_or_is_built_the_same_without_a_checkout(tokenizer, monkeypatch):
    _, where = chapter.load_tiny_tokenizer()
    assert where.startswith("from the model cache")

    def no_checkout():
        raise ConfigError("cannot find the course repository")

    monkeypatch.setattr(chapter, "default_cache_dir", no_checkout)
    built, where = chapter.load_tiny_tokenizer()
    assert where.startswith("built in memory")
    conversation = [{"role": "user", "content": "Compute 12 + 30.\tＦｕｌｌ"}, {"role": "assistant", "content": "42"}]
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert built.apply_chat_template(conversation, tokenize=False) == rendered
    assert built(rendered, add_special_tokens=False)["input_ids"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert built.eos_token_id == tokenizer.eos_token_id and built.pad_token_id == tokenizer.pad_token_id


def test_token_regions_mark_replies_and_their_end_of_turn(tokenizer, reference):
    messages = [{"role": "user", "content": "Compute 9 - 4."}, {"role": "assistant", "content": "5"}]
    ids = tokenizer(tokenizer.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
    regions = chapter.token_regions(ids, tokenizer)
    supervised = [position for position, region in enumerate(regions) if region in chapter.SUPERVISED_REGIONS]
    example = reference["build_sft_example"](messages, tokenizer)
    assert supervised == [position for position, label in enumerate(example["labels"]) if label != -100]
    assert regions[0] == "header" and regions[-1] == "separator"


def test_averaging_shares_are_the_weights_reduce_sft_loss_gives(reference):
    lengths = {"short": 3, "sentence": 12, "long": 60}
    shares = chapter.averaging_shares(lengths)
    mask = torch.zeros(3, 60, dtype=torch.bool)
    for row, n in enumerate(lengths.values()):
        mask[row, :n] = True
    nll = torch.ones(3, 60, dtype=torch.float64)
    for mode, key in (("token", "token_share"), ("sample", "sample_share")):
        weights = reference["reduce_sft_loss"](nll, mask, mode)["sample_weights"]
        assert weights == pytest.approx([shares[name][key] for name in lengths])
    assert sum(share["token_share"] for share in shares.values()) == pytest.approx(1.0)


def test_fixed_batch_is_right_padded_from_the_training_seed(tokenizer, reference):
    conversations = chapter.fixed_conversations()
    eval_prompts = {task.prompt for task in build_task_pool().tasks}
    assert not any(message["content"] in eval_prompts for messages in conversations.values() for message in messages)
    examples, batch = chapter.build_fixed_batch(tokenizer, reference["build_sft_example"])
    lengths = [len(example["input_ids"]) for example in examples.values()]
    assert batch["input_ids"].shape == (3, max(lengths)) == batch["labels"].shape == batch["attention_mask"].shape
    for row, length in enumerate(lengths):
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (max(lengths) - length)
        assert (batch["labels"][row, length:] == chapter.IGNORE_INDEX).all()
        assert (batch["input_ids"][row, length:] == tokenizer.pad_token_id).all()
    assert examples["worked_answer_truncated"]["truncated_supervised_tokens"] > 0
    table = chapter.batch_table(examples, batch, reference["shifted_token_nll"], reference["reduce_sft_loss"], tokenizer)
    assert "worked_answer_truncated" in table and "effective supervised tokens" in table


def test_framework_check_matches_transformers_and_sees_a_wrong_average(step5_model, reference):
    model, model_tokenizer, _ = step5_model
    _, batch = chapter.build_fixed_batch(model_tokenizer, reference["build_sft_example"])
    result = chapter.compare_with_model_loss(model, batch, reference["shifted_token_nll"], reference["reduce_sft_loss"])
    assert result["matches_model_loss"] and result["abs_diff"] <= chapter.LOSS_TOLERANCE
    assert result["grad_max_abs_diff"] <= chapter.LOSS_TOLERANCE
    assert result["effective_supervised_tokens"] == int((batch["labels"][:, 1:] != -100).sum())

    def over_every_position(token_nll, mask, mode="token"):
        out = reference["reduce_sft_loss"](token_nll, mask, mode)
        return {**out, "loss": token_nll.masked_fill(~mask, 0).sum() / token_nll.numel()}

    wrong = chapter.compare_with_model_loss(model, batch, reference["shifted_token_nll"], over_every_position)
    assert not wrong["matches_model_loss"], "a loss divided by every position must not pass the framework check"


def test_learner_comparison_reports_stubs_and_bugs_as_data(step5_model, reference):
    model, model_tokenizer, _ = step5_model
    _, batch = chapter.build_fixed_batch(model_tokenizer, reference["build_sft_example"])

    def stub(*args, **kwargs):
        raise NotImplementedError("TODO 2 shifted_token_nll: not yet")

    def broken(*args, **kwargs):
        raise KeyError("mask")

    assert chapter.learner_comparison(model, batch, {"shifted_token_nll": stub, "reduce_sft_loss": stub}) == {
        "status": "not_implemented", "detail": "TODO 2 shifted_token_nll: not yet"}
    assert chapter.learner_comparison(model, batch, {**reference, "shifted_token_nll": broken})["status"] == "error"
    assert chapter.learner_comparison(model, batch, reference)["status"] == "matches"


def test_record_body_names_the_framework_and_holds_no_machine_path(step5_model, tokenizer, reference):
    model, model_tokenizer, identity = step5_model
    examples, batch = chapter.build_fixed_batch(model_tokenizer, reference["build_sft_example"])
    comparison = chapter.compare_with_model_loss(model, batch, reference["shifted_token_nll"], reference["reduce_sft_loss"])
    counter = chapter.counterexample_losses(model, batch)
    assert all(math.isfinite(value) for value in counter.values())
    body = chapter.record_body(examples, batch, comparison, {"status": "not_implemented", "detail": "TODO"}, counter,
                               device="cpu", model=identity)
    assert body["framework"] == {"library": "transformers", "version": installed_version("transformers"),
                                 "reference_call": "model(input_ids=..., attention_mask=..., labels=...).loss",
                                 "tolerance_abs": chapter.LOSS_TOLERANCE}
    text = json.dumps(body)
    assert "/work/" not in text and str(REPO_ROOT) not in text
    lines = "\n".join(chapter.record_summary({"evidence_level": "cpu_smoke", **body}))
    assert "transformers 5" in lines and "not_implemented" in lines
    older = {"evidence_level": "cpu_smoke", "results": {key: value for key, value in body["results"].items()
                                                         if key != "learner_functions"}}
    assert "matches: True" in "\n".join(chapter.record_summary(older)), "a record without the newer fields still shows"


def test_figures_draw(tokenizer):
    ids = tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": "Hi"},
                                                   {"role": "assistant", "content": "5"}], tokenize=False),
                    add_special_tokens=False)["input_ids"]
    regions = chapter.token_regions(ids, tokenizer)
    for figure in (chapter.draw_token_regions(ids, regions, tokenizer), chapter.draw_causal_shift(ids, regions, tokenizer),
                   chapter.draw_averaging_shares({"a": 1, "b": 4})):
        assert figure.axes
        matplotlib.pyplot.close(figure)
