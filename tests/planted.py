"""Chapter functions for Step 5 tests: the notebook's reference implementations, and planted wrong ones (a
chapter mutant of `grading/mutants/<slug>/`), with the names the chapter's setup cell imports, wrapped as a
`Mechanism` the way a notebook passes the learner's functions to its stage."""

from __future__ import annotations

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import load_mutants, reference_source
from tools.course.layout import CourseLayout
from tools.experiments.contract import Mechanism


def references(chapter_id: str, names, namespace: dict) -> dict:
    """`{name: function}` of the notebook's reference implementations, defined in a copy of `namespace`."""
    notebook = read_notebook(find_chapter(chapter_id, REPO_ROOT).notebook_path(REPO_ROOT))
    scope = dict(namespace)
    for name in names:
        exec(reference_source(notebook, name), scope)
    return {name: scope[name] for name in names}


def mutant(chapter_id: str, name: str, namespace: dict):
    """The function a chapter mutant plants (its exercise's name), defined in a copy of `namespace`."""
    chapter = find_chapter(chapter_id, REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    (found,) = [item for item in load_mutants(CourseLayout(REPO_ROOT).mutants(chapter.slug), notebook)
                if item.name == name]
    scope = dict(namespace)
    exec(found.source, scope)
    return found.exercise, scope[found.exercise]


def learner_mechanism(functions: dict) -> Mechanism:
    """`functions` as a notebook passes the learner's: every one with source "learner"."""
    return Mechanism(dict(functions), {name: "learner" for name in functions})
