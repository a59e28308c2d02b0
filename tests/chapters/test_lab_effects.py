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

