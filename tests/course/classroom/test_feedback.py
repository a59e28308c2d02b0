"""Feedback sanitizing and the leak guard, on the toy chapter (no nbgrader run)."""

from __future__ import annotations

import copy

import nbformat
import pytest
from chapter_factory import make_toy_project

from tools.core.catalog import load_catalog
from tools.course.classroom import feedback
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


# ---------------------------------------------------------------------------
# No script, no raw HTML from the learner, the hidden lines of every chapter
# ---------------------------------------------------------------------------

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
SCRIPT = "<script>alert('pwned')</script><h1>Score: 100 / 100</h1>"


def hostile_autograded(source):
    """An autograded notebook whose learner displayed HTML, JavaScript and SVG, added a Markdown cell with a
    script and a cell with forged nbgrader metadata, and edited a locked Markdown cell."""
    notebook = copy.deepcopy(source)
    solution = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "halve")
    solution.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": SCRIPT, "text/plain": "<IPython.HTML>"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(1)",
                                                     "image/svg+xml": "<svg onload='alert(1)'/>"}),
        nbformat.v4.new_output("display_data", data={"image/png": PNG}, metadata={"image/png": {"width": "1\" onerror=\"x"}}),
        nbformat.v4.new_output("display_data", data={"image/png": "not base64 <script>"}),
        nbformat.v4.new_output("execute_result", data={"text/markdown": "[x](javascript:alert(1))", "text/plain": "42"},
                               execution_count=3),
    ]
    added = nbformat.v4.new_markdown_cell(SCRIPT)
    forged = nbformat.v4.new_raw_cell(SCRIPT, metadata={"format": "text/html", "nbgrader": {
        "grade": True, "grade_id": "<script>x</script>", "points": 100, "solution": False, "locked": True}})
    notebook.cells[1:1] = [added, forged]
    heading = next(c for c in notebook.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader"))
    heading.source = SCRIPT
    notebook.metadata["title"] = SCRIPT
    notebook.metadata["language_info"] = {"name": "python", "pygments_lexer": SCRIPT}
    return notebook


def test_learner_html_script_and_forged_cells_reach_the_page_only_as_text(toy):
    source, release = toy
    cells = feedback.grade_cells(source)
    sanitized = feedback.sanitize_notebook(hostile_autograded(source), cells, feedback.cell_results(cells, scores(source)),
                                           feedback.secret_lines(source, release), source)
    text = nbformat.writes(sanitized)
    assert "text/html" not in text and "application/javascript" not in text and "image/svg+xml" not in text
    assert "text/markdown" not in text and "onerror" not in text and "not base64" not in text
    solution = next(c for c in sanitized.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "halve")
    assert [list(output.get("data", {})) for output in solution.outputs] == [["text/plain"], ["image/png"], ["text/plain"]]
    added = [c for c in sanitized.cells if c.source.startswith(feedback.LEARNER_CELL_NOTE)]
    assert len(added) == 2 and all(c.cell_type == "code" and c.metadata == {} for c in added)
    assert not any(c.cell_type in ("markdown", "raw") and "<script>" in c.source for c in sanitized.cells)
    assert sanitized.metadata == {"kernelspec": source.metadata["kernelspec"], "language_info": {"name": "python"}}


PAGE = "<html><head><script src='https://cdn/mathjax.js'></script><script>MathJax.config = 1;</script></head>" \
       "<body><pre>{body}</pre></body></html>"


@pytest.mark.parametrize("learner", [
    "<script>alert(1)</script>",
    "<img src=x onerror='alert(1)'>",
    "<a href=' javascript:alert(1)'>score</a>",
    "<iframe src='https://evil'></iframe>",
    "<script src='https://cdn/mathjax.js'></script>",  # a second copy of the template's own script
    "<svg><animate onbegin='alert(1)'/></svg>",
])
def test_the_guard_refuses_anything_active_beyond_the_templates_own(toy, tmp_path, learner):
    _, release = toy
    guard = feedback.HtmlGuard(release)
    guard.learn(PAGE.format(body="trusted"))
    assert guard.problems(PAGE.format(body="&lt;script&gt;alert(1)&lt;/script&gt; Score: 100 / 100")) == []
    assert guard.problems(PAGE.format(body=learner))
    record = {"student": "ann"}
    with pytest.raises(feedback.FeedbackUnsafeError, match="active element"):
        feedback.write_feedback(tmp_path / "ann", "toy", PAGE.format(body=learner), record, [], guard)
    assert not (tmp_path / "ann").exists()


def test_the_leak_scan_knows_the_hidden_lines_of_every_chapter(tmp_path):
    root = make_toy_project(tmp_path)
    other = root / "grading" / "hidden_tests" / "other-chapter.py"
    other.write_text("# %% hidden exercise=f points=1 name=a_secret_name\n# hint: a hint shown by design.\n"
                     "assert other_chapters_function(12345) == 'expected value'\n", encoding="utf-8")
    chapter = load_catalog(root)[0]
    source = build_source_notebook(root, chapter)
    secrets = feedback.course_secret_lines(root, chapter, source)
    assert "assertother_chapters_function(12345)=='expectedvalue'" in secrets
    assert "asserthalve(3)==1.5" in secrets
    assert not any("a_secret_name" in secret or "hintshownbydesign" in secret for secret in secrets)
    assert not any("add_rates(1,2)" in secret for secret in secrets)  # in the public chapter notebook


def test_an_autograded_notebook_past_the_limit_is_not_rendered(toy, tmp_path):
    source, _ = toy
    path = tmp_path / "toy.ipynb"
    path.write_text(nbformat.writes(source), encoding="utf-8")
    outcome = feedback.write_student_feedback(tmp_path, load_catalog(make_toy_project(tmp_path / "r"))[0], "ann", path,
                                              tmp_path, [], [], [], [], "course", None, max_bytes=100)
    assert outcome["written"] is False and "feedback not rendered" in outcome["error"]
