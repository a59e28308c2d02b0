"""The graders of every implemented chapter are proven through nbgrader (`grading verify`)."""

import re

import pytest

from chapter_factory import REPO_ROOT
from tools.course.catalog import implemented_chapters
from tools.course.cells import read_notebook
from tools.course.grading_build import hidden_tests_path, load_mutants, mutants_dir, parse_hidden_tests
from tools.course.grading_verify import format_matrix, verify_chapter

GRADED = [chapter for chapter in implemented_chapters(REPO_ROOT) if hidden_tests_path(REPO_ROOT, chapter).is_file()]


@pytest.mark.parametrize("chapter", GRADED, ids=[chapter.id for chapter in GRADED])
def test_grading_matrix_holds(chapter):
    report = verify_chapter(REPO_ROOT, chapter)
    print(format_matrix(report))
    assert report.passed, format_matrix(report)
    kinds = {outcome.student for outcome in report.outcomes}
    assert {"stub", "reference", "tampered_stub", "endless_loop"} <= kinds
    assert len([kind for kind in kinds if kind.startswith("mutant_")]) >= 5


@pytest.mark.parametrize("chapter", GRADED, ids=[chapter.id for chapter in GRADED])
def test_every_exercise_has_hidden_tests_and_mutants(chapter):
    hidden = parse_hidden_tests(hidden_tests_path(REPO_ROOT, chapter))
    mutants = load_mutants(mutants_dir(REPO_ROOT, chapter), read_notebook(REPO_ROOT / chapter.notebook))
    source = (REPO_ROOT / chapter.notebook).read_text(encoding="utf-8")
    exercises = set(re.findall(r'"exercise": "(\w+)"', source))
    assert exercises and exercises == {test.exercise for test in hidden}
    assert {mutant.exercise for mutant in mutants} <= exercises
