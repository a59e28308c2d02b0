"""Planted learner functions for the preference stages: a chapter's reference, or one of its mutants, built
from the notebook and `grading/mutants/` exactly as grading builds them, so a Step 5 test runs what a
learner with that mistake would pass through `step5_mechanism`."""

from __future__ import annotations

import pytest

from chapter_factory import REPO_ROOT

from tools.core.catalog import find_chapter
from tools.course.cells import cells_with_role, read_notebook
from tools.course.grader.build import load_mutants
from tools.course.layout import CourseLayout
from tools.experiments.contract import Mechanism


def chapter_functions(chapter_id: str, mutant: str | None = None) -> dict:
    """The chapter's reference functions (every name the reference cells define), with one mutant's function
    in place of its exercise's when `mutant` is given."""
    chapter = find_chapter(chapter_id, REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    namespace: dict = {}
    for _, cell in cells_with_role(notebook, "reference-solution"):
        exec(compile(cell.source, f"<{chapter.slug} reference>", "exec"), namespace)
    if mutant is not None:
        planted = {item.name: item for item in load_mutants(CourseLayout(REPO_ROOT).mutants(chapter.slug), notebook)}
        exec(compile(planted[mutant].source, f"<{chapter.slug} mutant {mutant}>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="session")
def mechanism_of():
    """`mechanism_of(chapter_id, names, mutant=None)`: a Mechanism of the chapter's functions `names`, the
    reference's ("reference"), or with the mutant's exercise function planted as the learner's ("learner")."""
    def build(chapter_id: str, names, mutant: str | None = None) -> Mechanism:
        functions = chapter_functions(chapter_id, mutant)
        planted = None
        if mutant is not None:
            chapter = find_chapter(chapter_id, REPO_ROOT)
            notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
            planted = next(item.exercise for item in load_mutants(CourseLayout(REPO_ROOT).mutants(chapter.slug),
                                                                  notebook) if item.name == mutant)
        return Mechanism({name: functions[name] for name in names},
                         {name: "learner" if name == planted else "reference" for name in names})

    return build
