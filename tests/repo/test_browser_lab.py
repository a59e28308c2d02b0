"""The course as a learner and an instructor meet it: JupyterLab in headless Chromium.

One JupyterLab server (127.0.0.1, random token) and one browser serve both tests. The chapter is
opened from a copy under build/, so the notebook on disk is never touched; Lab's autosave is off
as well. Screenshots land in build/screenshots/.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from traitlets.config.loader import PyFileConfigLoader

import lab_browser
from tools.core.catalog import find_chapter

from chapter_factory import REPO_ROOT  # noqa: E402
COURSE_DIR = REPO_ROOT / "grading"
SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
CHAPTER_ID = "PT-RL-SYSTEM"
EXPECTED_TODOS = ("TODO 1", "TODO 2", "TODO 3")

MISSING = lab_browser.missing_prerequisite()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


@pytest.fixture(scope="module")
def chapter_notebook() -> tuple[Path, dict]:
    path = REPO_ROOT / find_chapter(CHAPTER_ID, REPO_ROOT).notebook
    return path, json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory, chapter_notebook):
    """(page, server, the chapter copy's path relative to the repo); everything stops on exit."""
    from playwright.sync_api import expect

    expect.set_options(timeout=30_000)
    work = tmp_path_factory.mktemp("lab")
    copies = REPO_ROOT / "build" / "browser-lab"
    copies.mkdir(parents=True, exist_ok=True)
    copy_dir = Path(tempfile.mkdtemp(prefix="run-", dir=copies))
    source, _ = chapter_notebook
    shutil.copy2(source, copy_dir / source.name)
    server = lab_browser.LabServer(REPO_ROOT, COURSE_DIR, work)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, copy_dir)
        stack.callback(_stop_server, server)
        server.start()
        page = stack.enter_context(lab_browser.chromium_page(work / "chromium-profile"))
        yield page, server, (copy_dir / source.name).relative_to(REPO_ROOT).as_posix()


def _stop_server(server: lab_browser.LabServer) -> None:
    problems = server.stop()
    assert not problems, f"JupyterLab did not stop cleanly: {problems}\n{server.log_tail()}"


def test_chapter_runs_all_cells_in_lab(lab, chapter_notebook):
    """Run > Run All Cells: the visible tests show the TODO stubs, the reference check passes."""
    from playwright.sync_api import expect

    page, server, rel_path = lab
    source, notebook = chapter_notebook
    bytes_before = source.read_bytes()
    started = time.monotonic()

    lab_browser.open_notebook(page, server, rel_path)
    expect(page.locator(f"{lab_browser.NOTEBOOK} .jp-Cell")).to_have_count(len(notebook["cells"]))

    state = lab_browser.run_all_cells(page)
    counts = lab_browser.execution_counts(state["prompts"])
    code_cells = lab_browser.code_cell_indices(notebook)
    assert sorted(counts) == code_cells
    not_run = [i for i in code_cells if counts[i] is None]
    assert not not_run, f"Run All Cells stopped before cells {not_run}; server log:\n{server.log_tail()}"
    in_order = [counts[i] for i in code_cells]
    assert in_order == sorted(in_order) and len(set(in_order)) == len(in_order), in_order

    visible_tests = lab_browser.cells_tagged(notebook, "visible-tests")
    assert len(visible_tests) == len(EXPECTED_TODOS), visible_tests
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for index, todo in zip(visible_tests, EXPECTED_TODOS):
        # The message is the traceback's last line: bring the end of the output on screen.
        output = lab_browser.output_area(page, index)
        lab_browser.bring_into_view(output, block="end")
        if todo == EXPECTED_TODOS[0]:
            page.screenshot(path=SCREENSHOTS / "pt-rl-system-lab.png")
        expect(output).to_be_in_viewport()
        expect(output).to_contain_text(re.compile(rf"NotImplementedError: {todo}\b"), use_inner_text=True)

    (check_index,) = lab_browser.cells_tagged(notebook, "reference-check")
    success_line = lab_browser.last_printed_literal("".join(notebook["cells"][check_index]["source"]))
    output = lab_browser.output_area(page, check_index)
    lab_browser.bring_into_view(output)
    page.screenshot(path=SCREENSHOTS / "pt-rl-system-lab-reference-check.png")
    expect(output).to_be_in_viewport()
    expect(output).to_contain_text(success_line, use_inner_text=True)
    assert "Traceback" not in output.inner_text(), output.inner_text()

    assert source.read_bytes() == bytes_before, "the chapter notebook on disk was modified"
    print(f"chapter opened and run in JupyterLab in {time.monotonic() - started:.1f} s")


def test_formgrader_loads_the_course(lab):
    """Nbgrader > Formgrader lists the assignments of grading/, with its course id and an exchange."""
    from playwright.sync_api import expect

    page, server, _ = lab
    if not page.url.startswith(server.base_url):
        page.goto(server.url("lab"))
    course_config = PyFileConfigLoader("nbgrader_config.py", path=str(COURSE_DIR)).load_config()
    assert course_config.CourseDirectory.course_id, "grading/nbgrader_config.py sets the course id"
    assignments = sorted(d.name for d in (COURSE_DIR / "source").glob("*") if any(d.glob("*.ipynb")))

    frame = lab_browser.open_formgrader(page)
    expect(frame.locator(".page-header h1", has_text="Manage Assignments")).to_be_visible()
    table = frame.locator("#main-table")
    expect(table).not_to_contain_text("Loading, please wait")
    names = frame.locator("#main-table tr td:first-child:not(.dataTables_empty)")
    expect(names).to_have_count(len(assignments))
    assert sorted(name.strip() for name in names.all_inner_texts()) == assignments
    expect(frame.locator("#warning-course-id")).to_have_count(0)
    expect(frame.locator("#warning-exchange")).to_have_count(0)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "formgrader-lab.png")
