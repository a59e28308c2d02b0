"""What class grading costs, measured as an instructor runs it: a benchmark, never a timed test.

`bench_class_grading` grades N copies of a correct submission four ways, each on its own copy of the
course, wall clock of each command: plain serial nbgrader (`nbgrader autograde`, then `nbgrader
generate_feedback`) and ours (`python -m tools.course grading autograde --jobs 1` and `--jobs 2`: grades,
feedback and class report, with every isolation and the grading boundary). The process boundary's own
cost per submission is the difference of the median per-submission time of `--jobs 1` runs with and
without it (`autograde_chapter(split_tests=False)`, a measurement switch only).

`bench_cpu_hog` grades one correct submission alone, then beside a submission whose kernel runs setsid
spinners, and compares the correct one's time.

`bench_hostile_classes` grades an honest class (N correct submissions, `--jobs 2`), then the same class beside
each attack of issue 33 (`ATTACKS`, planted on the chapter's first exercise), and reports each class's wall
and CPU seconds, what the attacker scored and spent, whether every honest submission kept full marks, and
the grading's own CPU seconds per submission of the honest class (kernel, trusted grader, worker, batch).

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


def class_of_copies(root: Path, chapter: Chapter, folder: Path, copies: int, extra: dict | None = None,
                    added: dict | None = None, files: dict | None = None) -> Path:
    """An nbgrader course holding the chapter's release and `copies` reference submissions (`s000`, ...);
    `extra` adds `student -> {exercise: source}` submissions on top of the reference, `added` appends cells
    (`student -> [cell]`) and `files` puts files beside a student's notebook (`student -> {name: text}`)."""
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
        submission.cells += copy.deepcopy((added or {}).get(student, []))
        write_notebook(submission, course.submission(student, chapter.slug))
        for name, text in (files or {}).get(student, {}).items():
            (course.submission(student, chapter.slug).parent / name).write_text(text, encoding="utf-8")
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


# ---------------------------------------------------------------------------
# A hostile class: the attacks of issue 33, against any chapter
# ---------------------------------------------------------------------------

def _wrapper(name: str, before: str) -> str:
    """Source that wraps the learner's own `name` defined above it: `before` runs first in every call."""
    return (f"\n\n_own_{name} = {name}\n\n\ndef {name}(*args, **kwargs):\n"
            + "".join(f"    {line}\n" for line in before.splitlines()) + f"    return _own_{name}(*args, **kwargs)\n")


DISPLAY_LOG = """
import threading, time
from IPython.display import display
_handle = display("a progress bar", display_id=True)
_seen = []
def _report():
    while True:
        time.sleep(0.5)
        if _seen:
            print("LOGGED: " + _seen[-1][:200], flush=True)
threading.Thread(target=_report, daemon=True).start()
"""
DISPLAY_CAP = """
from IPython.display import display, update_display
for _ in range(200):
    display("x", display_id="one-id")
update_display("y" * 2 ** 20, display_id="one-id")
"""
HUGE_REPLY = """
import struct
import tools.course.classroom.learner_server as _server
_tree = b'{"list":[' + b'{"int":"1"},' * 300_000 + b'{"int":"1"}]}'
_server.serve_request = lambda payload, namespace, limit=None: struct.pack(">QQ", len(_tree), 0) + _tree
"""
HARDENING_PROBE = """
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
print("unshare(CLONE_NEWUSER):", _libc.unshare(0x10000000), os.strerror(ctypes.get_errno()))
print("/etc:", len(os.listdir("/etc")), "entries; /proc/net/tcp:", len(open("/proc/net/tcp").readlines()) - 1, "sockets")
"""


def attack_plants(root: Path, chapter: Chapter) -> dict[str, dict]:
    """`attack -> {"sources": {exercise: source}, "added": [cells], "files": {name: text}}`, each planted on the
    chapter's first exercise (see `tests/course/classroom/test_hostile_class_round_two.py` for what each does)."""
    import nbformat

    from tools.course.grader.build import load_mutants
    from tools.course.grader.degenerate import overwriting_solution
    from tools.course.grader.boundary import parameter_names

    notebook = read_notebook(chapter.notebook_path(root))
    source = build_source_notebook(root, chapter)
    exercises = [cell.metadata["nbgrader"]["grade_id"] for cell in source.cells
                 if cell.metadata.get("nbgrader", {}).get("solution")]
    first = exercises[0]
    own = reference_source(notebook, first)
    mutant = next(m for m in load_mutants(CourseLayout(root).mutants(chapter.slug), notebook) if m.exercise == first)
    everything = list(enumerate(parameter_names(own, first)))
    return {
        "mirrored_state": {"sources": {first: overwriting_solution(mutant.source, first, everything)}},
        "display_log": {"sources": {first: DISPLAY_LOG + own + _wrapper(first, "_seen.append(repr(args))\n"
                                                                        "_handle.update('LOGGED: ' + repr(args)[:2000])")}},
        "printer": {"sources": {first: own + _wrapper(first, "print('ARGS', args)")}},
        "display_cap": {"added": [nbformat.v4.new_code_cell(DISPLAY_CAP)]},
        "huge_reply": {"sources": {first: HUGE_REPLY + own}},
        "markdown_bomb": {"added": [nbformat.v4.new_markdown_cell("<b>bold</b> `x` *y* " * 100_000)]},
        "never_returns": {"sources": {first: f"import time\n\n\ndef {first}(*args, **kwargs):\n    time.sleep(3600)\n"}},
        "hardening": {"added": [nbformat.v4.new_code_cell(HARDENING_PROBE)],
                      "files": {"timestamp.txt": "2000-01-01 00:00:00.000000 UTC\n"}},
    }


ATTACKER = "a_attacker"


def _grade_class(root: Path, chapter: Chapter, course: Path, out: Path, jobs: int) -> dict:
    """Grade one class in this process; its wall and CPU seconds and its outcomes."""
    from tools.course.classroom.batch import autograde_chapter

    cpu = _cpu_seconds()
    started = time.perf_counter()
    report = autograde_chapter(root, chapter, course=course, jobs=jobs, show_progress=False, output_dir=out)
    return {"wall_s": round(time.perf_counter() - started, 2), "cpu_s": round(_cpu_seconds() - cpu, 2),
            "report": report}


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _group_cpu(outcome, key: str) -> float | None:
    return (((outcome.enforced or {}).get(key) or {}).get("usage") or {}).get("cpu_seconds")


def bench_hostile_classes(root: Path, chapter: Chapter, copies: int = 2, jobs: int = 2,
                          attacks: list[str] | None = None) -> dict:
    """An honest class, then the same class beside each attack (module docstring)."""
    plants = attack_plants(root, chapter)
    chosen = attacks or list(plants)
    result: dict = {"copies": copies, "jobs": jobs, "load_before": load_average(), "attacks": {}}
    with tempfile.TemporaryDirectory(prefix=f"bench-hostile-{chapter.slug}-") as temp:
        honest = _grade_class(root, chapter, class_of_copies(root, chapter, Path(temp) / "honest", copies),
                              Path(temp) / "honest-out", jobs)
        report = honest.pop("report")
        full = report.outcomes[0].max_score
        graded = report.graded
        result["honest"] = {**honest, "full_marks": sum(1 for o in graded if o.score == full),
                            "per_submission_cpu_s": round(honest["cpu_s"] / copies, 2),
                            "kernel_cpu_s": [_group_cpu(o, "cgroup") for o in graded],
                            "trusted_cpu_s": [_group_cpu(o, "trusted_cgroup") for o in graded],
                            "feedback_s": [o.timings.get("feedback_s") for o in graded]}
        for name in chosen:
            plant = plants[name]
            course = class_of_copies(root, chapter, Path(temp) / name, copies,
                                     extra={ATTACKER: plant.get("sources", {})},
                                     added={ATTACKER: plant.get("added", [])}, files={ATTACKER: plant.get("files", {})})
            run = _grade_class(root, chapter, course, Path(temp) / f"{name}-out", jobs)
            outcomes = {o.student: o for o in run.pop("report").outcomes}
            attacker = outcomes.pop(ATTACKER)
            result["attacks"][name] = {
                **run, "extra_wall_s": round(run["wall_s"] - honest["wall_s"], 2),
                "honest_full_marks": sum(1 for o in outcomes.values() if o.score == full), "honest": len(outcomes),
                "attacker_status": attacker.status, "attacker_score": attacker.score, "attacker_s": attacker.seconds,
                "attacker_regraded": attacker.regraded is not None,
                "attacker_timeouts": len((attacker.boundary or {}).get("timeouts", [])),
                "attacker_trusted_peak_mb": round((((attacker.enforced or {}).get("trusted_cgroup") or {}).get(
                    "usage") or {}).get("memory_peak_bytes", 0) / 2 ** 20, 1),
                "attacker_feedback_s": attacker.timings.get("feedback_s"),
            }
    result["load_after"] = load_average()
    return result


def hostile_lines(hostile: dict) -> list[str]:
    """The hostile-class benchmark as text."""
    honest = hostile["honest"]
    lines = ["", f"hostile classes ({hostile['copies']} correct submissions, --jobs {hostile['jobs']}; load average "
                 f"{hostile['load_before']} before, {hostile['load_after']} after; a shared, loaded host):",
             f"  honest class: {honest['wall_s']} s wall, {honest['cpu_s']} CPU s "
             f"({honest['per_submission_cpu_s']} CPU s per submission), full marks {honest['full_marks']}/"
             f"{hostile['copies']}; kernel groups {honest['kernel_cpu_s']} CPU s, trusted groups "
             f"{honest['trusted_cpu_s']} CPU s, feedback {honest['feedback_s']} s"]
    for name, item in hostile["attacks"].items():
        lines.append(f"  beside {name}: {item['wall_s']} s wall ({item['extra_wall_s']:+} s), {item['cpu_s']} CPU s; "
                     f"honest full marks {item['honest_full_marks']}/{item['honest']}; attacker {item['attacker_status']} "
                     f"{item['attacker_score']} in {item['attacker_s']} s, {item['attacker_timeouts']} timeout(s), "
                     f"graded again: {item['attacker_regraded']}, trusted peak {item['attacker_trusted_peak_mb']} MiB")
    return lines


def bench_ray_class(root: Path, chapter: Chapter, copies: int = 8, jobs: int = 2, projected: int = 1000) -> dict:
    """The same class of `copies` correct submissions graded by the local executor (`--jobs jobs`) and by Ray
    (`jobs` actors on a local cluster of `jobs` CPUs), each on its own copy of the course: wall and CPU
    seconds, Ray's cost per submission over the local executor's, its fixed start (cluster and actors), and
    the time `projected` submissions would take on 1, 8, 32 and 128 actors at the measured per-submission
    cost. The batch's own CPU seconds leave out the Ray workers' (they are not this process's children)."""
    from tools.course.classroom.batch import autograde_chapter
    from tools.course.classroom.ray_grading import ray_executor

    result: dict = {"copies": copies, "jobs": jobs, "load_before": load_average()}
    with tempfile.TemporaryDirectory(prefix=f"bench-ray-{chapter.slug}-") as temp:
        for executor in ("local", "ray"):
            course = class_of_copies(root, chapter, Path(temp) / executor, copies)
            started = time.perf_counter()
            remote = ray_executor(executor, None, jobs)
            connected = time.perf_counter()
            report = autograde_chapter(root, chapter, course=course, jobs=jobs, show_progress=False,
                                       output_dir=Path(temp) / f"{executor}-out", remote=remote)
            ended = time.perf_counter()
            if remote is not None:
                import ray

                ray.shutdown()
            result[executor] = {
                "wall_s": round(ended - started, 2), "cluster_start_s": round(connected - started, 2),
                "workers_ready_s": report.timings.get("prepared_s"), "graded_s": report.timings.get("graded_s"),
                "full_marks": sum(1 for o in report.graded if o.score == o.max_score),
                "median_submission_s": round(statistics.median(o.seconds for o in report.graded), 2) if report.graded else None}
    local, remote = result["local"], result["ray"]
    grading_local = local["graded_s"] - local["workers_ready_s"]
    grading_ray = remote["graded_s"] - remote["workers_ready_s"]
    per_submission = grading_ray * jobs / copies  # one actor's seconds per submission
    fixed_start = remote["cluster_start_s"] + remote["workers_ready_s"]
    result.update(
        ray_overhead_per_submission_s=round((grading_ray - grading_local) * jobs / copies, 2),
        ray_fixed_start_s=round(fixed_start, 2), ray_per_submission_s=round(per_submission, 2),
        projected={f"{actors}_actors_min": round((fixed_start + projected * per_submission / actors) / 60, 1)
                   for actors in (1, 8, 32, 128)},
        projected_submissions=projected, load_after=load_average())
    return result


def ray_lines(ray: dict) -> list[str]:
    """The Ray-versus-local class benchmark as text."""
    local, remote = ray["local"], ray["ray"]
    return ["", f"class of {ray['copies']} correct submissions, {ray['jobs']} workers (load average "
                f"{ray['load_before']} -> {ray['load_after']}):",
            f"  local  {local['wall_s']:7.1f} s wall, workers ready {local['workers_ready_s']} s, "
            f"median submission {local['median_submission_s']} s, full marks {local['full_marks']}",
            f"  ray    {remote['wall_s']:7.1f} s wall, cluster {remote['cluster_start_s']} s, actors ready "
            f"{remote['workers_ready_s']} s, median submission {remote['median_submission_s']} s, "
            f"full marks {remote['full_marks']}",
            f"  Ray's overhead per submission {ray['ray_overhead_per_submission_s']} s, fixed start "
            f"{ray['ray_fixed_start_s']} s; {ray['projected_submissions']} submissions projected (minutes): "
            + ", ".join(f"{key.split('_')[0]} actors {value}" for key, value in ray["projected"].items())]
