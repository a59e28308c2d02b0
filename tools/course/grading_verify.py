"""Prove the graders' strength by autograding planted submissions through nbgrader.

For one chapter, in a throw-away copy of the course root: generate the release with
`nbgrader generate_assignment`, write submissions made from it (the stub, the reference, each
planted wrong solution, tampered test cells, an endless loop), autograde them all with
`nbgrader autograde`, and compare each score with what it must be.
"""

from __future__ import annotations

import copy
import os
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from nbformat import NotebookNode

from tools.course.catalog import Chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grading_build import (
    GRADING_DIR,
    build_source_notebook,
    load_mutants,
    mutants_dir,
    reference_source,
)
from tools.errors import CourseError

MIN_MUTANTS = 5
ENDLESS_LOOP = "while True:  # a submission that never finishes\n    pass\n"


def venv_environment() -> dict:
    """The current environment with this interpreter's bin folder first on PATH (nbgrader runs `alembic`)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


class GradingError(CourseError):
    """nbgrader failed, or a planted submission scored what it must not."""


@dataclass
class Submission:
    """A planted submission and the rule its score must satisfy."""

    student: str
    kind: str
    notebook: NotebookNode
    expectation: str
    target_exercise: str | None = None


@dataclass
class Outcome:
    student: str
    kind: str
    expectation: str
    per_exercise: dict[str, float]
    total: float
    max_total: float
    passed: bool
    detail: str = ""


@dataclass
class VerifyReport:
    chapter: str
    exercises: list[str]
    max_per_exercise: dict[str, float]
    outcomes: list[Outcome] = field(default_factory=list)
    autograde_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(outcome.passed for outcome in self.outcomes)

    def to_json(self) -> dict:
        data = asdict(self)
        data["passed"] = self.passed
        data["seconds_per_submission"] = round(self.autograde_seconds / max(len(self.outcomes), 1), 2)
        return data


# ---------------------------------------------------------------------------
# Planted submissions
# ---------------------------------------------------------------------------

def _solution_cells(notebook: NotebookNode) -> dict[str, NotebookNode]:
    return {cell.metadata["nbgrader"]["grade_id"]: cell for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("solution")}


def _grade_cells(notebook: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]


def _with_solutions(release: NotebookNode, sources: dict[str, str]) -> NotebookNode:
    notebook = copy.deepcopy(release)
    cells = _solution_cells(notebook)
    for name, source in sources.items():
        cells[name].source = source
    return notebook


def _emptied_tests(notebook: NotebookNode) -> NotebookNode:
    tampered = copy.deepcopy(notebook)
    for index, cell in enumerate(_grade_cells(tampered)):
        cell.source = "pass" if index % 2 else "assert True  # edited test"
    return tampered


def planted_submissions(release: NotebookNode, chapter_notebook: NotebookNode, mutants: list) -> list[Submission]:
    """The stub, the reference, one per mutant, two tampered and one endless-loop submission."""
    exercises = list(_solution_cells(release))
    reference = {name: reference_source(chapter_notebook, name) for name in exercises}
    submissions = [
        Submission("stub", "released stub", copy.deepcopy(release), "zero"),
        Submission("reference", "reference solution", _with_solutions(release, reference), "full"),
    ]
    for mutant in mutants:
        if mutant.exercise not in exercises:
            raise GradingError(f"mutant {mutant.name} targets unknown exercise {mutant.exercise}")
        notebook = _with_solutions(release, {**reference, mutant.exercise: mutant.source})
        submissions.append(Submission(f"mutant_{mutant.name}", f"mutant: {mutant.mistake}", notebook,
                                      "loses_points", mutant.exercise))
    if mutants:
        first = submissions[2]
        submissions.append(Submission(f"tampered_{first.student}", "mutant with edited/emptied test cells",
                                      _emptied_tests(first.notebook), f"same_as:{first.student}"))
    submissions.append(Submission("tampered_stub", "stub with edited/emptied test cells",
                                  _emptied_tests(release), "zero"))
    looping = copy.deepcopy(release)
    first_solution = next(iter(_solution_cells(looping).values()))
    first_solution.source = ENDLESS_LOOP + first_solution.source
    submissions.append(Submission("endless_loop", "stub whose first exercise cell never finishes", looping, "zero"))
    return submissions


# ---------------------------------------------------------------------------
# nbgrader
# ---------------------------------------------------------------------------

def _nbgrader(course: Path, *args: str, log) -> None:
    command = [sys.executable, "-m", "nbgrader", *args]
    completed = subprocess.run(command, cwd=course, capture_output=True, text=True, check=False,
                               env=venv_environment())
    log.write(f"$ {' '.join(command)}\n{completed.stdout}{completed.stderr}\n")
    if completed.returncode != 0:
        tail = "\n".join((completed.stdout + completed.stderr).splitlines()[-15:])
        raise GradingError(f"`nbgrader {' '.join(args)}` exited {completed.returncode}:\n{tail}")


def _scores(course: Path, slug: str, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(slug, slug, student)
        return {grade.cell.name: (float(grade.score), float(grade.max_score)) for grade in submission.grades}


def _exercise_of_grade_cells(source: NotebookNode) -> dict[str, str]:
    return {cell.metadata["nbgrader"]["grade_id"]: cell.metadata.get("course", {}).get("exercise")
            for cell in _grade_cells(source)}


# ---------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------

def _judge(submission: Submission, per_exercise: dict[str, float], total: float, max_total: float,
           max_per_exercise: dict[str, float], totals: dict[str, float]) -> tuple[bool, str]:
    rule = submission.expectation
    if rule == "zero":
        return total == 0, "must score 0"
    if rule == "full":
        return total == max_total, "must score full marks"
    if rule == "loses_points":
        target = submission.target_exercise
        lost = per_exercise[target] < max_per_exercise[target]
        return lost and total < max_total, f"must lose points on {target}"
    if rule.startswith("same_as:"):
        base = rule.split(":", 1)[1]
        return total == totals[base], f"must gain nothing over {base} ({totals[base]:g})"
    raise GradingError(f"unknown expectation {rule}")


def verify_chapter(root: Path, chapter: Chapter, *, log_dir: Path | None = None,
                   progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Autograde the planted submissions of `chapter` and judge every score."""
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    mutants = load_mutants(mutants_dir(root, chapter), chapter_notebook)
    if len(mutants) < MIN_MUTANTS:
        raise GradingError(f"{chapter.id}: {len(mutants)} mutant(s) in {mutants_dir(root, chapter)}, need >= {MIN_MUTANTS}")
    source = build_source_notebook(root, chapter)
    log_dir = log_dir or root / "build" / "grading"
    log_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"verify-{chapter.slug}-") as temp, \
            open(log_dir / f"verify_{chapter.slug}.log", "w", encoding="utf-8") as log:
        course = Path(temp)
        shutil.copy(root / GRADING_DIR / "nbgrader_config.py", course / "nbgrader_config.py")
        write_notebook(source, course / "source" / chapter.slug / f"{chapter.slug}.ipynb")
        (progress or (lambda _: None))(f"{chapter.id}: generate_assignment")
        _nbgrader(course, "generate_assignment", chapter.slug, "--force", log=log)
        release = read_notebook(course / "release" / chapter.slug / f"{chapter.slug}.ipynb")
        submissions = planted_submissions(release, chapter_notebook, mutants)
        for submission in submissions:
            write_notebook(submission.notebook,
                           course / "submitted" / submission.student / chapter.slug / f"{chapter.slug}.ipynb")
        (progress or (lambda _: None))(f"{chapter.id}: autograde {len(submissions)} submissions")
        started = time.perf_counter()
        _nbgrader(course, "autograde", chapter.slug, "--force", log=log)
        elapsed = time.perf_counter() - started
        exercise_of = _exercise_of_grade_cells(source)
        exercises = list(_solution_cells(source))
        report = VerifyReport(chapter.id, exercises, {}, autograde_seconds=round(elapsed, 2))
        scored = {submission.student: _scores(course, chapter.slug, submission.student) for submission in submissions}
    any_scores = next(iter(scored.values()))
    report.max_per_exercise = {name: sum(m for cell, (_, m) in any_scores.items() if exercise_of[cell] == name)
                               for name in exercises}
    max_total = sum(report.max_per_exercise.values())
    totals = {student: sum(score for score, _ in cells.values()) for student, cells in scored.items()}
    for submission in submissions:
        cells = scored[submission.student]
        per_exercise = {name: sum(s for cell, (s, _) in cells.items() if exercise_of[cell] == name) for name in exercises}
        passed, detail = _judge(submission, per_exercise, totals[submission.student], max_total,
                                report.max_per_exercise, totals)
        report.outcomes.append(Outcome(submission.student, submission.kind, submission.expectation, per_exercise,
                                       totals[submission.student], max_total, passed, detail))
    (log_dir / f"verify_{chapter.slug}.json").write_text(
        json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return report


def format_matrix(report: VerifyReport) -> str:
    """The verification matrix as a fixed-width table."""
    headers = ["submission", *report.exercises, "total", "rule", "ok"]
    rows = []
    for outcome in report.outcomes:
        rows.append([outcome.student, *(f"{outcome.per_exercise[name]:g}/{report.max_per_exercise[name]:g}"
                                        for name in report.exercises),
                     f"{outcome.total:g}/{outcome.max_total:g}", outcome.detail, "PASS" if outcome.passed else "FAIL"])
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(value).ljust(width) for value, width in zip(headers, widths))]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(str(value).ljust(width) for value, width in zip(row, widths)) for row in rows)
    per = report.autograde_seconds / max(len(report.outcomes), 1)
    lines.append(f"{report.chapter}: {len(report.outcomes)} submissions autograded in {report.autograde_seconds:.1f} s "
                 f"({per:.1f} s each) -> {'PASS' if report.passed else 'FAIL'}")
    return "\n".join(lines)
