"""Each failure the SFT chain must refuse, planted and refused with a clear error, nothing recorded.

- a format-only gain: a model that learns to stop but not to answer gains nothing the chain scores, and
  the delivery's gates reject such an adapter;
- an evaluation-split read before 62: 63 and 65 asking to select on it are refused, and only 62 may
  open it (every opening leaves a receipt);
- a tampered and re-sealed upstream manifest where a sha256 is promised: refused before any work;
- a paraphrased leak: the pipeline's own paraphrase of an evaluation problem is found by its problem
  identity (the text check alone misses it) and never reaches the admitted data.

The forgotten skill is planted in a real delivery (tests/experiments/sft_chain/test_chain_stages.py) and a
resume on other data in tests/experiments/sft_chain/test_training_resume.py.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tools.core.handoff import SEAL_FIELD, seal
from tools.core.records import encode_record, record_header, save_json_record_once
from tools.data import sft_raw
from tools.errors import SealedSplitError, UpstreamRecordError
from tools.experiments.contract import Plan, run
from tools.experiments.sft_chain import admission, admission_gates, delivery, delivery_gates, manifests, training

LABEL = "planted_chain"


@pytest.fixture(scope="module")
def admitted(tmp_path_factory):
    """Project 64 run once (CPU only, a few seconds): the results root and its manifest."""
    results = tmp_path_factory.mktemp("results")
    refs = {ref.stage: ref for ref in run(Plan(experiment="sft_data_admission", chapter="64", run_mode="cpu_smoke",
                                               label=LABEL, results_dir=results))}
    return results, refs


def files_under(folder):
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*")) if folder.exists() else []


# ---- a format-only gain ----------------------------------------------------------------------------

class FixedLogits(torch.nn.Module):
    """A stand-in model whose prediction at every position is a given token (its logits one-hot)."""

    def __init__(self, predictions: torch.Tensor, vocabulary: int):
        super().__init__()
        last = torch.zeros((predictions.shape[0], 1), dtype=predictions.dtype)  # the position after the reply
        self.predictions, self.vocabulary = torch.cat([predictions, last], dim=1), vocabulary

    def forward(self, input_ids, attention_mask=None):
        logits = torch.nn.functional.one_hot(self.predictions[:, :input_ids.shape[1]], self.vocabulary).float()
        return type("Output", (), {"logits": logits})()


def test_a_format_only_gain_scores_nothing_and_is_rejected():
    """Two models answer every digit wrong; the second has learned where the reply ends. Reply-token
    accuracy (the old metric) rises, answer exact match and digit accuracy do not: the paired gain is
    0 and the delivery's gates reject it."""
    _, tokenizer, _ = training.load_base("tiny", "local", "float32", "cpu")
    records = sft_raw.frozen_evaluation()[:16]
    rendered = [training.render_record(tokenizer, record) for record in records]
    batch = training.training_batch(rendered, tokenizer.pad_token_id)
    labels = batch["labels"][:, 1:]
    wrong_digit = tokenizer.convert_tokens_to_ids("x")  # never an answer digit
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    supervised = labels != -100
    no_format = torch.where(supervised, torch.full_like(labels, wrong_digit), labels.clamp(min=0))
    with_format = torch.where(labels == end, labels, no_format)  # only the end of turn is right
    vocabulary = len(tokenizer)
    before = training.answer_metrics(FixedLogits(no_format, vocabulary), rendered, tokenizer.pad_token_id, "cpu")
    after = training.answer_metrics(FixedLogits(with_format, vocabulary), rendered, tokenizer.pad_token_id, "cpu")
    token_accuracy = [float(((model_predictions == labels) & supervised).sum() / supervised.sum())
                      for model_predictions in (no_format, with_format)]
    assert token_accuracy[1] > token_accuracy[0] + 0.2  # what a reply-token score would have called a gain
    assert before["exact_match"] == after["exact_match"] == 0.0
    assert before["digit_accuracy"] == after["digit_accuracy"] == 0.0  # the end of turn is never a digit
    assert "token_accuracy" not in after
    from tools.core.effects import paired_effect

    seeds = (1, 2, 3)
    effects = {"task_gain": paired_effect({s: after["exact_match"] for s in seeds},
                                          {s: before["exact_match"] for s in seeds}),
               "base_skill_change": paired_effect({s: 0.6 for s in seeds}, {s: 0.6 for s in seeds})}
    gates = delivery.evaluation_gates(effects)
    state = delivery_gates.delivery_state({"matches": True, "mismatches": []},
                                          {"checks": [{"name": name, "passed": True, "findings": []}
                                                      for name in delivery_gates.CHECKS]}, gates)
    assert state["state"] == "rejected" and state["reasons"] == ["evaluation:task_gain"]
    assert "nothing is delivered" in state["next_action"]


# ---- the evaluation split before 62 ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("experiment,chapter,slug", [("lora_selection", "63", "63-lora-variant-selection"),
                                                     ("qlora_branch", "65", "65-qlora-low-resource")])
def test_selecting_on_the_evaluation_split_is_refused_with_nothing_recorded(admitted, experiment, chapter, slug):
    results, _ = admitted
    plan = Plan(experiment=experiment, chapter=chapter, run_mode="cpu_smoke", label="reads_eval",
                results_dir=results, options={"upstream_label": LABEL, "selection_split": "evaluation"})
    with pytest.raises(SealedSplitError, match=f"project {chapter} may not read the frozen evaluation split.*"
                                               "opened once, by project 62"):
        run(plan)
    assert files_under(results / slug) == []
    assert files_under(results / "64-sft-data-admission" / "evaluation_reads") == []


@pytest.mark.slow
def test_only_62_opens_the_evaluation_split_and_every_opening_is_recorded(admitted):
    results, refs = admitted
    upstream = manifests.read_upstream(results, upstream_id="64", reader_id="62", run_mode="cpu_smoke", label=LABEL,
                                       options={}, schema_version=admission.MANIFEST_SCHEMA)
    with pytest.raises(SealedSplitError, match="project 63 may not read"):
        manifests.open_evaluation_split(results, upstream, reader_id="63", reader_label="x_63", run_mode="cpu_smoke",
                                        purpose="selection")
    assert files_under(results / "64-sft-data-admission" / "evaluation_reads") == []
    admitted_data = refs["admitted_data"].load()
    assert "evaluation" not in admitted_data and "records" not in refs["raw_data"].load()["frozen_evaluation"]
    first = manifests.open_evaluation_split(results, upstream, reader_id="62", reader_label="first_62",
                                            run_mode="cpu_smoke", purpose="final report")
    assert len(first["records"]) == sft_raw.EVALUATION_SIZE and first["earlier_reads"] == []
    second = manifests.open_evaluation_split(results, upstream, reader_id="62", reader_label="second_62",
                                             run_mode="cpu_smoke", purpose="final report")
    assert [read["reader_label"] for read in second["earlier_reads"]] == ["first_62"]
    receipts = files_under(results / "64-sft-data-admission" / "evaluation_reads")
    assert receipts == [f"{LABEL}", f"{LABEL}/62_first_62.json", f"{LABEL}/62_second_62.json"]


@pytest.mark.slow
def test_a_changed_evaluation_split_is_refused_before_it_is_read(admitted, tmp_path):
    results, refs = admitted
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    path = copy / refs["evaluation_split"].path.relative_to(results)
    record = json.loads(path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    record["records"][0]["output"] = "0"
    path.write_bytes(encode_record(seal(record)))  # changed and sealed again: the manifest's sha256 still catches it
    receipts = files_under(copy / "64-sft-data-admission" / "evaluation_reads")
    upstream = manifests.read_upstream(copy, upstream_id="64", reader_id="62", run_mode="cpu_smoke", label=LABEL,
                                       options={}, schema_version=admission.MANIFEST_SCHEMA)
    with pytest.raises(UpstreamRecordError, match="not the file its manifest sealed.*Fix: python -m tools.course run"):
        manifests.open_evaluation_split(copy, upstream, reader_id="62", reader_label="reader_62", run_mode="cpu_smoke",
                                        purpose="final report")
    assert files_under(copy / "64-sft-data-admission" / "evaluation_reads") == receipts  # no new receipt


# ---- a tampered and re-sealed upstream manifest where a sha256 is promised ---------------------------

def resealed(path, edit) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    edit(record)
    path.write_bytes(encode_record(seal(record)))


@pytest.mark.slow
def test_a_resealed_admission_is_refused_where_a_sha256_is_promised(admitted, tmp_path):
    results, refs = admitted
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    manifest = copy / refs["manifest"].path.relative_to(results)
    resealed(manifest, lambda record: record["gates"][2].update(measured=9999))
    promise = {"upstream_label": LABEL, "upstream_sha256": {"64": refs["manifest"].sha256}}
    plan = Plan(experiment="lora_selection", chapter="63", run_mode="cpu_smoke", label="after_reseal",
                results_dir=copy, options=promise)
    with pytest.raises(UpstreamRecordError, match=r"was promised when project 64 finished.*sealed again or not.*"
                                                  r"Fix: python -m tools.course run --chain 63 --run-mode cpu_smoke"):
        run(plan)
    assert files_under(copy / "63-lora-variant-selection") == []
    # without a promise the seal alone cannot see it (what the page says): the manifest reads as valid
    upstream = manifests.read_upstream(copy, upstream_id="64", reader_id="63", run_mode="cpu_smoke", label=LABEL,
                                       options={}, schema_version=admission.MANIFEST_SCHEMA)
    assert upstream.record["gates"][2]["measured"] == 9999


def test_a_resealed_selection_is_refused_by_62_where_a_sha256_is_promised(tmp_path):
    """63's manifest edited to the rank 63 rejected and sealed again: 62 refuses it before any work."""
    body = {"inputs": [], "candidates": [], "gates": [], "decision": {"decision": "accept", "reasons": []},
            "next_action": "deliver", "outputs": [], "selected_config": {"rank": 4, "data_sha256": "d"}}
    path = tmp_path / "63-lora-variant-selection" / f"63-lora-variant-selection_manifest_{LABEL}.json"
    record = {**record_header(schema_version="lora-variant-selection-manifest/v2", chapter="63", stage="manifest",
                              run_mode="cpu_smoke", run_label=LABEL), **body}
    promised = save_json_record_once(path, seal(record))
    resealed(path, lambda record: record["selected_config"].update(rank=16))
    plan = Plan(experiment="sft_delivery", chapter="62", run_mode="cpu_smoke", label="delivery_62",
                results_dir=tmp_path, options={"upstream_label": LABEL, "upstream_sha256": {"63": promised}})
    with pytest.raises(UpstreamRecordError, match="was promised when project 63 finished.*Fix: python -m tools.course "
                                                  "run --chain 62 --run-mode cpu_smoke --label <a new label>"):
        run(plan)
    assert files_under(tmp_path / "62-sft-delivery") == []


def test_real_gpu_requires_a_promise_before_any_work(tmp_path):
    from tools.errors import ConfigError

    plan = Plan(experiment="lora_selection", chapter="63", run_mode="real_gpu", label="gpu_63", results_dir=tmp_path,
                device="cuda", options={})
    with pytest.raises(ConfigError, match="needs UPSTREAM_SHA256 for project\\(s\\) 64.*sealed again"):
        run(plan)
    assert files_under(tmp_path) == []


# ---- a paraphrased leak --------------------------------------------------------------------------------

def test_a_paraphrased_leak_is_found_by_identity_and_never_admitted(tiny_tokenizer):
    result = admission.run_admission(tokenizer=tiny_tokenizer, lines=(sft_raw.LINES[0],))
    first, final = result["lines"][sft_raw.LINES[0]]["rounds"][0], result["lines"][sft_raw.LINES[0]]["final"]
    delivery_records = {r["id"]: r for r in first["delivery"].splits["train"]}
    evaluation = {sft_raw.problem_identity(r): r for r in result["evaluation"]}
    for planted in ("leak-7", "leak-8", "leak-9"):
        record = delivery_records[planted]
        twin = evaluation[sft_raw.problem_identity(record)]
        assert sft_raw.content_key(record) != sft_raw.content_key(twin)  # no text in common with the evaluation copy
        assert "leakage" in first["checked"].details["train"][planted]
    text_only = admission_gates.find_leaks({"evaluation": result["evaluation"], **{
        name: [r for r in records if "input" in r] for name, records in first["delivery"].splits.items()}},
        list(admission.PRIORITY))
    assert not {"leak-7", "leak-8", "leak-9"} & set(text_only["leaked"]["train"])  # the text check misses them
    assert admission.paraphrase_leaks(first["checked"])["train"] == ["leak-7", "leak-8", "leak-9"]
    admitted = {sft_raw.problem_identity(r) for split in final.splits.values() for r in split}
    assert not admitted & set(evaluation)  # no admitted record asks an evaluation problem, in any wording


@pytest.mark.parametrize("record,identity", [
    ({"instruction": "Compute 34 + 57. Reply with the integer result only.", "input": ""}, "add:34:57"),
    ({"instruction": "What is 57 plus 34? Reply with the integer result only.", "input": ""}, "add:34:57"),
    ({"instruction": "Compute the sum. Reply with the integer result only.", "input": "３４ ＋ ５７"}, "add:34:57"),
    ({"instruction": "Add 34 to 57.", "input": ""}, "add:34:57"),
    ({"instruction": "What is the sum of 57 and 34?", "input": ""}, "add:34:57"),
    ({"instruction": "Compute 34 + 57 and 10 + 11.", "input": ""}, None),
    ({"instruction": "Say hello.", "input": ""}, None),
])
def test_the_problem_identity_reads_every_wording_of_one_sum(record, identity):
    assert sft_raw.problem_identity(record) == identity
