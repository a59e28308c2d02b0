"""The shared SFT training stage on the tiny model: data, accumulation, hashes, records, failures, CLI."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

from tools.errors import ConfigError, RecordExistsError
from tools.experiments.sft_training.__main__ import main
from tools.experiments.sft_training.config import AdapterSpec, StageConfig
from tools.experiments.sft_training.data import IGNORE_INDEX, build_split, chat_example
from tools.experiments.sft_training.runner import run_stage

ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    return tiny_tokenizer


def stage(tmp_path, **changes) -> StageConfig:
    return StageConfig(**{"chapter": "14", "run_mode": "cpu_smoke", "run_label": "pytest_sft",
                          "results_root": tmp_path / "results", "steps": 3, **changes})


@pytest.mark.parametrize("changes,message", [
    ({"method": "qlora"}, "method"), ({"rank": 0}, "rank"), ({"alpha": float("nan")}, "alpha"),
    ({"target_modules": ("embed_tokens",)}, "target_modules"), ({"compute_dtype": "float16"}, "compute_dtype"),
])
def test_a_bad_variant_is_refused_before_any_work(changes, message):
    with pytest.raises(ConfigError, match=message):
        AdapterSpec("bad", **changes)


def test_a_bad_stage_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="dry_run"):
        stage(tmp_path, run_mode="dry_run")
    with pytest.raises(ConfigError, match="held-apart"):
        stage(tmp_path, eval_task_seed=101)
    with pytest.raises(ConfigError, match="placeholder"):
        stage(tmp_path, run_label="replace_with_unique_label")


def test_rslora_scales_by_the_square_root_of_the_rank():
    assert AdapterSpec("a", rank=16, alpha=32).scaling == 2.0
    assert AdapterSpec("b", method="rslora", rank=16, alpha=32).scaling == 8.0


def test_only_the_reply_and_its_end_of_turn_are_supervised(tokenizer):
    example = chat_example(tokenizer, "Compute 12 + 30. Reply with the integer result only.", "42", 96)
    supervised = [token for token, label in zip(example.input_ids, example.labels) if label != IGNORE_INDEX]
    assert tokenizer.decode(supervised) == "42<|im_end|>"


def test_the_evaluation_split_is_held_apart(tokenizer):
    split = build_split(tokenizer, (101, 102), 103, 2, 96)
    manifest = split.manifest()
    assert manifest["overlap"] == 0 and manifest["evaluation_examples"] > 0
    same = build_split(tokenizer, (101, 102), 909, 2, 96)
    assert same.manifest()["overlap"] == 0



def test_an_evaluation_split_that_only_repeats_training_is_refused(tokenizer, monkeypatch):
    from tools.experiments.sft_training import data

    original = data.generate_tasks
    monkeypatch.setattr(data, "generate_tasks", lambda seed, per_operation: original(7, per_operation))
    with pytest.raises(ConfigError, match="also stands in the training split"):
        data.build_split(tokenizer, (1,), 2, 2, 96)


def test_accumulated_micro_batches_equal_one_large_batch(tmp_path):
    one = run_stage(stage(tmp_path, run_label="acc_one", steps=1, batch_size=4), [AdapterSpec("v")])
    two = run_stage(stage(tmp_path, run_label="acc_two", steps=1, batch_size=2, grad_accumulation=2), [AdapterSpec("v")])
    first, second = (json.loads(item[0]["path"].read_text(encoding="utf-8")) for item in (one, two))
    assert first["measurements"]["losses"] == pytest.approx(second["measurements"]["losses"], rel=1e-5)
    assert first["hashes"]["adapter_sha256_before"] == second["hashes"]["adapter_sha256_before"]
    assert first["measurements"]["grad_norms"] == pytest.approx(second["measurements"]["grad_norms"], rel=1e-5)


def test_each_variant_writes_one_honest_record(tmp_path):
    written = run_stage(stage(tmp_path), [AdapterSpec("attention_qv"), AdapterSpec("all_linear", target_modules=ALL_LINEAR)])
    assert [item["status"] for item in written] == ["ok", "ok"]
    records = [json.loads(item["path"].read_text(encoding="utf-8")) for item in written]
    for record in records:
        assert record["evidence_level"] == "cpu_smoke" and record["schema_version"] == "sft-training-variant/v1"
        assert record["hashes"]["base_unchanged"] and record["hashes"]["adapter_changed"]
        assert record["hashes"]["changed_base_tensors"] == []
        assert record["parameters"]["trainable"] == record["parameters"]["requires_grad_count"] > 0
        assert record["measurements"]["peak_allocated_mib"] is None  # not measured on a CPU, never 0
        assert record["comparable"] == {} and record["data"]["overlap"] == 0
        assert record["model"]["weights"] and record["config"]["results_root"] is None
    assert records[1]["parameters"]["trainable"] > records[0]["parameters"]["trainable"]
    assert written[0]["path"].name == "14-lora-targets_sft_attention_qv_pytest_sft.json"
    with pytest.raises(RecordExistsError):
        run_stage(stage(tmp_path), [AdapterSpec("attention_qv")])


def test_an_oom_or_a_failure_is_recorded_and_the_next_variant_runs(tmp_path):
    def prepare(model, spec):
        if spec.name == "too_big":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if spec.name == "broken":
            raise RuntimeError("a stage bug")
        return model

    written = run_stage(stage(tmp_path), [AdapterSpec("too_big"), AdapterSpec("broken"), AdapterSpec("fine")],
                        prepare=prepare)
    assert [item["status"] for item in written] == ["oom", "failed", "ok"]
    oom = json.loads(written[0]["path"].read_text(encoding="utf-8"))
    assert oom["error"].startswith("CUDA out of memory") and "measurements" not in oom
    assert "a stage bug" in json.loads(written[1]["path"].read_text(encoding="utf-8"))["error"]


def test_a_variant_whose_hook_is_missing_is_refused_before_any_work(tmp_path):
    for spec, message in ((AdapterSpec("packed", batching="packed"), "collate"),
                          (AdapterSpec("nf4", base_quantisation="nf4"), "prepare")):
        with pytest.raises(ConfigError, match=message):
            run_stage(stage(tmp_path), [AdapterSpec("first"), spec])
    assert not (tmp_path / "results").exists()


def test_the_command_line_runs_a_chapter_plan(tmp_path, monkeypatch, capsys):
    plan = types.ModuleType("tools.experiments.sft_training.plans.ch_14")
    plan.variants = lambda run_mode: [AdapterSpec("attention_qv")]
    plan.STAGE = {"cpu_smoke": {"steps": 2}}
    monkeypatch.setitem(sys.modules, plan.__name__, plan)
    assert main(["--chapter", "14", "--run-mode", "cpu_smoke", "--label", "pytest_cli",
                 "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("attention_qv: ok")
    record = json.loads(next(Path(tmp_path / "results").rglob("*.json")).read_text(encoding="utf-8"))
    assert record["config"]["steps"] == 2
    assert main(["--chapter", "14", "--run-mode", "cpu_smoke", "--label", "pytest_cli",
                 "--results-dir", str(tmp_path / "results")]) == 2  # a used label: invalid input, nothing written
    assert main(["--chapter", "50", "--run-mode", "cpu_smoke", "--label", "pytest_cli2",
                 "--results-dir", str(tmp_path / "results")]) == 2
    assert "has no SFT plan" in capsys.readouterr().err
    assert main(["--chapter", "14", "--run-mode", "cpu_smoke", "--label", "pytest_cli3", "--model", "nobody/not-cached",
                 "--results-dir", str(tmp_path / "results")]) == 4  # as the preflight and the other stage commands
    assert not list(Path(tmp_path / "results").rglob("*pytest_cli3*"))


def test_the_recorded_learning_rate_is_the_one_the_optimiser_applied(tmp_path, monkeypatch):
    """A scheduler that halves the rate inside step() must show in the record: the stage reads the
    optimiser's param_groups, not its own plan (issue 22: a planned-vs-applied check that can fail)."""
    import tools.experiments.sft_training.training as training

    class HalvingAdamW(torch.optim.AdamW):
        def zero_grad(self, set_to_none=True):
            super().zero_grad(set_to_none=set_to_none)
            for group in self.param_groups:
                group["lr"] = group["lr"] / 2  # set after the loop's own assignment, before step()

    monkeypatch.setattr(training.torch.optim, "AdamW", HalvingAdamW)
    config = stage(tmp_path, run_label="lr_halved", steps=2, learning_rate=1e-3)
    record = json.loads(run_stage(config, [AdapterSpec("v")])[0]["path"].read_text(encoding="utf-8"))
    assert record["measurements"]["learning_rates"] == pytest.approx([5e-4, 5e-4], rel=1e-12)


def test_a_tensor_hash_covers_dtype_shape_and_bytes():
    from tools.experiments.sft_training.adapters import tensor_hashes

    def hashes_of(tensor):
        module = torch.nn.Module()
        module.weight = torch.nn.Parameter(tensor, requires_grad=False)
        return tensor_hashes(module)["weight"]

    square = torch.arange(16, dtype=torch.int32).float().reshape(4, 4)
    assert hashes_of(square) == hashes_of(square.clone())
    assert hashes_of(square) != hashes_of(square.reshape(2, 8)), "a reshape keeps the bytes but is another tensor"
    assert hashes_of(square) != hashes_of(square.view(torch.int32)), "the same bytes read as another dtype"
    assert hashes_of(torch.zeros(2)) != hashes_of(-torch.zeros(2))


def test_a_four_bit_weight_hash_covers_its_quantisation_state():
    """The packed NF4 codes alone do not say what the weight is: changing absmax must change the hash."""
    pytest.importorskip("bitsandbytes")
    from tools.experiments.sft_training.adapters import tensor_hashes
    from tools.experiments.sft_training.quantisation import quantise_linear_layers

    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("q_proj", torch.nn.Linear(64, 64, bias=False))
    quantise_linear_layers(model, compute_dtype=torch.float32)
    before = tensor_hashes(model)["q_proj.weight"]
    codes = model.q_proj.weight.data.clone()
    model.q_proj.weight.quant_state.absmax.mul_(2)  # the same codes now stand for other values
    assert torch.equal(model.q_proj.weight.data, codes)
    assert tensor_hashes(model)["q_proj.weight"] != before
