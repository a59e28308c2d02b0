"""Tests of the grading build: chapter + hidden tests -> nbgrader source notebook."""

import subprocess
import sys

import pytest

from chapter_factory import REPO_ROOT, TOY_HIDDEN, make_toy_project, toy_notebook
from tools.core.catalog import load_catalog
from tools.course.grader.build import (
    BEGIN_HIDDEN,
    BEGIN_SOLUTION,
    build_source_notebook,
    build_sources,
    copy_similarity,
    load_mutants,
    parse_hidden_tests,
)
from tools.course.cells import read_notebook
from tools.errors import ConfigError


def grade_ids(notebook):
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells]


def test_solution_cells_hold_the_reference_body_in_place_of_the_placeholder(tmp_path):
    root = make_toy_project(tmp_path)
    source = build_source_notebook(root, load_catalog(root)[0])
    cell = next(c for c in source.cells if c.metadata["nbgrader"]["grade_id"] == "add_rates")
    assert cell.metadata["nbgrader"]["solution"] is True and cell.metadata["nbgrader"]["locked"] is False
    lines = cell.source.splitlines()
    begin = lines.index("    " + BEGIN_SOLUTION)
    assert "raise ValueError" in "\n".join(lines[begin:])
    assert lines[-1].strip().startswith('raise NotImplementedError("TODO 1')
    assert "# YOUR CODE HERE" not in cell.source


def test_graded_part_stops_before_the_reference_and_hidden_tests_follow_visible_ones(tmp_path):
    root = make_toy_project(tmp_path)
    source = build_source_notebook(root, load_catalog(root)[0])
    ids = grade_ids(source)
    assert ids.index("hidden_add_rates_rejects_nan") == ids.index("test_add_rates") + 1
    assert ids[-1] == "hidden_halve_odd_numbers"
    assert not any("reference" in grade_id or "stop" in grade_id for grade_id in ids)
    hidden = source.cells[ids.index("hidden_halve_odd_numbers")]
    assert hidden.metadata["nbgrader"]["points"] == 2 and BEGIN_HIDDEN in hidden.source
    assert hidden.metadata["course"]["hint"] == "halving is exact division."
    assert all(c.metadata["nbgrader"]["locked"] for c in source.cells if not c.metadata["nbgrader"]["solution"])


def test_stale_sources_are_reported_and_rebuilt(tmp_path):
    root = make_toy_project(tmp_path)
    chapters = load_catalog(root)
    assert build_sources(root, chapters, check=True) == ["grading/source/toy/toy.ipynb"]
    assert build_sources(root, chapters) == ["grading/source/toy/toy.ipynb"]
    assert build_sources(root, chapters, check=True) == []
    notebook = toy_notebook()
    notebook.cells[0].source += " (edited)"
    make_toy_project(tmp_path, notebook)
    assert build_sources(root, chapters, check=True) == ["grading/source/toy/toy.ipynb"]


@pytest.mark.parametrize("text,message", [
    ("# %% hidden exercise=add_rates points=1\n# hint: h\nassert True\n", "lacks name"),
    ("# %% hidden exercise=add_rates points=1 name=a\nassert True\n", "hint"),
    ("# %% hidden exercise=add_rates points=1 name=a\n# hint: h\nassert (\n", "does not parse"),
    ("x = 1\n# %% hidden exercise=add_rates points=1 name=a\n# hint: h\n", "before the first"),
    ("# %% hidden exercise=a points=1 name=a\n# hint: h\n# %% hidden exercise=a points=1 name=a\n# hint: h\n",
     "duplicate"),
])
def test_malformed_hidden_tests_are_refused(tmp_path, text, message):
    path = tmp_path / "h.py"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        parse_hidden_tests(path)


def test_hidden_tests_for_unknown_exercise_are_refused(tmp_path):
    root = make_toy_project(tmp_path, hidden="# %% hidden exercise=nope points=1 name=a\n# hint: h\nassert True\n")
    with pytest.raises(ConfigError, match="unknown exercise"):
        build_source_notebook(root, load_catalog(root)[0])


def test_a_hidden_test_that_reads_an_argument_after_the_call_is_refused(tmp_path):
    reads_after = ("# %% hidden exercise=halve points=1 name=reads_after\n# hint: h\n"
                   "values = [4.0]\nhalf = halve(values)\nassert half == values[0] / 2\n")
    root = make_toy_project(tmp_path, hidden=TOY_HIDDEN + reads_after)
    with pytest.raises(ConfigError, match=r"TOY, hidden test reads_after: line 3 compares a result of halve with "
                                          r"'values', read after line 2 passed it to halve \(as 'x'\)"):
        build_source_notebook(root, load_catalog(root)[0])
    before = reads_after.replace("half = halve(values)\nassert half == values[0] / 2",
                                 "expected = values[0] / 2\nhalf = halve(values)\nassert half == expected")
    root = make_toy_project(tmp_path / "fixed", hidden=TOY_HIDDEN + before)
    assert any("reads_after" in cell.source for cell in build_source_notebook(root, load_catalog(root)[0]).cells)


@pytest.mark.slow
def test_the_committed_grading_sources_are_up_to_date():
    completed = subprocess.run([sys.executable, "-m", "tools.course", "grading", "build", "--check"],
                               cwd=REPO_ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_edit_mutants_apply_to_the_reference_and_whole_ones_load_as_written(tmp_path):
    root = make_toy_project(tmp_path)
    mutants = {m.name: m for m in load_mutants(root / "grading/mutants/toy", read_notebook(root / "notebooks/toy.ipynb"))}
    assert "return a + b + 1" in mutants["off_by_one"].source
    assert mutants["off_by_one"].source.startswith("def add_rates(a, b):")
    assert "math.isfinite" in mutants["off_by_one"].source  # the rest of the reference is kept
    assert mutants["floor_division"].source.endswith("return x // 2")
    assert mutants["no_nan_check"].source.endswith("return a + b\n")  # a whole, different implementation


def test_a_whole_mutant_that_copies_the_reference_with_other_names_is_refused(tmp_path):
    renamed = ("import math\n\n\ndef add_rates(first, second):\n"
               "    if not (math.isfinite(first) and math.isfinite(second)):\n"
               "        raise ValueError('not finite')\n    return first + second + 1\n")
    root = make_toy_project(tmp_path, mutants={"renamed_copy": ("add_rates", "adds one", renamed)})
    with pytest.raises(ConfigError, match=r"renamed_copy.py: \d+% of its code shape is the reference's"):
        load_mutants(root / "grading/mutants/toy", read_notebook(root / "notebooks/toy.ipynb"))
    assert copy_similarity(renamed, renamed.replace("first", "a").replace("second", "b"), "add_rates") == 1.0


@pytest.mark.parametrize("edits,message", [
    ([("    return a - b", "    return 0")], "matches the reference 0 times"),
    ([], "has no edit"),
    ([("    return a + b", "    return a + b")], "unchanged"),
    ([("    return a + b", "    return (")], "does not parse"),
])
def test_broken_edit_mutants_are_refused(tmp_path, edits, message):
    root = make_toy_project(tmp_path, mutants={"bad": ("add_rates", "m", edits)})
    if not edits:
        (root / "grading/mutants/toy/bad.mutant").write_text("# mutant: bad\n# exercise: add_rates\n# mistake: m\n",
                                                              encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_mutants(root / "grading/mutants/toy", read_notebook(root / "notebooks/toy.ipynb"))


def test_unclosed_edit_is_refused(tmp_path):
    root = make_toy_project(tmp_path, mutants={})
    (root / "grading/mutants/toy/bad.mutant").write_text(
        "# mutant: bad\n# exercise: add_rates\n# mistake: m\n@@ replace\n    return a + b\n@@ with\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not closed"):
        load_mutants(root / "grading/mutants/toy", read_notebook(root / "notebooks/toy.ipynb"))
