"""Chapter 50 (preference data and evaluation): the library behind its figures and fixed check, run with
the notebook's own reference, and the effect Step 5 shows (a position-biased judge flips the verdict
of a one-order evaluation) across several seeds."""

from __future__ import annotations

import hashlib
import math
import re
import statistics
import unicodedata

import matplotlib
import pytest

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT

from tools.chapters import preference_data as chapter
from tools.core.catalog import find_chapter
from tools.core.records import encode_record
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.data.arithmetic import make_task
from tools.errors import ConfigError
from tools.experiments.preference.judge import PairwiseJudge

EXERCISES = ("validate_preference_pairs", "split_by_prompt", "pairwise_win_rate")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the modules the notebook's setup cell imports."""
    notebook = read_notebook(find_chapter("50", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"hashlib": hashlib, "math": math, "re": re, "statistics": statistics, "unicodedata": unicodedata}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


@pytest.fixture(scope="module")
def fixed(reference):
    return chapter.run_fixed_check(*(reference[name] for name in EXERCISES))


def test_the_judge_reads_with_the_verifier_unless_it_follows_the_position():
    task = make_task("add-0", "add", 20, 22)
    honest = PairwiseJudge(position_bias=0.0, seed=3)
    assert honest.verdict(task, "42", "41") == "first" and honest.verdict(task, "41", "42") == "second"
    assert honest.verdict(task, "42", " 42 ") == "tie" and honest.verdict(task, "40", "41") == "tie"
    lazy = PairwiseJudge(position_bias=1.0, seed=3)
    assert lazy.verdict(task, "41", "42") == "first", "a fully biased judge never reads"
    tasks = [make_task(f"add-{k}", "add", 10 + k, 30) for k in range(400)]
    biased = PairwiseJudge(position_bias=0.3, seed=5)
    share = sum(biased.verdict(t, str(t.label - 1), str(t.label)) == "first" for t in tasks) / len(tasks)
    assert 0.22 < share < 0.38, "the wrong first answer wins only through the position bias"
    assert [biased.verdict(t, "1", "2") for t in tasks[:20]] == [biased.verdict(t, "1", "2") for t in tasks[:20]]
    for bad in (-0.1, 1.5, True, float("nan")):
        with pytest.raises(ConfigError):
            PairwiseJudge(position_bias=bad)


def test_step_examples_match_the_prose(reference):
    step1 = reference["validate_preference_pairs"](chapter.STEP1_PAIRS)
    assert step1["issues"] == {"p1": [], "p2": ["prompt_mismatch"], "p3": ["empty_rejected"], "p4": ["same_response"],
                               "p5": ["duplicate"], "p6": ["tie"], "p7": ["duplicate", "tie"], "p8": []}
    assert step1["duplicate_of"] == {"p5": "p1", "p7": "p6"}
    prompts = chapter.STEP2_PROMPTS
    assert chapter.jaccard(prompts["a"], prompts["b"]) == 1.0
    assert chapter.jaccard(prompts["a"], prompts["c"]) == 0.9 and chapter.jaccard(prompts["a"], prompts["d"]) == 0.8
    assert round(chapter.jaccard(prompts["e"], prompts["f"]), 2) == 0.67
    step2 = reference["split_by_prompt"]([{"id": k, "prompt": v} for k, v in prompts.items()], 0.5, 0.85)
    assert [group["ids"] for group in step2["groups"]] == [["a", "b", "c"], ["d"], ["e"], ["f"]]
    step3 = reference["pairwise_win_rate"](chapter.step3_judgements())
    assert step3["counts"] == {"win": 2, "loss": 2, "tie": 1, "inconsistent": 5} and step3["decision"] == "undecided"


def test_the_fixed_check_reaches_what_the_prose_describes(fixed):
    assert fixed["delivered"] == 39 and len(fixed["kept"]) == 28
    assert fixed["counts"] == {"prompt_mismatch": 2, "empty_chosen": 1, "empty_rejected": 1, "same_response": 2,
                               "duplicate": 3, "tie": 2}
    assert fixed["leaks"]["by_prompt"] == [] and len(fixed["leaks"]["by_id"]) >= 1
    assert fixed["evaluation_tasks"] + fixed["evaluation_dropped"] == 300
    assert fixed["one_order"]["decision"] == "candidate_better"
    assert fixed["both_orders"]["decision"] == fixed["verifier"]["decision"] == "baseline_better"
    assert chapter.verdict_flipped(fixed)
    lines = chapter.summary_lines(fixed)
    assert lines[-1] == "verdict flipped by judging both orders: True"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_position_biased_judge_flips_a_one_order_verdict(reference, seed):
    """The effect Step 5 shows, at three seeds: one order calls the worse candidate better; judging both
    orders recovers the verifier's verdict, and its rate sits far closer to the verifier's."""
    results = chapter.run_fixed_check(*(reference[name] for name in EXERCISES), seed=seed)
    one, both, truth = (results[key]["win_rate"] for key in ("one_order", "both_orders", "verifier"))
    assert results["one_order"]["decision"] == "candidate_better"
    assert results["both_orders"]["decision"] == "baseline_better" == results["verifier"]["decision"]
    assert one - both >= 0.25, (one, both)
    assert abs(both - truth) < abs(one - truth) - 0.2, (one, both, truth)


def test_without_position_bias_the_orders_agree(reference):
    results = chapter.run_fixed_check(*(reference[name] for name in EXERCISES), position_bias=0.0)
    assert results["both_orders"] == results["verifier"]
    assert results["both_orders"]["counts"]["inconsistent"] == 0


def test_the_record_body_is_json_and_names_its_evidence(fixed):
    body = chapter.record_body(fixed)
    encode_record(body)
    assert body["measurement"].startswith("none:")
    assert body["decision"] == {"both_orders": "baseline_better", "one_order": "candidate_better",
                                "verdict_flipped": True}
    lines = chapter.record_summary({**body, "evidence_level": "cpu_smoke"})
    assert lines[0].startswith("evidence level cpu_smoke") and lines[-1].endswith("True")


def test_the_figures_draw(reference, fixed):
    import matplotlib.pyplot as plt

    for figure in (chapter.draw_prompt_similarity(chapter.STEP2_PROMPTS, 0.85), chapter.draw_order_verdicts(),
                   chapter.draw_interval_widths(reference["pairwise_win_rate"]), chapter.draw_fixed_check(fixed)):
        assert figure.axes
        plt.close(figure)
