"""A loaded host still grades (issue 33, item 6): chapter 26's class with the default limits, beside CPU hogs.

With the cell limit of 30 s for its setup cells too, every submission of chapter 26 ended "not graded" on a
loaded 2-core host: the trusted grader's setup cells (the imports) ran past the limit, and that was not
counted as starvation. The setup cells now have their own budget (`Limits.setup_s`), and a setup timeout is
graded again. Here two honest submissions are graded with `--jobs 2` and the course's default limits while
`HOGS` processes spin beside the batch (on top of whatever else the host runs): both must be graded with
full marks (a second attempt is allowed only with the contention evidence it names). The wall time is
printed, never asserted; HANG_GUARD_S only stops a batch that hangs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from chapter_factory import REPO_ROOT
from class_factory import _notebook, _solution_ids, prepare_course

from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import reference_source

CHAPTER_SLUG = "26-qlora"
HOGS = 2
HANG_GUARD_S = 2400

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning"),
    pytest.mark.skipif(not (REPO_ROOT / "notebooks" / f"{CHAPTER_SLUG}.ipynb").is_file(), reason="chapter 26 not present"),
]


def test_the_chapter_26_class_grades_beside_cpu_hogs_with_the_default_limits(tmp_path):
    chapter = find_chapter(CHAPTER_SLUG, REPO_ROOT)
    course = tmp_path / "course"
    source, release = prepare_course(course, chapter)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    reference = {name: reference_source(notebook, name) for name in _solution_ids(release)}
    for student in ("s1", "s2"):
        write_notebook(_notebook(release, reference), course / "submitted" / student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"]) for _ in range(HOGS)]
    started = time.monotonic()
    try:
        completed = subprocess.run([sys.executable, "-m", "tools.course", "grading", "autograde", "--chapter",
                                    CHAPTER_SLUG, "--jobs", "2", "--course-dir", str(course), "--output-dir",
                                    str(tmp_path / "out"), "--no-progress"], cwd=REPO_ROOT, capture_output=True,
                                   text=True, timeout=HANG_GUARD_S, check=False)
    finally:
        for hog in hogs:
            hog.send_signal(signal.SIGKILL)
            hog.wait()
    print(f"\nchapter 26 beside {HOGS} CPU hogs: {time.monotonic() - started:.0f} s\n{completed.stdout}")
    record = json.loads((tmp_path / "out" / f"autograde_{CHAPTER_SLUG}.json").read_text(encoding="utf-8"))
    assert record["limits"]["cell_timeout_s"] == 30 and record["limits"]["notebook_timeout_s"] == 600
    full = sum(float(cell.metadata["nbgrader"]["points"]) for cell in source.cells
               if cell.metadata.get("nbgrader", {}).get("grade"))
    for outcome in record["outcomes"]:
        assert outcome["status"] == "graded" and outcome["score"] == full, (outcome["student"], outcome["reason"])
        if outcome["regraded"] is not None:
            assert "waited" in outcome["regraded"]["first_reason"] or "setup" in outcome["regraded"]["first_reason"]
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
