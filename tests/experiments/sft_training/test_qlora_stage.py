"""Chapter 26's NF4 code in the SFT stage: the reference against bitsandbytes, the account against the
bytes bitsandbytes stores, the prepare hook against transformers' own 4-bit loading, the plan's two
records, and the Q-QLORA profile against what the stage imports."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import math
import sys
from pathlib import Path

import bitsandbytes
import bitsandbytes.functional as bnb_functional
import pytest
import torch

from chapter_factory import REPO_ROOT
from tools.chapters import qlora
from tools.core.environment import read_pins
from tools.experiments.sft_training import quantisation
from tools.experiments.sft_training.config import StageConfig
from tools.experiments.sft_training.plans import plan_for
from tools.experiments.sft_training.runner import run_stage
from tools.models.architectures import TINY_ARCHITECTURE
from tools.models.loading import load_causal_lm, resolve_model

TINY = resolve_model("tiny")


def unpack(packed: torch.Tensor, count: int) -> torch.Tensor:
    pairs = packed.reshape(-1)
    return torch.stack([pairs >> 4, pairs & 0xF], dim=1).reshape(-1)[:count].long()


def test_the_level_table_is_bitsandbytes_and_the_normal_quantile_construction():
    assert torch.equal(torch.tensor(quantisation.NF4_LEVELS), bnb_functional.get_4bit_type("nf4", device="cpu"))
    derived = quantisation.nf4_levels_from_normal_quantiles()
    assert float((derived - torch.tensor(quantisation.NF4_LEVELS, dtype=torch.float64)).abs().max()) < 2e-7


def bnb_round_trip(weight: torch.Tensor, blocksize: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bitsandbytes' (codes, absmax, float32 values) of `weight`, flat."""
    packed, state = bnb_functional.quantize_4bit(weight, blocksize=blocksize, quant_type="nf4")
    state.dtype = torch.float32
    return unpack(packed, weight.numel()), state.absmax, bnb_functional.dequantize_4bit(packed, state).reshape(-1)


@pytest.mark.parametrize("shape,dtype,blocksize", [((64, 96), torch.float32, 64), ((37, 50), torch.float32, 64),
                                                   ((33, 64), torch.bfloat16, 32),
                                                   pytest.param((7, 129), torch.float16, 128, marks=pytest.mark.slow)])
def test_the_reference_quantiser_matches_bitsandbytes_code_for_code(shape, dtype, blocksize):
    weight = (torch.randn(*shape, generator=torch.Generator().manual_seed(5)) * 0.03).to(dtype)
    weight.view(-1)[:blocksize] = 0  # a zero block
    codes, absmax = quantisation.nf4_quantise(weight, blocksize)
    their_codes, their_absmax, _ = bnb_round_trip(weight, blocksize)
    assert torch.equal(codes.reshape(-1).long(), their_codes) and torch.equal(absmax, their_absmax)
    _, _, their_values = bnb_round_trip(weight.reshape(-1), blocksize)  # flat: see the next test
    assert torch.equal(quantisation.nf4_dequantise(codes, absmax, blocksize).reshape(-1), their_values)


def test_bitsandbytes_cpu_round_trip_of_the_flattened_tensor_stays_within_half_a_level_gap():
    """What holds on every CPU. For a 2-D tensor whose rows are not whole blocks (64 x 96) the values that
    bitsandbytes 0.50.2's CPU dequantize_4bit returns depend on the CPU: measured with AVX-512 they do not
    invert its own quantize_4bit, reported without AVX-512 they do. So the course gives bitsandbytes the
    flattened tensor (blocks run over the flattened order anyway) and checks nothing of the 2-D path."""
    weight = torch.randn(64, 96, generator=torch.Generator().manual_seed(5)) * 0.03
    codes, absmax, values = bnb_round_trip(weight.reshape(-1), 64)
    their_2d_codes, their_2d_absmax, _ = bnb_round_trip(weight, 64)
    assert torch.equal(codes, their_2d_codes) and torch.equal(absmax, their_2d_absmax)  # quantising is CPU-independent
    bound = 0.152 * absmax.repeat_interleave(64)  # the largest half gap between NF4 levels is 0.1519
    assert bool(((weight.reshape(-1) - values).abs() <= bound + 1e-7).all())


@pytest.mark.parametrize("double_quant", [False, True])
@pytest.mark.parametrize("elements", [1, 65, 4096, 64 * 300 + 5])
def test_the_account_matches_the_bytes_bitsandbytes_stores(double_quant, elements):
    packed, state = bnb_functional.quantize_4bit(torch.randn(elements), blocksize=64, quant_type="nf4",
                                                 compress_statistics=double_quant)
    stored = [packed, state.absmax] + ([state.state2.absmax, state.offset] if double_quant else [])
    account = quantisation.memory_account([(elements,)], 0, double_quant=double_quant)
    assert account["code_bytes"] + account["constant_bytes"] == sum(t.numel() * t.element_size() for t in stored)


def test_qwen2_shapes_count_the_published_and_the_built_parameters():
    shapes, kept = quantisation.qwen2_base_shapes(qlora.ARCHITECTURES["Qwen2.5-0.5B"])
    assert sum(math.prod(shape) for shape in shapes) + kept == 494_032_768  # Qwen2.5-0.5B's parameter count
    model = load_causal_lm(TINY)[0]
    shapes, kept = quantisation.qwen2_base_shapes({**TINY_ARCHITECTURE, "vocab_size": model.config.vocab_size})
    built = {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}
    linear = sorted(shape for name, shape in built.items() if name.endswith("proj.weight"))
    assert sorted(shapes) == linear
    assert sum(math.prod(shape) for shape in shapes) + kept == sum(math.prod(shape) for shape in built.values())


def _spec(name: str):
    return next(spec for spec in plan_for("26").variants("cpu_smoke") if spec.name == name)


def _four_bit_state(model) -> dict:
    return {name.removesuffix(".weight"): (parameter.data.clone(), parameter.quant_state)
            for name, parameter in model.named_parameters() if quantisation.is_4bit(parameter)}


def test_prepare_builds_what_transformers_builds_from_a_bitsandbytes_config():
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    ours = quantisation.prepare(load_causal_lm(TINY)[0], _spec("nf4_base"))
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.bfloat16)
    theirs = AutoModelForCausalLM.from_pretrained(TINY, quantization_config=config, dtype=torch.bfloat16,
                                                  device_map="cpu")
    mine, reference = _four_bit_state(ours), _four_bit_state(theirs)
    assert sorted(mine) == sorted(reference) and len(mine) == 7 * TINY_ARCHITECTURE["num_hidden_layers"]
    for name, (packed, state) in mine.items():
        other_packed, other_state = reference[name]
        assert torch.equal(packed, other_packed), name
        assert state.nested and other_state.nested and state.blocksize == other_state.blocksize == 64
        assert torch.equal(state.absmax, other_state.absmax) and torch.equal(state.state2.absmax, other_state.state2.absmax)
    kept = {name: parameter for name, parameter in ours.named_parameters() if not quantisation.is_4bit(parameter)}
    assert kept and all(parameter.dtype == torch.bfloat16 and not parameter.requires_grad for parameter in kept.values())
    assert ours.is_loaded_in_4bit and "lm_head" not in " ".join(mine)


def test_the_4bit_layers_give_back_their_weights_within_the_nf4_bound():
    original = {name: parameter.detach().to(torch.bfloat16).float() for name, parameter in
                load_causal_lm(TINY)[0].named_parameters() if name.endswith("proj.weight")}
    model = quantisation.prepare(load_causal_lm(TINY)[0], _spec("nf4_base"))
    for name, (packed, state) in _four_bit_state(model).items():
        values = bnb_functional.dequantize_4bit(packed, state).float()  # what Linear4bit multiplies with
        weight = original[f"{name}.weight"]
        block_absmax = weight.reshape(-1, 64).abs().amax(dim=1).repeat_interleave(64).reshape(weight.shape)
        # the largest NF4 half gap (0.1519) plus the 8-bit error of a double-quantised absmax (under 1 %)
        assert bool(((weight - values).abs() <= 0.16 * block_absmax).all()), name


def test_an_eval_forward_keeps_the_stored_bytes_the_record_hashes():
    model = quantisation.prepare(load_causal_lm(TINY)[0], _spec("nf4_base"))
    before = {name: packed for name, (packed, _) in _four_bit_state(model).items()}
    model.eval()
    with torch.no_grad():
        model(input_ids=torch.tensor([[1, 2, 3, 4]]))
    assert all(torch.equal(before[name], packed) for name, (packed, _) in _four_bit_state(model).items())
    from bitsandbytes.nn.modules import has_avx512bf16

    if has_avx512bf16():  # the guard matters here: bitsandbytes would repack the weights for its CPU kernels
        layer = model.model.layers[0].self_attn.q_proj
        layer.support_avx512bf16_for_cpu = True
        with torch.no_grad():
            model(input_ids=torch.tensor([[1, 2, 3, 4]]))
        assert not torch.equal(layer.weight.data, before["model.layers.0.self_attn.q_proj"])


def test_the_table_summary_names_every_problem():
    rows = [{"name": "q.lora_A.default.weight", "shape": [2, 4], "storage": "nf4", "requires_grad": True},
            {"name": "k.weight", "shape": [4, 4], "storage": "nf4", "requires_grad": False},
            {"name": "norm.weight", "shape": [4], "storage": "bfloat16", "requires_grad": True}]
    summary = quantisation.summarise_table(rows)
    assert summary["tensors"] == {"frozen_4bit": 1, "frozen": 0, "trainable": 2}
    assert summary["parameters"] == {"frozen_4bit": 16, "frozen": 0, "trainable": 12}
    assert [(item["name"], item["problem"]) for item in summary["problems"]] == [
        ("norm.weight", "base_tensor_trains"), ("q.lora_A.default.weight", "4bit_tensor_trains"),
        ("q.lora_A.default.weight", "adapter_in_4bit")]


def test_the_plan_writes_two_honest_records(tmp_path):
    plan = plan_for("26")
    config = StageConfig(chapter="26", run_mode="cpu_smoke", run_label="pytest_qlora", results_root=tmp_path,
                         **plan.stage["cpu_smoke"])
    written = run_stage(config, plan.variants("cpu_smoke"), prepare=plan.prepare, measure=plan.measure)
    records = {item["variant"]: json.loads(Path(item["path"]).read_text(encoding="utf-8")) for item in written}
    assert [item["status"] for item in written] == ["ok", "ok"]
    for record in records.values():
        assert record["hashes"]["base_unchanged"] and record["hashes"]["adapter_changed"]
        assert record["measurements"]["peak_allocated_mib"] is None and record["comparable"] == {}
        chapter = record["chapter_measurements"]
        assert chapter["summary"]["problems"] == [] and chapter["base_storage_bytes"]["agrees"]
        assert chapter["summary"]["parameters"]["trainable"] == record["parameters"]["trainable"]
        assert all(row["requires_grad"] == ("lora_" in row["name"]) for row in chapter["parameters"])
    nf4, bf16 = records["nf4_base"]["chapter_measurements"], records["bf16_base"]["chapter_measurements"]
    assert nf4["base_precision"] == "nf4" and bf16["base_precision"] == "bfloat16"
    four_bit = [row["name"] for row in nf4["parameters"] if row["storage"] == "nf4"]
    assert len(four_bit) == 14 and all(name.endswith("proj.base_layer.weight") for name in four_bit)
    assert nf4["quantisation"]["double_quant"] and nf4["quantisation"]["library"] == f"bitsandbytes {bitsandbytes.__version__}"
    assert nf4["four_bit_layers_computed_in"] == ["bfloat16"] and bf16["quantisation"] is None
    assert nf4["base_storage_bytes"]["measured"]["total_bytes"] < bf16["base_storage_bytes"]["measured"]["total_bytes"]
    assert records["nf4_base"]["parameters"]["trainable"] == records["bf16_base"]["parameters"]["trainable"]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            if node.module.startswith("tools"):
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def stage_imports(start: list[str]) -> set[str]:
    """Top-level names of the third-party packages the given tools modules import, transitively."""
    third, seen, todo = set(), set(), list(start)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = REPO_ROOT / (name.replace(".", "/") + ".py")
        path = path if path.is_file() else REPO_ROOT / name.replace(".", "/") / "__init__.py"
        if not path.is_file():
            continue  # `from tools.x import name`: a name, not a module
        for imported in _imports(path):
            if imported.startswith("tools"):
                todo.append(imported)
            elif imported.split(".")[0] not in sys.stdlib_module_names:
                third.add(imported.split(".")[0])
    return third


def test_the_profile_pins_every_package_the_stage_imports():
    pins = read_pins(REPO_ROOT / "environment" / "q-qlora.txt")
    imported = stage_imports(["tools.experiments.sft_training.__main__", "tools.experiments.sft_training.runner",
                              "tools.experiments.sft_training.plans.ch_26", "tools.chapters.qlora"])
    assert {"torch", "transformers", "peft", "bitsandbytes"} <= imported
    distributions = importlib.metadata.packages_distributions()
    installed_by_pins = set(pins)
    for pinned in pins:
        try:
            requirements = importlib.metadata.requires(pinned) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # pinned but not installed here: the pin itself covers it
        for requirement in requirements:
            if "extra ==" not in requirement:
                installed_by_pins.add(requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0]
                                      .split("=")[0].split("!")[0].split("~")[0].strip().lower())
    missing = {name for name in imported
               if not {dist.lower() for dist in distributions.get(name, [name])} & installed_by_pins}
    assert not missing, f"environment/q-qlora.txt neither pins nor pulls in {sorted(missing)}"
