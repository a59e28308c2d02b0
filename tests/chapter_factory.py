"""Build small chapter notebooks in code, for tests of the template check, the grading build and verify."""

from __future__ import annotations

import copy
import shutil
import textwrap
from pathlib import Path

import nbformat

from tools.course.cells import write_notebook

REPO_ROOT = Path(__file__).resolve().parents[1]


def markdown(source: str, *tags: str, **course):
    cell = nbformat.v4.new_markdown_cell(textwrap.dedent(source).strip("\n"))
    _tag(cell, tags, course)
    return cell


def code(source: str, *tags: str, **course):
    cell = nbformat.v4.new_code_cell(textwrap.dedent(source).strip("\n"))
    _tag(cell, tags, course)
    return cell


def _tag(cell, tags, course):
    if tags:
        cell.metadata["tags"] = list(tags)
    if course:
        cell.metadata["course"] = dict(course)


def toy_cells() -> list:
    """A two-exercise chapter that follows the template."""
    return [
        markdown("# 玩具章节"),
        code('RUN_MODE = "dry_run"\nRUN_LABEL = "replace_with_unique_label"\nRESULTS_DIR = None', "parameters"),
        code("import math"),
        code('''
            def add_rates(a, b):
                """Sum of two finite rates."""
                # Reject non-finite input with ValueError.
                # YOUR CODE HERE
                raise NotImplementedError("TODO 1 add_rates: sum two finite rates")
            ''', "exercise", exercise="add_rates"),
        code('''
            def halve(x):
                """Half of x."""
                # YOUR CODE HERE
                raise NotImplementedError("TODO 2 halve: return x / 2")
            ''', "exercise", exercise="halve"),
        code('''
            def test_add_rates():
                assert add_rates(1, 2) == 3
                assert add_rates(0.5, 0.25) == 0.75
            test_add_rates()
            ''', "visible-tests", "raises-exception", exercise="add_rates", points=1),
        code('''
            def test_halve():
                assert halve(4) == 2
                assert halve(-1) == -0.5
            test_halve()
            ''', "visible-tests", "raises-exception", exercise="halve", points=1),
        markdown("🛑 STOP HERE", "stop-here"),
        code('''
            def add_rates(a, b):
                """Sum of two finite rates."""
                if not (math.isfinite(a) and math.isfinite(b)):
                    raise ValueError("rates must be finite")
                return a + b


            def halve(x):
                """Half of x."""
                return x / 2
            ''', "reference-solution"),
        code("test_add_rates()\ntest_halve()\nprint('reference ok')", "reference-check"),
    ]


def toy_notebook(cells=None):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = toy_cells() if cells is None else cells
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["course"] = {"schema_version": 1, "chapter_id": "TOY", "slug": "toy"}
    return notebook


TOY_CATALOG = '''
[[chapter]]
id = "TOY"
slug = "toy"
kind = "mechanism"
title_zh = "玩具"
title_en = "Toy"
status = "implemented"
'''

TOY_HIDDEN = '''
# %% hidden exercise=add_rates points=1 name=rejects_nan
# hint: non-finite rates are invalid input; finite ones are summed.
assert add_rates(2, 0.5) == 2.5
try:
    add_rates(float("nan"), 1)
except ValueError:
    pass
else:
    raise AssertionError("nan accepted")
# %% hidden exercise=halve points=2 name=odd_numbers
# hint: halving is exact division.
assert halve(3) == 1.5
'''

TOY_MUTANTS = {
    "no_nan_check": ("add_rates", "accepts NaN", "def add_rates(a, b):\n    return a + b\n"),
    "floor_division": ("halve", "uses floor division", [("    return x / 2", "    return x // 2")]),
    "always_three": ("add_rates", "hard-codes the visible answer", "def add_rates(a, b):\n    return 3\n"),
    "halve_plus": ("halve", "subtracts instead of dividing", [("    return x / 2", "    return x - 2")]),
    "raises": ("halve", "raises on every input", "def halve(x):\n    raise ValueError('x')\n"),
    # an edit of the reference instead of a whole implementation (written as <name>.mutant)
    "off_by_one": ("add_rates", "adds one too many", [("    return a + b", "    return a + b + 1")]),
}


def make_toy_project(root: Path, notebook=None, hidden: str = TOY_HIDDEN, mutants: dict | None = None) -> Path:
    """A minimal course root holding the toy chapter."""
    (root / "tools").mkdir(parents=True, exist_ok=True)
    (root / "tools" / "project_runtime.py").write_text("# marker\n", encoding="utf-8")
    (root / "notebooks").mkdir(exist_ok=True)
    (root / "notebooks" / "catalog.toml").write_text(TOY_CATALOG, encoding="utf-8")
    nbformat.write(toy_notebook() if notebook is None else notebook, str(root / "notebooks" / "toy.ipynb"))
    (root / "grading" / "hidden_tests").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "grading" / "nbgrader_config.py", root / "grading" / "nbgrader_config.py")
    (root / "grading" / "hidden_tests" / "toy.py").write_text(hidden, encoding="utf-8")
    mutant_dir = root / "grading" / "mutants" / "toy"
    mutant_dir.mkdir(parents=True, exist_ok=True)
    for name, (exercise, mistake, source) in (TOY_MUTANTS if mutants is None else mutants).items():
        header = f"# mutant: {name}\n# exercise: {exercise}\n# mistake: {mistake}\n"
        if isinstance(source, list):
            edits = "".join(f"@@ replace\n{old}\n@@ with\n{new}\n@@ end\n" for old, new in source)
            (mutant_dir / f"{name}.mutant").write_text(header + edits, encoding="utf-8")
        else:
            (mutant_dir / f"{name}.py").write_text(header + source, encoding="utf-8")
    return root


def submit(course: Path, student: str, release, sources: dict) -> None:
    """Write `student`'s submission of the toy chapter: the release with `sources` (grade_id -> source) filled in."""
    notebook = copy.deepcopy(release)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in sources:
            cell.source = sources[cell.metadata["nbgrader"]["grade_id"]]
    write_notebook(notebook, course / "submitted" / student / "toy" / "toy.ipynb")
