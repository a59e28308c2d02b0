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
from tools.experiments.contract import Mechanism
from tools.experiments.preference.judge import PairwiseJudge

EXERCISES = ("validate_preference_pairs", "split_by_prompt", "pairwise_win_rate")
CHAPTER_ID = "50"


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
    assert step2["held"] == [] and set(step2["ledger"].values()) <= {"train", "eval"}
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


def test_a_new_near_duplicate_moves_trained_prompts_by_the_hash_alone_but_not_with_the_ledger(reference):
    """Issue 32: the group key is the smallest normalised prompt, so a second delivery whose prompts sort first
    moves trained pairs into evaluation when the split reads the hash alone; the ledger keeps every first-split
    pair on its side."""
    kept = reference["validate_preference_pairs"](chapter.delivered_pairs())["kept"]
    appended = chapter.appended_check(reference["split_by_prompt"], kept)
    assert appended["new_pairs"] == len(kept) == 28
    assert len(appended["by_hash"]["train_moved"]) == 7 and len(appended["by_hash"]["eval_moved"]) == 4
    assert appended["with_ledger"] == {"train_moved": [], "eval_moved": [], "held": []}
    assert appended["ledger_entries"] == {"before": 28, "after": 56}


def test_step5_runs_the_learners_functions_and_a_wrong_one_changes_its_verdict(reference):
    """The notebook passes step5_mechanism(...) to run_step5: a planted wrong pairwise_win_rate (one order read)
    turns the both-orders verdict from baseline_better into candidate_better, and the record says whose ran."""
    def reads_one_order(judgements, confidence=0.95):
        """A learner's protocol that reads only the candidate-first verdict (the one_order_read mutant)."""
        mirrored = [{**item, "candidate_second": {"first": "second", "second": "first"}.get(item["candidate_first"],
                                                                                             "tie")}
                    for item in judgements]
        return reference["pairwise_win_rate"](mirrored, confidence)

    sources = {name: "reference" for name in EXERCISES}
    right = chapter.run_step5(Mechanism({name: reference[name] for name in EXERCISES}, sources))
    wrong = chapter.run_step5(Mechanism({**{name: reference[name] for name in EXERCISES},
                                         "pairwise_win_rate": reads_one_order},
                                        {**sources, "pairwise_win_rate": "learner"}))
    assert right["both_orders"]["decision"] == "baseline_better" and chapter.verdict_flipped(right)
    assert wrong["both_orders"]["decision"] == "candidate_better" and not chapter.verdict_flipped(wrong)
    body = chapter.record_body(wrong)
    assert body["mechanism"]["pairwise_win_rate"]["source"] == "learner"
    assert body["mechanism"]["split_by_prompt"]["source"] == "reference"
    assert chapter.summary_lines(wrong)[0].startswith("Step 5 ran your pairwise_win_rate")
    with pytest.raises(ConfigError, match="missing"):
        chapter.run_step5(Mechanism({"pairwise_win_rate": reads_one_order}, {"pairwise_win_rate": "learner"}))


def test_responses_equal_only_after_normalisation_are_different_tokens(tiny_tokenizer):
    """What Step 1 teaches about same_response: the planted pairs' two answers are equal after normalisation,
    but they are different token sequences, so DPO would push them apart (a surface-form preference)."""
    same = {pair["id"]: pair for pair in chapter.delivered_pairs() if pair["id"].startswith("same-")}
    assert len(same) == 2
    for pair in same.values():
        chosen, rejected = pair["chosen"]["response"], pair["rejected"]["response"]
        assert chapter.normalised(chosen) == chapter.normalised(rejected)
        assert tiny_tokenizer.encode(chosen, add_special_tokens=False) != \
            tiny_tokenizer.encode(rejected, add_special_tokens=False), pair["id"]


LEARNER_WIN_RATE = '''def pairwise_win_rate(judgements, confidence=0.95):
    """A learner's own protocol: the same contract as the reference, written another way."""
    import math as m
    from statistics import NormalDist

    ok = ("first", "second", "tie")
    if type(confidence) not in (int, float) or not m.isfinite(confidence) or not 0 < confidence < 1:
        raise ValueError("confidence out of range")
    if not isinstance(judgements, (list, tuple)):
        raise ValueError("judgements must be a list")
    ids = []
    for item in judgements:
        if not isinstance(item, dict) or sorted(item) != ["candidate_first", "candidate_second", "id"]:
            raise ValueError("bad judgement")
        if not isinstance(item["id"], str) or item["id"].strip() == "" or item["id"] in ids:
            raise ValueError("bad id")
        if any(not isinstance(item[k], str) or item[k] not in ok for k in ("candidate_first", "candidate_second")):
            raise ValueError("bad verdict")
        ids.append(item["id"])
    table = {("first", "second"): "win", ("second", "first"): "loss", ("tie", "tie"): "tie"}
    outcomes = {item["id"]: table.get((item["candidate_first"], item["candidate_second"]), "inconsistent")
                for item in judgements}
    counts = {key: 0 for key in ("win", "loss", "tie", "inconsistent")}
    for value in outcomes.values():
        counts[value] += 1
    n = counts["win"] + counts["loss"]
    if n == 0:
        return {"outcomes": outcomes, "counts": counts, "consistent": 0, "win_rate": None, "interval": None,
                "decision": "undecided"}
    p = counts["win"] / n
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    scale = 1 + z ** 2 / n
    mid = (p + z ** 2 / (2 * n)) / scale
    spread = z * m.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / scale
    low, high = max(0.0, mid - spread), min(1.0, mid + spread)
    decision = "candidate_better" if low > 0.5 else "baseline_better" if high < 0.5 else "undecided"
    return {"outcomes": outcomes, "counts": counts, "consistent": n, "win_rate": p, "interval": [low, high],
            "decision": decision}
'''


@pytest.mark.integration
def test_a_papermill_run_with_a_learners_exercise_records_that_step5_ran_it(tmp_path):
    """The notebook in cpu_smoke, with TODO 3's stub replaced by a correct learner implementation written
    differently from the reference: the keep-own cell keeps it, Step 5 runs it, the record says "learner"."""
    import json

    import nbformat

    from tools.course.runs.runner import run_chapter

    chapter_entry = find_chapter(CHAPTER_ID, REPO_ROOT)
    notebook = nbformat.read(chapter_entry.notebook_path(REPO_ROOT), as_version=4)
    cells = [cell for cell in notebook.cells if cell.metadata.get("course", {}).get("exercise") == "pairwise_win_rate"
             and "exercise" in cell.metadata.get("tags", [])]
    assert len(cells) == 1
    cells[0].source = LEARNER_WIN_RATE
    copy = tmp_path / "notebooks" / chapter_entry.notebook_path(REPO_ROOT).name
    copy.parent.mkdir()
    copy.write_text(nbformat.writes(notebook), encoding="utf-8")

    class CopiedChapter:
        id = chapter_entry.id

        @staticmethod
        def notebook_path(root):
            return copy

    outcome = run_chapter(REPO_ROOT, CopiedChapter, run_mode="cpu_smoke", label="learner-exercise",
                          results_dir=tmp_path / "results", output_dir=tmp_path / "out")
    assert outcome.status == "passed", outcome.failure
    records = list((tmp_path / "results").rglob(f"*{chapter.RECORD_STAGE}_learner-exercise.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text(encoding="utf-8"))
    assert record["mechanism"]["pairwise_win_rate"]["source"] == "learner"
    assert {record["mechanism"][name]["source"] for name in ("validate_preference_pairs", "split_by_prompt")} == \
        {"reference"}
    assert record["decision"]["verdict_flipped"] is True
    executed = (tmp_path / "out" / copy.name).read_text(encoding="utf-8")
    assert "Step 5 will run your pairwise_win_rate" in executed
