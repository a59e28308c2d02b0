"""Chapter PT-KTO: the framework check against TRL's KTOTrainer, run with the notebook's own reference,
and the figures of Steps 1-3."""

from __future__ import annotations

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT

from tools.chapters import kto as chapter
from tools.core.catalog import find_chapter
from tools.core.records import encode_record
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source

pytestmark = pytest.mark.slow  # each module drives a TRL trainer on the tiny model once (10-20 s)

EXERCISES = ("kto_reference_point", "kto_loss", "kto_class_weights")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the names the notebook's setup cell imports."""
    notebook = read_notebook(find_chapter("PT-KTO", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math, "torch": torch, "F": torch.nn.functional}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


@pytest.fixture(scope="module")
def check(reference, one_cpu_thread):
    return chapter.trl_kto_check(reference["kto_reference_point"], reference["kto_loss"], seed=0)


def test_the_reference_matches_trls_kto_loss_within_the_tolerance(check):
    assert check["framework"]["library"] == "trl" and check["framework"]["version"] == "1.16.0"
    assert check["matches"], chapter.framework_lines(check)
    assert check["policy_changed_by_trl_step"] and check["reference_unchanged"]
    assert check["trl"]["kl"] > 0, "the step must move the policy, or the reference point is a trivial 0"
    assert check["kl_pairs"] == [[0, 4], [1, 0], [2, 1], [3, 2], [4, 3]]


def test_the_framework_weights_are_inside_the_recommended_range(reference):
    labels = [example["label"] for example in chapter.framework_examples()]
    weights = reference["kto_class_weights"](labels, desirable_weight=chapter.FRAMEWORK_WEIGHTS["desirable_weight"],
                                             undesirable_weight=chapter.FRAMEWORK_WEIGHTS["undesirable_weight"])
    assert weights["ratio"] == 1.0


def test_the_check_fails_a_reference_point_or_loss_that_is_not_trls(check, reference):
    """z0 from the matched pairs, and the class means added, are both caught; the reference matches."""
    def matched(policy, reference_logps):
        point = reference["kto_reference_point"](policy, reference_logps)
        diagonal = (policy - reference_logps).diagonal().mean().detach()
        return {**point, "z0": diagonal.clamp(min=0)}

    def class_means(policy, reference_logps, desirable, z0, beta, **weights):
        result = reference["kto_loss"](policy, reference_logps, desirable, z0, beta, **weights)
        parts = [result["losses"][keep].mean() for keep in (desirable, ~desirable)]
        return {**result, "loss": parts[0] + parts[1]}

    functions = {"kto_reference_point": reference["kto_reference_point"], "kto_loss": reference["kto_loss"]}
    assert chapter.learner_comparison(check["step"], functions)["status"] == "matches"
    assert chapter.learner_comparison(check["step"], {**functions, "kto_reference_point": matched})["status"] == "differs"
    assert chapter.learner_comparison(check["step"], {**functions, "kto_loss": class_means})["status"] == "differs"


def test_the_framework_record_is_json(check):
    record = chapter.framework_record(check, {"status": "not_implemented", "detail": "TODO 1"})
    encode_record(record)
    lines = chapter.framework_summary({**record, "evidence_level": "cpu_smoke"})
    assert lines[0].startswith("evidence level cpu_smoke") and "trl 1.16.0" in lines[1]


def test_seed_draws_the_checks_examples_and_the_reference_still_matches(check, reference):
    """Issue 32: SEED used to change nothing in the framework check; it now draws the examples (and the batch)."""
    assert chapter.framework_examples(seed=0) != chapter.framework_examples(seed=1)
    assert [example["label"] for example in chapter.framework_examples(seed=1)].count(True) == 2
    other = chapter.trl_kto_check(reference["kto_reference_point"], reference["kto_loss"], seed=1)
    assert other["examples"] == chapter.framework_examples(seed=1) and other["matches"], chapter.framework_lines(other)
    assert other["trl"]["loss"] != check["trl"]["loss"]


def test_the_figures_draw():
    import matplotlib.pyplot as plt

    for figure in (chapter.draw_value_and_loss(), chapter.draw_mismatched_pairs(), chapter.draw_class_shares()):
        assert figure.axes
        plt.close(figure)
