"""The effect each SFT chapter teaches, measured on the lab model across seeds (issues 22, 30, 32).

One test per chapter, all its seeds in one process. Each trains its variants from the `lab` student on
the task it does not know (`add_plus_one`) at a matched budget (the same steps, rows per step, data
order, learning rate and seeds), and asserts paired effects over the seeds with a Student-t interval
(`tools.core.effects`) on the held-out split: `holds(effect, margin)` for a difference the page
claims, `equivalent(effect, margin)` for "no difference". Every margin is the smallest effect the page
claims and is no smaller than the spread of the paired differences measured under both numerics
profiles (the pinned AVX2 profile with the committed weights, and the generic profile with lab models
pretrained under it); the values are in each margin's docstring. No test asserts a wall time.
"""

from __future__ import annotations

import pytest

from tools.core import effects
from tools.experiments.sft_training.lab_curves import gain, paired, summary

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)

ALL_LINEAR_MARGIN = 0.05
"""14: after 30 steps at 7e-4, all_linear's held-out exact match (256 problems) beats attention_qv's by
more than 0.05 (13 problems). Measured, all_linear - attention_qv per seed 0..5: pinned +0.109 +0.215
+0.141 +0.105 +0.113 +0.176 (mean +0.143, sd 0.044); generic +0.344 +0.434 +0.324 +0.332 +0.340 +0.383
(mean +0.359, sd 0.042). Five seeds: with three, the pinned interval (+0.021 lower) does not clear 0.05."""
SEEDS_14 = (0, 1, 2, 3, 4)
LEARNS_MARGIN = 0.1
"""14: every target set raises the held-out exact match above the input model's by more than 0.1 (the
smallest gain, attention_qv under the generic profile: +0.125 to +0.172 over seeds 0..5)."""


@pytest.mark.effect
def test_14_all_linear_learns_the_new_task_faster_than_attention_qv(lab_models):
    """Equal rank, steps, rows, data order, learning rate and seeds: every target set learns the task
    (held-out exact match above the baseline row by LEARNS_MARGIN), and all_linear is ahead of
    attention_qv by ALL_LINEAR_MARGIN on the held-out split; peft's "all-linear" wraps exactly the seven
    projections, never lm_head; the regression check on the pretraining task was measured."""
    from tools.experiments.sft_training.plans.ch_14 import effect

    result = effect(SEEDS_14)
    variants = result["variants"]
    assert result["data"]["overlap"] == 0 and result["data"]["heldout_problems"] == 256
    for name, variant in variants.items():
        assert all(curve["regression"]["exact_match"][0] > 0.4 for curve in variant["curves"]), name  # knew `add`
        learned = gain(variant["curves"])
        assert effects.holds(learned, LEARNS_MARGIN), (name, effects.describe(learned))
    ahead = paired(variants["all_linear"]["curves"], variants["attention_qv"]["curves"])
    assert effects.holds(ahead, ALL_LINEAR_MARGIN), effects.describe(ahead)
    counts = [variants[name]["trainable_parameters"] for name in ("attention_qv", "attention_all", "all_linear")]
    assert counts == sorted(counts) and len(set(counts)) == 3, counts
    assert result["peft_all_linear"] == {"modules": sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"]),
                                         "equals_qwen2_linear": True, "lm_head_targeted": False}
    print(f"all_linear - attention_qv, held-out exact match: {effects.describe(ahead)}; per seed "
          f"{[round(d, 3) for d in ahead['differences']]}")


REAL_UPDATE_MARGIN = 0.3
"""15: the real update ends above each look-alike by more than 0.3 held-out exact match. Measured,
effective - vanishing_scale per seed 0..3: pinned +0.445 +0.488 +0.449 +0.523 (sd 0.036); generic
+0.617 +0.559 +0.582 +0.598 (sd 0.025); grads_zeroed within 0.004 of these."""
LOOKALIKE_DRIFT = 0.01
"""15: a look-alike moves the held-out exact match and loss by at most 0.01 (measured: <= 0.004)."""


@pytest.mark.effect
def test_15_only_the_real_update_moves_the_held_out_curves(lab_models):
    """The look-alikes are controls at the real update's budget (the same steps, rows per step, learning
    rate, data and seeds); their adapter tensors change, yet neither moves the held-out split, and the
    real update is ahead of each by REAL_UPDATE_MARGIN; the update accumulated over 4 micro-batches gives
    the one-batch curve (validation loss within 1e-3 at every point, held-out loss at the end too)."""
    from tools.experiments.sft_training.plans.ch_15 import effect

    variants = effect(SEEDS)["variants"]
    budgets = {name: variant["budget"] for name, variant in variants.items()}
    assert len({tuple(sorted(budget.items())) for budget in budgets.values()}) == 1, budgets
    real = variants["effective"]["curves"]
    for name in ("vanishing_scale", "grads_zeroed"):
        curves = variants[name]["curves"]
        assert all(curve["trainable_changed"] for curve in curves), name
        for key in ("heldout.exact_match", "heldout.loss"):
            moved = summary(curves, key)
            assert max(abs(moved["change_min"]), abs(moved["change_max"])) <= LOOKALIKE_DRIFT, (name, moved)
        ahead = paired(real, curves)
        assert effects.holds(ahead, REAL_UPDATE_MARGIN), (name, effects.describe(ahead))
        print(f"effective - {name}, held-out exact match: {effects.describe(ahead)}; per seed "
              f"{[round(d, 3) for d in ahead['differences']]}")
    for one, accumulated in zip(real, variants["effective_accumulated"]["curves"]):
        gaps = [abs(a - b) for a, b in zip(one["validation_loss"] + one["heldout"]["loss"],
                                           accumulated["validation_loss"] + accumulated["heldout"]["loss"])]
        assert max(gaps) <= 1e-3, gaps


NF4_EQUIVALENCE_MARGIN = 0.08
"""26: the NF4 base's held-out exact match lies within 0.08 (20 of 256 problems) of the bf16 base's, the
whole interval inside; training gains +0.45 (pinned) to +0.65 (generic) on either base. Measured with the
plan's decaying rate, nf4 - bf16 per seed 0..3: pinned -0.027 -0.004 +0.047 +0.023, interval [-0.042,
+0.061]; generic -0.020 -0.008 -0.027 0.000, interval [-0.033, +0.006]."""
NF4_LOSS_MARGIN = 0.02
"""26: and their held-out losses within 0.02 nats (training lowers it by 0.48 pinned, 1.0 generic).
Measured: pinned +0.002 -0.003 -0.005 -0.002, interval [-0.007, +0.003]; generic -0.009 +0.002 +0.007
+0.005, interval [-0.010, +0.013]."""
SEEDS_26 = (0, 1, 2, 3)


@pytest.mark.effect
def test_26_an_nf4_base_learns_like_the_bf16_base_in_half_the_bytes(lab_models):
    """The same adapter on both bases, four seeds: both learn the new task (held-out exact match up by
    >= 0.3 from their own baselines), the paired difference nf4 - bf16 of the held-out exact match is
    equivalent to zero within NF4_EQUIVALENCE_MARGIN (the held-out loss within NF4_LOSS_MARGIN), the NF4 base's measured bytes equal the account's
    prediction and are below 0.6x the bf16 base's, and the reconstruction error is real but bounded
    (0 < relative Frobenius error < 0.2)."""
    from tools.experiments.sft_training.plans.ch_26 import effect

    result = effect(SEEDS_26)
    variants = result["variants"]
    assert [variants[name]["status"] for name in ("bf16_base", "nf4_base")] == ["ok", "ok"], variants
    for name in ("bf16_base", "nf4_base"):
        assert summary(variants[name]["curves"])["change_min"] >= 0.3, (name, summary(variants[name]["curves"]))
    same = paired(variants["nf4_base"]["curves"], variants["bf16_base"]["curves"])
    assert effects.equivalent(same, NF4_EQUIVALENCE_MARGIN), effects.describe(same)
    same_loss = paired(variants["nf4_base"]["curves"], variants["bf16_base"]["curves"], "heldout.loss")
    assert effects.equivalent(same_loss, NF4_LOSS_MARGIN), effects.describe(same_loss)
    measured = {name: variants[name]["base_bytes"]["measured"]["total_bytes"] for name in variants}
    assert variants["nf4_base"]["base_bytes"]["predicted"]["total_bytes"] == measured["nf4_base"]
    assert measured["nf4_base"] < 0.6 * measured["bf16_base"], measured
    assert 0 < result["reconstruction_error"]["relative_frobenius"] < 0.2, result["reconstruction_error"]
    print(f"nf4 - bf16, held-out exact match: {effects.describe(same)}; per seed "
          f"{[round(d, 3) for d in same['differences']]}; loss {effects.describe(same_loss)}")
