"""DISTILL-OPD's library: the worked distributions of Steps 1-3, the framework check against TRL's GKD
generalized_jsd_loss and its record, and the distillation divergences tied to the notebook's reference."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from chapter_factory import REPO_ROOT
from tools.chapters import distill_opd as chapter
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.course.grader.differential import difference
from tools.experiments.distillation import divergences

matplotlib.use("Agg")

EXERCISES = ("token_reverse_kl", "generalized_jsd", "mixed_distillation_loss")
SEARCH = settings(max_examples=100, derandomize=True, database=None, deadline=None)


@pytest.fixture(scope="module")
def reference():
    notebook = read_notebook(find_chapter("DISTILL-OPD", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def outcome(function, *args):
    try:
        return "value", function(*args)
    except ValueError as error:
        return "raised", type(error).__name__


def same(left, right) -> bool:
    return left[0] == right[0] and (left[0] == "raised" or difference(left[1], right[1]) is None)


def test_forward_kl_covers_and_reverse_kl_seeks_a_mode():
    teacher = chapter.bimodal_teacher()
    fits = chapter.best_single_mode_fits(teacher)
    assert fits["forward"]["width"] > 3 * fits["reverse"]["width"], "the forward fit spreads over both modes"
    assert abs(fits["reverse"]["mean"] - 11) <= 1, "the reverse fit sits on the larger mode"
    assert fits["reverse"]["reverse_kl"] < fits["forward"]["reverse_kl"]
    assert fits["forward"]["forward_kl"] < fits["reverse"]["forward_kl"]


def test_scaled_jsd_reaches_the_two_kls_at_the_ends():
    teacher = chapter.bimodal_teacher()
    student = chapter.best_single_mode_fits(teacher)["forward"]["student"]
    assert chapter.jsd_beta(student, teacher, 1e-5) / 1e-5 == pytest.approx(chapter.kl(teacher, student), rel=1e-3)
    assert chapter.jsd_beta(student, teacher, 1 - 1e-7) / 1e-7 == pytest.approx(chapter.kl(student, teacher), rel=1e-2)
    assert chapter.mixing_weights(2, 6, 0.5) == {"on_policy": 0.25, "fixed": 0.5 / 6}


@pytest.mark.parametrize("draw", ["modes", "jsd", "mixing"])
def test_figures_draw(draw):
    teacher = chapter.bimodal_teacher(20)
    figure = {"modes": lambda: chapter.draw_forward_vs_reverse(teacher, chapter.best_single_mode_fits(teacher)),
              "jsd": lambda: chapter.draw_jsd_interpolation(chapter.gaussian_student(8, 5, 20), teacher),
              "mixing": lambda: chapter.draw_mixing_weights()}[draw]()
    assert figure.axes
    matplotlib.pyplot.close(figure)


@pytest.mark.slow  # imports TRL (several seconds on a cold start)
def test_framework_check_matches_trl_and_catches_swapped_ends(reference):
    check = chapter.compare_with_trl(reference["generalized_jsd"])
    assert check["matches"] and check["framework"]["version"] == "1.16.0" and len(check["rows"]) == 10
    assert all(math.isfinite(row["trl_loss"]) for row in check["rows"]), "TRL ignores the nan outside the mask too"

    def swapped(student, teacher, mask, beta=0.5, temperature=1.0):
        flipped = {0.0: 1.0, 1.0: 0.0}.get(float(beta), beta)
        return reference["generalized_jsd"](student, teacher, mask, flipped, temperature)

    wrong = chapter.compare_with_trl(swapped)
    assert not wrong["matches"]
    body = chapter.framework_record_body(check)
    lines = "\n".join(chapter.framework_summary({"evidence_level": "cpu_smoke", **json.loads(json.dumps(body))}))
    assert lines.startswith("evidence level cpu_smoke") and "matches: True" in lines


def _logits(seed, batch, time, vocab, dtype):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64) * 2).to(dtype)


@pytest.mark.slow
@SEARCH
@given(st.integers(0, 10_000), st.integers(1, 3), st.integers(1, 3), st.integers(1, 5),
       st.sampled_from([torch.float32, torch.float64]), st.sampled_from([0, 0.3, 1.0, 1.5]),
       st.sampled_from([1.0, 2, 0]), st.sampled_from([0, 0.5, 1, True]))
def test_package_divergences_agree_with_the_notebook(reference, seed, batch, time, vocab, dtype, beta, temperature, lam):
    student, teacher = _logits(seed, batch, time, vocab, dtype), _logits(seed + 1, batch, time, vocab, dtype)
    mask = torch.rand(batch, time, generator=torch.Generator().manual_seed(seed)) > 0.3
    mask[:, 0] = True
    tokens = torch.randint(0, vocab + 1, (batch, time), generator=torch.Generator().manual_seed(seed))
    kinds = [row % 2 == 0 for row in range(batch)]
    assert same(outcome(divergences.token_reverse_kl, student, teacher, tokens, mask),
                outcome(reference["token_reverse_kl"], student, teacher, tokens, mask))
    assert same(outcome(divergences.generalized_jsd, student, teacher, mask, beta, temperature),
                outcome(reference["generalized_jsd"], student, teacher, mask, beta, temperature))
    assert same(outcome(divergences.mixed_distillation_loss, student, teacher, mask, kinds, lam),
                outcome(reference["mixed_distillation_loss"], student, teacher, mask, kinds, lam))


@pytest.mark.effect
@pytest.mark.slow
def test_distillation_closes_part_of_the_students_gap_to_the_teacher_on_every_seed(lab_models, one_cpu_thread):
    """Step 5.2's effect: cpu_smoke's plan, seeds 0-2, each kind from the same student weights; on every
    seed both on-policy and fixed trajectories close at least 0.3 of the gap between the lab student's
    and the lab teacher's held-out exact match, and at least 0.5 on average over the seeds.

    Measured under the pinned CPU numerics (AVX2), 24 steps: teacher 1.000, student 0.599 before; gap
    closed on_policy 0.606, 0.652, 0.572 (mean 0.610), fixed 0.612, 0.628, 0.560 (mean 0.600). With 16
    steps on_policy closed 0.489, 0.443, 0.551 (mean 0.494); 32 steps gave no more (0.606, 0.643, 0.554)."""
    from tools.experiments.distillation.stage import PLAN, run_kind

    closed = {"on_policy": [], "fixed": []}
    teacher = None
    for seed in (0, 1, 2):
        for kind in closed:
            record = run_kind(kind, seed, teacher_exact_match=teacher)
            assert record["status"] == "ok", record.get("error")
            teacher = record["teacher_exact_match"]
            assert teacher >= 0.9 and record["before"]["accuracy"] <= 0.8
            assert len(record["steps"]) == PLAN["steps"] and record["steps"][-1]["loss"] < record["steps"][0]["loss"]
            closed[kind].append(record["gap_closed"])
    for kind, shares in closed.items():
        assert min(shares) >= 0.3, (kind, shares)
        assert sum(shares) / len(shares) >= 0.5, (kind, shares)
