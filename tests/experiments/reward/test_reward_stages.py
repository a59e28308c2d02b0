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
    monkeypatch.setattr(ppo_stage, "HELD_OUT_PROBLEMS", 16)
    monkeypatch.setattr(ppo_stage, "PROBE_PROBLEMS", 4)
    plan = Plan(experiment=name, chapter=CHAPTERS[name], run_mode="cpu_smoke", label="pytest_reward",
                results_dir=tmp_path, model_cache=tiny_model_dir.parent, options=SMALL[name], seeds=(0, 1))
    records = run(plan)
    stage = get_experiment(name).default_stage
    assert [ref.stage for ref in records] == [stage] and records[0].status == "ok"
    record = records[0].load()
    assert record["evidence_level"] == "cpu_smoke" and record["model"]["model_id"] == "tiny"
    assert record["decision"]["decision"] in ("accept_mechanism", "tune", "reject")
    assert record["memory"]["peak_allocated_mb"] is None, "not measured on the CPU: null, never 0"
    assert record["effects"] is not None and all(found["seeds"] == [0, 1] for found in record["effects"].values())
    assert {item["source"] for item in record["mechanism"].values()} == {"package"}
    assert "/" not in json.dumps(record["plan"]["model_cache"] or "")
    with pytest.raises(RecordExistsError):
        run(plan)


def _ppo_result(seed, before, after, critic=0.1, constant=0.1):
    return {"seed": seed, "exact_match_before": before, "exact_match_after": after, "value_loss_last": critic,
            "probe": {"constant_value_loss": constant}}


def test_ppo_decision_reads_the_paired_effect_over_the_shuffled_control():
    treated = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.55, 0.56, 0.54))]
    shuffled = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.30, 0.32, 0.28))]
    assert ppo_stage.decide(treated, shuffled)["decision"] == "accept_mechanism"
    close = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.53, 0.55, 0.52))]
    assert ppo_stage.decide(treated, close)["decision"] == "tune", "beats the control by less than the margin"
    assert ppo_stage.decide(treated, treated)["decision"] == "reject", "no difference from the control"
    fell = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.40, 0.41, 0.39))]
    collapsed = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.10, 0.11, 0.12))]
    assert ppo_stage.decide(fell, collapsed)["decision"] == "reject", "beats the control but fell below the start"
    assert ppo_stage.decide(treated[:1], shuffled[:1])["decision"] == "accept_mechanism", "the per-seed rule"
    one_short = [_ppo_result(seed, 0.5, after) for seed, after in enumerate((0.30, 0.32, 0.52))]
    assert ppo_stage.decide(treated, one_short)["decision"] == "tune", "one seed beats the control by only 0.02"
    found = ppo_stage.paired_effects(treated, shuffled)
    assert found["exact_match_over_control"]["differences"] == pytest.approx([0.25, 0.24, 0.26])
    assert found["critic_over_constant"]["mean"] == pytest.approx(0.0)


def test_signal_decision_needs_the_baseline_accepted_and_every_control_rejected_on_every_seed():
    def seed_entry(seed, leaky=None):
        names = list(signal_stage.CANDIDATES)
        verdict = {name: "reject" if name in signal_stage.CONTROLS and name != leaky else "accept" for name in names}
        return {"seed": seed, "candidates": [{"name": name, "decision": verdict[name]} for name in names]}

    assert signal_stage.decide([seed_entry(0), seed_entry(1)])["decision"] == "accept_mechanism"
    for control in signal_stage.CONTROLS:
        decision = signal_stage.decide([seed_entry(0), seed_entry(1, leaky=control)])
        assert decision["decision"] == "reject" and "[1]" in decision["reason"], control


def test_reward_model_gate_matches_the_chapter_rules():
    def evaluation(accuracy, ece=0.05):
        return {"hidden_accuracy": accuracy, "hidden_pairs": 64, "ece_after": ece}

    gate = reward_model_stage.reward_model_gate
    assert gate(evaluation(1.0), evaluation(0.5))["decision"] == "accept_mechanism"
    assert gate(evaluation(0.7), evaluation(0.45))["decision"] == "accept_mechanism"
    assert gate(evaluation(0.75), evaluation(0.75))["reasons"] == ["no_gap_over_control"]
    assert gate(evaluation(0.5), evaluation(0.0))["reasons"] == ["not_above_chance"]
    assert gate(evaluation(1.0, 0.5), evaluation(0.5))["decision"] == "tune"


def test_reward_model_splits_and_templates_keep_hidden_pairs_unseen():
    assert reward_model_stage.SPLIT_OF == {"train": "train", "calibration": "validation", "hidden": "heldout"}
    assert not set(reward_model_stage.TRAIN_TEMPLATES) & set(reward_model_stage.HIDDEN_TEMPLATES)
    pairs = [{"prompt": "p", "chosen": "7", "rejected": "It equals 7", "label": 7}]
    again = reward_model_stage.rewrapped(pairs, reward_model_stage.TRAIN_TEMPLATES, 0)
    assert again[0]["rejected"] in {template.format(n=7) for template in reward_model_stage.TRAIN_TEMPLATES}
    assert again[0]["chosen"] == "7" and pairs[0]["rejected"] == "It equals 7"


def test_ppo_task_split_keeps_held_out_and_probe_prompts_out_of_training():
    train, held_out, probe = ppo_stage.task_split()
    prompts = [{task.prompt for task in tasks} for tasks in (train, held_out, probe)]
    assert held_out and probe and not (prompts[0] & prompts[1] or prompts[0] & prompts[2] or prompts[1] & prompts[2])
