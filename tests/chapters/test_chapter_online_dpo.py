"""Chapter 51 (online DPO): the framework check against TRL's experimental OnlineDPOTrainer, run with the
notebook's own reference, the Wilson helper the gate reads, and the figures of Steps 1-3."""

from __future__ import annotations

import hashlib
import math
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT

from tools.chapters import online_dpo as chapter
from tools.core.catalog import find_chapter
from tools.core.records import encode_record
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source

pytestmark = pytest.mark.slow  # each module drives a TRL trainer on the tiny model once (10-20 s)

EXERCISES = ("build_online_pairs", "adoption_gate", "guard_rollback")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the names the notebook's setup cell imports."""
    notebook = read_notebook(find_chapter("51", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"hashlib": hashlib, "math": math, "re": re, "wilson_interval": chapter.wilson_interval}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


@pytest.fixture(scope="module")
def check(reference, one_cpu_thread):
    return chapter.trl_online_dpo_check(reference["build_online_pairs"], seed=0)


def test_the_reference_picks_trls_pairs_and_matches_its_loss(check):
    assert check["framework"]["library"] == "trl" and check["framework"]["version"] == "1.16.0"
    assert check["matches"], chapter.framework_lines(check)
    two, four = check["groups_of_two"], check["groups_of_four"]
    assert two["groups"] == 2 * chapter.FRAMEWORK_PROMPTS and four["groups"] == chapter.FRAMEWORK_PROMPTS
    assert two["agreeing"] == two["untied"] and two["ties_reported"] == two["tied"]
    assert four["agreeing"] == four["untied"]
    assert check["reference_unchanged"] and abs(check["trl"]["loss"] - math.log(2)) > 1e-4


def test_the_batch_holds_ties_and_repeated_best_scores(check):
    """The check can fail only where the contract's hard cases occur: tied groups of two (TRL trains on them) and
    groups of four whose best or worst score repeats (the first position must win)."""
    assert check["groups_of_two"]["tied"] >= 1 and check["trl_trains_on_ties"] == check["groups_of_two"]["tied"]
    scores = check["step"]["sampled"]["scores"]
    groups, _ = chapter.prompt_groups(check["step"], "v")
    repeated = [group for group in groups if len(set(group["scores"])) > 1 and (
        group["scores"].count(max(group["scores"])) > 1 or group["scores"].count(min(group["scores"])) > 1)]
    assert repeated and set(scores) <= {0.0, 1.0}


def test_trls_rule_as_a_knockout_is_the_first_best_against_the_first_worst():
    assert chapter.trl_rule_knockout([0.0, 1.0, 1.0, 0.0]) == (1, 0)
    assert chapter.trl_rule_knockout([1.0, 0.0, 0.0, 1.0]) == (0, 1)
    assert chapter.trl_rule_knockout([2.0, 3.0, 1.0, 1.0]) == (1, 2)
    assert chapter.trl_rule_knockout([1.0, 1.0, 1.0, 1.0]) is None


@pytest.mark.parametrize("mutant", ["last_best_position", "ties_paired_anyway", "sorted_group_ends"])
def test_the_check_catches_a_learners_pairing_slip(check, mutant):
    """Chapter mutants that pass on untied groups of two (the old check's only case) fail here."""
    from tools.course.grader.build import load_mutants
    from tools.course.layout import CourseLayout

    notebook = read_notebook(find_chapter("51", REPO_ROOT).notebook_path(REPO_ROOT))
    planted = {item.name: item for item in load_mutants(CourseLayout(REPO_ROOT).mutants("51-online-dpo"), notebook)}
    namespace = {"math": math, "re": re, "hashlib": hashlib, "wilson_interval": chapter.wilson_interval}
    exec(planted[mutant].source, namespace)
    assert chapter.learner_comparison(check["step"], {"build_online_pairs": namespace["build_online_pairs"]})[
        "status"] == "differs"


def test_the_check_catches_pairs_taken_the_wrong_way_round(check, reference):
    def reversed_pairs(groups, version):
        result = reference["build_online_pairs"](groups, version)
        swapped = [{**pair, "chosen": pair["rejected"], "rejected": pair["chosen"]} for pair in result["pairs"]]
        return {**result, "pairs": swapped}

    assert chapter.learner_comparison(check["step"], {"build_online_pairs": reversed_pairs})["status"] == "differs"
    assert chapter.learner_comparison(check["step"], {"build_online_pairs": reference["build_online_pairs"]})["status"] \
        == "matches"


def test_wilson_interval_is_chapter_50s():
    low, high = chapter.wilson_interval(8, 10, 0.95)
    assert abs(low - 0.4901625) < 1e-6 and abs(high - 0.9433178) < 1e-6
    assert chapter.wilson_interval(0, 3)[0] == 0.0 and chapter.wilson_interval(3, 3)[1] == 1.0
    for bad in ((4, 3), (1, 0), (True, 2), (1, 2.0)):
        with pytest.raises(ValueError):
            chapter.wilson_interval(*bad)


def test_the_step3_log_is_consistent_for_the_reference(reference):
    log = chapter.STEP3_LOG
    next_version = chapter.example_hash("v4")
    result = reference["guard_rollback"](log, {"version": next_version, "parent": log[-1]["version"]}, 0.2, 0.05)
    assert result["rolled_back"] and result["serving"] == log[-1]["version"]


def test_the_framework_record_is_json(check):
    record = chapter.framework_record(check, {"status": "not_implemented", "detail": "TODO 1"})
    encode_record(record)
    lines = chapter.framework_summary({**record, "evidence_level": "cpu_smoke"})
    assert lines[0].startswith("evidence level cpu_smoke") and "trl 1.16.0" in lines[1]


def test_the_figures_draw():
    import matplotlib.pyplot as plt

    for figure in (chapter.draw_online_rounds(), chapter.draw_version_log(chapter.STEP3_LOG, chapter.STEP3_LOG[-1]["version"])):
        assert figure.axes
        plt.close(figure)
