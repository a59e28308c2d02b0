"""The chain's stages in cpu_smoke, run once through the experiment contract (64, 63, 65, 62 on one
label): what each record holds, that its decision is the gates' on its own evidence, and that the
delivered files are checked (a changed byte or another configuration changes the delivery state)."""

from __future__ import annotations

import json

import pytest

from tools.core.records import sha256_file
from tools.experiments.contract import Plan, run
from tools.experiments.sft_chain import delivery_gates, qlora, selection, selection_gates
from tools.experiments.sft_chain.training import state_sha256

pytestmark = pytest.mark.slow  # four stages train the lab model (cpu_smoke): about two minutes
LABEL = "chain_stages"


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    refs = {}
    for experiment, chapter in (("sft_data_admission", "64"), ("lora_selection", "63"), ("qlora_branch", "65"),
                                ("sft_delivery", "62")):
        refs[chapter] = {ref.stage: ref for ref in run(Plan(experiment=experiment, chapter=chapter,
                                                            run_mode="cpu_smoke", label=LABEL, results_dir=results))}
    return results, refs


def test_63_matrix_holds_every_run_and_excludes_the_leftover(chain):
    _, refs = chain
    matrix, manifest = refs["63"]["matrix"].load(), refs["63"]["manifest"].load()
    names = [run["name"] for run in matrix["runs"]]
    assert len(names) == len(selection.RANKS) * len(selection.SEEDS) + 1 and names[-1] == "r32_s1_leftover"
    assert matrix["gating"]["comparability"]["excluded"] == [{"value": 32, "reasons": ["differs:steps", "seeds"]}]
    admitted = refs["64"]["admitted_data"].load()
    assert {run["config"]["data_sha256"] for run in matrix["runs"]} == {admitted["version"]["content_sha256"]}
    again = selection.gate(matrix["runs"], "cpu_smoke", admitted["version"]["content_sha256"], gates=selection_gates)
    assert json.loads(json.dumps(again)) == matrix["gating"] and manifest["decision"]["decision"] == again["choice"]["decision"]
    assert matrix["memory_metric"] == "training_state_bytes"
    assert all(run["peak_allocated_bytes"] is None for run in matrix["runs"])  # a CPU measures no device memory


def test_63_trains_the_lab_model_and_its_quality_moves_with_training(chain):
    """cpu_smoke trains the lab student, and the quality the gates read is well above the untrained
    base on every comparable run (the gates compare learning, not noise around zero)."""
    from tools.data import sft_raw
    from tools.experiments.sft_chain.training import evaluate, load_base, render

    _, refs = chain
    matrix, admitted = refs["63"]["matrix"].load(), refs["64"]["admitted_data"].load()
    assert matrix["model"]["model_id"] == selection.CPU_MODEL == "lab"
    assert matrix["quality_key"] == "token_accuracy" and "token" in matrix["quality_metric"]
    base, tokenizer, _ = load_base("lab", "local", "float32", "cpu")
    rendered = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
    untrained = evaluate(base, rendered, tokenizer.pad_token_id, "cpu")
    comparable = [run for run in matrix["runs"] if run["config"]["rank"] in selection.RANKS]
    assert all(run["quality"] == run["token_accuracy"] for run in matrix["runs"])
    assert all(run["quality"] > untrained["token_accuracy"] + 0.05 for run in comparable), (
        untrained, [run["quality"] for run in comparable])
    assert all(run["eval_loss"] < untrained["eval_loss"] - 1.0 for run in comparable)


def test_63_chosen_adapter_files_are_the_chosen_run(chain):
    results, refs = chain
    manifest = refs["63"]["manifest"].load()
    if manifest["decision"]["decision"] != "accept":
        pytest.skip("no rank was chosen in this run")
    files = [entry for entry in manifest["outputs"] if entry["role"].startswith("chosen_adapter/")]
    assert files and all(sha256_file(results / entry["path"]) == entry["sha256"] for entry in files)
    from safetensors.torch import load_file

    weights = next(entry for entry in files if entry["path"].endswith("adapter_model.safetensors"))
    assert state_sha256(load_file(str(results / weights["path"]))) == manifest["chosen_adapter"]["adapter_sha256"]
    config = json.loads(next(results / e["path"] for e in files if e["path"].endswith("adapter_config.json")).read_text())
    assert not str(config.get("base_model_name_or_path", "")).startswith("/")  # no machine path in a delivered file
    assert manifest["selected_config"]["rank"] == manifest["decision"]["chosen_rank"]


def test_65_pairs_say_which_path_ran_and_claim_no_memory_on_a_cpu(chain):
    _, refs = chain
    pairs, manifest = refs["65"]["pairs"].load(), refs["65"]["manifest"].load()
    path = manifest["bitsandbytes_path"]
    assert path["quant_type"] == "nf4" and path["linear4bit_layers"] > 0 and path["backend"] == "cpu"
    for seed in map(str, qlora.SEEDS):
        bf16, nf4 = pairs["runs"]["bf16"][seed], pairs["runs"]["nf4"][seed]
        assert bf16["status"] == nf4["status"] == "ok"
        assert nf4["base_tensor_bytes"] < bf16["base_tensor_bytes"]  # 4-bit storage, counted from the tensors
        assert bf16["peak_allocated_bytes"] is None and nf4["peak_allocated_bytes"] is None
    assert pairs["ladders"] == {"bf16": [], "nf4": []} and "CUDA only" in pairs["ladder_note"]
    assert manifest["decision"]["decision"] in ("tune", "reject")
    if manifest["decision"]["decision"] == "tune":
        assert manifest["decision"]["reasons"][0] == "capacity_not_measured"
        assert "not measured" in manifest["next_action"] and "real_gpu" in manifest["next_action"]


def test_62_delivers_the_selection_and_its_checks_can_fail(chain, tmp_path):
    results, refs = chain
    report, manifest = refs["62"]["evaluation"].load(), refs["62"]["manifest"].load()
    assert manifest["decision"]["decision"] == "delivered" and manifest["decision"]["reasons"] == []
    k = report["checkpoint_step"]
    assert report["resumed"]["optimiser_steps"][0] == k + 1
    assert report["resumed"]["losses"] == report["formal"]["losses"][k:]
    assert report["reloaded"]["eval_loss"] == report["formal"]["eval_loss"]
    selected = refs["63"]["manifest"].load()["selected_config"]
    assert report["selected"] == selected and report["config"]["data_sha256"] == selected["data_sha256"]
    delivered = [entry for entry in manifest["outputs"] if entry["role"].startswith("delivery/")]
    assert {entry["role"][len("delivery/"):] for entry in delivered} == set(report["files"]["recorded"])
    # a changed byte in a delivered file: the same gates now ask for a rerun
    adapter = next(results / e["path"] for e in delivered if e["path"].endswith("adapter_model.safetensors"))
    folder = adapter.parent.parent  # <slug>/<slug>_delivery_<label>/adapter/adapter_model.safetensors
    data = bytearray(adapter.read_bytes())
    data[-1] ^= 1
    adapter.write_bytes(bytes(data))
    from tools.experiments.sft_chain.training import file_hashes

    files = {"recorded": report["files"]["recorded"], "found": file_hashes(folder)}
    resume = {"reference_losses": report["formal"]["losses"], "checkpoint_step": k,
              "resumed_losses": report["resumed"]["losses"], "resumed_first_step": report["resumed"]["optimiser_steps"][0]}
    reload = {"in_process": report["formal"]["eval_loss"], "reloaded": report["reloaded"]["eval_loss"]}
    state = delivery_gates.delivery_state(delivery_gates.upstream_identity(selected, report["config"]),
                                          delivery_gates.artifact_checks(files, resume, reload))
    assert state["state"] == "needs_rerun" and state["reasons"] == ["files_intact:changed:adapter/adapter_model.safetensors"]
    other = dict(report["config"], rank=report["config"]["rank"] * 2)
    assert delivery_gates.delivery_state(delivery_gates.upstream_identity(selected, other),
                                         delivery_gates.artifact_checks(files, resume, reload))["state"] == "blocked"


def test_no_chain_record_carries_a_machine_path(chain):
    results, _ = chain
    for path in results.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        assert str(results) not in text and "/work/" not in text and "/home/" not in text, path
