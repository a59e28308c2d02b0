"""The effect each SFT chapter teaches, measured on the lab model across seeds (issue 22).

One test per chapter, all its seeds in one process; each asserts the direction of the effect with a
stated margin (never a wall time). They train from the `lab` student on the task it does not yet
know (`add_plus_one`), so the curves move for a reason the chapter names.
"""

from __future__ import annotations

import pytest

from tools.experiments.sft_training.lab_curves import summary

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)


@pytest.mark.effect
def test_14_all_linear_learns_the_new_task_faster_than_attention_qv(lab_models):
    """Equal rank, steps and data: every target set learns the task (held-out exact-match up by >= 0.3
    from step 0), and all_linear ends with a held-out loss at least 0.01 below attention_qv in every
    seed; peft's "all-linear" wraps exactly the seven projections, never lm_head."""
    from tools.experiments.sft_training.plans.ch_14 import effect

    result = effect(SEEDS)
    variants = result["variants"]
    assert result["data"]["overlap"] == 0
    for name, variant in variants.items():
        assert summary(variant["curves"])["change_min"] >= 0.3, (name, summary(variant["curves"]))
    qv = summary(variants["attention_qv"]["curves"], "heldout_loss")["final"]
    every = summary(variants["all_linear"]["curves"], "heldout_loss")["final"]
    assert all(q - a >= 0.01 for q, a in zip(qv, every)), (qv, every)
    counts = [variants[name]["trainable_parameters"] for name in ("attention_qv", "attention_all", "all_linear")]
    assert counts == sorted(counts) and len(set(counts)) == 3, counts
    assert result["peft_all_linear"] == {"modules": sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"]),
                                         "equals_qwen2_linear": True, "lm_head_targeted": False}


@pytest.mark.effect
def test_15_only_the_real_update_moves_the_held_out_curves(lab_models):
    """Three seeds: the real update raises held-out exact-match by >= 0.2 and lowers the held-out loss by
    >= 0.3; both look-alikes change their adapter tensors yet move neither by more than 0.01; the
    update accumulated over 4 micro-batches gives the one-batch curve (loss within 1e-3 at every point)."""
    from tools.experiments.sft_training.plans.ch_15 import effect

    variants = effect(SEEDS)["variants"]
    real = variants["effective"]["curves"]
    assert summary(real)["change_min"] >= 0.2, summary(real)
    assert summary(real, "heldout_loss")["change_max"] <= -0.3, summary(real, "heldout_loss")
    for name in ("vanishing_scale", "grads_zeroed"):
        curves = variants[name]["curves"]
        assert all(curve["trainable_changed"] for curve in curves), name
        for key in ("heldout_exact_match", "heldout_loss"):
            moved = summary(curves, key)
            assert max(abs(moved["change_min"]), abs(moved["change_max"])) <= 0.01, (name, moved)
    for one, accumulated in zip(real, variants["effective_accumulated"]["curves"]):
        gaps = [abs(a - b) for a, b in zip(one["heldout_loss"], accumulated["heldout_loss"])]
        assert max(gaps) <= 1e-3, gaps


@pytest.mark.effect
def test_26_an_nf4_base_learns_like_the_bf16_base_in_half_the_bytes(lab_models):
    """Three seeds, the same adapter on both bases: both learn the new task (held-out exact-match up by
    >= 0.3), the final held-out losses stay within 0.1 of each other in every seed, the NF4 base's
    measured bytes equal the account's prediction and are below 0.6x the bf16 base's, and the
    reconstruction error is real but bounded (0 < relative Frobenius error < 0.2)."""
    from tools.experiments.sft_training.plans.ch_26 import effect

    result = effect(SEEDS)
    variants = result["variants"]
    assert [variants[name]["status"] for name in ("bf16_base", "nf4_base")] == ["ok", "ok"], variants
    for name in ("bf16_base", "nf4_base"):
        assert summary(variants[name]["curves"])["change_min"] >= 0.3, (name, summary(variants[name]["curves"]))
    bf16 = summary(variants["bf16_base"]["curves"], "heldout_loss")["final"]
    nf4 = summary(variants["nf4_base"]["curves"], "heldout_loss")["final"]
    assert all(abs(a - b) <= 0.1 for a, b in zip(bf16, nf4)), (bf16, nf4)
    measured = {name: variants[name]["base_bytes"]["measured"]["total_bytes"] for name in variants}
    assert variants["nf4_base"]["base_bytes"]["predicted"]["total_bytes"] == measured["nf4_base"]
    assert measured["nf4_base"] < 0.6 * measured["bf16_base"], measured
    assert 0 < result["reconstruction_error"]["relative_frobenius"] < 0.2, result["reconstruction_error"]
