"""Chapters 14 (LoRA target modules) and 31 (LoRA variants): what their plans record, checked against peft.

The counting, merging and DoRA modules of the SFT stage, the two chapter plans run through the
stage on the tiny model, the verdicts computed from their records, and the notebooks' reference
solutions against the stage's own implementations (the page teaches what the records measure).
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from tools.chapters import lora_common as lora
from tools.chapters.context import ChapterContext
from tools.course.cells import cells_with_role, read_notebook
from tools.errors import ConfigError
from tools.experiments.sft_training import variants as dora_module
from tools.experiments.sft_training.adapters import hash_report, tensor_hashes
from tools.experiments.sft_training.config import QWEN2_LINEAR_MODULES, AdapterSpec
from tools.experiments.sft_training.counting import (
    largest_rank_within_budget,
    linear_shapes,
    lora_parameter_count,
    model_shapes,
)
from tools.experiments.sft_training.merging import judge_merge, merge_equivalence, recordable
from tools.experiments.sft_training.plans import ch_14, ch_31, plan_for
from tools.experiments.sft_training.variants import adapter_scaling, check_against_peft, dora_forward

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
TARGET_SETS = [("q_proj", "v_proj"), ("q_proj", "k_proj", "v_proj", "o_proj"), QWEN2_LINEAR_MODULES, ("down_proj",)]


@pytest.fixture(scope="module")
def tiny():
    return lora.tiny_model(seed=0)


@pytest.fixture(scope="module")
def qwen_meta():
    return lora.meta_model(QWEN)


# ---- counting ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["lora", "dora"])
@pytest.mark.parametrize("targets", TARGET_SETS)
def test_the_analytic_count_equals_peft_on_tiny_and_qwen(tiny, qwen_meta, targets, method):
    for model_id, model in (("tiny", tiny), (QWEN, qwen_meta)):
        ours = lora_parameter_count(lora.architecture(model_id), targets, 8, method)["total"]
        assert ours == lora.peft_trainable(model, targets, 8, method), (model_id, targets, method)


def test_grouped_query_attention_narrows_k_and_v():
    shapes = linear_shapes(lora.architecture(QWEN))
    assert shapes["q_proj"] == (896, 896) and shapes["k_proj"] == shapes["v_proj"] == (896, 128)
    assert shapes["down_proj"] == (4864, 896)
    counted = lora_parameter_count(lora.architecture(QWEN), ["v_proj", "q_proj"], 8)
    assert list(counted["per_layer"]) == ["q_proj", "v_proj"] and counted["total"] == 540_672


@pytest.mark.parametrize("config,targets,rank,message", [
    ({"hidden_size": 64}, ["q_proj"], 8, "lacks"),
    ({**lora.architecture("tiny"), "num_key_value_heads": 3}, ["q_proj"], 8, "multiple of num_key_value_heads"),
    (lora.architecture("tiny"), ["q_proj", "q_proj"], 8, "distinct"),
    (lora.architecture("tiny"), ["lm_head"], 8, "distinct"),
    (lora.architecture("tiny"), ["q_proj"], True, "rank"),
])
def test_a_bad_count_request_is_refused(config, targets, rank, message):
    with pytest.raises(ConfigError, match=message):
        lora_parameter_count(config, targets, rank)


def test_a_budget_that_gives_lora_rank_8_gives_dora_rank_7():
    for model_id in ("tiny", QWEN):
        architecture = lora.architecture(model_id)
        shapes = model_shapes(architecture, ("q_proj", "v_proj"))
        budget = lora_parameter_count(architecture, ("q_proj", "v_proj"), 8)["total"]
        assert largest_rank_within_budget(budget, shapes, "lora") == {"rank": 8, "parameters": budget, "unused": 0}
        dora = largest_rank_within_budget(budget, shapes, "dora")
        assert dora["rank"] == 7 and dora["unused"] == sum(fan_in for fan_in, _ in shapes)
    with pytest.raises(ConfigError, match="rank-1"):
        largest_rank_within_budget(10, [(64, 64)], "dora")


# ---- merging -------------------------------------------------------------------------------------

def test_the_merge_judgement_bands():
    logits = torch.tensor([[4.0, -2.0]], dtype=torch.float64)
    assert judge_merge(logits, logits + 2e-5, "float32")["decision"] == "accept"
    assert judge_merge(logits, logits + 1e-3, "float32")["decision"] == "reject"
    assert judge_merge(logits, logits + 4 * 2 ** -7, "bfloat16")["decision"] == "accept"
    assert judge_merge(logits, logits + 0.1, "bfloat16")["decision"] == "tune"
    assert judge_merge(logits, logits + 2.0, "bfloat16")["decision"] == "reject"
    broken = judge_merge(logits, torch.full_like(logits, float("nan")), "bfloat16")
    assert broken["decision"] == "reject" and recordable(broken)["max_abs_diff"] is None
    with pytest.raises(ConfigError, match="dtype"):
        judge_merge(logits, logits, "float16")


def test_the_bf16_tolerance_is_counted_in_bf16_spacings_at_the_logit_scale():
    """Issue 22: the accept threshold is two bfloat16 spacings at the logits' magnitude (each path rounds
    its own logits), not one relative step: a drift of 1.5 spacings at scale 10.5 was a flip of noise."""
    from tools.experiments.sft_training.merging import bf16_spacing

    assert [bf16_spacing(scale) for scale in (1.0, 1.99, 2.0, 10.5, 40.0)] == [2 ** -7, 2 ** -7, 2 ** -6, 2 ** -4, 2 ** -2]
    logits = torch.tensor([10.5, -3.0], dtype=torch.float64)
    near = judge_merge(logits, logits + torch.tensor([1.5 * 2 ** -4, 0.0], dtype=torch.float64), "bfloat16")
    assert near["decision"] == "accept" and near["drift_in_spacings"] == 1.5 and near["bf16_spacing"] == 2 ** -4, near
    assert judge_merge(logits, logits + 2 * 2 ** -4, "bfloat16")["decision"] == "accept"  # inclusive
    assert judge_merge(logits, logits + 16 * 2 ** -4, "bfloat16")["decision"] == "tune"
    assert judge_merge(logits, logits + 17 * 2 ** -4, "bfloat16")["decision"] == "reject"


def test_the_float32_band_leaves_room_for_rounding_through_the_layers():
    """A correct float32 merge of the lab model's all-linear adapter drifted 1.2e-5 of the logit scale (the
    rounding of every layer, accumulated): 1e-5 rejected it; the band is 1e-4, far below a wrong merge."""
    logits = torch.tensor([10.5, -3.0], dtype=torch.float64)
    assert judge_merge(logits, logits + 1.2e-5 * 10.5, "float32")["decision"] == "accept"
    zeros = torch.zeros(2, dtype=torch.float64)
    assert judge_merge(zeros, zeros + 1e-4, "float32")["decision"] == "accept"  # inclusive
    assert judge_merge(logits, logits + 1e-2 * 10.5, "float32")["decision"] == "reject"


def test_merge_equivalence_judges_a_copy_and_leaves_the_trained_model_alone(tiny):
    model = lora.with_adapter(tiny, ("q_proj", "v_proj"), 8)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    before = tensor_hashes(model)
    batch = {"input_ids": torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(2)),
             "attention_mask": torch.ones(2, 9, dtype=torch.long)}
    judged = {dtype: merge_equivalence(model, batch, dtype) for dtype in ("float32", "bfloat16")}
    assert judged["float32"]["decision"] == "accept" and judged["float32"]["adapter_tensors_left"] == 0
    assert judged["bfloat16"]["decision"] in ("accept", "tune")
    assert hash_report(before, tensor_hashes(model))["base_unchanged"] and tensor_hashes(model) == before


def test_a_wrong_merge_is_rejected(tiny):
    """The judgement can fail: a merge that doubles the update is far outside the float32 band."""
    model = lora.with_adapter(tiny, ("q_proj", "v_proj"), 8)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    ids = torch.randint(0, 512, (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        unmerged = model(input_ids=ids).logits
        wrong = copy.deepcopy(model)
        for module in wrong.modules():
            if hasattr(module, "scaling") and isinstance(module.scaling, dict) and "default" in module.scaling:
                module.scaling["default"] *= 2
        merged = wrong.merge_and_unload()(input_ids=ids).logits
    assert judge_merge(unmerged, merged, "float32")["decision"] == "reject"


# ---- variants ------------------------------------------------------------------------------------

def test_scaling_matches_the_stage_config_and_peft(tiny):
    for method in ("lora", "rslora", "dora"):
        for rank in (1, 8, 64):
            ours = adapter_scaling(method, 16.0, rank)
            assert ours["scaling"] == AdapterSpec("v", method=method, rank=rank, alpha=16.0).scaling
    layer = lora.with_adapter(tiny, ("v_proj",), 16, "rslora", alpha=32).base_model.model.model.layers[0].self_attn
    assert layer.v_proj.scaling["default"] == adapter_scaling("rslora", 32, 16)["scaling"] == 8.0
    assert adapter_scaling("lora", 32, 64)["relative_update_size"] == 0.125


def test_dora_forward_matches_peft_and_the_check_can_fail(tiny, monkeypatch):
    model = lora.with_adapter(tiny, ("q_proj", "v_proj"), 4, "dora")
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.1, generator=torch.Generator().manual_seed(3))
    checked = check_against_peft(model)
    assert checked["matches"] and checked["layer"].endswith("layers.0.self_attn.q_proj"), checked
    assert check_against_peft(lora.with_adapter(tiny, ("q_proj",), 4, "lora")) == {"layer": None}

    def column_norm(x, weight, lora_A, lora_B, magnitude, scaling, bias=None):
        adapted = weight + scaling * (lora_B @ lora_A)
        norm = torch.linalg.vector_norm(adapted, dim=0)[: weight.shape[0]]
        return (x @ adapted.T) * (magnitude / norm) + (0 if bias is None else bias)

    monkeypatch.setattr(dora_module, "dora_forward", column_norm)
    assert not dora_module.check_against_peft(model)["matches"]


# ---- plans, records, verdicts --------------------------------------------------------------------

def test_the_plans_compare_what_the_chapters_say():
    assert [spec.name for spec in ch_14.variants("cpu_smoke")] == ["attention_qv", "attention_all", "all_linear"]
    assert {spec.rank for spec in ch_14.variants("real_gpu")} == {8}
    for run_mode in ("cpu_smoke", "real_gpu"):
        names = [(spec.name, spec.method, spec.rank) for spec in ch_31.variants(run_mode)]
        assert names == [(f"{method}_r{rank}", method, rank) for rank in (1, 4, 16, 64)
                         for method in ("lora", "rslora", "dora")] + [("dora_budget", "dora", 7)]
        assert {spec.alpha for spec in ch_31.variants(run_mode)} == {16.0}  # one alpha: matched scaling at rank 1
    assert plan_for("14").measure is ch_14.measure and plan_for("31").measure is ch_31.measure


def _context(tmp_path, chapter_id: str, slug: str) -> ChapterContext:
    return ChapterContext(chapter_id, "cpu_smoke", "pytest_lora", slug, tmp_path / "results", None, ())


def test_the_chapter_31_plan_records_its_measurements(tmp_path, monkeypatch):
    monkeypatch.setattr(ch_31, "STAGE", {"cpu_smoke": {"steps": 2}})
    original = ch_31.variants
    monkeypatch.setattr(ch_31, "variants", lambda run_mode: original(run_mode)[-1:])  # the budget DoRA only
    written = lora.run_plan(_context(tmp_path, "31", "31-lora-variants"))
    record = json.loads(written[0]["path"].read_text(encoding="utf-8"))
    assert record["status"] == "ok" and record["stage"] == "sft_dora_budget", record.get("error")
    measured = record["chapter_measurements"]
    assert measured["count"]["matches"] and measured["count"]["analytic"] == record["parameters"]["trainable"]
    assert measured["budget"] == {"parameters": 3584, "fits": True}
    assert measured["dora_forward"]["matches"] and measured["scaling"]["scaling"] == 16 / 7
    assert set(measured["merge"]) == {"float32", "bfloat16"}
    assert record["measurements"]["peak_allocated_mib"] is None and record["comparable"] == {}
    verdict = lora.variant_verdict(record)
    assert verdict["mechanism"] == "accept_mechanism" and verdict["decision"] in ("accept_mechanism", "tune")
    assert "dora_budget" in lora.summary_table([record])


def _record(**changes) -> dict:
    record = {"status": "ok", "variant": {"name": "attention_qv", "method": "lora", "rank": 8},
              "hashes": {"base_unchanged": True, "adapter_changed": True, "changed_base_tensors": []},
              "measurements": {"eval_loss_before": 6.0, "eval_loss_after": 5.9, "step_time_ms_mean": 10.0},
              "chapter_measurements": {"count": {"analytic": 10, "peft": 10, "matches": True},
                                       "merge": {"float32": {"decision": "accept"},
                                                 "bfloat16": {"decision": "accept", "relative_drift": 0.004}}}}
    for key, value in changes.items():
        record[key] = value
    return record


def test_verdicts_are_computed_from_the_records():
    assert lora.variant_verdict(_record())["decision"] == "accept_mechanism"
    tune = _record(chapter_measurements={"count": {"matches": True}, "merge": {
        "float32": {"decision": "accept"}, "bfloat16": {"decision": "tune"}}})
    assert lora.variant_verdict(tune)["decision"] == "tune"
    assert lora.variant_verdict(tune)["mechanism"] == "accept_mechanism"
    moved = lora.variant_verdict(_record(hashes={"base_unchanged": False, "adapter_changed": True,
                                                 "changed_base_tensors": ["model.embed_tokens.weight"]}))
    assert moved["decision"] == "reject" and "model.embed_tokens.weight" in moved["reasons"][0]
    miscount = _record(chapter_measurements={"count": {"analytic": 9, "peft": 10, "matches": False}, "merge": {}})
    assert lora.variant_verdict(miscount)["decision"] == "reject"
    failed = lora.variant_verdict({"status": "oom", "error": "CUDA out of memory", "variant": {"name": "all_linear"}})
    assert failed["decision"] == "reject" and "oom" in failed["reasons"][0]


# ---- the notebooks teach what the stage measures ---------------------------------------------------

def _reference(slug: str, names: list[str]) -> dict:
    notebook = read_notebook(f"notebooks/{slug}.ipynb")
    source = "\n".join(cell.source for _, cell in cells_with_role(notebook, "reference-solution"))
    namespace = {"math": math, "torch": torch, "hashlib": __import__("hashlib"), "METHODS": ("lora", "rslora", "dora"),
                 "QWEN2_LINEAR": QWEN2_LINEAR_MODULES,
                 "ADAPTER_MARKERS": ("lora_A", "lora_B", "lora_magnitude_vector", "lora_embedding_A", "lora_embedding_B")}
    exec(compile(source, f"<{slug} reference>", "exec"), namespace)
    return {name: namespace[name] for name in names}


def test_chapter_14_reference_agrees_with_the_stage():
    ref = _reference("14-lora-targets", ["lora_trainable_count", "judge_merge", "frozen_base_report"])
    for model_id in ("tiny", QWEN):
        for targets in TARGET_SETS:
            ours = lora_parameter_count(lora.architecture(model_id), targets, 4)
            theirs = ref["lora_trainable_count"](lora.architecture(model_id), list(targets), 4)
            assert ours["per_layer"] == theirs["per_layer"] and ours["total"] == theirs["total"]
    generator = torch.Generator().manual_seed(0)
    for dtype in ("float32", "bfloat16"):
        for size in (1e-7, 1e-3, 0.05, 0.5):
            unmerged = torch.randn(3, 5, generator=generator) * 10
            merged = unmerged + size * torch.randn(3, 5, generator=generator)
            taught = ref["judge_merge"](unmerged, merged, dtype)
            assert taught == {key: value for key, value in judge_merge(unmerged, merged, dtype).items() if key in taught}
    before = {"a.weight": torch.zeros(2), "a.lora_A.default.weight": torch.zeros(2)}
    after = {"a.weight": torch.ones(2), "a.lora_A.default.weight": torch.ones(2)}
    stage = hash_report(tensor_hashes_of(before), tensor_hashes_of(after))
    taught = ref["frozen_base_report"](before, after)
    assert taught["changed_base"] == stage["changed_base_tensors"] and taught["decision"] == "base_changed"


def tensor_hashes_of(snapshot: dict) -> dict:
    module = torch.nn.Module()
    for index, (name, tensor) in enumerate(snapshot.items()):
        module.register_parameter(f"p{index}", torch.nn.Parameter(tensor.clone()))
    hashes = tensor_hashes(module)
    return {name: hashes[f"p{index}"] for index, name in enumerate(snapshot)}


def test_chapter_31_reference_agrees_with_the_stage():
    ref = _reference("31-lora-variants", ["adapter_scaling", "dora_forward", "largest_rank_within_budget"])
    for method in ("lora", "rslora", "dora"):
        for rank in (1, 7, 8, 64):
            assert ref["adapter_scaling"](method, 16.0, rank) == adapter_scaling(method, 16.0, rank)
    generator = torch.Generator().manual_seed(0)
    weight, a, b = (torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in ((5, 3), (2, 3), (5, 2)))
    magnitude, x, bias = torch.rand(5, dtype=torch.float64) + 0.5, torch.randn(4, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    assert torch.allclose(ref["dora_forward"](x, weight, a, b, magnitude, 1.5, bias),
                          dora_forward(x, weight, a, b, magnitude, 1.5, bias), atol=1e-12)
    shapes = model_shapes(lora.architecture(QWEN), ("q_proj", "v_proj"))
    for method in ("lora", "rslora", "dora"):
        for budget in (600_000, 540_672, 2_000_000):
            assert ref["largest_rank_within_budget"](budget, shapes, method) == \
                largest_rank_within_budget(budget, shapes, method)


def test_step_5_figure_draws_every_variant_with_the_budget_and_unmeasured_values():
    import matplotlib

    matplotlib.use("Agg")
    from tools.chapters.lora_common import draw_adapter_results
    from tools.chapters.lora_targets import draw_target_results
    from tools.chapters.lora_variants import draw_variant_results

    records = [{"variant": {"name": "lora_r8"}, "measurements": {"eval_loss_before": 6.1, "eval_loss_after": 5.9},
                "chapter_measurements": {"count": {"analytic": 3328}, "budget": {"parameters": 3500},
                                         "merge": {"bfloat16": {"max_abs_diff": 0.09375, "logit_scale": 4.0}}}},
               {"variant": {"name": "dora_r8"}, "measurements": {"eval_loss_before": None, "eval_loss_after": None},
                "chapter_measurements": {"count": {"analytic": 3776}}}]
    assert draw_target_results is draw_adapter_results is draw_variant_results
    fig = draw_adapter_results(records)
    counts, losses, drift = fig.axes
    assert [bar.get_height() for bar in counts.patches] == [3328, 3776]
    assert [line.get_ydata()[0] for line in counts.lines] == [3500]  # the budget
    assert [bar.get_height() for bar in losses.patches] == [6.1, 0, 5.9, 0]  # unmeasured drawn as empty
    assert [bar.get_height() for bar in drift.patches] == [3.0, 1e-3]  # 0.09375 at scale 4: 3 bf16 spacings of 2**-5


def test_chapter_14_says_bfloat16_has_8_significant_bits_not_digits():
    """Issue 22: bfloat16 keeps 8 significant bits (about 2-3 decimal digits), not 8 digits."""
    from chapter_factory import REPO_ROOT

    notebook = json.loads((REPO_ROOT / "notebooks" / "14-lora-targets.ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    assert "8 位有效数字" not in text
    assert text.count("8 个二进制位") >= 2 and "2–3 位十进制有效数字" in text


def test_every_claim_sentence_fills_from_the_same_fields():
    """The page's claim sentences (lesson_text.toml, section sft_effects) for a met and an unmet claim of
    each kind, and with one seed: each fills from the fields claim_lines passes (a sentence that takes
    fewer fields once stopped chapter 15's cpu_smoke run when its claim was met)."""
    from tools.chapters.lab_curves_figure import Claim, claim_lines

    def curve(seed, after):
        return {"seed": seed, "heldout": {"exact_match": [0.1, after], "loss": [1.0, 0.5]}}

    record = {"variants": {"a": {"curves": [curve(seed, 0.6 + seed * 0.01) for seed in range(3)]},
                           "b": {"curves": [curve(seed, 0.1 + seed * 0.001) for seed in range(3)]}},
              "cpu_numerics": {}, "lab_models": "committed"}
    single = {**record, "variants": {name: {"curves": v["curves"][:1]} for name, v in record["variants"].items()}}
    for margin, kind in ((0.3, "greater"), (0.9, "greater"), (0.9, "equivalent"), (0.01, "equivalent")):
        for shown in (record, single):
            lines = claim_lines(shown, [Claim("a", "b", margin, kind, test_seeds=5)])
            assert len(lines) == 2 and "`a`" in lines[0] and "5" in lines[0], lines
