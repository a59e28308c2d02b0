"""Chapter 30 (long-context fine-tuning): packing with boundary isolation on the shared SFT stage.

The packing module against transformers' DataCollatorWithFlattening and against each example run
alone on the tiny Qwen2 model; what transformers 5.9 does with `position_ids` alone; the chapter's
plan through the stage (packed losses equal padded ones); the decision read from its records; and
the notebook's reference solutions against the stage's own implementation.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import DataCollatorWithFlattening

from tools.chapters import sft_long_context as long_context
from tools.course.cells import cells_with_role, read_notebook
from tools.errors import ConfigError
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, Example, build_split, pad_batch
from tools.experiments.sft_training.packing import (
    block_causal_mask,
    block_mask_hook,
    collate,
    first_fit_rows,
    install_block_mask,
    dense_mask_bytes,
    isolation_check,
    packed_batch,
    padded_batch,
    padding_free_batch,
)
from tools.experiments.sft_training.plans import ch_30, plan_for
from tools.experiments.sft_training.runner import run_stage


@pytest.fixture(scope="module")
def examples(tiny_tokenizer):
    return build_split(tiny_tokenizer, (101, 102, 103, 104), 909, 2, 96).train[:6]


def _example(ids, labels) -> Example:
    return Example(tuple(ids), tuple(labels), f"{ids}")


def _reference(names: list[str]) -> dict:
    notebook = read_notebook("notebooks/30-long-context.ipynb")
    source = "\n".join(cell.source for _, cell in cells_with_role(notebook, "reference-solution"))
    namespace = {"math": math, "torch": torch}
    exec(compile(source, "<30 reference>", "exec"), namespace)
    return {name: namespace[name] for name in names}


def test_first_fit_fills_earlier_rows_and_never_splits_an_example():
    assert first_fit_rows([6, 7, 3, 2, 1, 4], 10) == [[0, 2, 4], [1, 3], [5]]
    assert first_fit_rows([10, 1], 10) == [[0], [1]]
    for lengths in ([11], [0], [3, 12]):
        with pytest.raises(ConfigError):
            first_fit_rows(lengths, 10)


def test_a_packed_row_restarts_positions_and_masks_each_first_label():
    batch = packed_batch([_example([1, 2, 3], [1, 2, 3]), _example([4, 5], [4, 5]), _example([6, 7, 8, 9], [6, 7, 8, 9])], 8, 0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 0, 0, 0], [6, 7, 8, 9, 0, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 2, 3, -100, 5, -100, -100, -100], [-100, 7, 8, 9, -100, -100, -100, -100]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2], [0, 1, 2, 3, 0, 1, 2, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]]
    padded = padded_batch([_example([1, 2, 3], [1, 2, 3])], 5, 0)
    assert padded["input_ids"].tolist() == [[1, 2, 3, 0, 0]] and "position_ids" not in padded
    assert padded["labels"].tolist() == [[1, 2, 3, IGNORE_INDEX, IGNORE_INDEX]]
    with pytest.raises(ConfigError):
        padded_batch([_example([1, 2, 3], [1, 2, 3])], 2, 0)


def test_packed_rows_equal_transformers_data_collator_with_flattening(examples, tiny_tokenizer):
    batch = packed_batch(examples, 128, tiny_tokenizer.pad_token_id)
    rows = first_fit_rows([len(example.input_ids) for example in examples], 128)
    flattening = DataCollatorWithFlattening()
    for row, members in enumerate(rows):
        flat = flattening([{"input_ids": list(examples[i].input_ids), "labels": list(examples[i].labels)} for i in members])
        real = int(batch["attention_mask"][row].sum())
        for key in ("input_ids", "labels", "position_ids"):
            assert flat[key][0].tolist() == batch[key][row, :real].tolist(), key


def test_the_block_mask_follows_position_ids_and_refuses_broken_ones():
    mask = block_causal_mask(torch.tensor([[0, 1, 0, 1, 2]]))
    assert mask.dtype == torch.bool and tuple(mask.shape) == (1, 1, 5, 5)
    assert mask[0, 0].int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    for broken in (torch.tensor([[1, 2]]), torch.tensor([[0, 2]]), torch.tensor([[0.0, 1.0]]), torch.tensor([0, 1])):
        with pytest.raises(ConfigError):
            block_causal_mask(broken)


def test_position_ids_alone_do_not_isolate_in_transformers_default_qwen2(tiny_model, tiny_tokenizer, examples):
    """What the chapter teaches about transformers 5.9 (sdpa): a 2-D mask or the default cache turn the
    packed-sequence detection off; only no mask and use_cache=False isolate without our block mask."""
    model, tokenizer = tiny_model, tiny_tokenizer
    batch = packed_batch(examples[:2], 128, tokenizer.pad_token_id)
    length = len(examples[1].input_ids)
    start = len(examples[0].input_ids)
    with torch.no_grad():
        alone = model(**pad_batch([examples[1]], tokenizer.pad_token_id)).logits[0, :length]

        def second_example(**kwargs):
            logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], **kwargs).logits
            return float((logits[0, start:start + length] - alone).abs().max())

        assert second_example(attention_mask=block_causal_mask(batch["position_ids"])) < 1e-5
        assert second_example(use_cache=False) < 1e-5
        assert second_example(attention_mask=batch["attention_mask"]) > 1e-2
        assert second_example() > 1e-2


def test_the_block_mask_hook_isolates_and_the_check_can_fail(fresh_tiny_model, tiny_tokenizer, examples):
    model, tokenizer = fresh_tiny_model, tiny_tokenizer
    with pytest.raises(ConfigError, match="install_block_mask"):
        isolation_check(model, examples, 128, tokenizer.pad_token_id, "cpu")
    install_block_mask(model)
    assert install_block_mask(model) is block_mask_hook(model)  # installed once
    proof = isolation_check(model, examples, 128, tokenizer.pad_token_id, "cpu")
    assert proof["isolated"] and proof["rows"] == 3 and proof["max_abs_logit_diff"] < 1e-5
    assert proof["without_block_mask"]["max_abs_logit_diff"] > proof["logit_tolerance"]
    block_mask_hook(model).enabled = False
    leaky = isolation_check(model, examples, 128, tokenizer.pad_token_id, "cpu")
    assert leaky["isolated"] is False and leaky["max_abs_logit_diff"] > 1e-2  # a broken boundary is caught
    assert block_mask_hook(model).enabled is False


def test_an_attention_implementation_without_mask_support_is_refused(fresh_tiny_model):
    model = fresh_tiny_model
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ConfigError, match="attention"):
        install_block_mask(model)


def test_the_collate_hook_follows_the_variant(examples):
    config = StageConfig(chapter="30", run_mode="cpu_smoke", run_label="pytest_collate", results_root="/tmp/unused")
    padded = collate(examples[:4], 0, AdapterSpec("p", max_length=128), config)
    packed = collate(examples[:4], 0, AdapterSpec("q", max_length=128, batching="packed"), config)
    assert tuple(padded["input_ids"].shape) == (4, 128) and tuple(packed["input_ids"].shape) == (2, 128)
    assert int(padded["attention_mask"].sum()) == int(packed["attention_mask"].sum())
    supervised = lambda batch: int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())  # noqa: E731
    assert supervised(padded) == supervised(packed)


@pytest.fixture(scope="module")
def stage_records(tmp_path_factory, lab_models):
    results = tmp_path_factory.mktemp("ch30")
    plan = plan_for("30")
    config = StageConfig(chapter="30", run_mode="cpu_smoke", run_label="pytest_ch30", results_root=results,
                         **plan.stage["cpu_smoke"])
    variants = [spec for spec in plan.variants("cpu_smoke") if spec.max_length == 128 and spec.batching != "packed_unisolated"]
    written = run_stage(config, variants, prepare=plan.prepare, measure=plan.measure, collate=plan.collate)
    return [json.loads(item["path"].read_text(encoding="utf-8")) for item in written]


def test_the_plan_compares_three_lengths_padded_and_packed():
    names = [spec.name for spec in ch_30.variants("cpu_smoke")]
    assert names == ["padded_128", "packed_128", "padded_512", "packed_512", "padded_2048", "packed_2048",
                     "packed_unisolated_128"]  # the negative control: packed rows without the block mask
    assert ch_30.variants("cpu_smoke")[-1].batching == "packed_unisolated"
    assert [spec.max_length for spec in ch_30.variants("real_gpu") if spec.batching == "padded"] == list(ch_30.LENGTHS["real_gpu"])
    assert max(ch_30.LENGTHS["cpu_smoke"]) >= 2048 and max(ch_30.LENGTHS["real_gpu"]) >= 8192  # issue 22
    assert ch_30.STAGE["cpu_smoke"]["model_id"] == "lab"  # starts from a model that knows some arithmetic
    assert ch_30.STAGE["cpu_smoke"]["steps"] > ch_30.WARMUP_STEPS + 1  # at least two timed steps: a spread


def test_a_padding_free_row_is_what_flattening_gives_and_isolates_without_any_mask(lab_models, examples):
    """The padding-free path (DataCollatorWithFlattening, TRL padding_free): one row, no padding, no mask;
    transformers finds the examples from position_ids when no 2-D mask and no cache are passed."""
    from tools.models.loading import load_causal_lm

    model, tokenizer = load_causal_lm(lab_models["lab"])
    model.eval()
    chosen = examples[:4]
    row = padding_free_batch(chosen)
    flat = DataCollatorWithFlattening()([{"input_ids": list(e.input_ids), "labels": list(e.labels)} for e in chosen])
    for key in ("input_ids", "labels", "position_ids"):
        assert row[key].tolist() == flat[key].tolist(), key
    assert row["input_ids"].shape == (1, sum(len(e.input_ids) for e in chosen))  # not one padding position
    with torch.no_grad():
        flat_logits = model(input_ids=row["input_ids"], position_ids=row["position_ids"], use_cache=False).logits[0]
        mixed = model(input_ids=row["input_ids"], position_ids=row["position_ids"],
                      attention_mask=row["attention_mask"]).logits[0]  # a 2-D mask switches the detection off
        cursor, isolated, leaked = 0, 0.0, 0.0
        for example in chosen:
            length = len(example.input_ids)
            alone = model(**pad_batch([example], tokenizer.pad_token_id)).logits[0, :length]
            isolated = max(isolated, float((flat_logits[cursor:cursor + length] - alone).abs().max()))
            leaked = max(leaked, float((mixed[cursor:cursor + length] - alone).abs().max()))
            cursor += length
    assert isolated < 1e-4 and leaked > 1e-2
    with pytest.raises(ConfigError):
        padding_free_batch([])


def test_a_dense_mask_grows_as_the_square_of_the_row():
    assert dense_mask_bytes(32768) == 2 ** 30  # 1 GiB of bool per row at 32k tokens (issue 22)
    assert dense_mask_bytes(32768, element_bytes=4) == 4 * 2 ** 30 and dense_mask_bytes(2048, rows=4) == 4 * 2048 ** 2
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ConfigError):
            dense_mask_bytes(bad)


def _markdown(path: str) -> str:
    notebook = read_notebook(path)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


def test_the_chapter_teaches_the_padding_free_path_beside_the_dense_mask():
    text = _markdown("notebooks/30-long-context.ipynb")
    for needed in ("DataCollatorWithFlattening", "padding_free=True", "flash_attn_varlen_func", "cu_seqlens",
                   "1 GiB", "flash 内核", "免填充"):
        assert needed in text, needed


def test_the_chapter_claims_one_example_per_row_only_where_the_plan_gives_it(examples):
    """Cell 27 once said the shortest length holds one example per row: true for cpu_smoke's old 64,
    false for real_gpu's 128. Whatever the notebook says must hold for every planned length."""
    text = _markdown("notebooks/30-long-context.ipynb")
    micro_batch = examples[:ch_30.STAGE["cpu_smoke"]["batch_size"]]
    lengths = [length for mode in ("cpu_smoke", "real_gpu") for length in ch_30.LENGTHS[mode]]
    per_row = {length: len(micro_batch) / len(first_fit_rows([len(e.input_ids) for e in micro_batch], length))
               for length in lengths}
    if any(count > 1 for count in per_row.values()):
        assert "一行只放得下一条样本" not in text, per_row
    assert all(count > 1 for count in per_row.values()), per_row  # every planned length packs


def test_packed_training_equals_padded_training_on_the_stage(stage_records):
    padded, packed = stage_records
    assert padded["status"] == packed["status"] == "ok"
    assert packed["measurements"]["losses"] == pytest.approx(padded["measurements"]["losses"], rel=1e-5)
    assert packed["measurements"]["token_slots"] < padded["measurements"]["token_slots"]
    assert packed["measurements"]["real_tokens"] == padded["measurements"]["real_tokens"]
    assert packed["chapter_measurements"]["isolation"]["isolated"] is True
    assert padded["chapter_measurements"]["isolation"] is None


def test_the_decision_is_read_from_the_records(stage_records):
    waste_report = _reference(["waste_report"])["waste_report"]
    verdict = long_context.decide(stage_records, waste_report)
    assert verdict["decision"] == "accept_mechanism" and verdict["reasons"] == []
    assert verdict["waste"]["packing_gain"][128] is not None
    broken = json.loads(json.dumps(stage_records))
    broken[1]["chapter_measurements"]["isolation"]["isolated"] = False
    assert long_context.decide(broken, waste_report)["decision"] == "reject"
    drifted = json.loads(json.dumps(stage_records))
    drifted[1]["measurements"]["losses"][1] *= 1.01
    assert long_context.decide(drifted, waste_report)["decision"] == "reject"
    oom = json.loads(json.dumps(stage_records))
    oom.append({**oom[0], "variant": {**oom[0]["variant"], "name": "padded_4096", "max_length": 4096}, "status": "oom"})
    assert long_context.decide(oom, waste_report)["decision"] == "tune"


def test_the_notebook_reference_agrees_with_the_stage(examples, tiny_tokenizer):
    ref = _reference(["pack_examples", "block_causal_mask"])
    for row_length in (64, 128, 256):
        ours = ref["pack_examples"](long_context.example_dicts(examples), row_length, tiny_tokenizer.pad_token_id)
        stage = packed_batch(examples, row_length, tiny_tokenizer.pad_token_id)
        for key in ("input_ids", "labels", "position_ids", "attention_mask"):
            assert stage[key].tolist() == ours[key], (row_length, key)
        positions = torch.tensor(ours["position_ids"])
        assert torch.equal(ref["block_causal_mask"](positions), block_causal_mask(positions))
