"""Step 5 of the SFT chapters (14, 15, 26, 30, 31) runs the learner's functions (issue 32, item 1).

For each chapter a plausible learner mistake, planted as the learner's function, goes through the same
`tools.experiments.contract.run(plan)` the notebook calls (tools.chapters.sft_stage.run_plan), and the
Step 5 outcome changes: the decision computed from the records. The records say which functions ran
(`mechanism`: "learner" for the planted one, "package" for the others), and a plan that passes a
function its chapter does not take is refused before any work.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
from chapter_factory import REPO_ROOT

from tools.chapters import lora_common as lora
from tools.chapters import qlora
from tools.chapters import sft_long_context as long_context
from tools.chapters import sft_training_loop as loop
from tools.chapters.context import ChapterContext
from tools.chapters.sft_stage import mechanism_lines, run_plan
from tools.errors import ConfigError
from tools.experiments.contract import Mechanism, Plan, run
from tools.experiments.sft_training.packing import waste_report

pytestmark = pytest.mark.slow


def learner(tmp_path, name: str, source: str):
    """A learner's function, defined in a file of its own (so its source can be read, as in a kernel)."""
    path = tmp_path / f"learner_{name}.py"
    path.write_text("import math\nimport torch\n\n" + textwrap.dedent(source), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"learner_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def planted(tmp_path, name: str, source: str) -> Mechanism:
    return Mechanism({name: learner(tmp_path, name, source)}, {name: "learner"})


def context(tmp_path, chapter_id: str, slug: str, label: str) -> ChapterContext:
    return ChapterContext(chapter_id, "cpu_smoke", label, slug, tmp_path / "results", None, ())


def run_chapter(tmp_path, chapter_id: str, slug: str, label: str, mechanism: Mechanism | None, variants=()):
    """The notebook's call (sft_stage.run_plan), restricted to `variants` when given."""
    if not variants:
        return run_plan(context(tmp_path, chapter_id, slug, label), "local", mechanism)[1]
    plan = Plan(experiment="sft_training", chapter=chapter_id, run_mode="cpu_smoke", label=label,
                results_dir=tmp_path / "results", variants=tuple(variants),
                mechanism=mechanism if mechanism is not None else Mechanism())
    import json

    return [json.loads(ref.path.read_text(encoding="utf-8")) for ref in run(plan)]


def test_a_function_the_chapter_does_not_take_is_refused_before_any_work(tmp_path):
    foreign = planted(tmp_path, "pack_examples", "def pack_examples(examples, row_length, pad_id):\n    return {}\n")
    with pytest.raises(ConfigError, match="takes the functions"):
        run(Plan(experiment="sft_training", chapter="14", run_mode="cpu_smoke", label="pytest_foreign",
                 results_dir=tmp_path / "results", mechanism=foreign))
    assert not (tmp_path / "results").exists()


WIDE_KV = '''
def lora_trainable_count(config, target_modules, rank):
    """A learner's count that takes k_proj and v_proj as wide as q_proj (grouped-query attention missed)."""
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, hidden), "v_proj": (hidden, hidden),
              "o_proj": (hidden, hidden), "gate_proj": (hidden, inner), "up_proj": (hidden, inner),
              "down_proj": (inner, hidden)}
    per_layer = {name: rank * sum(shapes[name]) for name in shapes if name in target_modules}
    total = sum(per_layer.values())
    return {"per_layer": per_layer, "per_layer_total": total, "total": total * config["num_hidden_layers"]}
'''


def test_14_a_count_that_misses_grouped_query_attention_rejects_the_variant(tmp_path, lab_models):
    reference = run_chapter(tmp_path, "14", "14-lora-targets", "pytest_14_package", None, ["attention_qv"])[0]
    wrong = run_chapter(tmp_path, "14", "14-lora-targets", "pytest_14_learner",
                        planted(tmp_path, "lora_trainable_count", WIDE_KV), ["attention_qv"])[0]
    assert lora.variant_verdict(reference)["mechanism"] == "accept_mechanism", lora.variant_verdict(reference)
    verdict = lora.variant_verdict(wrong)
    assert verdict["decision"] == "reject" and "analytic count" in verdict["reasons"][0], verdict
    assert wrong["mechanism"]["lora_trainable_count"]["source"] == "learner"
    assert wrong["mechanism"]["judge_merge"]["source"] == "package"
    assert reference["chapter_measurements"]["frozen"]["decision"] == "frozen"
    assert mechanism_lines([wrong]) == ["Step 5 ran the package's copy: frozen_base_report, judge_merge",
                                        "Step 5 ran yours: lora_trainable_count"]


BLIND_TO_LEAKS = '''
def isolated_evaluation(model, eval_batches, optimizer, train_hashes, eval_hashes):
    """A learner's evaluation in eval mode without gradients that never intersects the hashes."""
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    total = tokens = 0.0
    with torch.no_grad():
        for batch in eval_batches:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
            labels = batch["labels"][:, 1:]
            total += float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                           ignore_index=-100, reduction="sum"))
            tokens += int((labels != -100).sum())
    model.train(was_training)
    return {"loss": total / tokens, "supervised_tokens": int(tokens), "state_unchanged": True,
            "optimizer_unchanged": True, "leaked": [], "isolated": True}
'''


def test_15_an_evaluation_blind_to_leaks_lets_the_leaking_lookalike_through(tmp_path, lab_models):
    mechanism = planted(tmp_path, "isolated_evaluation", BLIND_TO_LEAKS)
    records = run_chapter(tmp_path, "15", "15-sft-training-loop", "pytest_15_learner", mechanism)
    decided = loop.decide_stage(records, mechanism)
    by_name = {item["variant"]: item for item in decided["variants"]}
    assert by_name["eval_leak"]["decision"] != "reject" and decided["decision"]["decision"] == "reject", decided
    assert decided["audit_disagreements"]["eval_leak"][0].startswith("leaked examples: yours 0")
    assert records[0]["mechanism"]["isolated_evaluation"]["source"] == "learner"
    reference = run_chapter(tmp_path, "15", "15-sft-training-loop", "pytest_15_package", None)
    assert loop.decide_stage(reference)["decision"]["decision"] == "accept_mechanism", loop.decide_stage(reference)


PER_TENSOR_ABSMAX = '''
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0)


def nf4_quantise(weight, blocksize=64):
    """A learner's quantiser that scales the whole tensor by one absmax, repeated for every block."""
    flat = weight.detach().reshape(-1).float()
    blocks = (flat.numel() + blocksize - 1) // blocksize
    absmax = flat.abs().max()
    levels = torch.tensor(NF4, dtype=torch.float32)
    codes = torch.bucketize(flat / absmax, (levels[:-1] + levels[1:]) / 2)
    return {"codes": codes.to(torch.uint8).reshape(weight.shape), "absmax": absmax.repeat(blocks),
            "shape": tuple(weight.shape), "blocksize": blocksize}
'''


def test_26_a_quantiser_with_one_absmax_per_tensor_is_caught_on_the_real_base(tmp_path, lab_models):
    wrong = run_chapter(tmp_path, "26", "26-qlora", "pytest_26_learner",
                        planted(tmp_path, "nf4_quantise", PER_TENSOR_ABSMAX), ["nf4_base"])
    decided = qlora.decide(wrong)
    assert decided["decision"] == "reject" and "nf4_quantise" in decided["reasons"][0], decided
    reference = run_chapter(tmp_path, "26", "26-qlora", "pytest_26_package", None, ["nf4_base"])
    assert qlora.decide(reference) == {"decision": "accept_mechanism", "reasons": []}
    checks = reference[0]["chapter_measurements"]["chapter_functions"]
    assert checks["quantise"]["codes_mismatched"] == 0 and checks["quantise"]["codes_compared"] > 0
    assert wrong[0]["mechanism"]["nf4_quantise"]["source"] == "learner"


CAUSAL_ONLY = '''
def block_causal_mask(position_ids):
    """A learner's mask that is causal over the whole row: packed examples see each other."""
    batch, time = position_ids.shape
    causal = torch.ones(time, time, dtype=torch.bool, device=position_ids.device).tril()
    return causal.expand(batch, 1, time, time).clone()
'''


def test_30_a_mask_without_blocks_breaks_the_packed_losses(tmp_path, lab_models):
    wrong = run_chapter(tmp_path, "30", "30-long-context", "pytest_30_learner",
                        planted(tmp_path, "block_causal_mask", CAUSAL_ONLY), ["padded_128", "packed_128"])
    decided = long_context.decide(wrong, waste_report)
    assert decided["decision"] == "reject" and decided["reasons"] == ["packed_128: not isolated"], decided
    reference = run_chapter(tmp_path, "30", "30-long-context", "pytest_30_package", None,
                            ["padded_128", "packed_128"])
    assert long_context.decide(reference, waste_report)["decision"] == "accept_mechanism"


NO_MAGNITUDE = '''
def largest_rank_within_budget(budget, shapes, method="lora"):
    """A learner's budget rank that forgets DoRA's magnitude vector (one number per output)."""
    per_rank = sum(fan_in + fan_out for fan_in, fan_out in shapes)
    rank = budget // per_rank
    if rank < 1:
        raise ValueError("the budget does not fit rank 1")
    return {"rank": rank, "parameters": rank * per_rank, "unused": budget - rank * per_rank}
'''


def test_31_a_budget_rank_that_forgets_the_magnitude_overruns_the_budget(tmp_path, lab_models):
    wrong = run_chapter(tmp_path, "31", "31-lora-variants", "pytest_31_learner",
                        planted(tmp_path, "largest_rank_within_budget", NO_MAGNITUDE), ["dora_budget"])[0]
    reference = run_chapter(tmp_path, "31", "31-lora-variants", "pytest_31_package", None, ["dora_budget"])[0]
    assert (wrong["variant"]["rank"], reference["variant"]["rank"]) == (8, 7)
    verdict = lora.variant_verdict(wrong)
    assert verdict["decision"] == "reject" and "over the budget" in verdict["reasons"][0], verdict
    assert lora.variant_verdict(reference)["mechanism"] == "accept_mechanism", lora.variant_verdict(reference)


LEARNER_COUNT = '''
def lora_trainable_count(config, target_modules, rank):
    """A learner's count, correct but written apart from the reference: validation first, then a table."""
    if not isinstance(config, dict):
        raise ValueError("config must be a dict")
    needed = ["hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers"]
    for key in needed:
        value = config.get(key)
        if type(value) is not int or value < 1:
            raise ValueError(f"{key} must be an int >= 1")
    head_dim = config.get("head_dim")
    if head_dim is None:
        if config["hidden_size"] % config["num_attention_heads"] != 0:
            raise ValueError("hidden_size must divide into the heads")
        head_dim = config["hidden_size"] // config["num_attention_heads"]
    if type(head_dim) is not int or head_dim < 1:
        raise ValueError("head_dim must be an int >= 1")
    if config["num_attention_heads"] % config["num_key_value_heads"] != 0:
        raise ValueError("the heads must divide into the key-value heads")
    if type(target_modules) not in (list, tuple) or len(target_modules) == 0:
        raise ValueError("target_modules must be a non-empty list or tuple")
    if len(set(target_modules)) != len(target_modules) or not all(name in QWEN2_LINEAR for name in target_modules):
        raise ValueError("target_modules must be distinct Qwen2 linear names")
    if type(rank) is not int or rank < 1:
        raise ValueError("rank must be an int >= 1")
    h, i = config["hidden_size"], config["intermediate_size"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    sizes = [("q_proj", h + q), ("k_proj", h + kv), ("v_proj", h + kv), ("o_proj", q + h),
             ("gate_proj", h + i), ("up_proj", h + i), ("down_proj", i + h)]
    per_layer = {}
    for name, width in sizes:
        if name in target_modules:
            per_layer[name] = rank * width
    layer_sum = 0
    for count in per_layer.values():
        layer_sum += count
    return {"per_layer": per_layer, "per_layer_total": layer_sum, "total": layer_sum * config["num_hidden_layers"]}
'''


def test_14_the_notebook_runs_step5_with_the_learners_own_count(tmp_path):
    """A copy of chapter 14's notebook whose lora_trainable_count exercise holds a correct learner
    implementation written differently from the reference, executed in cpu_smoke as `make run` does: the
    keep-own cell keeps it, Step 5 runs it (every stage record says "learner" for it, "reference" for the
    two stubs), the counts still match peft and the page prints which functions ran."""
    import json

    from tools.core.catalog import find_chapter
    from tools.course.cells import read_notebook, write_notebook
    from tools.course.runs.runner import run_chapter

    chapter = find_chapter("14", REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    (cell,) = [cell for cell in notebook.cells if "exercise" in cell.metadata.get("tags", [])
               and cell.metadata["course"]["exercise"] == "lora_trainable_count"]
    cell.source = LEARNER_COUNT
    write_notebook(notebook, chapter.notebook_path(tmp_path))
    results = tmp_path / "results"
    outcome = run_chapter(tmp_path, chapter, run_mode="cpu_smoke", label="pytest_learner", results_dir=results,
                          output_dir=tmp_path / "executed")
    assert outcome.status == "passed", (outcome.failed_cell, outcome.error)
    records = [json.loads(path.read_text(encoding="utf-8")) for path in results.rglob("*.json")]
    staged = [record for record in records if record.get("mechanism")]
    assert staged, [sorted(record) for record in records]
    expected = {"lora_trainable_count": "learner", "frozen_base_report": "reference", "judge_merge": "reference"}
    for record in staged:
        assert {name: item["source"] for name, item in record["mechanism"].items()} == expected
        assert lora.variant_verdict(record)["mechanism"] == "accept_mechanism", lora.variant_verdict(record)
    executed = read_notebook(tmp_path / "executed" / chapter.notebook_path(REPO_ROOT).name)
    shown = "".join(output.get("text", "") for cell in executed.cells if cell.cell_type == "code"
                    for output in cell.get("outputs", []))
    assert "Step 5 will run your lora_trainable_count" in shown and "Step 5 ran yours: lora_trainable_count" in shown
