"""Autograde every submission of one chapter through nbgrader, in parallel isolated workers.

`jobs` worker slots each hold a uid and a long-lived grading worker in its own sandbox
(`tools.course.classroom.slot`, `tools.course.classroom.worker`), forked from this process with
nbgrader already imported (or started as a new interpreter where this process runs other
threads) while the batch is prepared; each worker grades a queue of submissions with nbgrader's
`Autograde` converter. The course gradebook (sqlite) is not safe for concurrent writers, so each
submission is graded in its own throw-away nbgrader course (a copy of a gradebook template made
once per batch, with this assignment and no student, the config and the source). Its code runs in a
kernel of its own (forked from the worker's kernel zygote, `tools.course.classroom.zygote`, into the
submission's own sandbox: namespaces, control group, filesystem; `tools.course.classroom.sandbox`);
its test cells run in a trusted grader process outside that sandbox (`split_execute`, `trusted`), so
the verdicts are computed where the learner's code cannot reach. The main thread then merges each result
into the course gradebook with nbgrader's Gradebook API, one student at a time, has the learner's feedback
rendered in a process of its own with limits (`tools.course.classroom.feedback_render`: it also withholds
what would show a hidden test's inputs) and copies the autograded notebook once it is within its size limit
and scanned. A submission that cannot be graded is recorded as failed and skipped; it never touches another
student. Time goes to the learner who spends it: a submission is graded again (at once, beside the rest of
the class) only on evidence that the host starved it (`regrade_reason`), and reported as not graded if it
fails again; the class report sets the class's time against its budget (`class_time`).

`grade_in_worker` (one submission in its sandbox, returning a `WorkerResult`) is apart from the merge
(`_finish`, the only writer of the course gradebook), so another executor can run the first and leave the
second to the process that owns the course.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import threading
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from tools.core.catalog import Chapter
from tools.core.records import save_json_record_once, utc_timestamp
from tools.course.cells import read_notebook
from tools.course.classroom.cgroups import BatchCgroups, probe_cgroups
from tools.course.classroom.contention import NOTEBOOK_WAIT_SHARE, contention_evidence
from tools.course.classroom.feedback import cell_results, exercise_summary, exercises_of, grade_cells
from tools.course.classroom.feedback_render import FeedbackRenderer
from tools.course.classroom.report import score_summary, write_class_report
from tools.course.grader.build import render_source_notebook
from tools.course.layout import CourseLayout, NbgraderCourse
from tools.course.nbgrader_cli import run_nbgrader
from tools.course.scratch import owned_folder, remove_tree
from tools.course.classroom.sandbox import (
    HostIsolation,
    Limits,
    UidPool,
    blocked_ancestor,
    kill_running,
    limits_record,
    plan_masks,
    probe_host,
)
from tools.course.classroom.slot import GradingSlot
from tools.course.classroom.trusted import trusted_spec
from tools.errors import ConfigError, RecordExistsError

BATCH_SCHEMA = "class-autograde/v1"
MAX_NOTEBOOK_BYTES = 64 * 2 ** 20


@dataclass
class Submission:
    student: str
    folder: Path
    notebook: Path
    collected: str | None = None  # when it was collected, set where the files were copied again (a Ray node)


@dataclass
class Outcome:
    """What happened to one submission."""

    student: str
    status: str  # "graded" | "failed" ("regrade" only while it waits to be graded again alone)
    reason: str | None = None
    score: float | None = None
    max_score: float | None = None
    exercises: list = field(default_factory=list)
    enforced: dict | None = None
    seconds: float | None = None
    feedback: dict | None = None
    worker: dict | None = None  # slot, n-th worker process of the slot, k-th submission of that worker
    timings: dict = field(default_factory=dict)  # seconds per stage of this submission (see `grade_in_worker`)
    boundary: dict = field(default_factory=dict)  # cells that timed out, the output cap if reached
    regraded: dict | None = None  # graded again after it was starved: the first attempt's reason
    collected_utc: str | None = None  # when the instructor collected it (its nbgrader timestamp)


@dataclass
class BatchReport:
    chapter: str
    slug: str
    jobs: int
    course_dir: str
    limits: dict
    host: dict
    cgroups: dict = field(default_factory=dict)  # {"version": "v2" | "v1" | None, "reason"}
    boundary: str = "test cells in a trusted grader process; the learner's kernel serves its functions"
    outcomes: list[Outcome] = field(default_factory=list)
    wall_seconds: float | None = None
    assignment: str | None = None
    record_path: str | None = None
    report_path: str | None = None
    hardest_exercise: str | None = None
    timings: dict = field(default_factory=dict)  # seconds since the start at each step of the batch
    time: dict = field(default_factory=dict)  # the class's time against its budget (`class_time`)
    executor: dict = field(default_factory=lambda: {"executor": "local"})  # where it was graded (`ray_grading`)

    @property
    def graded(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.status == "graded"]

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "graded" or not (o.feedback or {}).get("written")]

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and not self.failures

    def to_json(self) -> dict:
        data = asdict(self)
        data.update(schema_version=BATCH_SCHEMA, created_utc=utc_timestamp(), passed=self.passed,
                    summary=score_summary(self.outcomes))
        return data


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def course_paths(course: Path, slug: str) -> dict[str, Path]:
    folders = NbgraderCourse(course)
    return {"config": folders.config, "source": folders.source(slug), "release": folders.release(slug),
            "gradebook": folders.gradebook, "submitted": folders.submitted_root}


def check_inputs(root: Path, chapter: Chapter, course: Path) -> None:
    """Refuse to start (ConfigError) unless the course folder holds an up-to-date source and config."""
    paths = course_paths(course, chapter.slug)
    if not paths["config"].is_file():
        raise ConfigError(f"{paths['config']} does not exist; --course-dir must be an nbgrader course folder")
    if not paths["source"].is_file():
        raise ConfigError(f"{paths['source']} does not exist; run `python -m tools.course grading build`")
    if paths["source"].read_text(encoding="utf-8") != render_source_notebook(root, chapter):
        raise ConfigError(f"{paths['source']} is stale; run `python -m tools.course grading build`")


def discover_submissions(course: Path, slug: str) -> list[Submission]:
    """Every `submitted/<student>/<slug>/` folder, sorted by student id."""
    submitted = course_paths(course, slug)["submitted"]
    found = sorted(path for path in submitted.glob(f"*/{slug}")
                   if path.is_dir() and not path.is_symlink() and not path.parent.is_symlink()) \
        if submitted.is_dir() else []
    if not found:
        raise ConfigError(f"no submissions of {slug} under {submitted}/<student>/{slug}/")
    return [Submission(path.parent.name, path, path / f"{slug}.ipynb") for path in found]


def notebook_problem(path: Path) -> str | None:
    """Why `path` cannot be graded (missing, a link, too large, not a notebook), or None."""
    if path.is_symlink():
        return f"{path.name} is a symbolic link, not a submitted file"
    if not path.is_file():
        return f"missing notebook {path.name}"
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        return f"notebook larger than {MAX_NOTEBOOK_BYTES // 2 ** 20} MiB"
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"corrupt notebook: not JSON ({error.__class__.__name__}: {str(error)[:80]})"
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or data.get("nbformat") != 4:
        return "corrupt notebook: JSON, but not an nbformat-4 notebook"
    try:
        nbformat.reads(text, as_version=4)
    except Exception as error:  # nbformat raises many types for malformed notebooks; all mean "corrupt"
        return f"corrupt notebook: {error.__class__.__name__}: {str(error)[:80]}"
    return None


# ---------------------------------------------------------------------------
# Preparing the assignment and the worker template
# ---------------------------------------------------------------------------

def _has_assignment(gradebook: Path, slug: str) -> bool:
    from nbgrader.api import Gradebook, MissingEntry

    if not gradebook.is_file():
        return False
    with Gradebook(f"sqlite:///{gradebook}") as book:
        try:
            book.find_assignment(slug)
        except MissingEntry:
            return False
    return True


def ensure_assignment(course: Path, slug: str, log_dir: Path) -> str:
    """Run `nbgrader generate_assignment` unless the gradebook and release are newer than the source."""
    paths = course_paths(course, slug)
    if _has_assignment(paths["gradebook"], slug) and paths["release"].is_file() \
            and paths["release"].stat().st_mtime >= paths["source"].stat().st_mtime:
        return "up to date"
    run_nbgrader(course, ["generate_assignment", slug, "--force"], log_dir / "generate_assignment.log")
    return "generated"


def make_template(course: Path, slug: str, batch_dir: Path) -> Path:
    """A copy of the course gradebook holding only this assignment and no student: what each worker
    starts from (no other student's grades, no other chapter's hidden tests)."""
    from nbgrader.api import Gradebook

    template = NbgraderCourse(batch_dir / "template")
    template.folder.mkdir(mode=0o700)
    shutil.copy(NbgraderCourse(course).gradebook, template.gradebook)
    with Gradebook(template.gradebook_url) as book:
        for student in list(book.students):
            book.remove_student(student.id)
        for assignment in list(book.assignments):
            if assignment.name != slug:
                book.remove_assignment(assignment.name)
    return template.gradebook


def existing_extensions(course: Path, slug: str) -> dict:
    """Extensions granted in the course gradebook, so that late penalties are computed as nbgrader would."""
    from nbgrader.api import Gradebook

    with Gradebook(NbgraderCourse(course).gradebook_url) as book:
        assignment = book.find_assignment(slug)
        return {submission.student.id: submission.extension for submission in assignment.submissions
                if submission.extension}


# ---------------------------------------------------------------------------
# One worker
# ---------------------------------------------------------------------------

@dataclass
class WorkerResult:
    student: str
    worker_dir: Path  # the submission's folder in its slot, removed after merging
    course_dir: Path  # the submission's private nbgrader course inside it
    status: str
    reason: str | None
    enforced: dict | None
    seconds: float
    worker: dict | None = None
    timings: dict = field(default_factory=dict)
    boundary: dict = field(default_factory=dict)  # timeouts and output cap of the run (`SplitExecute.report`)
    hidden_inputs: list = field(default_factory=list)  # what hidden tests sent (fingerprints, for the leak scan)
    collected_utc: str | None = None


@dataclass
class WorkerContext:
    course: Path
    slug: str
    template: Path
    limits: Limits
    log_dir: Path
    extensions: dict
    source: nbformat.NotebookNode | None = None  # the trusted source notebook: what runs on the trusted side


_SPEC_LOCK = threading.Lock()
"""One thread at a time builds a trusted spec: it parses the exercise cells with `ast`, and CPython 3.11.7's AST
converter keeps its recursion depth per interpreter, not per thread, so two grading threads parsing at once can
fail one submission with "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905; seen in
a class graded beside CPU hogs)."""


def slot_trusted_spec(slot: GradingSlot, context: WorkerContext) -> dict | None:
    """The trusted side's spec for `slot` (`trusted.trusted_spec`), with a working folder of its own that
    holds the assignment's files (no notebook), made once per slot."""
    if context.source is None:
        return None
    folder = slot.dir / "trusted-cwd"
    with _SPEC_LOCK:
        if not folder.is_dir():
            folder.mkdir(mode=0o700)
            copy_regular_files(NbgraderCourse(context.course).source_dir(context.slug), folder, skip_suffix=".ipynb")
        return trusted_spec(context.source, folder)


TIMESTAMP_FILE = "timestamp.txt"


def collected_utc(submission: Submission) -> str:
    """When the instructor collected `submission`, in nbgrader's timestamp format: the submitted notebook's
    inode change time, which the copy into `submitted/` set on the instructor's side (no archive, tool or file
    of the learner carries it), or the time the driver read so where the files were copied again. A
    `timestamp.txt` in the learner's folder is never read."""
    if submission.collected is not None:
        return submission.collected
    stamp = datetime.fromtimestamp(submission.notebook.stat().st_ctime, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def prepare_private_course(submission: Submission, private: Path, context: WorkerContext) -> None:
    """The submission's own nbgrader course: the template gradebook (with the student's extension, if
    any), the config, the assignment's source, the submitted files (never the learner's `timestamp.txt`) and
    the time of collection (`collected_utc`) as nbgrader's `timestamp.txt`."""
    own, course = NbgraderCourse(private), NbgraderCourse(context.course)
    private.mkdir(mode=0o700)
    shutil.copy(context.template, own.gradebook)
    shutil.copy(course.config, own.config)
    shutil.copytree(course.source_dir(context.slug), own.source_dir(context.slug))
    target = own.submission_dir(submission.student, context.slug)
    copy_regular_files(submission.folder, target, skip_names={TIMESTAMP_FILE})
    (target / TIMESTAMP_FILE).write_text(collected_utc(submission) + "\n", encoding="utf-8")
    if submission.student in context.extensions:
        from nbgrader.api import Gradebook

        with Gradebook(own.gradebook_url) as book:
            book.update_or_create_student(submission.student)
            book.add_submission(context.slug, submission.student, extension=context.extensions[submission.student])


def submission_timings(started: float, prepared: float, marks: dict, kernel_report: dict | None, ended: float) -> dict:
    """Seconds per stage of one submission, from the host's, the worker's and the kernel launcher's
    CLOCK_MONOTONIC marks: preparing its folders; handing it to the worker (waiting for one that is
    still starting); nbgrader up to the kernel's set-up (sanitizing, the kernel manager, the zygote's
    fork or the launcher's interpreter); the set-up (namespaces, mounts, limits, uid); ipykernel's
    start until it answers; the cells; after them (kernel stop, grades and files saved); the host's
    cleanup (leftover check, kernel home deleted). A stage whose marks are missing (the kernel never
    started) is None."""
    launcher = (kernel_report or {}).get("monotonic", {})
    points = [("prepare_s", started), ("to_worker_s", prepared), ("to_launcher_s", marks.get("started")),
              ("launcher_s", launcher.get("launcher_started")), ("kernel_start_s", launcher.get("exec")),
              ("cells_s", marks.get("kernel_ready")), ("after_cells_s", marks.get("cells_done")),
              ("cleanup_s", marks.get("ended")), (None, ended)]
    return {name: round(end - begin, 3) if begin is not None and end is not None else None
            for (name, begin), (_, end) in zip(points, points[1:])}


def grade_in_worker(submission: Submission, index: int, slot: GradingSlot, context: WorkerContext) -> WorkerResult:
    """Grade one submission in its own nbgrader course with the slot's worker; never writes the course folder.

    Layout: `<slot>/submission-NNNN/` (passable, 0711) holds `course/` (the private nbgrader course,
    closed to the kernel's uid) and the kernel's folder (`KernelFolder`: `kernel/` is its home, cwd
    and TMPDIR). The kernel's home is deleted as soon as the submission is graded, before the slot
    takes its next one.
    """
    started = time.monotonic()
    folder = slot.dir / f"submission-{index:04d}"
    kernel = slot.new_kernel(folder)
    private = folder / "course"
    prepare_private_course(submission, private, context)
    # The kernel starts in its own folder: give it what nbgrader would put next to the notebook,
    # the student's other files overwritten by the assignment's own.
    for source in (submission.folder, NbgraderCourse(context.course).source_dir(context.slug)):
        copy_regular_files(source, kernel.home, skip_suffix=".ipynb", owner=slot.uid, skip_names={TIMESTAMP_FILE})
    log_path = folder / "autograde.log"
    boundary_path, inputs_path = private / "boundary.json", private / "hidden_inputs.json"
    request = {"id": index, "course": str(private), "slug": context.slug, "student": submission.student,
               "cell_timeout": context.limits.cell_timeout_s, "setup_timeout": context.limits.setup_s,
               "log": str(log_path), "env": slot.sandbox.grader_env(kernel), "zygote_env": slot.sandbox.zygote_env(),
               "trusted": slot_trusted_spec(slot, context), "trusted_env": slot.sandbox.trusted_env(),
               "output_bytes": context.limits.output_mb * 2 ** 20, "cpus": context.limits.cpus,
               "cgroup_usage_file": kernel.cgroup.cpu_usage_file if kernel.cgroup is not None else None,
               "trusted_cgroup_procs": kernel.trusted_cgroup.procs_files if kernel.trusted_cgroup is not None else [],
               "report_path": str(boundary_path), "hidden_inputs_path": str(inputs_path),
               "sockets": str(kernel.sockets) if kernel.sockets is not None else None}
    prepared = time.monotonic()
    try:
        result = slot.grade(request, kernel)
        kernel_report = kernel.report()
    finally:
        remove_tree(kernel.home)
        if log_path.is_file():
            copy_tail(log_path, context.log_dir / f"autograde_{index:04d}.log")
    enforced = slot.sandbox.enforced(kernel, result.run)
    seconds = round(time.monotonic() - started, 2)
    timings = submission_timings(started, prepared, result.marks, kernel_report, time.monotonic())
    worker = {"slot": slot.dir.name, **result.worker}
    autograded = NbgraderCourse(private).autograded(submission.student, context.slug)
    status, reason = result.status, result.reason
    if status == "graded" and not autograded.is_file():
        status, reason = "failed", "nbgrader wrote no autograded notebook"
    boundary = result.boundary or read_json_file(boundary_path) or {}  # the worker's last word if it was killed
    return WorkerResult(submission.student, folder, private, status, reason, enforced, seconds, worker, timings,
                        boundary, read_json_file(inputs_path) or [], collected_utc(submission))


def read_json_file(path: Path):
    """The JSON a grading worker wrote at `path`, or None (missing or cut short)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------
# Merging into the course (main thread only)
# ---------------------------------------------------------------------------

LOG_TAIL_BYTES = 1 * 2 ** 20


def copy_tail(source: Path, target: Path, size: int = LOG_TAIL_BYTES) -> None:
    """Copy the last `size` bytes of a log (a submission's kernel may write a lot to it), marking a cut."""
    with open(source, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        length = handle.tell()
        handle.seek(max(length - size, 0))
        tail = handle.read()
    with open(target, "wb") as handle:
        if length > size:
            handle.write(f"[{length - size} earlier bytes of this log not kept]\n".encode())
        handle.write(tail)


def copy_regular_files(source: Path, target: Path, *, skip_suffix: str | None = None,
                       owner: int | None = None, skip_names: set[str] | frozenset[str] = frozenset()) -> None:
    """Copy the regular files under `source` (never symbolic links or devices) into `target`, but those with
    the suffix `skip_suffix` and those named in `skip_names` (at the top of `source`)."""
    target.mkdir(parents=True, exist_ok=True)
    for folder, _, names in os.walk(source):  # os.walk does not enter linked folders
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file() or (skip_suffix and path.suffix == skip_suffix) or (
                    Path(folder) == source and name in skip_names):
                continue
            destination = target / path.relative_to(source)
            if not destination.parent.is_dir():
                destination.parent.mkdir(parents=True)
                if owner is not None:
                    os.chown(destination.parent, owner, owner)
            shutil.copyfile(path, destination)
            if owner is not None:
                os.chown(destination, owner, owner)


def _worker_grades(worker: Path, slug: str, student: str) -> tuple:
    from nbgrader.api import Gradebook

    with Gradebook(NbgraderCourse(worker).gradebook_url) as book:
        submission = book.find_submission(slug, student)
        notebooks = {}
        for notebook in submission.notebooks:
            grades = {grade.cell.name: (grade.auto_score, grade.needs_manual_grade) for grade in notebook.grades}
            comments = {comment.cell.name: comment.auto_comment for comment in notebook.comments}
            notebooks[notebook.name] = (grades, comments, notebook.late_submission_penalty)
        return submission.timestamp, notebooks


def _apply(book, slug: str, student: str, notebooks: dict) -> None:
    for name, (grades, comments, penalty) in notebooks.items():
        for cell, (auto_score, _) in grades.items():
            grade = book.find_grade(cell, name, slug, student)
            grade.auto_score = auto_score
            grade.needs_manual_grade = grade.manual_score is not None or auto_score is None
        for cell, auto_comment in comments.items():
            book.find_comment(cell, name, slug, student).auto_comment = auto_comment
        book.find_submission_notebook(name, slug, student).late_submission_penalty = penalty


def merge_result(course: Path, slug: str, student: str, worker: Path) -> dict[str, tuple[float, float]]:
    """Write one student's autograde result into the course gradebook; return grade_id -> (score, max).

    Manual scores already in the course gradebook are kept, as `nbgrader autograde` keeps them.
    """
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    timestamp, notebooks = _worker_grades(worker, slug, student)
    with Gradebook(NbgraderCourse(course).gradebook_url) as book, warnings.catch_warnings():
        # nbgrader's add_submission builds related rows before adding them to the session, which
        # SQLAlchemy 2 reports on autoflush; `nbgrader autograde` prints the same warning. The
        # rows are written (the scores are read back below).
        warnings.filterwarnings("ignore", message=".*not in session, add operation along.*", category=SAWarning)
        book.update_or_create_student(student)
        extra = {"timestamp": timestamp} if timestamp else {}
        try:
            submission = book.find_submission(slug, student)
        except MissingEntry:
            book.add_submission(slug, student, **extra)
        else:
            if timestamp:
                submission.timestamp = timestamp
        try:
            _apply(book, slug, student, notebooks)
        except MissingEntry:
            # The assignment's cells changed since this student's last grading: start the submission afresh.
            book.db.rollback()
            book.remove_submission(slug, student)
            book.add_submission(slug, student, **extra)
            _apply(book, slug, student, notebooks)
        book.db.commit()
        merged = book.find_submission_notebook(slug, slug, student)
        return {grade.cell.name: (float(grade.score or 0.0), float(grade.max_score)) for grade in merged.grades}


def copy_autograded(course: Path, source: Path, slug: str, student: str) -> None:
    """Put one student's autograded folder (`source`: the scanned copy) into the course."""
    target = NbgraderCourse(course).autograded_dir(student, slug)
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)


# ---------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------

def _batch_root(masks: list[dict], host: HostIsolation) -> Path:
    """A private temporary folder for the workers, outside every folder hidden from submissions,
    that the kernels' own uids can pass through to reach their folders."""
    batch = owned_folder("class-grading-")  # a batch whose process died is removed by the next
    resolved = batch.resolve()
    closed = blocked_ancestor(resolved)
    if host.separate_uid and closed is not None:
        remove_tree(batch)
        raise ConfigError(f"the temporary folder {batch} lies inside {closed}, which other users cannot enter; "
                          "set TMPDIR to a folder such as /tmp")
    for mask in masks:
        hidden = Path(mask["path"])
        if (resolved == hidden or hidden in resolved.parents) and not any(
                Path(kept) == resolved or Path(kept) in resolved.parents for kept in mask["keep"]):
            remove_tree(batch)
            raise ConfigError(f"the temporary folder {batch} lies inside {hidden}, which submissions must not see; "
                              "set TMPDIR to another folder")
    batch.chmod(0o711)
    return batch


def stop_idle_tqdm_monitor() -> None:
    """tqdm starts a monitor thread with its first bar, even a disabled one (papermill's, a previous batch's),
    and keeps it for the life of the process; it only wakes to refresh bars. Stop it (the next bar starts
    another, and tqdm works without one) so that a process that runs nothing else can fork its workers."""
    monitors = sys.modules.get("tqdm._monitor")
    if monitors is None:
        return
    for thread in threading.enumerate():  # each tqdm class (std, auto, asyncio, ...) keeps its own
        if isinstance(thread, monitors.TMonitor):
            thread.exit()  # joins it; the class's next bar starts a new one


def autograde_chapter(root: Path, chapter: Chapter, *, course: Path | None = None, jobs: int = 1,
                      limits: Limits | None = None, output_dir: Path | None = None,
                      show_progress: bool = True, require_isolation: bool = False,
                      progress_stream=None, split_tests: bool = True, remote=None) -> BatchReport:
    """Grade every submission of `chapter`, merge, write feedback, the record and the class report.

    `remote` (None: `jobs` local slots) starts the batch's graders elsewhere: called once the assignment is
    prepared, as `remote(root, slug, course, template, context, kernel_name, jobs, unpack_dir)`, it returns
    graders with `grade(index, submission) -> WorkerResult`, `describe()` and `close()`; results are merged
    here all the same (`tools.course.classroom.ray_grading.ray_executor` grades on Ray actors).

    `split_tests=False` runs the test cells in the learner's kernel, as stock nbgrader does: only for
    measuring what the grading boundary costs (`classroom.benchmark`), never for grading a class."""
    from tqdm import tqdm

    layout = CourseLayout(root)
    course = (course or layout.grading).resolve()
    limits = limits or Limits()
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"--jobs must be a positive whole number, got {jobs!r}")
    check_inputs(root, chapter, course)
    submissions = discover_submissions(course, chapter.slug)
    host = probe_host()
    if require_isolation and not host.namespaces:
        raise ConfigError(f"isolation required but unavailable: {host.reason}")
    label = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    output_dir = (output_dir or layout.autograde_output(chapter.slug, label)).resolve()
    record = output_dir / f"autograde_{chapter.slug}.json"
    if record.exists():
        raise RecordExistsError(f"{record} already exists; records are write-once, choose another --output-dir")
    log_dir = output_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cgroup_host = probe_cgroups()
    report = BatchReport(chapter.id, chapter.slug, jobs, str(course), limits_record(limits), asdict(host),
                         {"version": cgroup_host.version, "reason": cgroup_host.reason})
    if not split_tests:
        report.boundary = "none: test cells in the learner's kernel (a measurement run, not a grading)"
    started = time.monotonic()
    masks = plan_masks(root, course)
    batch_dir = _batch_root(masks, host)
    uid_pool = None
    cgroups = None
    slots: list[GradingSlot] = []
    graders = None
    try:
        local_slots = jobs if remote is None else 0
        cgroups = BatchCgroups(cgroup_host, jobs) if cgroup_host.version and local_slots else None
        uid_pool = UidPool(jobs) if host.separate_uid and local_slots else None
        kernel_name = read_notebook(course_paths(course, chapter.slug)["source"]).metadata.get(
            "kernelspec", {}).get("name", "python3")
        # Forked from this process, the workers start with nbgrader imported (`grading_slot` imports it);
        # a process with other threads starts new interpreters instead, which import it in the background.
        stop_idle_tqdm_monitor()
        fork = threading.active_count() == 1
        for number, uid in enumerate(uid_pool.uids if uid_pool else [None] * local_slots):
            slots.append(GradingSlot(batch_dir / f"slot-{number}", uid, limits, host, masks, kernel_name, root,
                                     cgroups))
            slots[-1].start(fork=fork)
        report.timings["workers_started_s"] = round(time.monotonic() - started, 3)
        report.assignment = ensure_assignment(course, chapter.slug, log_dir)
        source = read_notebook(course_paths(course, chapter.slug)["source"])
        cells, exercises = grade_cells(source), exercises_of(source)
        renderer = FeedbackRenderer(root, chapter, course, feedback_size_limit(limits), log_dir / "feedback.log")
        feedback = FeedbackContext(cells, exercises, renderer, feedback_size_limit(limits))
        template = make_template(course, chapter.slug, batch_dir)
        context = WorkerContext(course, chapter.slug, template, limits, log_dir, existing_extensions(course, chapter.slug),
                                source if split_tests else None)
        if remote is not None:
            graders = remote(root, chapter.slug, course, template, context, kernel_name, jobs,
                             batch_dir / "from-remote")
            report.executor = graders.describe()
        report.timings["prepared_s"] = round(time.monotonic() - started, 3)
        free: queue.Queue = queue.Queue()
        for slot in slots:
            free.put(slot)

        def work(index: int, submission: Submission) -> WorkerResult:
            if graders is not None:
                return graders.grade(index, submission)
            slot = free.get()
            try:
                return grade_in_worker(submission, index, slot, context)
            finally:
                free.put(slot)

        bar = tqdm(total=len(submissions), desc=f"autograde {chapter.slug}", unit="nb", disable=not show_progress,
                   file=progress_stream or sys.stderr)
        pool = ThreadPoolExecutor(max_workers=jobs)
        pending: dict = {}  # future -> (submission, index, the first attempt's outcome when graded again)
        try:
            for index, submission in enumerate(submissions):
                problem = notebook_problem(submission.notebook)
                if problem:
                    report.outcomes.append(Outcome(submission.student, "failed", problem))
                    bar.update(1)
                    continue
                pending[pool.submit(work, index, submission)] = (submission, index, None)
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    submission, index, first = pending.pop(future)
                    outcome = _finish(future, submission, course, chapter, feedback, regrade=first is None)
                    if outcome.status == "regrade":  # graded again at once, beside the rest of the class
                        pending[pool.submit(work, index, submission)] = (submission, index, outcome)
                        continue
                    if first is not None:
                        outcome.regraded = {"first_reason": first.reason, "first_boundary": first.boundary,
                                            "first_seconds": first.seconds}
                        if outcome.status != "graded":
                            outcome.reason = f"not graded, also when graded again: {outcome.reason}"
                    report.outcomes.append(outcome)
                    bar.update(1)
                    bar.set_postfix(failures=len(report.failures))
        except BaseException:
            # Interrupted (Ctrl-C) or a bug in the merge loop: stop every running worker now.
            pool.shutdown(wait=False, cancel_futures=True)
            while not all(future.done() for future in pending):
                kill_running()
                time.sleep(0.2)
            raise
        finally:
            pool.shutdown()
            bar.close()
            renderer.close()
        report.timings["graded_s"] = round(time.monotonic() - started, 3)
    finally:
        if graders is not None:
            graders.close()
        for slot in slots:
            slot.close()
        if uid_pool:
            uid_pool.release()
        if cgroups is not None:
            cgroups.close()
        remove_tree(batch_dir)
    report.outcomes.sort(key=lambda outcome: outcome.student)
    report.wall_seconds = round(time.monotonic() - started, 2)
    report.time = class_time(report.outcomes, limits, jobs, report.wall_seconds)
    report_path, hardest = write_class_report(report, exercises, output_dir)
    report.report_path, report.hardest_exercise = str(report_path), hardest
    report.timings["reported_s"] = round(time.monotonic() - started, 3)
    save_json_record_once(record, report.to_json())
    report.record_path = str(record)
    return report


@dataclass
class FeedbackContext:
    """What every student's feedback is made from: the grade cells and exercises, and the class's renderer
    (`feedback_render`: a process of its own per submission, with limits)."""

    cells: list
    exercises: list
    renderer: FeedbackRenderer
    max_bytes: int


def feedback_size_limit(limits: Limits) -> int:
    """The largest autograded notebook copied into the course or rendered into feedback: the output cap twice
    over, plus room for the notebook itself."""
    return 2 * limits.output_mb * 2 ** 20 + 16 * 2 ** 20


WORKER_DEATH = ("grading worker exited", "grading worker did not answer")


def regrade_reason(result: WorkerResult) -> str | None:
    """Why a submission is graded again, or None. Only evidence that the host starved it earns a second
    attempt: its grading worker died, the trusted grader's setup cells ran out of their own budget, or a cell
    (or the whole notebook) ran out of time while the figures show contention (`contention_evidence`). A
    timeout the learner's own code caused (its replies never came, it slept, it spent its CPU) is its loss."""
    reason = (result.reason or "").splitlines()[0] if result.reason else ""
    if result.status != "graded":
        if reason.startswith(WORKER_DEATH) or "grading worker" in reason and "at start" in reason:
            return reason
        if "setup cells failed" in (result.reason or "") and "CellTimeout" in (result.reason or ""):
            return "the trusted grader's setup cells ran out of their time"
        if "per-notebook limit" in reason:
            evidence = contention_evidence(result.boundary.get("totals") or {}, NOTEBOOK_WAIT_SHARE)
            return f"{reason}: {evidence}" if evidence else None
        return None
    for item in result.boundary.get("timeouts", []):
        evidence = contention_evidence(item)
        if evidence:
            return f"{item['cell']} ran out of time: {evidence}"
    return None


def learners_time(boundary: dict) -> dict:
    """The cells that ran out of time on the learner's own account (no contention evidence): graded as they are."""
    own = [item for item in boundary.get("timeouts", []) if not contention_evidence(item)]
    return {"cells": [str(item["cell"]) for item in own],
            "seconds": round(sum(item.get("wall_s") or 0.0 for item in own), 2),
            "waiting_for_the_learner_s": round(sum(item.get("learner_s") or 0.0 for item in own), 2)}


def class_time(outcomes: list[Outcome], limits: Limits, jobs: int, wall_seconds: float) -> dict:
    """The class's time against its budget: every submission its notebook limit, `jobs` at a time (a second
    attempt only on contention evidence), what the batch took, and where the time went."""
    budget = -(-len(outcomes) // jobs) * limits.notebook_timeout_s
    first_attempts = [outcome.regraded.get("first_seconds") or 0.0 for outcome in outcomes if outcome.regraded]
    own = [outcome.boundary.get("learners_time") or {} for outcome in outcomes]
    return {"budget_s": budget, "wall_s": wall_seconds, "submission_seconds": round(sum(outcome.seconds or 0.0 for outcome in outcomes), 2),
            "learner_timeouts": sum(1 for item in own if item.get("cells")),
            "learner_timeout_seconds": round(sum(item.get("seconds", 0.0) for item in own), 2),
            "graded_again": len(first_attempts), "first_attempt_seconds": round(sum(first_attempts), 2)}


def _finish(future, submission: Submission, course: Path, chapter: Chapter, feedback: FeedbackContext, *,
            regrade: bool) -> Outcome:
    """Merge one finished worker into the course and write its feedback; failures are recorded, not raised.
    A starved submission (`regrade_reason`) is, with `regrade`, left unmerged with the status "regrade", for the
    batch to grade it again. The autograded notebook is copied into the course only when it is within the size
    limit and was scanned for hidden tests' inputs (by the renderer)."""
    try:
        result = future.result()
    except Exception as error:  # a bug or I/O error in one worker must not stop the batch; it is recorded
        return Outcome(submission.student, "failed", f"worker error: {error.__class__.__name__}: {error}")
    outcome = Outcome(result.student, result.status, result.reason, enforced=result.enforced, seconds=result.seconds,
                      worker=result.worker, timings=dict(result.timings), boundary=dict(result.boundary),
                      collected_utc=result.collected_utc)
    try:
        why = regrade_reason(result) if regrade else None
        if why is not None:
            outcome.status, outcome.reason = "regrade", why
            return outcome
        outcome.boundary["learners_time"] = learners_time(result.boundary)
        if result.status != "graded":
            return outcome
        started = time.monotonic()
        autograded = NbgraderCourse(result.course_dir).autograded(result.student, chapter.slug)
        size = autograded.stat().st_size
        try:
            scores = merge_result(course, chapter.slug, result.student, result.course_dir)
        except Exception as error:  # recorded: this student's grade is not merged, the others are untouched
            outcome.status, outcome.reason = "failed", f"merge failed: {error.__class__.__name__}: {error}"
            return outcome
        merged = time.monotonic()
        results = cell_results(feedback.cells, scores)
        outcome.exercises = exercise_summary(feedback.exercises, results)
        outcome.score = sum(item["score"] for item in outcome.exercises)
        outcome.max_score = sum(item["max_score"] for item in outcome.exercises)
        if size > feedback.max_bytes:
            outcome.feedback = {"written": False, "error": f"the autograded notebook is {size / 2 ** 20:.1f} MiB, more "
                                                           f"than {feedback.max_bytes / 2 ** 20:.0f} MiB; not copied "
                                                           "into the course, feedback not rendered"}
        else:
            scanned = result.worker_dir / "autograded-scanned"
            outcome.feedback = feedback.renderer.render({
                "student": result.student, "autograded": str(autograded), "work_dir": str(result.course_dir),
                "results": results, "enforced": result.enforced, "hidden_inputs": result.hidden_inputs,
                "scanned_dir": str(scanned)})
            if outcome.feedback.pop("scanned", False):
                try:
                    copy_autograded(course, scanned, chapter.slug, result.student)
                except Exception as error:  # recorded: the grade stands
                    outcome.status, outcome.reason = "failed", f"copy failed: {error.__class__.__name__}: {error}"
            outcome.boundary["hidden_inputs_withheld"] = outcome.feedback.pop("inputs_withheld", 0)
        outcome.timings.update(merge_s=round(merged - started, 3), feedback_s=round(time.monotonic() - merged, 3))
        return outcome
    finally:
        remove_tree(result.worker_dir)


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------

def format_summary(report: BatchReport) -> str:
    summary = score_summary(report.outcomes)
    lines = [f"{report.chapter}: {summary['submissions']} submissions, {summary['graded']} graded, "
             f"{len(report.failures)} failure(s), {summary['graded_again_alone']} graded again, "
             f"in {report.wall_seconds:.1f} s with {report.jobs} job(s)"]
    if report.time:
        lines.append(f"time: budget {report.time['budget_s']:g} s, took {report.time['wall_s']:g} s; "
                     f"{report.time['learner_timeouts']} submission(s) ran out of time on their own account, "
                     f"{report.time['graded_again']} graded again on evidence of contention")
    if summary["graded"]:
        lines.append(f"score: mean {summary['mean']:g} / {summary['max_score']:g}, median {summary['median']:g}, "
                     f"min {summary['min']:g}, max {summary['max']:g}, full marks {summary['full_marks']}")
        lines.append("distribution: " + " | ".join(f"{band} {count}" for band, count in summary["distribution"].items()))
    limits = report.limits
    lines.append(f"limits: cell {limits['cell_timeout_s']} s, notebook {limits['notebook_timeout_s']:g} s, "
                 f"memory {limits['memory_mb']} MiB, cpu {limits['cpu_seconds']} s, processes {limits['max_processes']}, "
                 f"cpus {limits['cpus']}, output {limits['output_mb']} MiB; isolation: {report.host['reason']}; "
                 f"per-submission limits: {report.cgroups.get('reason')}")
    for outcome in report.failures:
        reason = outcome.reason or (outcome.feedback or {}).get("error", "feedback not written")
        lines.append(f"FAILED {outcome.student}: {reason.splitlines()[0] if reason else ''}")
    if report.hardest_exercise:
        lines.append(f"hardest exercise: {report.hardest_exercise}")
    elif report.graded:
        lines.append("hardest exercise: none (full marks on every exercise)")
    lines.append(f"class report: {report.report_path}")
    lines.append(f"record: {report.record_path}")
    return "\n".join(lines)
