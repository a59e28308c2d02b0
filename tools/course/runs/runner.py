"""Batch execution of chapters with papermill: one label, a lock, progress and a summary.

`run_chapters` executes each chapter notebook into `build/runs/<label>/`, injecting
RUN_MODE, RUN_LABEL and RESULTS_DIR into its `parameters` cell. A failing chapter is
recorded with its cell and error, the batch goes on, and the caller exits non-zero.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from tools.core.catalog import Chapter, order_by_prerequisites
from tools.course.cells import read_notebook, tags, write_notebook
from tools.course.layout import CourseLayout
from tools.course.ray_cluster import check_executor, connect, disconnect
from tools.course.runs.chain import HandOffs
from tools.errors import ConfigError, LabelLockedError, NotebookExecutionError
from tools.core.paths import default_results_dir
from tools.core.runs import validate_run_label, validate_run_mode


@dataclass
class ChapterRun:
    """The outcome of one chapter in a batch."""

    chapter: str
    mode: str
    status: str
    seconds: float
    records_written: list[str]
    output_notebook: str
    failed_cell: int | None = None
    error: str | None = None
    failure: dict | None = None
    """The failing cell as data: `notebook`, `cell` (index in the chapter notebook), `cause`
    ("Name: value"), plus `source` (the cell's first lines) and `traceback` (its last lines)."""

# The kernel's own log (ipykernel 7 warns on every start that its localhost TCP transport is not
# encrypted) would interleave with the run's progress; its errors still show, cell output is unaffected.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]


def default_label(run_mode: str) -> str:
    """A fresh label for modes that allow one to be made up (never for real_gpu)."""
    if run_mode == "real_gpu":
        raise ConfigError("real_gpu runs need an explicit --label (it names the records in benchmarks/results).")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{run_mode.replace('_', '-')}-{stamp}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def label_lock(root: Path, label: str) -> Iterator[Path]:
    """Hold `build/locks/<label>.lock` for the duration of a run; refuse if another run holds it."""
    lock = CourseLayout(root).run_lock(label)
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        holder = lock.read_text(encoding="utf-8").strip() or "unknown"
        try:
            pid = int(json.loads(holder).get("pid", -1))
        except (ValueError, AttributeError):
            pid = -1
        state = "is still running" if pid > 0 and _pid_alive(pid) else "is no longer running; delete the lock if so"
        raise LabelLockedError(f"label {label!r} is locked by another run ({holder}); that process {state}: {lock}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat()}, handle)
    try:
        yield lock
    finally:
        lock.unlink(missing_ok=True)


def _records_under(folder: Path | None) -> set[Path]:
    """JSON records under `folder` (logs and other side files are not records)."""
    if folder is None or not folder.exists():
        return set()
    return {path for path in folder.rglob("*.json") if path.is_file()}


def _written_by(chapter: Chapter, results: Path, paths: set[Path]) -> set[Path]:
    """Of the files that appeared while other chapters ran beside this one, those it wrote: under its
    own folder, or a record whose header names it (a shared record in another folder)."""
    own = set()
    for path in paths:
        if path.relative_to(results).parts[0] == chapter.slug:
            own.add(path)
            continue
        try:
            header = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(header, dict) and header.get("chapter") == chapter.id:
            own.add(path)
    return own


def unexpected_error(executed: Path) -> NotebookExecutionError | None:
    """The first error in a cell not tagged `raises-exception`, as a NotebookExecutionError whose
    `cell` counts chapter cells only (not the cell papermill injected), so it matches the chapter.

    Papermill's error banner cells are removed from the executed notebook, so a learner is not
    shown a banner for an expected failure.
    """
    from papermill.execute import ERROR_MARKER_TAG

    notebook = read_notebook(executed)
    notebook.cells = [cell for cell in notebook.cells if ERROR_MARKER_TAG not in tags(cell)]
    write_notebook(notebook, executed)
    chapter_cells = [cell for cell in notebook.cells if "injected-parameters" not in tags(cell)]
    for index, cell in enumerate(chapter_cells):
        if cell.cell_type != "code" or "raises-exception" in tags(cell):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                cause = f"{output.get('ename')}: {output.get('evalue')}".strip()
                error = NotebookExecutionError(f"cell {index} raised {cause}", notebook=executed.name, cell=index,
                                               cause=cause, fix=f"open {executed} and read the traceback of cell {index}")
                error.source = "\n".join(cell.source.splitlines()[:5])
                error.traceback = [_ANSI.sub("", line) for line in output.get("traceback", [])][-8:]
                return error
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def run_chapter(root: Path, chapter: Chapter, *, run_mode: str, label: str, results_dir: Path | None,
                output_dir: Path, kernel_name: str = "python3", extra_parameters: dict | None = None,
                concurrent: bool = False) -> ChapterRun:
    """Execute one chapter with papermill and describe the outcome (never raises for a failing cell).
    `concurrent`: other chapters write into the same results folder meanwhile (the Ray executor), so only
    the records this chapter wrote are listed."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    notebook = chapter.notebook_path(root)
    output_dir.mkdir(parents=True, exist_ok=True)
    output = output_dir / notebook.name
    before = _records_under(results_dir)
    started = time.perf_counter()
    parameters = {**(extra_parameters or {}), "RUN_MODE": run_mode, "RUN_LABEL": label,
                  "RESULTS_DIR": None if results_dir is None else str(results_dir)}
    status, failed_cell, error, failure = "passed", None, None, None
    try:
        papermill.execute_notebook(
            str(notebook), str(output), parameters=parameters, cwd=str(notebook.parent),
            kernel_name=kernel_name, progress_bar=False, log_output=False, request_save_on_cell_execute=False,
            extra_arguments=KERNEL_ARGUMENTS,
        )
    except PapermillExecutionError:
        # papermill stops on any error output, including the visible tests that are meant to fail on a
        # stub (tag `raises-exception`); only an error in another cell fails the chapter.
        unexpected = unexpected_error(output)
        if unexpected is not None:
            status, failed_cell, error = "failed", unexpected.cell, unexpected.cause
            failure = {**unexpected.fields(), "source": unexpected.source, "traceback": unexpected.traceback}
    new = _records_under(results_dir) - before
    if concurrent and results_dir is not None:
        new = _written_by(chapter, results_dir, new)
    written = sorted(str(path.relative_to(root)) if path.is_relative_to(root) else str(path) for path in new)
    return ChapterRun(chapter.id, run_mode, status, round(time.perf_counter() - started, 1), written,
                      str(output.relative_to(root)) if output.is_relative_to(root) else str(output), failed_cell, error,
                      failure)


def resolve_run_settings(root: Path, run_mode: str, label: str | None,
                         results_dir: str | None) -> tuple[str, str, Path | None]:
    """Validate the batch parameters before any work: mode, label, results folder."""
    validate_run_mode(run_mode)
    label = validate_run_label(label) if label is not None else default_label(run_mode)
    if run_mode == "dry_run":
        folder = None
    elif results_dir is not None:
        folder = Path(results_dir).expanduser().resolve()
    else:
        folder = default_results_dir(run_mode, root)
    return run_mode, label, folder


def parse_parameters(pairs: list[str] | None) -> dict:
    """`KEY=VALUE` pairs for the notebooks' parameters cells (values stay strings)."""
    parameters = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier() or not key.isupper():
            raise ConfigError(f"--param {pair!r}: use UPPER_CASE_NAME=value, e.g. MODEL_SOURCE=random_init")
        if key in ("RUN_MODE", "RUN_LABEL", "RESULTS_DIR"):
            raise ConfigError(f"--param {key}: use --run-mode / --label / --results-dir instead")
        parameters[key] = value
    return parameters




def run_chapters(root: Path, chapters: list[Chapter], *, run_mode: str, label: str | None = None,
                 results_dir: str | None = None, show_progress: bool = True,
                 extra_parameters: dict | None = None, executor: str = "local",
                 address: str | None = None, ray_cpus: int | None = None) -> tuple[str, list[ChapterRun]]:
    """Run `chapters` under one label, each after its prerequisites (projects after the projects whose
    manifests they read, see `tools.course.runs.chain`); return the label and every chapter's outcome.

    `executor="local"` runs them one after another here; `"ray"` runs each as a Ray task on the cluster at
    `address` (None: a local cluster of `ray_cpus` CPUs), see `tools.course.runs.ray_executor`. A run
    interrupted on the Ray executor writes its summary and raises `ray_executor.InterruptedRun`."""
    from tqdm import tqdm

    check_executor(executor, address)
    run_mode, label, folder = resolve_run_settings(root, run_mode, label, results_dir)
    chapters = order_by_prerequisites(chapters)
    output_dir = CourseLayout(root).run_dir(label)
    cluster = None
    if executor == "ray":
        from tools.course.runs import ray_executor

        ray = connect(address, num_cpus=ray_cpus)
        ray_executor.check_nodes(ray, root, folder)
        cluster = ray_executor.describe_cluster(ray)
    with label_lock(root, label):
        output_dir.mkdir(parents=True, exist_ok=True)
        handoffs = HandOffs(root, folder, label)
        bar = tqdm(total=len(chapters), desc=f"{run_mode} {label}", unit="chapter", disable=not show_progress)

        def write_summary(outcomes: list[ChapterRun]) -> None:
            summary = {"run_mode": run_mode, "label": label, "parameters": extra_parameters or {},
                       "results_dir": None if folder is None else str(folder), "executor": executor,
                       "cluster": cluster, "chapters": [asdict(outcome) for outcome in outcomes],
                       "handoffs": handoffs.promised}
            (output_dir / "summary.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n",
                                                     encoding="utf-8")

        if executor == "ray":
            try:
                outcomes = ray_executor.run_on_cluster(
                    ray, root, chapters, run_mode=run_mode, label=label, results=folder, output_dir=output_dir,
                    extra_parameters=extra_parameters or {}, handoffs=handoffs, progress=bar,
                    run_chapter=run_chapter, ChapterRun=ChapterRun)
            except ray_executor.InterruptedRun as interrupted:
                bar.close()
                write_summary(interrupted.outcomes)
                disconnect(ray)  # bounded: the driver exits even when Ray is slow to stop
                raise
        else:
            outcomes = _run_one_by_one(root, chapters, run_mode=run_mode, label=label, folder=folder,
                                       output_dir=output_dir, extra_parameters=extra_parameters or {},
                                       handoffs=handoffs, progress=bar)
        bar.close()
        write_summary(outcomes)
    return label, outcomes


def _run_one_by_one(root: Path, chapters: list[Chapter], *, run_mode: str, label: str, folder: Path | None,
                    output_dir: Path, extra_parameters: dict, handoffs: HandOffs, progress) -> list[ChapterRun]:
    """The local executor: every chapter here, in order."""
    outcomes = []
    for chapter in chapters:
        progress.set_postfix_str(chapter.id)
        blocked = handoffs.blocked_by(chapter)
        if blocked:
            outcomes.append(ChapterRun(chapter.id, run_mode, "blocked", 0.0, [], "", error=(
                f"not run: upstream project(s) {', '.join(blocked)} did not pass in this batch")))
        else:
            parameters = {**extra_parameters, **handoffs.parameters(chapter)}
            outcomes.append(run_chapter(root, chapter, run_mode=run_mode, label=label, results_dir=folder,
                                        output_dir=output_dir, extra_parameters=parameters))
        handoffs.finished(chapter, outcomes[-1].status == "passed")
        progress.update(1)
    return outcomes


def format_summary(outcomes: list[ChapterRun]) -> str:
    """The per-chapter summary table."""
    headers = ("chapter", "mode", "status", "seconds", "records written")
    rows = [(o.chapter, o.mode, o.status, f"{o.seconds:.1f}", str(len(o.records_written))) for o in outcomes]
    widths = [max(len(row[i]) for row in (headers, *rows)) for i in range(len(headers))]
    lines = ["  ".join(value.ljust(width) for value, width in zip(headers, widths)),
             "  ".join("-" * width for width in widths)]
    lines.extend("  ".join(value.ljust(width) for value, width in zip(row, widths)) for row in rows)
    for outcome in outcomes:
        if outcome.status in ("blocked", "not_run", "interrupted"):
            lines.append(f"{outcome.status.upper()} {outcome.chapter}: {outcome.error}")
        elif outcome.status != "passed":
            lines.append(f"FAILED {outcome.chapter}: cell {outcome.failed_cell}: {outcome.error} "
                         f"(executed notebook: {outcome.output_notebook})")
    return "\n".join(lines)
