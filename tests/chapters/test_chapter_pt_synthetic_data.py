"""PT-SYNTHETIC-DATA's library: the simulated jobs, the curves and the fixed check the notebook runs."""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata

import matplotlib
import pytest

matplotlib.use("Agg")

from chapter_factory import REPO_ROOT
from tools.chapters import pt_synthetic_data as chapter
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.data.arithmetic import DEFAULT_TASK_SEED, PROMPT_TEMPLATE, build_task_pool, parse_integer_response
from tools.errors import ConfigError

EXERCISES = ("stamp_generation", "screen_overlap", "admit_by_verifier")


@pytest.fixture(scope="module")
def reference():
    """The notebook's reference implementations, run with the names the notebook's setup cell imports."""
    notebook = read_notebook(find_chapter("PT-SYNTHETIC-DATA", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"hashlib": hashlib, "json": json, "math": math, "unicodedata": unicodedata,
                 "parse_integer_response": parse_integer_response}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def test_prompt_key_is_the_formula_the_notebook_and_the_exercise_state(reference):
    variants = ["Compute 12 + 30.", "compute  12 + 30\uff0e", "Ｃｏｍｐｕｔｅ\t12 + 30.\n", "COMPUTE 12\u00a0+\u300030."]
    assert {chapter.prompt_key(text) for text in variants} == {"compute 12 + 30."}
    assert chapter.prompt_key("Straße") == chapter.prompt_key("STRASSE") == "strasse"
    assert chapter.prompt_key("ﬁnd") == "find"
    samples = [{"sample_id": f"s{index}", "prompt": text} for index, text in enumerate(variants + ["What is 12 + 30?"])]
    report = reference["screen_overlap"](samples, [])
    assert report["kept"] == ["s0", "s4"], "the exercise's reference groups exactly what prompt_key groups"


def test_simulated_teacher_is_seeded_and_refuses_unknown_styles():
    job = {"name": "j", "seed": 7, "per_operation": 3, "template": PROMPT_TEMPLATE, "teacher": "weak",
           "teacher_seed": 11}
    first, labels = chapter.run_generation_job(job)
    again, _ = chapter.run_generation_job(job)
    assert first == again and len(first) == 12
    assert [sample["sample_id"] for sample in first][:3] == ["j/add-0", "j/add-1", "j/add-2"]
    assert all("label" not in sample and sample["sample_id"] in labels for sample in first)
    assert all(sample["prompt"].startswith("Compute ") for sample in first)
    with pytest.raises(ConfigError, match="unknown teacher style"):
        chapter.run_generation_job({**job, "teacher": "perfect"})


def test_duplicates_grow_with_volume_and_the_evaluation_seed_leaks():
    fractions = chapter.duplicate_fraction_by_volume(7, [10, 400])
    assert set(fractions) == {"add", "sub", "mul", "floordiv"}
    assert all(0.0 <= value <= 1.0 for values in fractions.values() for value in values)
    assert fractions["mul"][1] > fractions["mul"][0]
    overlap = chapter.evaluation_overlap((DEFAULT_TASK_SEED, 101), [1, 2])
    assert overlap[DEFAULT_TASK_SEED][-1] == len(build_task_pool().tasks), "two per operation is the evaluation set"
    assert overlap[101] == [0, 0]


def test_fixed_check_funnels_add_up_and_decide_per_job(reference):
    results = chapter.run_fixed_check(*(reference[name] for name in EXERCISES))
    jobs = results["jobs"]
    assert list(jobs) == [job["name"] for job in chapter.JOBS]
    for job in jobs.values():
        counts = job["admission"]["counts"]
        assert job["generated"] == job["duplicate"] + job["contaminated"] + job["screened_in"]
        assert counts["total"] == job["screened_in"]
        assert counts["total"] == counts["admitted"] + counts["no_label"] + counts["not_integer"] + counts["wrong_answer"]
    decisions = {name: job["admission"]["decision"] for name, job in jobs.items()}
    assert decisions == {"careful-101": "accept", "bulk-103": "accept", "chatty-102": "tune",
                         "default-seed": "accept", "ime-template-101": "reject"}
    assert jobs["default-seed"]["contaminated"] > 0 and results["eval_hits"]
    assert jobs["ime-template-101"]["duplicate"] > 0, "the full-width template copy repeats careful-101"
    assert results["admitted_total"] == sum(job["admission"]["counts"]["admitted"] for job in jobs.values())


def test_fixed_check_sees_a_wrong_screen(reference):
    """The check is only as good as the functions it is given: de-duplicating before the contamination
    check lets the default-seed job's leaked problems through as kept or duplicate samples."""
    def screen_without_contamination(samples, eval_prompts):
        return reference["screen_overlap"](samples, [])

    results = chapter.run_fixed_check(reference["stamp_generation"], screen_without_contamination,
                                      reference["admit_by_verifier"])
    assert results["eval_hits"] == [] and results["jobs"]["default-seed"]["contaminated"] == 0


def test_record_body_table_and_figures(reference):
    results = chapter.run_fixed_check(*(reference[name] for name in EXERCISES))
    body = chapter.record_body(results)
    assert body["measurement"].startswith("none:")
    assert [job["name"] for job in body["inputs"]["jobs"]] == [job["name"] for job in chapter.JOBS]
    assert json.loads(json.dumps(body)) == body
    assert chapter.record_summary({"evidence_level": "cpu_smoke", **body})[1:] == chapter.funnel_table(results).splitlines()
    table = chapter.funnel_table(results)
    assert all(name in table for name in results["jobs"]) and "wrong_rate_above_max" in table
    for figure in (chapter.draw_funnel(results),
                   chapter.draw_duplicate_growth(chapter.duplicate_fraction_by_volume(7, [10, 20]), [10, 20], 7),
                   chapter.draw_evaluation_overlap(chapter.evaluation_overlap((101,), [1, 2]), [1, 2], 8)):
        assert figure.axes
        matplotlib.pyplot.close(figure)
