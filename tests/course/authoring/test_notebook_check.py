"""Tests of `python -m tools.course check`: every template rule names the offending cell."""

import subprocess
import sys

import nbformat
import pytest

from chapter_factory import REPO_ROOT, code, make_toy_project, toy_cells, toy_notebook
from tools.course.authoring.check import check_course


def problems_for(tmp_path, cells=None, notebook=None):
    root = make_toy_project(tmp_path, notebook if notebook is not None else toy_notebook(cells))
    return [str(problem) for problem in check_course(root)]


def test_the_toy_chapter_follows_the_template(tmp_path):
    assert problems_for(tmp_path) == []


def test_the_course_notebooks_follow_the_template():
    completed = subprocess.run([sys.executable, "-m", "tools.course", "check"], cwd=REPO_ROOT,
                               capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def _mutate(index, change):
    cells = toy_cells()
    change(cells[index])
    return cells


@pytest.mark.parametrize("description,cells,expected", [
    ("stored output", _mutate(2, lambda c: c.update(execution_count=3)), "cell 2 [code] 'import math'"),
    ("unknown tag", _mutate(5, lambda c: c.metadata.update(tags=["visible-test"])), "unknown tag"),
    ("missing raises-exception", _mutate(5, lambda c: c.metadata.update(tags=["visible-tests"])), "raises-exception"),
    ("duplicate exercise id", _mutate(4, lambda c: c.metadata["course"].update(exercise="add_rates")), "already used"),
    ("no placeholder", _mutate(3, lambda c: setattr(c, "source", c.source.replace("    # YOUR CODE HERE\n", ""))),
     "YOUR CODE HERE"),
    ("no stub raise", _mutate(4, lambda c: setattr(c, "source", "def halve(x):\n    # YOUR CODE HERE\n    return 0")),
     "must end with"),
    ("zero points", _mutate(6, lambda c: c.metadata["course"].update(points=0)), "points"),
    ("nbgrader marker", _mutate(8, lambda c: setattr(c, "source", "### BEGIN SOLUTION\n" + c.source)), "nbgrader marker"),
    ("mode default", _mutate(1, lambda c: setattr(c, "source", c.source.replace("dry_run", "real_gpu"))), "dry_run"),
])
def test_each_rule_names_the_offending_cell(tmp_path, description, cells, expected):
    problems = problems_for(tmp_path, cells)
    assert problems, description
    assert any(expected in problem for problem in problems), problems
    assert all(problem.startswith("notebooks/toy.ipynb: ") for problem in problems)


def test_two_parameters_cells_are_refused(tmp_path):
    cells = toy_cells()
    cells.insert(2, code("X = 1", "parameters"))
    assert any("exactly one 'parameters' cell" in p for p in problems_for(tmp_path, cells))


def test_reference_must_define_every_exercise(tmp_path):
    cells = toy_cells()
    cells[8].source = cells[8].source.split("\n\n\ndef halve")[0]
    assert any("must define 'halve' exactly once" in p for p in problems_for(tmp_path, cells))


def test_missing_kernelspec_and_uncatalogued_notebook(tmp_path):
    notebook = toy_notebook()
    del notebook.metadata["kernelspec"]
    problems = problems_for(tmp_path, notebook=notebook)
    assert any("kernelspec" in p for p in problems)
    nbformat.write(toy_notebook(), str(tmp_path / "notebooks" / "stray.ipynb"))
    assert any("stray.ipynb" in str(p) and "catalog" in str(p) for p in check_course(tmp_path))


def test_cli_exit_code_is_one_on_problems(tmp_path, monkeypatch):
    cells = toy_cells()
    cells[2].execution_count = 1
    root = make_toy_project(tmp_path, toy_notebook(cells))
    completed = subprocess.run([sys.executable, "-m", "tools.course", "check"], cwd=root / "notebooks",
                               capture_output=True, text=True, env={**__import__("os").environ,
                                                                    "COURSE_PROJECT_ROOT": str(root)})
    assert completed.returncode == 1
    assert "cell 2" in completed.stdout
