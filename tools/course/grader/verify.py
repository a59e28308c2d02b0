"""Prove the graders' strength: planted submissions must score what their rule says.

For one chapter, in a throw-away copy of the course root, `nbgrader generate_assignment` makes
the release; submissions are made from it and from the reference:

* through `nbgrader autograde` (the pipeline proof): the released stub (0), the reference (full
  marks) and the stub with every other test cell edited into `assert True` and the rest deleted
  (0), so the release, the locked cells and the restored tests work;
* through the grading oracle (`tools.course.grader.oracle`, one forked process per submission):
  every planted wrong solution, which must lose points on its own exercise (only that exercise's
  test cells run for it: the matrix shows `·` for the others), and again combined with an in-place
  overwrite of its function's arguments (`degenerate.overwrite_plans`: each argument its contract lets it
  change alone, all the others together; a test that read its expected value from a mirrored argument
  would give it points); for every exercise, a body that
  raises on every input and one that returns a constant (`tools.course.grader.degenerate`), which
  must keep (near) nothing of their exercise's points (at most `NEAR_ZERO_SHARE`); plus the stub
  and the reference, whose per-cell scores must equal nbgrader's (a drift check on every chapter).

`full=True` (`grading verify --full`, before a release) grades every submission through nbgrader
as well (except the in-place overwrite variants: the trusted boundary that refuses an undeclared change
is the class grader's and the oracle's, while `nbgrader autograde` here runs the tests beside the learner's
code with no boundary, so only the oracle judges them), adds a tampered mutant and an endless loop, and
requires the oracle to agree with nbgrader test for test on every submission both graded.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from nbformat import NotebookNode

from tools.core.catalog import Chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import build_source_notebook, load_mutants, reference_source
from tools.course.grader.boundary import CHANGES_KEY, parameter_names
from tools.course.grader.degenerate import (
    DESCRIPTIONS,
    NEAR_ZERO_SHARE,
    OVERWRITE,
    degenerate_solutions,
    overwrite_plans,
    overwriting_solution,
)
from tools.course.grader.oracle import run_oracle
from tools.course.layout import CourseLayout, NbgraderCourse
from tools.course.nbgrader_cli import course_cell_timeout, gradebook_scores, run_nbgrader
from tools.errors import GradingError

MIN_MUTANTS = 5
ENDLESS_LOOP = "while True:  # a submission that never finishes\n    pass\n"
NBGRADER, ORACLE = "nbgrader", "oracle"

Scores = dict[str, tuple[float, float]]


@dataclass
class Submission:
    """A planted submission, the rule its score must satisfy, and who grades it."""

    student: str
    kind: str
    notebook: NotebookNode
    expectation: str
    target_exercise: str | None = None
    graders: tuple[str, ...] = (NBGRADER,)


@dataclass
class Outcome:
    student: str
    kind: str
    expectation: str
    graded_by: str
    per_exercise: dict[str, float | None]
    total: float | None
    max_total: float
    passed: bool
    detail: str = ""
    regraded: bool = False


@dataclass
class VerifyReport:
    chapter: str
    exercises: list[str]
    max_per_exercise: dict[str, float]
    mode: str = "fast"
    outcomes: list[Outcome] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    nbgrader_submissions: int = 0
    nbgrader_seconds: float = 0.0
    oracle_submissions: int = 0
    oracle_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(outcome.passed for outcome in self.outcomes) and not self.disagreements

    def to_json(self) -> dict:
        data = asdict(self)
        data["passed"] = self.passed
        data["nbgrader_seconds_per_submission"] = round(self.nbgrader_seconds / max(self.nbgrader_submissions, 1), 2)
        data["oracle_seconds_per_submission"] = round(self.oracle_seconds / max(self.oracle_submissions, 1), 3)
        return data


# ---------------------------------------------------------------------------
# Planted submissions
# ---------------------------------------------------------------------------

def _meta(cell: NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


def _solution_cells(notebook: NotebookNode) -> dict[str, NotebookNode]:
    return {_meta(cell)["grade_id"]: cell for cell in notebook.cells if _meta(cell).get("solution")}


def _grade_cells(notebook: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in notebook.cells if _meta(cell).get("grade")]


def _with_solutions(release: NotebookNode, sources: dict[str, str]) -> NotebookNode:
    notebook = copy.deepcopy(release)
    cells = _solution_cells(notebook)
    for name, source in sources.items():
        cells[name].source = source
    return notebook


def _edited_tests(notebook: NotebookNode) -> NotebookNode:
    tampered = copy.deepcopy(notebook)
    for index, cell in enumerate(_grade_cells(tampered)):
        cell.source = "pass" if index % 2 else "assert True  # edited test"
    return tampered


def _edited_and_deleted_tests(notebook: NotebookNode) -> NotebookNode:
    """Every other test cell edited into `assert True`, the others deleted: neither may earn a point."""
    tampered = copy.deepcopy(notebook)
    kept, tests_seen = [], 0
    for cell in tampered.cells:
        if _meta(cell).get("grade"):
            tests_seen += 1
            if tests_seen % 2 == 0:
                continue  # deleted
            cell.source = "assert True  # edited test"
        kept.append(cell)
    tampered.cells = kept
    return tampered


def solutions_of(notebook: NotebookNode) -> dict[str, str]:
    """`exercise -> source` of every solution cell of a submission notebook."""
    return {name: cell.source for name, cell in _solution_cells(notebook).items()}


def exercise_changes(chapter_notebook: NotebookNode) -> dict[str, frozenset[str]]:
    """`exercise -> the arguments its contract lets it change` (`metadata.course.changes` of its cell)."""
    return {cell.metadata["course"]["exercise"]: frozenset(cell.metadata["course"].get(CHANGES_KEY) or ())
            for cell in chapter_notebook.cells if "exercise" in cell.metadata.get("tags", [])}


def planted_submissions(release: NotebookNode, chapter_notebook: NotebookNode, mutants: list, *,
                        full: bool = False, endless_loop: bool = True) -> list[Submission]:
    """What verification grades, each with its rule and its graders (see the module docstring)."""
    exercises = list(_solution_cells(release))
    reference = {name: reference_source(chapter_notebook, name) for name in exercises}
    both = (NBGRADER, ORACLE)
    submissions = [
        Submission("stub", "released stub", copy.deepcopy(release), "zero", graders=both),
        Submission("reference", "reference solution", _with_solutions(release, reference), "full", graders=both),
        Submission("tampered_stub", "stub with test cells edited or deleted", _edited_and_deleted_tests(release),
                   "zero"),
    ]
    planted = []
    for mutant in mutants:
        if mutant.exercise not in exercises:
            raise GradingError(f"mutant {mutant.name} targets unknown exercise {mutant.exercise}")
        notebook = _with_solutions(release, {**reference, mutant.exercise: mutant.source})
        planted.append(Submission(f"mutant_{mutant.name}", f"mutant: {mutant.mistake}", notebook, "loses_points",
                                  mutant.exercise, graders=both if full else (ORACLE,)))
    submissions += planted
    changes = exercise_changes(chapter_notebook)
    for mutant in mutants:
        parameters = parameter_names(reference[mutant.exercise], mutant.exercise)
        for label, plan in overwrite_plans(parameters, changes.get(mutant.exercise, frozenset())).items():
            source = overwriting_solution(mutant.source, mutant.exercise, plan)
            notebook = _with_solutions(release, {**reference, mutant.exercise: source})
            names = ", ".join(parameter for _, parameter in plan)
            submissions.append(Submission(f"mutant_{mutant.name}+{OVERWRITE}_{label}",
                                          f"mutant {mutant.name}, then {names} overwritten in place", notebook,
                                          "loses_points", mutant.exercise,
                                          # "changed its inputs" is the boundary's (class grading, the oracle);
                                          # plain `nbgrader autograde` has none to compare with
                                          graders=(ORACLE,)))
    for exercise in exercises:
        for kind, source in degenerate_solutions(reference[exercise], exercise).items():
            notebook = _with_solutions(release, {**reference, exercise: source})
            submissions.append(Submission(f"{kind}_{exercise}", f"planted: {DESCRIPTIONS[kind]}", notebook,
                                          "near_zero", exercise, graders=both if full else (ORACLE,)))
    if full and planted:
        first = planted[0]
        submissions.append(Submission(f"tampered_{first.student}", "mutant with edited test cells",
                                      _edited_tests(first.notebook), f"same_as:{first.student}"))
    if full and endless_loop:
        submissions.append(endless_loop_submission(release))
    return submissions


def endless_loop_submission(release: NotebookNode) -> Submission:
    """The stub whose first exercise cell never finishes: the per-cell timeout must stop it."""
    looping = copy.deepcopy(release)
    first_solution = next(iter(_solution_cells(looping).values()))
    first_solution.source = ENDLESS_LOOP + first_solution.source
    return Submission("endless_loop", "stub whose first exercise cell never finishes", looping, "zero")


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
    if rule == "near_zero":
        target = submission.target_exercise
        kept = per_exercise[target]
        allowed = NEAR_ZERO_SHARE * max_per_exercise[target]
        return kept is not None and kept <= allowed, f"must keep <= {allowed:g} of {target}'s points"
    if rule == "loses_points":
        target = submission.target_exercise
        lost = per_exercise[target] is not None and per_exercise[target] < max_per_exercise[target]  # -1: lost early
        return lost and (total is None or total < max_total), f"must lose points on {target}"
    if rule.startswith("same_as:"):
        base = rule.split(":", 1)[1]
        return total == totals[base], f"must gain nothing over {base} ({totals[base]:g})"
    raise GradingError(f"unknown expectation {rule}")


def disagreements(nbgrader: dict[str, Scores], oracle: dict[str, Scores]) -> list[str]:
    """Every grade cell where the oracle's score differs from nbgrader's, for students both graded."""
    found = []
    for student in sorted(set(nbgrader) & set(oracle)):
        for cell in sorted(set(nbgrader[student]) | set(oracle[student])):
            ours, theirs = oracle[student].get(cell), nbgrader[student].get(cell)
            if ours != theirs:
                found.append(f"{student} {cell}: oracle {ours} vs nbgrader {theirs}")
    return found


# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------

@dataclass
class PreparedChapter:
    """A throw-away nbgrader course holding one chapter's source and release."""

    course: Path
    source: NotebookNode
    release: NotebookNode
    chapter_notebook: NotebookNode
    mutants: list


def prepare_course(root: Path, chapter: Chapter, course: Path, log_path: Path) -> PreparedChapter:
    """Copy the config, write the source notebook and run `nbgrader generate_assignment`."""
    layout, folders = CourseLayout(root), NbgraderCourse(course)
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    mutants = load_mutants(layout.mutants(chapter.slug), chapter_notebook)
    if len(mutants) < MIN_MUTANTS:
        raise GradingError(f"{chapter.id}: {len(mutants)} mutant(s) in {layout.mutants(chapter.slug)}, "
                           f"need >= {MIN_MUTANTS}")
    source = build_source_notebook(root, chapter)
    shutil.copy(layout.config_template, folders.config)
    write_notebook(source, folders.source(chapter.slug))
    run_nbgrader(course, ["generate_assignment", chapter.slug, "--force"], log_path)
    release = read_notebook(folders.release(chapter.slug))
    return PreparedChapter(course, source, release, chapter_notebook, mutants)


def autograde_planted(prepared: PreparedChapter, slug: str, submissions: list[Submission], log_path: Path,
                      cell_timeout_s: int | None = None) -> dict[str, Scores]:
    """Autograde `submissions` in one `nbgrader autograde` run (or, with a `cell_timeout_s` that
    replaces the course's, one run per student); return each student's cell scores."""
    if not submissions:
        return {}
    for submission in submissions:
        write_notebook(submission.notebook, NbgraderCourse(prepared.course).submission(submission.student, slug))
    if cell_timeout_s is None:
        run_nbgrader(prepared.course, ["autograde", slug, "--force"], log_path)
    else:
        for submission in submissions:
            run_nbgrader(prepared.course, ["autograde", slug, "--force", "--student", submission.student,
                                           f"--Execute.timeout={cell_timeout_s}"], log_path)
    return {submission.student: gradebook_scores(prepared.course, slug, submission.student)
            for submission in submissions}


TIME_LIMIT_ERRORS = ("CellTimeout", "submission timed out")


def oracle_planted(prepared: PreparedChapter, submissions: list[Submission], cell_timeout_s: int, *,
                   own_exercise_only: bool = False,
                   submission_timeout_s: float = 120.0) -> tuple[dict[str, Scores], set[str], set[str]]:
    """Oracle scores, the students graded only up to their first lost point, and the students a
    time limit stopped. With `own_exercise_only` a mutant runs only its own exercise's test cells
    (its rule concerns that exercise alone) and stops at the first that loses a point; a planted
    raising or constant body runs all of its own exercise's test cells (its rule counts what it
    keeps); every other submission runs all."""
    if not submissions:
        return {}, set(), set()
    own = [s for s in submissions if own_exercise_only and s.target_exercise and NBGRADER not in s.graders]
    results = run_oracle(prepared.source, {s.student: solutions_of(s.notebook) for s in submissions},
                         cell_timeout_s=cell_timeout_s, submission_timeout_s=submission_timeout_s,
                         only_exercise={s.student: s.target_exercise for s in own},
                         keep_going={s.student for s in own if s.expectation == "near_zero"})
    partial = {student for student, result in results.items() if result.stopped_at_first_loss}
    stopped = {student for student, result in results.items()
               if result.timed_out or any(error.startswith(TIME_LIMIT_ERRORS) for error in result.errors.values())}
    return {student: result.scores for student, result in results.items()}, partial, stopped


REGRADE_TIME_FACTOR = 10
"""A verdict must not depend on the machine's load: a submission whose verdict failed, whose score
a time limit cut, or on which the graders disagree is graded once more with every time limit this
many times longer, and the matrix says so. (The course's limit stays what the class is graded with;
an endless loop still scores 0 at either limit.)"""
ORACLE_SUBMISSION_TIMEOUT_S = 120.0


@dataclass
class Grades:
    """What the graders said about a set of submissions."""

    nbgrader: dict[str, Scores] = field(default_factory=dict)
    oracle: dict[str, Scores] = field(default_factory=dict)
    partial: set[str] = field(default_factory=set)
    stopped_by_time_limit: set[str] = field(default_factory=set)
    nbgrader_seconds: float = 0.0
    oracle_seconds: float = 0.0


def grade_submissions(prepared: PreparedChapter, slug: str, submissions: list[Submission], log_path: Path,
                      cell_timeout_s: int, *, full: bool, time_factor: int = 1) -> Grades:
    """Grade each submission by its graders, with the course's time limits times `time_factor`."""
    grades = Grades()
    by_nbgrader = [s for s in submissions if NBGRADER in s.graders]
    by_oracle = [s for s in submissions if ORACLE in s.graders]
    started = time.perf_counter()
    grades.nbgrader = autograde_planted(prepared, slug, by_nbgrader, log_path,
                                        cell_timeout_s * time_factor if time_factor != 1 else None)
    grades.nbgrader_seconds = time.perf_counter() - started
    started = time.perf_counter()
    grades.oracle, grades.partial, grades.stopped_by_time_limit = oracle_planted(
        prepared, by_oracle, cell_timeout_s * time_factor, own_exercise_only=not full,
        submission_timeout_s=ORACLE_SUBMISSION_TIMEOUT_S * time_factor)
    grades.oracle_seconds = time.perf_counter() - started
    return grades


def judge_submissions(report: VerifyReport, submissions: list[Submission], grades: Grades,
                      exercise_of: dict[str, str]) -> list[Outcome]:
    """Each submission's scores per exercise, judged by its rule."""
    max_total = sum(report.max_per_exercise.values())
    scored = {**grades.oracle, **grades.nbgrader}  # nbgrader's word counts where both graded
    totals = {student: sum(score for score, _ in cells.values()) for student, cells in scored.items()}
    outcomes = []
    for submission in submissions:
        cells = scored[submission.student]
        graded = {exercise_of.get(cell) for cell in cells}
        per_exercise = {name: sum(s for cell, (s, _) in cells.items() if exercise_of.get(cell) == name)
                        if name in graded else None for name in report.exercises}
        if None in per_exercise.values() or submission.student in grades.partial:
            totals[submission.student] = None  # only its own exercise was graded, up to its first lost point
            if submission.student in grades.partial:
                per_exercise[submission.target_exercise] = -1.0  # lost at least one point; the rest was not run
        passed, detail = _judge(submission, per_exercise, totals[submission.student], max_total,
                                report.max_per_exercise, totals)
        outcomes.append(Outcome(submission.student, submission.kind, submission.expectation,
                                "+".join(submission.graders), per_exercise, totals[submission.student],
                                max_total, passed, detail))
    return outcomes


def verify_chapter(root: Path, chapter: Chapter, *, full: bool = False, endless_loop: bool = True,
                   log_dir: Path | None = None, progress: Callable[[str], None] | None = None) -> VerifyReport:
    """Grade the planted submissions of `chapter` and judge every score.

    `endless_loop=False` leaves the endless-loop submission out of a full run (it waits for the
    whole per-cell timeout; one chapter proves it for the course). A submission whose verdict
    failed, whose score a time limit cut, or on which the graders disagree is graded once more with
    `REGRADE_TIME_FACTOR` times longer limits (`Outcome.regraded`), so the verdict does not depend
    on the machine's load."""
    say = progress or (lambda _: None)
    log_dir = log_dir or CourseLayout(root).grading_logs
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"verify_{chapter.slug}.log"
    log_path.write_text("", encoding="utf-8")
    cell_timeout_s = course_cell_timeout(CourseLayout(root).grading)
    with tempfile.TemporaryDirectory(prefix=f"verify-{chapter.slug}-") as temp:
        say(f"{chapter.id}: generate_assignment")
        prepared = prepare_course(root, chapter, Path(temp), log_path)
        submissions = planted_submissions(prepared.release, prepared.chapter_notebook, prepared.mutants, full=full,
                                          endless_loop=endless_loop)
        source = prepared.source
        exercise_of = {_meta(cell)["grade_id"]: cell.metadata.get("course", {}).get("exercise")
                       for cell in _grade_cells(source)}
        exercises = list(_solution_cells(source))
        by_nbgrader = [s for s in submissions if NBGRADER in s.graders]
        by_oracle = [s for s in submissions if ORACLE in s.graders]
        say(f"{chapter.id}: nbgrader autograde {len(by_nbgrader)}, oracle {len(by_oracle)} submissions")
        grades = grade_submissions(prepared, chapter.slug, submissions, log_path, cell_timeout_s, full=full)
        report = VerifyReport(chapter.id, exercises, {}, "full" if full else "fast",
                              nbgrader_submissions=len(by_nbgrader), nbgrader_seconds=round(grades.nbgrader_seconds, 2),
                              oracle_submissions=len(by_oracle), oracle_seconds=round(grades.oracle_seconds, 2))
        report.max_per_exercise = {name: sum(float(_meta(cell)["points"]) for cell in _grade_cells(source)
                                             if exercise_of[_meta(cell)["grade_id"]] == name) for name in exercises}
        report.outcomes = judge_submissions(report, submissions, grades, exercise_of)
        report.disagreements = disagreements(grades.nbgrader, grades.oracle)
        disagreeing = {item.split(" ", 1)[0] for item in report.disagreements}
        again = [s for s, o in zip(submissions, report.outcomes)
                 if not o.passed or s.student in grades.stopped_by_time_limit or s.student in disagreeing]
        if again:
            limit = cell_timeout_s * REGRADE_TIME_FACTOR
            say(f"{chapter.id}: grading {len(again)} submission(s) again with a {limit} s cell limit: "
                f"{', '.join(s.student for s in again)}")
            regraded = grade_submissions(prepared, chapter.slug, again, log_path, cell_timeout_s, full=full,
                                         time_factor=REGRADE_TIME_FACTOR)
            grades.nbgrader.update(regraded.nbgrader)
            grades.oracle.update(regraded.oracle)
            students = {s.student for s in again}
            grades.partial = (grades.partial - students) | regraded.partial
            report.outcomes = judge_submissions(report, submissions, grades, exercise_of)
            for outcome in report.outcomes:
                if outcome.student in students:
                    outcome.regraded = True
                    outcome.detail += f" (graded again, {limit} s per cell)"
            report.disagreements = disagreements(grades.nbgrader, grades.oracle)
            report.nbgrader_seconds = round(report.nbgrader_seconds + regraded.nbgrader_seconds, 2)
            report.oracle_seconds = round(report.oracle_seconds + regraded.oracle_seconds, 2)
    (log_dir / f"verify_{chapter.slug}.json").write_text(
        json.dumps(report.to_json(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return report


def _cell_text(score: float | None, maximum: float) -> str:
    if score is None:
        return "·"  # not run: a mutant is judged on its own exercise only
    if score < 0:
        return f"lost/{maximum:g}"  # lost a point; its remaining tests were not run
    return f"{score:g}/{maximum:g}"


def format_matrix(report: VerifyReport) -> str:
    """The verification matrix as a fixed-width table."""
    headers = ["submission", "graded by", *report.exercises, "total", "rule", "ok"]
    rows = []
    for outcome in report.outcomes:
        rows.append([outcome.student, outcome.graded_by,
                     *(_cell_text(outcome.per_exercise[name], report.max_per_exercise[name]) for name in report.exercises),
                     "·" if outcome.total is None else f"{outcome.total:g}/{outcome.max_total:g}", outcome.detail,
                     "PASS" if outcome.passed else "FAIL"])
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(value).ljust(width) for value, width in zip(headers, widths))]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(str(value).ljust(width) for value, width in zip(row, widths)) for row in rows)
    lines.extend(f"DISAGREE {item}" for item in report.disagreements)
    lines.append(f"{report.chapter} ({report.mode}): nbgrader {report.nbgrader_submissions} submissions in "
                 f"{report.nbgrader_seconds:.1f} s, oracle {report.oracle_submissions} in {report.oracle_seconds:.1f} s, "
                 f"{len(report.disagreements)} disagreement(s) -> {'PASS' if report.passed else 'FAIL'}")
    return "\n".join(lines)

