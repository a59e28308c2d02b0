"""Planted learner functions for the Step 5 tests: a chapter's mutant (grading/mutants/<slug>/) turned into a
function a learner could have written, defined in a file so that `inspect.getsource` sees it as in a kernel."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from chapter_factory import REPO_ROOT

from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import load_mutants
from tools.course.layout import CourseLayout
from tools.experiments.contract import Mechanism

HEADER = "import math\n\nimport torch\n\n\n"


def mutant_function(chapter_id: str, mutant: str, folder: Path):
    """The exercise function of mutant `mutant` of the chapter, and the exercise's name."""
    chapter = find_chapter(chapter_id, REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    (found,) = [item for item in load_mutants(CourseLayout(REPO_ROOT).mutants(chapter.slug), notebook)
                if item.name == mutant]
    name = f"planted_{chapter.slug.replace('-', '_')}_{mutant}"
    path = Path(folder) / f"{name}.py"
    path.write_text(HEADER + found.source + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return found.exercise, getattr(module, found.exercise)


def learner_mechanism(chapter_id: str, mutant: str, folder: Path) -> Mechanism:
    """A Step 5 mechanism in which the learner's version of one exercise is the planted mutant."""
    exercise, function = mutant_function(chapter_id, mutant, folder)
    return Mechanism({exercise: function}, {exercise: "learner"})
