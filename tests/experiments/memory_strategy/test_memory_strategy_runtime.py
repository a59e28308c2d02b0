"""Tests of the memory-strategy experiment through its product name `tools.memory_strategy_runtime` (a facade
over tools.experiments.memory_strategy): strategy paths proven by evidence, the estimate, the decisions."""

import copy

import pytest
import torch

import tools.experiments.memory_strategy as package
from tools import memory_strategy_runtime as msr
from tools.errors import ConfigError

BATCH, SEQ = 4, 64


pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # conftest: torch on one thread


@pytest.fixture(scope="module")
def factory(tiny_model):
    def make():
        model = copy.deepcopy(tiny_model)
        model.config.use_cache = False
        return model.train()  # from_pretrained returns eval mode, where layers never checkpoint

    return make


@pytest.fixture(scope="module")
def input_ids(tiny_model):
    generator = torch.Generator().manual_seed(7)
    return torch.randint(0, tiny_model.config.vocab_size, (BATCH, SEQ), generator=generator)


@pytest.fixture(scope="module")
def comparison(factory, input_ids):
    return msr.compare_strategy_gradients(factory, input_ids)


def _last(comparison, strategy):
    return comparison[strategy]["evidence"]["last_step"]


def _one_step(model, observer, input_ids):
    with observer.forward():
        loss = model(input_ids=input_ids, labels=input_ids).loss
    with observer.backward():
        loss.backward()
    return msr.observed_evidence(observer)


# ---------------------------------------------------------------------------
# Same numbers, different paths
# ---------------------------------------------------------------------------

def test_four_strategies_give_equal_loss_and_gradients(comparison):
    """Do checkpoint, offload and hybrid reproduce the baseline's loss and every parameter gradient?"""
    assert set(comparison) == set(msr.STRATEGIES)
    for strategy, result in comparison.items():
        assert result["loss_equal"], strategy
        assert result["grads_equal"], (strategy, result["max_abs_grad_diff"])
    assert comparison["baseline"]["loss"] > 0


def test_checkpoint_saves_fewer_activation_bytes_on_the_device(comparison):
    """Does non-reentrant checkpointing leave fewer saved activation bytes on the device than baseline?"""
    baseline, checkpoint = _last(comparison, "baseline"), _last(comparison, "checkpoint")
    assert 0 < checkpoint["device_saved_bytes"] < baseline["device_saved_bytes"] / 2
    assert checkpoint["host_offloaded_bytes"] == 0


def test_offload_moves_saved_activations_to_the_host(comparison):
    """Does offload keep no saved activation on the device, copy it to CPU, and bring it back in backward?"""
    baseline, offload = _last(comparison, "baseline"), _last(comparison, "offload")
    assert offload["device_saved_bytes"] == 0 < baseline["device_saved_bytes"]
    assert offload["host_offloaded_bytes"] >= baseline["device_saved_bytes"]
    assert offload["host_copy_devices"] == ["cpu"]
    assert offload["restored_tensor_count"] == offload["offloaded_tensor_count"] > 0


def test_hybrid_recomputes_and_offloads(comparison):
    """Does hybrid both recompute layers and move the remaining saved tensors (fewer than offload) to the host?"""
    hybrid, offload = _last(comparison, "hybrid"), _last(comparison, "offload")
    assert hybrid["device_saved_bytes"] == 0
    assert 0 < hybrid["host_offloaded_bytes"] < offload["host_offloaded_bytes"]
    assert hybrid["recomputed_layer_calls"] > 0


def test_recomputation_is_observed_only_for_checkpoint_and_hybrid(comparison, tiny_model):
    """Are layer forward calls during backward seen exactly for the recomputing strategies?"""
    layers = tiny_model.config.num_hidden_layers
    for strategy in msr.STRATEGIES:
        step = _last(comparison, strategy)
        assert step["forward_layer_calls"] == layers
        expected = layers if msr.STRATEGY_PATHS[strategy]["recompute"] else 0
        assert step["recomputed_layer_calls"] == expected, strategy


def test_every_strategy_path_is_verified_from_evidence(comparison):
    for strategy, result in comparison.items():
        verification = result["verification"]
        assert verification["execution_path_verified"] is True, (strategy, verification["reasons"])
        assert verification["reasons"] == []


def test_saved_bytes_match_the_analytic_estimate(comparison, tiny_model):
    """Is the documented Qwen2 activation formula within 2% of what our hook measured?"""
    for strategy in msr.STRATEGIES:
        estimate = msr.estimate_activation_bytes(tiny_model.config, batch_size=BATCH, seq_len=SEQ, strategy=strategy)
        ratios = msr.compare_with_estimate(comparison[strategy]["evidence"], estimate)
        ratio = ratios["host_ratio"] if msr.STRATEGY_PATHS[strategy]["offload"] else ratios["device_ratio"]
        assert ratio is not None
        low, high = (0.98, 1.02) if strategy != "offload" else (0.98, 1.5)  # per-view host copies of one storage
        assert low <= ratio <= high, (strategy, ratio)


# ---------------------------------------------------------------------------
# Planted wrong contexts are not verified
# ---------------------------------------------------------------------------

def test_a_checkpoint_that_does_not_checkpoint_is_not_verified(factory, input_ids):
    model = factory()
    with msr.observe_strategy(model, "checkpoint", offload_saved_tensors=False) as observer:
        evidence = _one_step(model, observer, input_ids)
    verification = msr.verify_execution_path(evidence, "checkpoint")
    assert verification["execution_path_verified"] is False
    assert "recomputation_not_observed" in verification["reasons"]


def test_an_offload_that_keeps_tensors_on_the_device_is_not_verified(factory, input_ids):
    model = factory()
    with msr.observe_strategy(model, "offload", offload_saved_tensors=False) as observer:
        evidence = _one_step(model, observer, input_ids)
    verification = msr.verify_execution_path(evidence, "offload")
    assert verification["execution_path_verified"] is False
    assert verification["reasons"] == ["offload_not_observed"]


def test_a_baseline_with_checkpointing_left_on_is_not_verified(factory, input_ids):
    model = factory()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with msr.observe_strategy(model, "baseline", offload_saved_tensors=False) as observer:
        evidence = _one_step(model, observer, input_ids)
    verification = msr.verify_execution_path(evidence, "baseline")
    assert verification["reasons"] == ["unexpected_recomputation"]


def test_an_inner_save_on_cpu_leaves_no_evidence_and_is_not_verified(factory, input_ids):
    """A foreign offload hook inside ours takes over saving, so our hook sees nothing and cannot vouch for it."""
    model = factory()
    with msr.observe_strategy(model, "offload", offload_saved_tensors=True) as observer:
        with observer.forward(), torch.autograd.graph.save_on_cpu(pin_memory=False):
            loss = model(input_ids=input_ids, labels=input_ids).loss
        with observer.backward():
            loss.backward()
        evidence = msr.observed_evidence(observer)
    verification = msr.verify_execution_path(evidence, "offload")
    assert evidence["last_step"]["saved_tensor_count"] == 0
    assert "no_saved_tensors_observed" in verification["reasons"]


def test_no_observed_step_is_not_verified():
    verification = msr.verify_execution_path({"last_step": None, "steps": []}, "baseline")
    assert verification["execution_path_verified"] is False
    assert "no_step_observed" in verification["reasons"]


def test_strategy_context_restores_the_models_checkpointing(factory):
    model = factory()
    assert not model.is_gradient_checkpointing
    with msr.memory_strategy(model, "hybrid"):
        assert model.is_gradient_checkpointing
    assert not model.is_gradient_checkpointing
    with pytest.raises(ConfigError, match="unknown memory strategy"):
        with msr.memory_strategy(model, "zero3"):
            pass


def test_run_memory_strategy_records_a_verified_cpu_run(factory):
    workload = msr.TrainingWorkload(batch_size=1, seq_len=32, warmup=1, iters=2, optimizer="sgd")
    record = msr.run_memory_strategy(factory, "hybrid", workload)
    assert record["status"] == "ok" and record["execution_path_verified"] is True
    assert record["peak_memory_mb"] is None and record["peak_reserved_mb"] is None
    assert record["saved_tensors"]["steps_observed"] == 3 and record["saved_tensors"]["steps_consistent"]
    assert record["optimizer"] == "SGD" and record["eval_loss"] > 0
    assert record["activation_estimate"]["host_ratio"] is not None


def test_workload_rejects_bad_values():
    with pytest.raises(ConfigError, match="seq_len"):
        msr.TrainingWorkload(batch_size=1, seq_len=0, warmup=1, iters=1)
    with pytest.raises(ConfigError, match="optimizer"):
        msr.TrainingWorkload(batch_size=1, seq_len=8, warmup=1, iters=1, optimizer="adam8bit")


# ---------------------------------------------------------------------------
# Analytic estimate
# ---------------------------------------------------------------------------

QWEN05 = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
          "num_key_value_heads": 2, "vocab_size": 151936}


def test_estimate_relations_for_qwen25_05b():
    base = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=768)
    ckpt = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=768, strategy="checkpoint")
    off = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=768, strategy="offload")
    hyb = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=768, strategy="hybrid")
    double = msr.estimate_activation_bytes(QWEN05, batch_size=2, seq_len=768)
    assert ckpt["device_bytes"] < base["device_bytes"] / 3
    assert off["device_bytes"] == 0 and off["host_bytes"] == base["device_bytes"]
    assert hyb["device_bytes"] == 0 and hyb["host_bytes"] == ckpt["device_bytes"]
    assert double["device_bytes"] == 2 * base["device_bytes"] - base["rotary_bytes"]
    eager_short = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=768, attn_implementation="eager")
    eager_long = msr.estimate_activation_bytes(QWEN05, batch_size=1, seq_len=1536, attn_implementation="eager")
    assert eager_long["per_layer_bytes"] > 2 * eager_short["per_layer_bytes"]  # the s^2 attention term
    assert 70e6 < base["per_layer_bytes"] < 90e6


def test_estimate_needs_the_architecture():
    with pytest.raises(ConfigError, match="hidden_size"):
        msr.estimate_activation_bytes({"vocab_size": 8}, batch_size=1, seq_len=8)


# ---------------------------------------------------------------------------
# G0 candidate summary and project decision
# ---------------------------------------------------------------------------

BUDGET = {"memory_cap_mb": 13000.0, "min_samples_per_s": 1.0, "min_memory_saving_mb": 512.0,
          "min_throughput_ratio": 0.70}  # cap rule: peak reserved + 1024 MiB (default CUDA context margin) <= cap
FLOOR = {"max_val_loss": 1.0812}


def _cand(name, **overrides):
    """An aggregated record; the reserved peak follows the allocated one (+300 MiB) unless given."""
    record = {"name": name, "status": "ok", "execution_path_verified": True, "successful_runs": 3, "oom_runs": 0,
              "peak_memory_mb": 11000.0, "samples_per_s": 8.0, "step_time_ms": 125.0, "eval_loss": 1.06}
    record.update(overrides)
    if "peak_reserved_mb" not in overrides:
        peak = record["peak_memory_mb"]
        record["peak_reserved_mb"] = None if peak is None else peak + 300.0
    return record


def _candidates(**by_name):
    base = [_cand("baseline")]
    return base + [_cand(name, **fields) for name, fields in by_name.items()]


def _row(summary, name):
    return next(row for row in summary["candidates"] if row["name"] == name)


def test_a_verified_saving_within_budget_is_accepted():
    summary = msr.summarize_memory_strategy_candidates(
        _candidates(checkpoint={"peak_memory_mb": 8200.0, "samples_per_s": 6.8, "eval_loss": 1.08}), BUDGET, FLOOR)
    row = _row(summary, "checkpoint")
    assert row["verdict"] == "accept"
    assert row["memory_saving_mb"] == pytest.approx(2800.0)
    assert row["throughput_ratio"] == pytest.approx(0.85)
    assert row["quality_delta"] == pytest.approx(0.02)
    decision = msr.decide_memory_strategy_project(summary)
    assert decision["decision"] == "accept" and decision["selected_strategy"] == "checkpoint"


def test_an_oom_is_never_a_saving_even_with_a_low_peak_number():
    summary = msr.summarize_memory_strategy_candidates(
        _candidates(offload={"status": "oom", "peak_memory_mb": 0.0, "samples_per_s": None, "eval_loss": None}),
        BUDGET, FLOOR)
    row = _row(summary, "offload")
    assert row["verdict"] == "reject" and row["memory_saving_mb"] is None
    assert row["reasons"] == ["hard_failure:oom"]
    assert summary["eligible_strategies"] == [] and "offload" in summary["oom_strategies"]
    assert msr.decide_memory_strategy_project(summary)["decision"] == "reject"


def test_an_unverified_path_is_rejected_whatever_it_saves():
    summary = msr.summarize_memory_strategy_candidates(
        _candidates(hybrid={"execution_path_verified": False, "peak_memory_mb": 4000.0}), BUDGET, FLOOR)
    row = _row(summary, "hybrid")
    assert row["verdict"] == "reject" and "execution_path_unverified" in row["reasons"]
    assert msr.decide_memory_strategy_project(summary)["decision"] == "reject"


def test_a_candidate_without_the_verified_field_is_not_accepted():
    candidates = _candidates(checkpoint={"peak_memory_mb": 8200.0})
    del candidates[1]["execution_path_verified"]
    assert _row(msr.summarize_memory_strategy_candidates(candidates, BUDGET, FLOOR), "checkpoint")["verdict"] == "reject"


def test_quality_below_the_floor_is_rejected():
    summary = msr.summarize_memory_strategy_candidates(
        _candidates(checkpoint={"peak_memory_mb": 8200.0, "eval_loss": 1.2}), BUDGET, FLOOR)
    assert _row(summary, "checkpoint")["reasons"] == ["quality_below_floor"]


def test_partial_oom_and_slow_or_small_savings_are_tuned():
    summary = msr.summarize_memory_strategy_candidates(_candidates(
        checkpoint={"status": "partial_oom", "peak_memory_mb": 8200.0, "successful_runs": 2, "oom_runs": 1},
        offload={"peak_memory_mb": 8000.0, "samples_per_s": 3.0},
        hybrid={"peak_memory_mb": 10800.0},
    ), BUDGET, FLOOR)
    assert _row(summary, "checkpoint")["reasons"] == ["unstable:partial_oom"]
    assert _row(summary, "offload")["reasons"] == ["gate_failed:throughput_ratio_ok"]
    assert _row(summary, "hybrid")["reasons"] == ["gate_failed:memory_saving_ok"]
    assert summary["tune_strategies"] == ["checkpoint", "offload", "hybrid"]
    decision = msr.decide_memory_strategy_project(summary)
    assert decision["decision"] == "tune" and decision["selected_strategy"] is None


def test_cpu_records_without_device_memory_are_never_accepted():
    candidates = [_cand(name, peak_memory_mb=None, peak_reserved_mb=None) for name in msr.STRATEGIES]
    summary = msr.summarize_memory_strategy_candidates(candidates, BUDGET, FLOOR)
    assert all(row["verdict"] == "tune" and "device_memory_not_measured" in row["reasons"]
               for row in summary["candidates"])
    decision = msr.decide_memory_strategy_project(summary)
    assert (decision["decision"], decision["reason"]) == ("tune", "device_memory_not_measured")
    cpu_ladder = [{"seq_len": length, "candidates": [_cand(name, peak_memory_mb=None) for name in msr.STRATEGIES]}
                  for length in (64, 96)]
    boundary = msr.decide_memory_boundary(msr.summarize_memory_boundary(cpu_ladder, BUDGET, FLOOR))
    assert (boundary["decision"], boundary["reason"]) == ("measure", "device_memory_not_measured")


def test_best_accepted_strategy_is_the_largest_saving():
    summary = msr.summarize_memory_strategy_candidates(_candidates(
        checkpoint={"peak_memory_mb": 8200.0, "samples_per_s": 6.8},
        hybrid={"peak_memory_mb": 7000.0, "samples_per_s": 6.0}), BUDGET, FLOOR)
    assert summary["eligible_strategies"] == ["hybrid", "checkpoint"]
    assert msr.decide_memory_strategy_project(summary)["selected_strategy"] == "hybrid"


def test_a_failed_baseline_blocks_every_comparison():
    candidates = _candidates(checkpoint={"peak_memory_mb": 8200.0})
    candidates[0].update(status="oom", peak_memory_mb=None)
    summary = msr.summarize_memory_strategy_candidates(candidates, BUDGET, FLOOR)
    assert _row(summary, "checkpoint")["memory_saving_mb"] is None
    decision = msr.decide_memory_strategy_project(summary)
    assert decision["decision"] == "tune" and decision["reason"] == "baseline_unavailable"


def test_summary_refuses_bad_candidate_sets_and_budgets():
    with pytest.raises(ConfigError, match="unique"):
        msr.summarize_memory_strategy_candidates([_cand("baseline"), _cand("baseline")], BUDGET, FLOOR)
    with pytest.raises(ConfigError, match="baseline"):
        msr.summarize_memory_strategy_candidates([_cand("checkpoint")], BUDGET, FLOOR)
    with pytest.raises(ConfigError, match="min_throughput_ratio"):
        msr.summarize_memory_strategy_candidates(_candidates(), {**BUDGET, "min_throughput_ratio": None}, FLOOR)


# ---------------------------------------------------------------------------
# G1 boundary summary, decision and safety admission
# ---------------------------------------------------------------------------

def _length(seq_len, **by_name):
    scale = seq_len / 768
    base = {"peak_memory_mb": 11000.0 * scale, "samples_per_s": 8.0 / scale}
    fields = {"checkpoint": {"peak_memory_mb": 7000.0 * scale, "samples_per_s": 6.5 / scale}}
    fields.update(by_name)
    candidates = [_cand("baseline", **base)] + [_cand(name, **value) for name, value in fields.items()]
    return {"seq_len": seq_len, "source": "g1_sgd", "candidates": candidates}


def test_boundary_accepts_only_for_the_activation_scope():
    summary = msr.summarize_memory_boundary([_length(768), _length(1024)], BUDGET, FLOOR)
    assert summary["tested_seq_lens"] == [768, 1024]
    assert summary["eligible_strategies"] == ["checkpoint"]
    decision = msr.decide_memory_boundary(summary)
    assert decision["decision"] == "accept_for_activation_memory_scope"
    assert decision["promotable_to_full_training"] is False and decision["scope"] == "activation_memory_isolation"
    assert summary["memory_by_length"]["1024"]["baseline"]["peak_memory_mb"] == pytest.approx(11000.0 * 1024 / 768)


def test_boundary_oom_at_a_longer_length_removes_the_strategy():
    records = [_length(768), _length(1024, checkpoint={"status": "oom", "peak_memory_mb": None})]
    summary = msr.summarize_memory_boundary(records, BUDGET, FLOOR)
    assert summary["strategies"]["checkpoint"]["max_accepted_seq_len"] == 768
    assert summary["eligible_strategies"] == []
    assert msr.decide_memory_boundary(summary)["decision"] == "tune"


def test_boundary_with_too_few_lengths_asks_to_measure():
    summary = msr.summarize_memory_boundary([_length(768)], BUDGET, FLOOR)
    assert msr.decide_memory_boundary(summary)["decision"] == "measure"
    failed_baseline = _length(1024)
    failed_baseline["candidates"][0].update(status="oom", peak_memory_mb=None)
    summary = msr.summarize_memory_boundary([_length(768), failed_baseline], BUDGET, FLOOR)
    assert summary["tested_seq_lens"] == [768]
    assert msr.decide_memory_boundary(summary)["decision"] == "measure"


def test_boundary_lengths_must_increase():
    with pytest.raises(ConfigError, match="increasing"):
        msr.summarize_memory_boundary([_length(1024), _length(768)], BUDGET, FLOOR)


def test_admission_projects_the_previous_reserved_peak_linearly():
    check = msr.admit_next_length(previous_seq_len=768, previous_peak_reserved_mb=9000.0, next_seq_len=1024,
                                  free_memory_mb=20000.0, safety_margin=3000.0)
    assert check["status"] == "admitted" and check["projected_peak_reserved_mb"] == pytest.approx(12000.0)
    assert check["safe_process_limit_mb"] == pytest.approx(17000.0)
    blocked = msr.admit_next_length(previous_seq_len=768, previous_peak_reserved_mb=9000.0, next_seq_len=1792,
                                    free_memory_mb=20000.0, safety_margin=3000.0)
    assert blocked["status"] == "blocked" and blocked["admitted"] is False  # 21000 > 17000
    no_peak = msr.admit_next_length(previous_seq_len=768, previous_peak_reserved_mb=None, next_seq_len=1024,
                                    free_memory_mb=20000.0, safety_margin=3000.0)
    assert no_peak["status"] == "blocked"
    cpu = msr.admit_next_length(previous_seq_len=64, previous_peak_reserved_mb=None, next_seq_len=96,
                                free_memory_mb=None, safety_margin=None)
    assert cpu["status"] == "not_applicable" and cpu["admitted"] is None
    assert msr.safety_margin_mb(143771.0) == pytest.approx(0.15 * 143771.0)
    assert msr.safety_margin_mb(8000.0) == 2048.0
    with pytest.raises(ConfigError):
        msr.admit_next_length(previous_seq_len=1024, previous_peak_reserved_mb=1.0, next_seq_len=768,
                              free_memory_mb=1.0, safety_margin=0.0)


def test_the_facade_re_exports_the_package():
    """The product name keeps the public names; the code lives in the package (test_layers checks that
    nothing inside tools imports the facade)."""
    for name in ("StrategyObserver", "estimate_activation_bytes", "summarize_memory_strategy_candidates",
                 "run_memory_strategy", "verify_execution_path", "handoff_gate", "STRATEGIES"):
        assert getattr(msr, name) is not None, name
    assert msr.run_memory_strategy.__module__ == "tools.experiments.memory_strategy.runner"
    assert msr.StrategyObserver.__module__ == "tools.experiments.memory_strategy.hooks"
    assert "runner" in package.__doc__ and "stages" in package.__doc__
