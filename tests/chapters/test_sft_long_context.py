"""Chapter 30's reading of the stage records (warm-up left out, median and spread, the gain told apart
from timing noise) and its effect on the lab model across seeds: packing keeps the step losses and
the real tokens and computes far fewer positions, at every length up to 2,048 tokens."""

from __future__ import annotations

import json

import pytest

from tools.chapters import sft_long_context as long_context
from tools.errors import ConfigError
from tools.experiments.sft_training.config import StageConfig
from tools.experiments.sft_training.plans import ch_30, plan_for
from tools.experiments.sft_training.runner import run_stage


def _record(batching: str, length: int, step_ms, real=(100, 100, 100), slots=(400, 400, 400), losses=(2.0, 1.5, 1.0)):
    return {"status": "ok", "variant": {"name": f"{batching}_{length}", "batching": batching, "max_length": length},
            "chapter_measurements": {"warmup_steps": 1, "isolation": None},
            "measurements": {"losses": list(losses), "real_tokens": sum(real), "token_slots": sum(slots),
                             "real_tokens_per_step": list(real), "token_slots_per_step": list(slots),
                             "step_time_ms": None if step_ms is None else list(step_ms)}}


def test_the_warm_up_step_is_left_out_and_the_spread_is_reported():
    record = _record("padded", 128, [9000.0, 100.0, 200.0])  # a slow first step must not count
    steps = long_context.timed_steps(record)
    assert steps["real_tokens"] == [100, 100] and steps["seconds"] == [0.1, 0.2]
    rate = long_context.step_throughput(record)
    assert rate["rates"] == pytest.approx([1000.0, 500.0]) and rate["median"] == pytest.approx(750.0)
    assert (rate["min"], rate["max"]) == (pytest.approx(500.0), pytest.approx(1000.0))
    assert long_context.step_throughput(_record("padded", 128, None)) is None  # not measured: None, never 0
    run = long_context.waste_runs([record])[0]
    assert (run["real_tokens"], run["token_slots"], run["seconds"]) == (200, 800, pytest.approx(0.3))
    with pytest.raises(ConfigError):
        long_context.timed_steps(record, warmup_steps=3)


def test_a_gain_counts_as_measured_only_when_the_step_ranges_are_apart():
    padded = _record("padded", 512, [50.0, 100.0, 120.0])
    apart = long_context.length_effects([padded, _record("packed", 512, [50.0, 40.0, 50.0], slots=(100, 100, 100))])[512]
    assert apart["separated"] is True and apart["gain"] == pytest.approx(((2500 + 2000) / 2) / ((1000 + 100 / 0.12) / 2))
    assert apart["packed"]["padding_share"] == 0.0 and apart["padded"]["padding_share"] == 0.75
    assert apart["padded"]["rows_per_step"] == 400 // 512 and apart["loss_curve_diff"] == 0.0
    overlap = long_context.length_effects([padded, _record("packed", 512, [50.0, 90.0, 130.0])])[512]
    assert overlap["separated"] is False and overlap["gain"] is not None
    unmeasured = long_context.length_effects([padded, _record("packed", 512, None)])[512]
    assert unmeasured["gain"] is None and unmeasured["separated"] is False


SEEDS = (0, 1, 2)
SLOT_MARGIN = 0.5
"""A packed variant computes at most half the positions of its padded twin at every planned length."""


@pytest.mark.effect
@pytest.mark.slow
def test_packing_keeps_the_losses_and_computes_fewer_positions_across_seeds(tmp_path, lab_models):
    """The chapter's effect on the lab model, three seeds (adapter init and training data) in one process,
    all three cpu_smoke lengths (up to 2,048 tokens), two steps each: per length the step losses of
    packed and padded agree within LOSS_CURVE_TOLERANCE, the real tokens are equal, and packed
    computes at most SLOT_MARGIN of the positions. Throughput is printed, never asserted."""
    plan = plan_for("30")
    settings = {**plan.stage["cpu_smoke"], "steps": 2}
    for seed in SEEDS:
        config = StageConfig(chapter="30", run_mode="cpu_smoke", run_label=f"pytest_effect_{seed}",
                             results_root=tmp_path, **{**settings, "seed": 1234 + seed,
                                                        "train_task_seeds": tuple(101 + 4 * seed + k for k in range(4))})
        written = run_stage(config, plan.variants("cpu_smoke"), prepare=plan.prepare, measure=plan.measure,
                            collate=plan.collate)
        records = [json.loads(item["path"].read_text(encoding="utf-8")) for item in written]
        assert [record["status"] for record in records] == ["ok"] * 6
        effects = long_context.length_effects(records)
        assert sorted(effects) == list(ch_30.LENGTHS["cpu_smoke"])
        for length, item in effects.items():
            assert item["loss_curve_diff"] <= long_context.LOSS_CURVE_TOLERANCE, (seed, length)
            assert item["packed"]["real_tokens"] == item["padded"]["real_tokens"], (seed, length)
            assert item["packed"]["token_slots"] <= SLOT_MARGIN * item["padded"]["token_slots"], (seed, length)
            assert item["packed"]["padding_share"] < item["padded"]["padding_share"], (seed, length)
            print(f"seed {seed} length {length}: padding {item['padded']['padding_share']:.3f} -> "
                  f"{item['packed']['padding_share']:.3f}, step-loss diff {item['loss_curve_diff']:.1e}, "
                  f"gain {item['gain'] if item['gain'] is None else round(item['gain'], 2)} (1 timed step)")
        assert long_context.decide(records, _waste_report)["decision"] == "accept_mechanism"


def _waste_report(runs):
    """A stand-in for the learner's waste_report (the decision only passes its result through)."""
    return {"rows": runs, "packing_gain": {}}


def test_the_dry_run_plan_names_the_model_the_stage_trains():
    from tools.chapters.sft_stage import plan_lines

    lines = plan_lines("30")
    assert lines[0].startswith("cpu_smoke: lab offline model on the CPU"), lines[0]
    assert any(line.startswith("  padded_2048") for line in lines)
