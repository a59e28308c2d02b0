"""Every formula chapter 76 shows is tied to the library function that computes it.

The chapter's reference solutions (its reference-solution cell) are compared with the library on
generated inputs: the activation estimate (TODO 1) with `estimate.estimate_activation_bytes`, the
handoff gate (TODO 4) with `judge.handoff_gate`; the saved-tensor accounting and the offload hooks
(TODOs 2 and 3) with the library's observer on the tiny model. The formulas written in the prose
(Step 3 and Step 5) are checked against the library's numbers and its formula text.
"""

import copy
import json
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from chapter_factory import REPO_ROOT
from tools.course.cells import cells_with_role, read_notebook
from tools.experiments.memory_strategy import estimate, judge, stages
from tools.experiments.memory_strategy.runner import compare_strategy_gradients

NOTEBOOK = REPO_ROOT / "notebooks" / "76-activation-memory-strategies.ipynb"
SETTINGS = settings(max_examples=120, derandomize=True, database=None, deadline=None,
                    suppress_health_check=list(HealthCheck))


pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # conftest: torch on one thread


@pytest.fixture(scope="module")
def chapter():
    notebook = read_notebook(NOTEBOOK)
    namespace = {"math": math, "torch": torch, "nn": nn}
    for _, cell in cells_with_role(notebook, "reference-solution"):
        exec(compile(cell.source, "<76 reference>", "exec"), namespace)
    prose = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    return {"ref": namespace, "prose": prose}


ARCH = st.fixed_dictionaries({name: st.integers(1, 5000) for name in estimate.ARCH_KEYS})
STRATEGY = st.sampled_from(["baseline", "checkpoint", "offload", "hybrid"])


@SETTINGS
@given(arch=ARCH, batch=st.integers(1, 64), seq=st.integers(1, 8192), strategy=STRATEGY,
       dtype_bytes=st.sampled_from([1, 2, 4, 8]))
def test_the_chapters_estimate_is_the_librarys(chapter, arch, batch, seq, strategy, dtype_bytes):
    ours = chapter["ref"]["estimate_saved_activation_bytes"](arch, batch, seq, strategy, dtype_bytes)
    library = estimate.estimate_activation_bytes(arch, batch_size=batch, seq_len=seq, strategy=strategy,
                                                 dtype_bytes=dtype_bytes, attn_implementation="sdpa")
    assert ours == {key: library[key] for key in ours}


@pytest.mark.parametrize("bad", [{"batch": 0}, {"seq": True}, {"strategy": "zero3"}, {"dtype_bytes": 2.0},
                                 {"arch": {"hidden_size": 8}}])
def test_the_chapter_and_the_library_refuse_the_same_inputs(chapter, bad):
    arguments = {"arch": {name: 4 for name in estimate.ARCH_KEYS}, "batch": 1, "seq": 8, "strategy": "baseline",
                 "dtype_bytes": 4, **bad}
    with pytest.raises(ValueError):
        chapter["ref"]["estimate_saved_activation_bytes"](arguments["arch"], arguments["batch"], arguments["seq"],
                                                          arguments["strategy"], arguments["dtype_bytes"])
    with pytest.raises(ValueError):
        estimate.estimate_activation_bytes(arguments["arch"], batch_size=arguments["batch"], seq_len=arguments["seq"],
                                           strategy=arguments["strategy"], dtype_bytes=arguments["dtype_bytes"])


def test_the_formula_in_the_prose_is_the_librarys(chapter):
    """Step 3.1's LaTeX and the library's formula text name the same terms."""
    prose = chapter["prose"]
    for latex, library in (("8h + 2\\,kv\\,d + 4i + a + 2", "8*h + 2*kv*d + 4*i + a + 2"),
                           ("3h + V + 1", "3*h + V + 1"), ("2\\,\\text{seq}\\,d", "2*seq*d"), ("16T", "16*T"),
                           ("L\\,T\\,h", "L*T*h")):
        assert latex in prose, latex
        assert library in estimate.ACTIVATION_FORMULA, library
    assert "repeat_kv" in prose and "repeat_kv" in estimate.GQA_NOTE


def test_the_qwen_figures_in_step_3_come_from_the_library():
    """The Step 3 figure's numbers for Qwen2.5-0.5B at batch 1, seq 768 (printed by report.estimate_lines)."""
    from tools.experiments.memory_strategy import report
    from tools.models.architectures import QWEN25_05B_INSTRUCT, RANDOM_INIT_ARCHITECTURES

    arch = estimate.arch_from_config(RANDOM_INIT_ARCHITECTURES[QWEN25_05B_INSTRUCT])
    lines = report.estimate_lines(arch, batch_size=1, seq_len=768)
    base = estimate.estimate_activation_bytes(arch, batch_size=1, seq_len=768)
    groups = estimate.activation_groups(arch, batch_size=1, seq_len=768)
    assert sum(groups.values()) == base["saved_bytes"]
    assert f"{base['device_bytes'] / 2**20:8.1f} MiB" in "\n".join(lines)
    assert any(line.startswith("log-softmax share of what checkpoint keeps: 86%") for line in lines)


RECORD = st.fixed_dictionaries({
    "status": st.sampled_from(["ok", "ok", "ok", "partial_oom", "partial_failed", "oom", "failed", "done"]),
    "successful_runs": st.one_of(st.integers(0, 5), st.sampled_from([True, -1])),
    "execution_path_verified": st.sampled_from([True, True, False, None, 1]),
    "peak_memory_mb": st.one_of(st.floats(1, 1e4), st.sampled_from([None, float("nan"), True])),
})
NAMES = st.lists(st.sampled_from(["checkpoint", "offload", "hybrid", "baseline", ""]), max_size=4)


@SETTINGS
@given(names=NAMES, records=st.lists(RECORD, min_size=5, max_size=5), minimum=st.sampled_from([1, 2, 3, 0, True]))
def test_the_chapters_handoff_gate_is_the_librarys(chapter, names, records, minimum):
    candidates = [{"name": name, **record} for name, record in zip(["baseline", *names], records)]
    outcomes = []
    for gate in (chapter["ref"]["decide_strategy_handoff"], judge.handoff_gate):
        try:
            outcomes.append(gate(copy.deepcopy(candidates), minimum))
        except ValueError:
            outcomes.append("ValueError")
    assert outcomes[0] == outcomes[1]


@pytest.fixture(scope="module")
def tiny(tiny_model):
    model = copy.deepcopy(tiny_model)
    model.config.use_cache = False
    ids = torch.randint(0, model.config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(3))

    def fresh(checkpointing=False):
        copy_ = copy.deepcopy(model).train()
        if checkpointing:
            copy_.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return copy_

    observed = compare_strategy_gradients(fresh, ids)
    return {"fresh": fresh, "ids": ids, "observed": {name: r["evidence"]["last_step"] for name, r in observed.items()}}


def _loss(module, batch):
    return module(input_ids=batch, labels=batch).loss


def test_the_chapters_ledger_counts_what_the_library_observer_counts(chapter, tiny):
    for name, checkpointing in (("baseline", False), ("checkpoint", True)):
        ledger = chapter["ref"]["saved_tensor_ledger"](tiny["fresh"](checkpointing), tiny["ids"], _loss)
        observed = tiny["observed"][name]
        assert ledger["activation_bytes"] == observed["device_saved_bytes"]
        assert ledger["activation_storages"] == observed["device_saved_storages"]
        assert ledger["saved_tensors"] == observed["saved_tensor_count"]
        assert ledger["parameter_tensors"] == observed["parameter_saved_count"]


def test_the_chapters_offload_copies_each_pack_and_the_library_each_live_view(chapter, tiny):
    """Both move every activation: the chapter copies at each pack (like torch's save_on_cpu), the library
    once per view still alive, so its host bytes are at most the chapter's and at least the baseline's."""
    result = chapter["ref"]["offloaded_step"](tiny["fresh"](), tiny["ids"], _loss)
    observed = tiny["observed"]
    assert result["host_copies"] == observed["offload"]["offloaded_tensor_count"]
    assert result["kept_parameter_tensors"] == observed["offload"]["parameter_saved_count"]
    assert observed["baseline"]["device_saved_bytes"] <= observed["offload"]["host_offloaded_bytes"] \
        <= result["host_bytes"]


def test_step_5_formulas_are_the_judges(chapter):
    """Savings, throughput ratio, quality floor, memory cap and the G1 admission as the prose writes them."""
    prose = chapter["prose"]
    assert "节省 = 基线峰值 − 候选峰值" in prose and "吞吐保留率 = 候选 ÷ 基线" in prose
    assert "max(2048\\ \\text{MB},\\ 0.15 \\times \\text{总显存})" in prose and "1.02" in prose
    budget = {**stages.BUDGET}
    rows = judge.summarize_memory_strategy_candidates([
        {"name": "baseline", "status": "ok", "execution_path_verified": True, "peak_memory_mb": 9000.0,
         "peak_reserved_mb": 9500.0, "samples_per_s": 8.0, "eval_loss": 1.0},
        {"name": "checkpoint", "status": "ok", "execution_path_verified": True, "peak_memory_mb": 6000.0,
         "peak_reserved_mb": 6400.0, "samples_per_s": 6.0, "eval_loss": 1.01}], budget, {"max_val_loss": 1.02})
    row = rows["candidates"][0]
    assert row["memory_saving_mb"] == 3000.0 and row["throughput_ratio"] == 0.75
    assert row["device_footprint_mb"] == 6400.0 + budget["cuda_context_margin_mb"]
    floor = stages.quality_floor_from([{"name": "baseline", "status": "ok", "eval_loss": 2.0}], 9.0, "unused")
    assert floor["max_val_loss"] == 2.0 * 1.02
    check = judge.admit_next_length(previous_seq_len=768, previous_peak_reserved_mb=6000.0, next_seq_len=1024,
                                    free_memory_mb=20000.0, safety_margin=judge.safety_margin_mb(24000.0))
    assert check["projected_peak_reserved_mb"] == 6000.0 * 1024 / 768
    assert check["safe_process_limit_mb"] == 20000.0 - max(2048.0, 0.15 * 24000.0)


def test_the_notebook_keeps_no_copy_of_library_code():
    """The chapter's code cells call the library for the estimate, the stages and the figures."""
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = "\n".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"
                     and "reference-solution" not in cell["metadata"].get("tags", []))
    for function in ("def activation_parts", "def kept_bytes", "def run_strategy_set", "def saved_bytes_table",
                     "def load_inputs", "def read_stage_record", "def quality_floor_from"):
        assert function not in code, function
    assert len(re.findall(r"^def ", code, flags=re.M)) <= 12  # exercise stubs, test functions and two helpers
