"""Where the course keeps its grading files: the one owner of every path under `grading/`.

nbgrader's own folders (`source/`, `release/`, `submitted/`, `autograded/`, `feedback/`, the gradebook)
and the course's additions (`hidden_tests/`, `mutants/`) are named here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

from tools.core.catalog import Chapter

GRADING_DIR = Path("grading")


def hidden_tests_path(root: Path, chapter: Chapter) -> Path:
    """`grading/hidden_tests/<slug>.py`: the chapter's hidden tests."""
    return root / GRADING_DIR / "hidden_tests" / f"{chapter.slug}.py"


def mutants_dir(root: Path, chapter: Chapter) -> Path:
    """`grading/mutants/<slug>/`: the chapter's planted wrong solutions."""
    return root / GRADING_DIR / "mutants" / chapter.slug


def source_notebook_path(root: Path, chapter: Chapter) -> Path:
    """`grading/source/<slug>/<slug>.ipynb`: the generated nbgrader source notebook."""
    return root / GRADING_DIR / "source" / chapter.slug / f"{chapter.slug}.ipynb"
