"""Chapter 15 (effective SFT update): a real update vs two look-alikes on the shared SFT stage.

The plan through the stage on the tiny model (what each variant's record holds), the decision read
from the records with the notebook's own effective_update_check, each measurement shown to fail
when its condition breaks, and the notebook's reference against transformers' num_items_in_batch.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F

from tools.chapters import sft_training_loop as loop
from tools.core import effects
from tools.course.cells import cells_with_role, read_notebook
from tools.errors import ConfigError
from tools.experiments.sft_training.config import StageConfig
from tools.experiments.sft_training.data import build_split, pad_batch
from tools.experiments.sft_training.effective_update import (
    TrainingLedger,
    evaluation_side_effects,
    leaking_examples,
    split_audit,
)
from tools.experiments.sft_training.plans import ch_15, plan_for
from tools.experiments.sft_training.runner import run_bound
from tools.models.loading import load_causal_lm, resolve_model


def _reference(names: list[str]) -> dict:
    notebook = read_notebook("notebooks/15-sft-training-loop.ipynb")
    source = "\n".join(cell.source for _, cell in cells_with_role(notebook, "reference-solution"))
    namespace = {"math": math, "torch": torch, "F": F, "copy": copy}
    exec(compile(source, "<15 reference>", "exec"), namespace)
    return {name: namespace[name] for name in names}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    plan = plan_for("15")
    config = StageConfig(chapter="15", run_mode="cpu_smoke", run_label="pytest_ch15",
                         results_root=tmp_path_factory.mktemp("ch15"), **plan.stage["cpu_smoke"])
    written = run_bound(config, plan.bound())
    return {item["variant"]: json.loads(item["path"].read_text(encoding="utf-8")) for item in written}


def test_the_plan_has_a_real_update_and_two_lookalikes():
    assert [spec.name for spec in ch_15.variants("cpu_smoke")] == ["effective", "vanishing_scale", "eval_leak"]
    assert ch_15.STAGE["cpu_smoke"]["lr_schedule"] == "linear_decay"


def test_each_record_holds_what_the_checks_read(records):
    for name, record in records.items():
        assert record["status"] == "ok", name
        own = record["chapter_measurements"]
        assert set(loop.observation(record)) == {"sha256_before", "sha256_after", "grad_norms", "loss_before",
                                                 "loss_after", "planned_lr", "applied_lr"}
        assert own["planned_learning_rates"] == pytest.approx(record["measurements"]["learning_rates"])
        assert own["planned_learning_rates"][0] > own["planned_learning_rates"][-1] > 0
        side = own["evaluation_side_effects"]
        assert side["parameters_unchanged"] and side["gradients_unchanged"] and side["training_mode_restored"]
        assert side["optimizer_state_unchanged"] is None  # not observable from the hook: null, never true
        report = record["measurements"]["evaluations"]["after"]  # the chapter's isolated_evaluation in the stage
        assert report["state_unchanged"] and report["optimizer_unchanged"]  # the training optimiser, compared
        assert len(report["leaked"]) == own["split_audit"]["leaked_count"], name
        assert record["measurements"]["eval_loss_after"] == pytest.approx(side["evaluation_loss"], rel=1e-6)
        assert record["mechanism"]["isolated_evaluation"]["source"] == "package"
        assert record["data"]["source"] == "tools.data.lab_tasks:add_plus_one"
        config = record["config"]
        assert own["split_audit"]["trained_examples"] == config["steps"] * config["batch_size"] * config["grad_accumulation"]


def test_the_lookalikes_look_like_training(records):
    vanishing, leak = records["vanishing_scale"], records["eval_leak"]
    assert vanishing["hashes"]["adapter_changed"] and all(0 < norm < 1e-3 for norm in vanishing["measurements"]["grad_norms"])
    same = vanishing["chapter_measurements"]["same_batch"]
    assert abs(same["loss_before"] - same["loss_after"]) < 1e-4
    assert leak["chapter_measurements"]["split_audit"]["leaked_count"] > 0
    assert leak["measurements"]["eval_loss_after"] < leak["measurements"]["eval_loss_before"]
    assert records["effective"]["chapter_measurements"]["split_audit"]["leaked_count"] == 0


@pytest.mark.effect
def test_the_decision_tells_the_real_update_from_the_lookalikes(records):
    check = _reference(["effective_update_check"])["effective_update_check"]
    decisions = [loop.decide_variant(records[name], check) for name in ("effective", "vanishing_scale", "eval_leak")]
    assert [item["decision"] for item in decisions] == ["accept_mechanism", "reject", "reject"], decisions
    assert decisions[1]["reasons"] == ["loss_not_lower"] and decisions[2]["reasons"] == ["validation_examples_trained"]
    assert loop.chapter_decision(decisions) == {"decision": "accept_mechanism",
                                                "reason": "the real update passes, every look-alike is rejected"}
    caught_nothing = [decisions[0], {**decisions[1], "decision": "accept_mechanism"}, decisions[2]]
    assert loop.chapter_decision(caught_nothing)["decision"] == "reject"
    flat = copy.deepcopy(records["effective"])
    flat["measurements"]["eval_loss_after"] = flat["measurements"]["eval_loss_before"]
    assert loop.decide_variant(flat, check)["decision"] == "tune"
    broken = copy.deepcopy(records["effective"])
    broken["measurements"]["evaluations"]["after"]["state_unchanged"] = False  # what isolated_evaluation reported
    assert loop.decide_variant(broken, check)["reasons"] == ["evaluation_changed_state"]
    broken["measurements"]["evaluations"]["after"]["optimizer_unchanged"] = False
    assert loop.decide_variant(broken, check)["reasons"] == ["evaluation_changed_state", "evaluation_changed_optimizer"]
    older = copy.deepcopy(records["effective"])  # a record from before the stage ran the chapter's evaluation
    older["measurements"].pop("evaluations")
    older["chapter_measurements"]["evaluation_side_effects"]["parameters_unchanged"] = False
    assert loop.decide_variant(older, check)["reasons"] == ["evaluation_changed_parameters"]
    failed = {**records["effective"], "status": "oom"}
    assert loop.decide_variant(failed, check) == {"variant": "effective", "decision": "reject",
                                                  "reasons": ["status_oom"], "update": None}
    with pytest.raises(ConfigError):
        loop.chapter_decision(decisions[1:])


HELD_APART_DROP = 0.1
"""The real update lowers the stage's held-apart loss (64 held-out problems of add_plus_one) by more than 0.1
nats in 8 steps. Measured, before - after per seed 0..2: pinned 0.245 0.256 0.210; generic 0.385 0.419
0.343. (On the arithmetic chats the stage trained before it moved by 0.01 or rose, and read `tune`.)"""


@pytest.mark.effect
@pytest.mark.slow
def test_the_decision_holds_on_three_seeds_and_the_real_update_lowers_the_held_apart_loss(tmp_path):
    """Seeds 0-2 (adapter init, training problems): the real update is accepted and both look-alikes are
    rejected on every seed, and the real update's held-apart loss falls by HELD_APART_DROP (paired: after
    minus before, per seed, Student-t interval); the look-alike with a vanishing scale stays where it was."""
    plan = plan_for("15").bound()
    before, after = {}, {}
    for seed in (0, 1, 2):
        config = StageConfig(chapter="15", run_mode="cpu_smoke", run_label=f"pytest_seed_{seed}", results_root=tmp_path,
                             **{**plan.stage["cpu_smoke"], "seed": 1234 + seed, "train_task_seeds": (101 + seed,)})
        seeded = [json.loads(item["path"].read_text(encoding="utf-8")) for item in run_bound(config, plan)]
        assert loop.decide_stage(seeded)["decision"]["decision"] == "accept_mechanism", (seed, loop.decide_stage(seeded))
        real, vanishing = seeded[0]["measurements"], seeded[1]["measurements"]
        before[seed], after[seed] = real["eval_loss_before"], real["eval_loss_after"]
        assert abs(vanishing["eval_loss_after"] - vanishing["eval_loss_before"]) < 1e-3, seed
    drop = effects.paired_effect(after, before, metric="held-apart loss")
    assert effects.holds(drop, HELD_APART_DROP, "less"), effects.describe(drop)
    print(f"held-apart loss, after - before: {effects.describe(drop)}; per seed {[round(d, 3) for d in drop['differences']]}")


def test_an_evaluation_with_side_effects_is_caught():
    model, tokenizer = load_causal_lm(resolve_model("tiny"))
    split = build_split(tokenizer, (101,), 909, 1, 96)
    config = StageConfig(chapter="15", run_mode="cpu_smoke", run_label="pytest_side", results_root="/tmp/unused")
    assert evaluation_side_effects(model, split, config, tokenizer)["parameters_unchanged"] is True

    def nudge(module, args):  # a forward pass that writes into a parameter (e.g. a running statistic kept as a weight)
        module.norm.weight.data.add_(1e-3)

    model.model.register_forward_pre_hook(nudge)
    changed = evaluation_side_effects(model, split, config, tokenizer)
    assert changed["parameters_unchanged"] is False and changed["training_mode_restored"] is True


def test_the_ledger_and_the_split_audit():
    ledger = TrainingLedger()
    with pytest.raises(ConfigError, match="not started"):
        ledger.add("v", [])
    model, tokenizer = load_causal_lm(resolve_model("tiny"))
    split = build_split(tokenizer, (101,), 909, 1, 96)
    ledger.start("v")
    ledger.add("v", split.train[:2])
    assert split_audit(ledger.seen("v"), split)["leaked"] == []
    ledger.add("v", leaking_examples(split.train[:2], split.evaluation, 3))
    audit = split_audit(ledger.seen("v"), split)
    assert audit["leaked"] == [split.evaluation[3 % len(split.evaluation)].content_sha256] and audit["trained_examples"] == 4


def test_the_notebook_reference_accumulates_like_transformers():
    accumulate = _reference(["accumulate_gradients"])["accumulate_gradients"]
    model, tokenizer = load_causal_lm(resolve_model("tiny"))
    split = build_split(tokenizer, (101, 102), 909, 2, 96)
    micro = [pad_batch(split.train[:2], tokenizer.pad_token_id), pad_batch(split.train[2:5], tokenizer.pad_token_id)]
    ours = accumulate(model, micro)
    model.zero_grad(set_to_none=True)
    for batch in micro:
        model(**batch, num_items_in_batch=ours["supervised_tokens"]).loss.backward()
    for name, parameter in model.named_parameters():
        assert torch.allclose(ours["gradients"][name], parameter.grad, atol=1e-6), name
    model.zero_grad(set_to_none=True)
    for batch in micro:  # the per-micro-batch mean that the chapter warns about differs
        (model(**batch).loss / len(micro)).backward()
    assert max(float((ours["gradients"][n] - p.grad).abs().max()) for n, p in model.named_parameters()) > 1e-4
