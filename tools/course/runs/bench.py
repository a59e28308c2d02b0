"""How long the course takes to run and to grade, per chapter: a benchmark, not a timed test.

`bench_chapter` measures, for one chapter, in throw-away folders:
- `dry_run_s`, `cpu_smoke_s`: one headless papermill run in each mode;
- `verify_*`: the fast `grading verify` (nbgrader for the pipeline proof, the oracle per mutant);
- `grading_*`: N copies of the reference submission graded three ways: plain `nbgrader autograde`
  (serial, no sandbox), then `grading autograde --jobs 1` and `--jobs 2` (sandboxed), with the
  ratios to plain nbgrader, the sandbox's own cost per submission, the CPU seconds of each, and
  where the `--jobs 1` run's time goes (`profile_jobs1`: the batch's steps, one submission's stages).
`bench_suite` runs the test suite with `--durations=0` and sums the time per test file.
Results are returned as dicts; the CLI writes them to `build/bench/` and prints a table.
"""

from __future__ import annotations

import copy
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tools.core.catalog import Chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import build_source_notebook, reference_source
from tools.course.layout import CourseLayout, NbgraderCourse
from tools.course.nbgrader_cli import run_nbgrader

BENCH_SCHEMA = "course-bench/v1"


def _timed(function, *args, **kwargs):
    started = time.perf_counter()
    value = function(*args, **kwargs)
    return value, round(time.perf_counter() - started, 2)


def _course_with_copies(root: Path, chapter: Chapter, folder: Path, copies: int) -> Path:
    """An nbgrader course holding the chapter's release and `copies` reference submissions."""
    course = NbgraderCourse(folder / "course")
    course.folder.mkdir(parents=True)
    shutil.copy(CourseLayout(root).config_template, course.config)
    write_notebook(build_source_notebook(root, chapter), course.source(chapter.slug))
    run_nbgrader(course.folder, ["generate_assignment", chapter.slug, "--force"])
    release = read_notebook(course.release(chapter.slug))
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    submission = copy.deepcopy(release)
    for cell in submission.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = reference_source(chapter_notebook, meta["grade_id"])
    for index in range(copies):
        write_notebook(submission, course.submission(f"s{index:03d}", chapter.slug))
    return course.folder


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended (the graders and their kernels)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed_cpu(function, *args, **kwargs):
    cpu = _cpu_seconds()
    value, seconds = _timed(function, *args, **kwargs)
    return value, seconds, round(_cpu_seconds() - cpu, 2)


def grading_profile(report) -> dict:
    """Where a class run's time goes: the batch's steps (seconds since its start) and, per stage of one
    submission, the median over the graded submissions (`Outcome.timings`)."""
    stages: dict[str, list[float]] = {}
    for outcome in report.graded:
        for name, seconds in outcome.timings.items():
            if seconds is not None:
                stages.setdefault(name, []).append(seconds)
    return {"batch": dict(report.timings),
            "submission_median": {name: round(statistics.median(values), 3) for name, values in stages.items()}}


def bench_grading(root: Path, chapter: Chapter, copies: int) -> dict:
    """Class grading as an instructor runs it (`classroom.benchmark`: plain `nbgrader autograde` +
    `generate_feedback` vs `grading autograde --jobs 1/2`, the boundary's cost per submission, a correct
    submission beside a CPU hog), plus the in-process timings below (`in_process`)."""
    from tools.course.classroom.benchmark import bench_class_grading, bench_cpu_hog

    return {**bench_class_grading(root, chapter, copies), "cpu_hog": bench_cpu_hog(root, chapter),
            "in_process": bench_grading_in_process(root, chapter, copies)}


def bench_grading_in_process(root: Path, chapter: Chapter, copies: int) -> dict:
    """Plain serial nbgrader vs the sandboxed class grader with 1 and 2 jobs, on `copies` submissions.

    Wall and CPU seconds of each (CPU: this process and its children, so the machine's other load
    does not count), and the profile of the `--jobs 1` run (`grading_profile`)."""
    from tools.course.classroom.batch import autograde_chapter

    with tempfile.TemporaryDirectory(prefix=f"bench-{chapter.slug}-") as temp:
        template = _course_with_copies(root, chapter, Path(temp) / "template", copies)
        timings, profile = {}, None
        plain = Path(temp) / "plain"
        shutil.copytree(template, plain)
        _, timings["plain_nbgrader_s"], timings["plain_cpu_s"] = _timed_cpu(
            run_nbgrader, plain, ["autograde", chapter.slug, "--force"])
        for jobs in (1, 2):
            course = Path(temp) / f"jobs{jobs}"
            shutil.copytree(template, course)
            report, timings[f"jobs{jobs}_s"], timings[f"jobs{jobs}_cpu_s"] = _timed_cpu(
                autograde_chapter, root, chapter, course=course, jobs=jobs, output_dir=Path(temp) / f"out{jobs}",
                show_progress=False)
            if not report.passed:
                raise RuntimeError(f"bench grading with {jobs} job(s) failed: {[o.reason for o in report.failures]}")
            profile = profile or grading_profile(report)
    plain_s = timings["plain_nbgrader_s"]
    return {
        "copies": copies,
        **timings,
        "plain_per_submission_s": round(plain_s / copies, 2),
        "jobs1_per_submission_s": round(timings["jobs1_s"] / copies, 2),
        "jobs2_per_submission_s": round(timings["jobs2_s"] / copies, 2),
        "jobs1_over_plain": round(timings["jobs1_s"] / plain_s, 2),
        "jobs2_over_plain": round(timings["jobs2_s"] / plain_s, 2),
        "sandbox_overhead_per_submission_s": round((timings["jobs1_s"] - plain_s) / copies, 2),
        "profile_jobs1": profile,
    }


def bench_chapter(root: Path, chapter: Chapter, *, copies: int = 6, grading: bool = True,
                  grading_only: bool = False, hostile: bool = False, attacks: list[str] | None = None,
                  ray: bool = False) -> dict:
    """Run and grade one chapter in throw-away folders; return the timings (`grading_only`: class grading;
    with `hostile`, the hostile-class comparison instead, `classroom.benchmark.bench_hostile_classes`)."""
    from tools.course.grader.verify import verify_chapter
    from tools.course.runs.runner import run_chapter

    result: dict = {"chapter": chapter.id}
    if grading_only and ray:
        from tools.course.classroom.benchmark import bench_ray_class

        return {**result, "ray": bench_ray_class(root, chapter, copies)}
    if grading_only and hostile:
        from tools.course.classroom.benchmark import bench_hostile_classes

        return {**result, "hostile": bench_hostile_classes(root, chapter, copies, attacks=attacks)}
    if grading_only:
        return {**result, "grading": bench_grading(root, chapter, copies)}
    with tempfile.TemporaryDirectory(prefix=f"bench-run-{chapter.slug}-") as temp:
        base = Path(temp)
        for mode in ("dry_run", "cpu_smoke"):
            outcome, seconds = _timed(run_chapter, root, chapter, run_mode=mode, label=f"bench_{mode}",
                                      results_dir=None if mode == "dry_run" else base / "results",
                                      output_dir=base / mode)
            result[f"{mode}_s"] = seconds
            result[f"{mode}_status"] = outcome.status
        report, seconds = _timed(verify_chapter, root, chapter, log_dir=base / "verify")
    result.update(verify_s=seconds, verify_passed=report.passed,
                  verify_nbgrader_per_submission_s=round(report.nbgrader_seconds / max(report.nbgrader_submissions, 1), 2),
                  oracle_per_planted_s=round(report.oracle_seconds / max(report.oracle_submissions, 1), 3),
                  planted=report.oracle_submissions)
    if grading:
        result["grading"] = bench_grading(root, chapter, copies)
    return result


_DURATION = re.compile(r"^([0-9.]+)s (?:call|setup|teardown)\s+(tests/[^:]+)")


def bench_suite(root: Path, workers: int = 2) -> dict:
    """The test suite's wall time and the seconds spent per test file (`pytest --durations=0`)."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", "-n", str(workers),
               "--dist", "loadgroup"]
    completed, wall = _timed(subprocess.run, command, cwd=root, capture_output=True, text=True)
    per_file: Counter = Counter()
    for line in completed.stdout.splitlines():
        match = _DURATION.match(line)
        if match:
            per_file[match.group(2)] += float(match.group(1))
    summary = next((line for line in reversed(completed.stdout.splitlines()) if " in " in line and "passed" in line), "")
    return {"wall_s": wall, "workers": workers, "returncode": completed.returncode, "summary": summary.strip("= "),
            "seconds_per_file": {name: round(value, 1) for name, value in per_file.most_common()}}


def class_grading_lines(item: dict) -> list[str]:
    """The end-to-end class-grading figures of one chapter (`classroom.benchmark`), when measured."""
    grading = item.get("grading") or {}
    if "plain_autograde_s" not in grading:
        return []
    hog = grading.get("cpu_hog") or {}
    lines = ["",
             (f"class grading {item['chapter']}, {grading['copies']} correct submissions, wall clock per command "
              f"(load average {grading['load_before']} before, {grading['load_after']} after):"),
             (f"  plain nbgrader: autograde {grading['plain_autograde_s']} s + generate_feedback "
              f"{grading['plain_feedback_s']} s = {grading['plain_s']} s"),
             f"  grading autograde --jobs 1: {grading['jobs1_s']} s ({grading['jobs1_over_plain']}x plain)",
             f"  grading autograde --jobs 2: {grading['jobs2_s']} s ({grading['jobs2_over_plain']}x plain; goal <= 0.6x)",
             (f"  the process boundary per submission: {grading['boundary_cost_per_submission_s']} s (median "
              f"{grading['submission_median_with_boundary_s']} s with, "
              f"{grading['submission_median_without_boundary_s']} s without)")]
    if hog:
        lines.append(f"  a correct submission beside a CPU hog: {hog['beside_over_alone']}x its time alone (goal <= 1.5x; "
                     f"alone {hog['alone_s']} s, beside {hog['beside_hog_s']} s; load average {hog['load_before']} "
                     f"before, {hog['load_after']} after)")
    return lines


def format_bench(chapters: list[dict], suite: dict | None) -> str:
    """The benchmark as fixed-width tables."""
    headers = ["chapter", "dry_run s", "cpu_smoke s", "verify s", "nbgrader s/sub", "oracle s/planted",
               "plain s/sub", "jobs1 s/sub", "jobs2 s/sub", "jobs2/plain", "sandbox s/sub"]
    rows = []
    for item in chapters:
        grading = item.get("grading") or {}
        rows.append([item["chapter"], *(item.get(key, "-") for key in (
                         "dry_run_s", "cpu_smoke_s", "verify_s", "verify_nbgrader_per_submission_s",
                         "oracle_per_planted_s")),
                     grading.get("plain_per_submission_s", "-"), grading.get("jobs1_per_submission_s", "-"),
                     grading.get("jobs2_per_submission_s", "-"), grading.get("jobs2_over_plain", "-"),
                     grading.get("sandbox_overhead_per_submission_s", "-")])
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)) for row in rows]
    lines += [line for item in chapters for line in class_grading_lines(item)]
    from tools.course.classroom.benchmark import hostile_lines, ray_lines

    lines += [line for item in chapters if item.get("hostile") for line in hostile_lines(item["hostile"])]
    lines += [line for item in chapters if item.get("ray") for line in ray_lines(item["ray"])]
    if suite:
        lines += ["", f"test suite: {suite['wall_s']:.0f} s wall with {suite['workers']} workers ({suite['summary']})"]
        lines += [f"  {seconds:8.1f} s  {name}" for name, seconds in suite["seconds_per_file"].items()]
    return "\n".join(lines)
