"""Feedback sanitizing and the leak guard, on the toy chapter (no nbgrader run)."""

from __future__ import annotations

import copy

import nbformat
import pytest

from chapter_factory import make_toy_project
from tools.course.classroom import feedback
from tools.core.catalog import load_catalog
from tools.course.grader.build import BEGIN_HIDDEN, END_HIDDEN, build_source_notebook


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = make_toy_project(tmp_path_factory.mktemp("toy"))
    source = build_source_notebook(root, load_catalog(root)[0])
    release = copy.deepcopy(source)
    for cell in release.cells:  # what nbgrader's ClearHiddenTests leaves of a hidden-test cell
        if BEGIN_HIDDEN in cell.source:
            lines = cell.source.splitlines()
            cell.source = "\n".join(lines[:lines.index(BEGIN_HIDDEN)] + lines[lines.index(END_HIDDEN) + 1:])
    return source, release


def autograded_from(source, *, extra_output: str | None = None):
    """A fake autograded notebook: the hidden halve test failed with a traceback quoting its code."""
    notebook = copy.deepcopy(source)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id == "hidden_halve_odd_numbers":
            cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="",
                                                   traceback=["----> 1 assert halve(3) == 1.5", "AssertionError"])]
        if grade_id == "test_halve" and extra_output:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=extra_output)]
    return notebook


def scores(source, failed=("hidden_halve_odd_numbers",)):
    return {cell.grade_id: (0.0 if cell.grade_id in failed else cell.points, cell.points)
            for cell in feedback.grade_cells(source)}


def test_secrets_are_the_hidden_lines_the_learner_has_not_seen(toy):
    source, release = toy
    secrets = feedback.secret_lines(source, release)
    assert "asserthalve(3)==1.5" in secrets and "add_rates(float('nan'),1)" in secrets
    assert not any("add_rates(1,2)" in secret for secret in secrets)  # visible test code is not secret
    assert all(len(secret) >= feedback.MIN_SECRET_CHARS for secret in secrets)


def test_sanitized_notebook_keeps_name_points_result_and_hint_only(toy):
    source, release = toy
    secrets = feedback.secret_lines(source, release)
    cells = feedback.grade_cells(source)
    results = feedback.cell_results(cells, scores(source))
    sanitized = feedback.sanitize_notebook(autograded_from(source), cells, results, secrets)
    hidden = next(c for c in sanitized.cells if c.metadata["nbgrader"]["grade_id"] == "hidden_halve_odd_numbers")
    assert hidden.outputs == [] and "FAILED (0 / 2 point(s))" in hidden.source
    assert "Hint: halving is exact division." in hidden.source and "odd_numbers" in hidden.source
    assert hidden.metadata == {"nbgrader": hidden.metadata["nbgrader"]}  # the source's course metadata is gone
    text = nbformat.writes(sanitized)
    assert not feedback.find_leaks(text.replace("\\n", "\n"), secrets)
    assert feedback.find_leaks(nbformat.writes(autograded_from(source)).replace("\\n", "\n"), secrets)


def test_outputs_that_quote_hidden_code_are_withheld(toy):
    source, release = toy
    secrets = feedback.secret_lines(source, release)
    cells = feedback.grade_cells(source)
    leaky = autograded_from(source, extra_output="found it: assert halve(3)  ==  1.5\n")
    sanitized = feedback.sanitize_notebook(leaky, cells, feedback.cell_results(cells, scores(source)), secrets)
    visible = next(c for c in sanitized.cells if c.metadata["nbgrader"]["grade_id"] == "test_halve")
    assert visible.outputs[0]["text"] == feedback.WITHHELD


def test_lines_the_student_wrote_are_not_secrets_for_that_student(toy):
    source, release = toy
    secrets = feedback.secret_lines(source, release)
    notebook = copy.deepcopy(source)
    solution = next(c for c in notebook.cells if c.metadata["nbgrader"].get("grade_id") == "halve")
    solution.source += "\n    assert halve(3) == 1.5  # my own check"
    assert "asserthalve(3)==1.5" not in feedback.secrets_for(secrets, notebook)
    assert "asserthalve(3)==1.5" in feedback.secrets_for(secrets, source)


def test_the_json_lists_exercises_and_tests_and_the_guard_refuses_a_leak(toy, tmp_path):
    source, release = toy
    secrets = feedback.secret_lines(source, release)
    cells = feedback.grade_cells(source)
    results = feedback.cell_results(cells, scores(source))
    record = feedback.feedback_record(chapter="TOY", slug="toy", student="ann", exercises=feedback.exercises_of(source),
                                      results=results, autograded=autograded_from(source), enforced=None)
    assert (record["score"], record["max_score"]) == (3.0, 5.0)
    halve = next(item for item in record["exercises"] if item["exercise"] == "halve")
    hidden = next(test for test in halve["tests"] if test["kind"] == "hidden")
    assert hidden == {"exercise": "halve", "kind": "hidden", "name": "odd_numbers", "points": 2.0, "score": 0.0,
                      "passed": False, "hint": "halving is exact division."}
    assert halve["passed"] is False and halve["max_score"] == 3.0
    html_path, json_path = feedback.write_feedback(tmp_path / "ok", "toy", "<p>fine</p>", record, secrets)
    assert html_path.is_file() and json_path.is_file()
    page = "<pre><span>assert</span> <span>halve</span>(<span>3</span>) == <span>1.5</span></pre>"
    with pytest.raises(feedback.FeedbackLeakError, match="hidden-test line"):
        feedback.write_feedback(tmp_path / "leaky", "toy", page, record, secrets)
    assert not (tmp_path / "leaky").exists()
