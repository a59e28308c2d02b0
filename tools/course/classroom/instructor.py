"""The instructor's per-chapter nbgrader steps, runnable as pasted (no activated venv needed).

`release_assignment` turns the committed source into the learners' release; `regenerate_feedback`
rewrites every graded student's leak-free feedback from the course gradebook, e.g. after manual
grading changed a score. Class autograding itself is `tools.course.classroom.batch`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tools.core.catalog import Chapter
from tools.course.cells import read_notebook
from tools.course.classroom.batch import check_inputs, course_paths
from tools.course.classroom.feedback import (
    HtmlGuard,
    cell_results,
    course_secret_lines,
    exercises_of,
    grade_cells,
    write_student_feedback,
)
from tools.course.layout import NbgraderCourse
from tools.course.nbgrader_cli import course_id, gradebook_scores, run_nbgrader
from tools.errors import ConfigError


def release_assignment(root: Path, chapter: Chapter, course: Path, log_dir: Path) -> Path:
    """`nbgrader generate_assignment` for one chapter; return the released notebook's path."""
    check_inputs(root, chapter, course)
    log_dir.mkdir(parents=True, exist_ok=True)
    run_nbgrader(course, ["generate_assignment", chapter.slug, "--force"], log_dir / f"release_{chapter.slug}.log")
    return course_paths(course, chapter.slug)["release"]


@dataclass
class FeedbackRun:
    written: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


def _previous_limits(path: Path) -> dict | None:
    """The limits recorded in a student's earlier feedback JSON (regenerating does not re-run the notebook)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("limits")
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def regenerate_feedback(root: Path, chapter: Chapter, course: Path) -> FeedbackRun:
    """Rewrite `feedback/<student>/<slug>/` for every student with an autograded notebook."""
    slug = chapter.slug
    check_inputs(root, chapter, course)
    paths = course_paths(course, slug)
    if not paths["release"].is_file():
        raise ConfigError(f"{paths['release']} does not exist; release and autograde the chapter first")
    folders = NbgraderCourse(course)
    students = folders.autograded_students(slug)
    if not students:
        raise ConfigError(f"no autograded notebooks of {slug} under {folders.autograded_root}; "
                          f"run `python -m tools.course grading autograde --chapter {chapter.id}` first")
    source, release = read_notebook(paths["source"]), read_notebook(paths["release"])
    cells, exercises = grade_cells(source), exercises_of(source)
    secrets = course_secret_lines(root, chapter, source, release, read_notebook(chapter.notebook_path(root)))
    guard = HtmlGuard(release)
    run = FeedbackRun()
    for student in students:
        previous = folders.feedback_dir(student, slug) / f"{slug}.json"
        limits = _previous_limits(previous)
        with tempfile.TemporaryDirectory(prefix="feedback-") as temp:
            work = Path(temp)
            copy = NbgraderCourse(work).autograded(student, slug)
            copy.parent.mkdir(parents=True)
            shutil.copyfile(folders.autograded(student, slug), copy)
            results = cell_results(cells, gradebook_scores(course, slug, student))
            outcome = write_student_feedback(course, chapter, student, copy, work, cells, exercises, results, secrets,
                                             course_id(course), None, source=source, guard=guard)
        if outcome["written"]:
            if limits is not None:
                _keep_limits(Path(outcome["json"]), limits)
            run.written.append(outcome["html"])
        else:
            run.failed[student] = outcome["error"]
    return run


def _keep_limits(path: Path, limits: dict) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    record["limits"] = limits
    path.write_text(json.dumps(record, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
