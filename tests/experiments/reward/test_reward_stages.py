"""The reward experiments on the contract: dry_run writes nothing, cpu_smoke writes one record per stage
(tiny model, small sizes: the code path, not the effect), labels are write-once, decisions come from numbers."""

from __future__ import annotations

import json

import pytest

from tools.errors import RecordExistsError
from tools.experiments.contract import Plan, run
from tools.experiments.registry import get_experiment
from tools.experiments.reward import ppo_stage, reward_model_stage, signal_stage

SMALL = {
    "ppo": {"iterations": 1, "tasks_per_iteration": 2, "samples_per_task": 2, "probe_tasks": 2},
    "reward_model": {"train_pairs": 2, "calibration_pairs": 2, "hidden_pairs": 2},
    "reward_signal": {},
}
CHAPTERS = {"ppo": "16", "reward_model": "PT-REWARD-MODEL", "reward_signal": "PT-REWARD-SIGNAL"}


@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_dry_run_describes_and_writes_nothing(name, tmp_path):
    lines = []
    plan = Plan(experiment=name, chapter=CHAPTERS[name], run_mode="dry_run", label="unused", results_dir=tmp_path)
    assert run(plan, log=lines.append) == []
    assert lines and "nothing is loaded or written" in lines[0]
    assert not any(tmp_path.rglob("*.json"))


@pytest.mark.slow  # loads the tiny model, samples and trains
@pytest.mark.parametrize("name", sorted(CHAPTERS))
def test_cpu_smoke_writes_one_record_and_refuses_the_label_again(name, tmp_path, monkeypatch, tiny_model_dir,
                                                                 one_cpu_thread):
    monkeypatch.setattr(signal_stage, "TASK_COUNT", 4)
    monkeypatch.setattr(signal_stage, "VALUE_TASK_COUNT", 4)
    monkeypatch.setattr(signal_stage, "SAMPLES_PER_TASK", 2)
    monkeypatch.setattr(reward_model_stage, "TRAIN_STEPS", 3)
    plan = Plan(experiment=name, chapter=CHAPTERS[name], run_mode="cpu_smoke", label="pytest_reward",
                results_dir=tmp_path, model_cache=tiny_model_dir.parent, options=SMALL[name])
    records = run(plan)
    stage = get_experiment(name).default_stage
    assert [ref.stage for ref in records] == [stage] and records[0].status == "ok"
    record = records[0].load()
    assert record["evidence_level"] == "cpu_smoke" and record["model"]["model_id"] == "tiny"
    assert record["decision"]["decision"] in ("accept_mechanism", "tune", "reject")
    assert record["memory"]["peak_allocated_mb"] is None, "not measured on the CPU: null, never 0"
    assert "/" not in json.dumps(record["plan"]["model_cache"] or "")
    with pytest.raises(RecordExistsError):
        run(plan)


@pytest.mark.effect
def test_ppo_decision_needs_both_effects_for_every_seed():
    good = {"exact_match_before": 0.25, "exact_match_after": 0.5, "value_loss_first": 0.2, "value_loss_last": 0.1}
    assert ppo_stage.decide([good, good])["decision"] == "accept_mechanism"
    assert ppo_stage.decide([good, {**good, "value_loss_last": 0.3}])["decision"] == "tune"
    assert ppo_stage.decide([good, {**good, "exact_match_after": 0.25}])["decision"] == "tune"
    assert ppo_stage.decide([{**good, "exact_match_after": 0.0}])["decision"] == "reject"


def test_signal_decision_needs_the_baseline_accepted_and_both_controls_rejected():
    accepted = lambda name: {"name": name, "decision": "accept"}
    rejected = lambda name: {"name": name, "decision": "reject"}
    names = list(signal_stage.CANDIDATES)
    every = [accepted(name) if name not in signal_stage.CONTROLS else rejected(name) for name in names]
    assert signal_stage.decide(every)["decision"] == "accept_mechanism"
    leaky = [accepted(name) if name != "kl20_k3_gae" else accepted(name) for name in names]
    assert signal_stage.decide(leaky)["decision"] == "reject"
    assert signal_stage.decide([rejected(name) for name in names])["decision"] == "reject"


def test_reward_model_gate_matches_the_chapter_rules():
    def evaluation(accuracy, ece=0.05):
        return {"hidden_accuracy": accuracy, "calibration": {"ece_after": ece}}

    assert reward_model_stage.gate(evaluation(1.0), evaluation(0.5))["decision"] == "accept_mechanism"
    assert reward_model_stage.gate(evaluation(0.7), evaluation(0.45))["decision"] == "accept_mechanism"
    assert reward_model_stage.gate(evaluation(0.75), evaluation(0.75))["reasons"] == ["no_gap_over_control"]
    assert reward_model_stage.gate(evaluation(0.5), evaluation(0.0))["reasons"] == ["not_above_chance"]
    assert reward_model_stage.gate(evaluation(1.0, 0.5), evaluation(0.5))["decision"] == "tune"


def test_ppo_task_split_keeps_held_out_prompts_out_of_training():
    train, held_out = ppo_stage.task_split()
    assert held_out and not {task.prompt for task in train} & {task.prompt for task in held_out}
