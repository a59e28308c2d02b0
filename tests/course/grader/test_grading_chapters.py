"""The graders of every implemented chapter hold (`grading verify`), and the fast oracle grades as nbgrader does."""

import re

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import implemented_chapters, select_chapters
from tools.course.cells import read_notebook
from tools.course.grader.build import hidden_tests_path, load_mutants, mutants_dir, parse_hidden_tests
from tools.course.grader.verify import format_matrix, verify_chapter

pytestmark = pytest.mark.integration

GRADED = [chapter for chapter in implemented_chapters(REPO_ROOT) if hidden_tests_path(REPO_ROOT, chapter).is_file()]
AGREEMENT_CHAPTERS = ["PT-RL-SYSTEM"]
"""Real chapters whose full planted matrix goes through nbgrader and the oracle in `make test`: one chapter
whose hidden tests pass torch tensors through the oracle's codec. The fast matrix of every chapter already
compares the two graders on the stub and the reference, and the toy chapter's full matrix
(test_grading_verify.py) compares them mutant by mutant on plain Python values; a second real chapter's full
matrix (33's took 353 s of a worker) proved the same again, so it runs with every other chapter's in
`make verify-full` before a release."""


@pytest.mark.parametrize("chapter", GRADED, ids=[chapter.id for chapter in GRADED])
def test_grading_matrix_holds(chapter, tmp_path):
    report = verify_chapter(REPO_ROOT, chapter, log_dir=tmp_path)
    print(format_matrix(report))
    assert report.passed, format_matrix(report)
    kinds = {outcome.student for outcome in report.outcomes}
    assert {"stub", "reference", "tampered_stub"} <= kinds
    assert len([kind for kind in kinds if kind.startswith("mutant_")]) >= 5


@pytest.mark.parametrize("chapter_id", AGREEMENT_CHAPTERS)
def test_the_oracle_agrees_with_nbgrader_test_for_test_on_the_full_matrix(chapter_id, tmp_path):
    chapter = select_chapters([chapter_id], REPO_ROOT)[0]
    report = verify_chapter(REPO_ROOT, chapter, full=True, endless_loop=False, log_dir=tmp_path)
    both = [outcome for outcome in report.outcomes if outcome.graded_by == "nbgrader+oracle"]
    # the in-place overwrite variants meet the trusted boundary, which plain nbgrader has not: the oracle alone
    overwriting = [outcome for outcome in report.outcomes if outcome.graded_by == "oracle"]
    assert overwriting and all("+overwrite_" in outcome.student for outcome in overwriting)
    assert len(both) + len(overwriting) == report.oracle_submissions and len(both) >= 7  # stub, reference, mutants
    assert report.disagreements == [], format_matrix(report)
    assert report.passed, format_matrix(report)


@pytest.mark.parametrize("chapter", GRADED, ids=[chapter.id for chapter in GRADED])
def test_every_exercise_has_hidden_tests_and_mutants(chapter):
    hidden = parse_hidden_tests(hidden_tests_path(REPO_ROOT, chapter))
    mutants = load_mutants(mutants_dir(REPO_ROOT, chapter), read_notebook(REPO_ROOT / chapter.notebook))
    source = (REPO_ROOT / chapter.notebook).read_text(encoding="utf-8")
    exercises = set(re.findall(r'"exercise": "(\w+)"', source))
    assert exercises and exercises == {test.exercise for test in hidden}
    assert {mutant.exercise for mutant in mutants} <= exercises
