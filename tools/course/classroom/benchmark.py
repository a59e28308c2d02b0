"""What class grading costs, measured as an instructor runs it: a benchmark, never a timed test.

`bench_class_grading` grades N copies of a correct submission four ways, each on its own copy of the
course, wall clock of each command: plain serial nbgrader (`nbgrader autograde`, then `nbgrader
generate_feedback`) and ours (`python -m tools.course grading autograde --jobs 1` and `--jobs 2`: grades,
feedback and class report, with every isolation and the grading boundary). The process boundary's own
cost per submission is the difference of the median per-submission time of `--jobs 1` runs with and
without it (`autograde_chapter(split_tests=False)`, a measurement switch only).

`bench_cpu_hog` grades one correct submission alone, then beside a submission whose kernel runs setsid
spinners, and compares the correct one's time.

Every figure comes with the host's load average before and after: on a shared machine the ratios move
with the load of others.
"""

from __future__ import annotations

import copy
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.core.catalog import Chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import build_source_notebook, reference_source
from tools.course.layout import CourseLayout, NbgraderCourse
from tools.course.nbgrader_cli import run_nbgrader, venv_environment

HOG = """import os
for _ in range(40):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
"""
"""A CPU hog: forty setsid spinners that live as long as its kernel."""


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def class_of_copies(root: Path, chapter: Chapter, folder: Path, copies: int, extra: dict | None = None) -> Path:
    """An nbgrader course holding the chapter's release and `copies` reference submissions (`s000`, ...);
    `extra` adds `student -> {exercise: source}` submissions on top of the reference."""
    course = NbgraderCourse(folder / "course")
    course.folder.mkdir(parents=True)
    shutil.copy(CourseLayout(root).config_template, course.config)
    write_notebook(build_source_notebook(root, chapter), course.source(chapter.slug))
    run_nbgrader(course.folder, ["generate_assignment", chapter.slug, "--force"])
    release = read_notebook(course.release(chapter.slug))
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    reference = {cell.metadata["nbgrader"]["grade_id"]: reference_source(chapter_notebook, cell.metadata["nbgrader"]["grade_id"])
                 for cell in release.cells if cell.metadata.get("nbgrader", {}).get("solution")}
    students = {f"s{index:03d}": reference for index in range(copies)}
    students.update({student: {**reference, **sources} for student, sources in (extra or {}).items()})
    for student, sources in students.items():
        submission = copy.deepcopy(release)
        for cell in submission.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in sources:
                cell.source = sources[grade_id]
        write_notebook(submission, course.submission(student, chapter.slug))
    return course.folder


def _timed_command(command: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=venv_environment())
    seconds = round(time.perf_counter() - started, 2)
    if completed.returncode != 0:
        raise RuntimeError(f"`{' '.join(command[2:])}` exited {completed.returncode}: {completed.stdout[-800:]}"
                           f"{completed.stderr[-800:]}")
    return seconds


def _ours(root: Path, chapter: Chapter, course: Path, jobs: int, out: Path) -> float:
    return _timed_command([sys.executable, "-m", "tools.course", "grading", "autograde", "--chapter", chapter.slug,
                           "--course-dir", str(course), "--jobs", str(jobs), "--output-dir", str(out),
                           "--no-progress"], root)


def _median_submission_seconds(report) -> float:
    return round(statistics.median(outcome.seconds for outcome in report.graded), 2)


def bench_class_grading(root: Path, chapter: Chapter, copies: int = 6) -> dict:
    """Plain nbgrader vs ours (`--jobs 1`, `--jobs 2`) end to end, and the boundary's cost (module docstring)."""
    from tools.course.classroom.batch import autograde_chapter

    result: dict = {"copies": copies, "load_before": load_average()}
    with tempfile.TemporaryDirectory(prefix=f"bench-class-{chapter.slug}-") as temp:
        template = class_of_copies(root, chapter, Path(temp) / "template", copies)

        def fresh(name: str) -> Path:
            course = Path(temp) / name
            shutil.copytree(template, course)
            return course

        plain = fresh("plain")
        nbgrader = [sys.executable, "-m", "nbgrader"]
        result["plain_autograde_s"] = _timed_command([*nbgrader, "autograde", chapter.slug, "--force"], plain)
        result["plain_feedback_s"] = _timed_command([*nbgrader, "generate_feedback", chapter.slug, "--force"], plain)
        result["plain_s"] = round(result["plain_autograde_s"] + result["plain_feedback_s"], 2)
        for jobs in (1, 2):
            result[f"jobs{jobs}_s"] = _ours(root, chapter, fresh(f"jobs{jobs}"), jobs, Path(temp) / f"out{jobs}")
        medians = {}
        for split in (True, False):
            report = autograde_chapter(root, chapter, course=fresh(f"split{split}"), jobs=1, show_progress=False,
                                       output_dir=Path(temp) / f"split-out{split}", split_tests=split)
            if not report.passed:
                raise RuntimeError(f"bench grading (boundary {split}) failed: {[o.reason for o in report.failures]}")
            medians[split] = _median_submission_seconds(report)
    result["load_after"] = load_average()
    plain_s = result["plain_s"]
    result.update(
        plain_per_submission_s=round(plain_s / copies, 2),
        jobs1_per_submission_s=round(result["jobs1_s"] / copies, 2),
        jobs2_per_submission_s=round(result["jobs2_s"] / copies, 2),
        jobs1_over_plain=round(result["jobs1_s"] / plain_s, 2),
        jobs2_over_plain=round(result["jobs2_s"] / plain_s, 2),
        sandbox_overhead_per_submission_s=round((result["jobs1_s"] - plain_s) / copies, 2),
        submission_median_with_boundary_s=medians[True],
        submission_median_without_boundary_s=medians[False],
        boundary_cost_per_submission_s=round(medians[True] - medians[False], 2),
    )
    return result


def bench_cpu_hog(root: Path, chapter: Chapter, repeats: int = 2) -> dict:
    """The time of one correct submission graded alone and graded beside a CPU hog (`HOG` at the top of the
    first exercise), `repeats` times each; the ratio of the medians."""
    from tools.course.classroom.batch import autograde_chapter

    result: dict = {"load_before": load_average(), "alone_s": [], "beside_hog_s": []}
    with tempfile.TemporaryDirectory(prefix=f"bench-hog-{chapter.slug}-") as temp:
        first = None
        for repeat in range(repeats):
            alone = class_of_copies(root, chapter, Path(temp) / f"alone{repeat}", 1)
            report = autograde_chapter(root, chapter, course=alone, jobs=1, show_progress=False,
                                       output_dir=Path(temp) / f"alone-out{repeat}")
            result["alone_s"].append(report.outcomes[0].seconds)
            if first is None:
                source = read_notebook(NbgraderCourse(alone).source(chapter.slug))
                first = next(cell.metadata["nbgrader"]["grade_id"] for cell in source.cells
                             if cell.metadata.get("nbgrader", {}).get("solution"))
                reference = reference_source(read_notebook(chapter.notebook_path(root)), first)
            # "a_hog" sorts first: the hog's kernel starts first and spins while the correct one is graded
            beside = class_of_copies(root, chapter, Path(temp) / f"beside{repeat}", 1,
                                     extra={"a_hog": {first: HOG + reference}})
            report = autograde_chapter(root, chapter, course=beside, jobs=2, show_progress=False,
                                       output_dir=Path(temp) / f"beside-out{repeat}")
            honest = next(outcome for outcome in report.outcomes if outcome.student == "s000")
            hog = next(outcome for outcome in report.outcomes if outcome.student == "a_hog")
            result["beside_hog_s"].append(honest.seconds)
            result.setdefault("hog_cpu_seconds", []).append(
                ((hog.enforced or {}).get("cgroup") or {}).get("usage", {}).get("cpu_seconds"))
            result.setdefault("honest_beside_hog_score", []).append(honest.score)
    result["load_after"] = load_average()
    result["beside_over_alone"] = round(statistics.median(result["beside_hog_s"]) / statistics.median(result["alone_s"]), 2)
    return result
