"""Chapters as Ray tasks: the batch runner's second executor, for work that leaves one machine.

`run_chapters(..., executor="ray")` connects to a Ray cluster (`--address`, or a local cluster on this
machine), checks every node before any work, then runs each chapter as one Ray task with the resources
its run mode needs (`num_gpus=1` for real_gpu, one CPU otherwise). A chapter is submitted once all its
prerequisites in the batch have finished, so the catalog order is kept and independent chapters run at
the same time; a project whose upstream failed is reported `blocked`, as with the local executor.

Where things land:
- records: the task's notebook writes them, write-once, straight into the run's results folder, which
  must be storage every node sees (the node check proves it with a probe file); the driver passes each
  project its promised upstream sha256, exactly as the local executor does;
- executed notebooks: each task executes into a folder of its own node and returns the notebook's bytes;
  the driver writes them under `build/runs/<label>/`, with the summary.

A task whose worker dies is submitted again once if it wrote no record yet, else reported with what it
left; an interrupted driver cancels what runs, writes the summary (what passed, what did not run) and
keeps every finished record.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tools.core.catalog import Chapter
from tools.course.ray_cluster import cancel
from tools.course.runs.chain import HandOffs
from tools.course.scratch import scratch_folder
from tools.errors import ConfigError

REQUIRED_PACKAGES = ("papermill", "nbformat", "ipykernel", "torch", "transformers", "peft", "tools")
"""What a node must import to run a chapter (reported by name when missing)."""
PROBE_NAME = ".ray-node-probe-{token}"


def _git_head(root: Path) -> str | None:
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def node_probe(root: str, results: str | None, token: str, required: tuple[str, ...] = REQUIRED_PACKAGES) -> dict:
    """What one node has: host, the packages it lacks, its checkout's commit, whether it sees the results."""
    missing = [name for name in required if importlib.util.find_spec(name) is None]
    checkout = Path(root)
    sees = None
    if results is not None:
        sees = (Path(results) / PROBE_NAME.format(token=token)).is_file()
    return {"host": socket.gethostname(), "missing_packages": missing,
            "checkout": checkout.is_dir() and (checkout / "notebooks" / "catalog.toml").is_file(),
            "commit": _git_head(checkout) if checkout.is_dir() else None, "sees_results": sees}


def check_nodes(ray, root: Path, results: Path | None, *,
                required: tuple[str, ...] = REQUIRED_PACKAGES) -> list[dict]:
    """Probe every alive node; refuse (before any work) when one lacks a package, the checkout, the
    driver's commit or the results folder, naming the node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = f"{time.time_ns()}"
    probe_file = None
    if results is not None:
        results.mkdir(parents=True, exist_ok=True)
        probe_file = results / PROBE_NAME.format(token=token)
        probe_file.write_text("probe\n", encoding="utf-8")
    try:
        remote = ray.remote(num_cpus=0)(node_probe)
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                .remote(str(root), None if results is None else str(results), token, required) for node in nodes]
        reports = [{"node_id": node["NodeID"], **report} for node, report in zip(nodes, ray.get(refs))]
    finally:
        if probe_file is not None:
            probe_file.unlink(missing_ok=True)
    head = _git_head(root)
    problems = []
    for report in reports:
        name = f"node {report['host']} ({report['node_id'][:12]})"
        if report["missing_packages"]:
            problems.append(f"{name} lacks the course's packages {', '.join(report['missing_packages'])}")
        if not report["checkout"]:
            problems.append(f"{name} has no course checkout at {root}")
        elif head is not None and report["commit"] != head:
            problems.append(f"{name} has commit {report['commit']} at {root}, the driver {head}")
        if report["sees_results"] is False:
            problems.append(f"{name} does not see the results folder {results}; give --results-dir on storage "
                            "every node mounts")
    if problems:
        raise ConfigError("the Ray cluster cannot run this batch: " + "; ".join(problems))
    return reports


def chapter_task(run_chapter, root: str, chapter: Chapter, run_mode: str, label: str, results: str | None,
                 parameters: dict) -> dict:
    """One chapter on a worker, with the runner's `run_chapter`: executed into a node-local folder; returns the
    outcome and the notebook."""
    with scratch_folder(f"course-{chapter.slug}-") as scratch:  # a cancelled task's is removed by the next
        outcome = run_chapter(Path(root), chapter, run_mode=run_mode, label=label,
                              results_dir=None if results is None else Path(results), output_dir=Path(scratch),
                              extra_parameters=parameters, concurrent=True)
        executed = Path(scratch) / chapter.notebook_path(Path(root)).name
        notebook = executed.read_bytes() if executed.is_file() else None
    return {"outcome": asdict(outcome), "notebook": notebook, "host": socket.gethostname()}


def _wrote_any(results: Path | None, chapter: Chapter, label: str) -> bool:
    return results is not None and any((results / chapter.slug).glob(f"*_{label}.json"))


WAIT_SLICE_S = 1.0
"""How long the driver waits for a finished task before it checks for an interrupt again."""


def run_on_cluster(ray, root: Path, chapters: list[Chapter], *, run_mode: str, label: str, results: Path | None,
                   output_dir: Path, extra_parameters: dict, handoffs: HandOffs, progress, run_chapter,
                   ChapterRun) -> list:
    """Run `chapters` (ordered by prerequisites) as Ray tasks, each with the runner's `run_chapter`; returns
    their outcomes (the runner's `ChapterRun`) in order."""
    from ray.exceptions import NodeDiedError, WorkerCrashedError

    in_batch = {chapter.id for chapter in chapters}
    outcomes: dict[str, ChapterRun] = {}
    waiting = list(chapters)
    running: dict = {}
    retried: set[str] = set()
    task = ray.remote(chapter_task)

    def submit(chapter: Chapter) -> None:
        parameters = {**extra_parameters, **handoffs.parameters(chapter)}
        resources = {"num_gpus": 1, "num_cpus": 1} if run_mode == "real_gpu" else {"num_cpus": 1}
        ref = task.options(max_retries=0, **resources).remote(run_chapter, str(root), chapter, run_mode, label,
                                                               None if results is None else str(results), parameters)
        running[ref] = chapter

    def finish(chapter: Chapter, outcome: ChapterRun) -> None:
        outcomes[chapter.id] = outcome
        handoffs.finished(chapter, outcome.status == "passed")
        progress.update(1)
        progress.set_postfix_str(chapter.id)

    try:
        while waiting or running:
            for chapter in list(waiting):
                needs = [need for need in chapter.prerequisites if need in in_batch]
                if any(need not in outcomes for need in needs):
                    continue
                waiting.remove(chapter)
                blocked = handoffs.blocked_by(chapter)
                if blocked:
                    finish(chapter, ChapterRun(chapter.id, run_mode, "blocked", 0.0, [], "", error=(
                        f"not run: upstream project(s) {', '.join(blocked)} did not pass in this batch")))
                else:
                    submit(chapter)
            if not running:
                continue
            done: list = []
            while not done:  # short waits: an interrupt reaches the driver within a second, whatever Ray checks
                done, _ = ray.wait(list(running), num_returns=1, timeout=WAIT_SLICE_S)
            chapter = running.pop(done[0])
            try:
                reply = ray.get(done[0])
            except (WorkerCrashedError, NodeDiedError) as error:
                if chapter.id not in retried and not _wrote_any(results, chapter, label):
                    retried.add(chapter.id)
                    submit(chapter)
                    continue
                finish(chapter, ChapterRun(chapter.id, run_mode, "failed", 0.0, [], "", error=(
                    f"the worker running it died ({type(error).__name__}); "
                    + ("it had written records, so it was not run again" if _wrote_any(results, chapter, label)
                       else "it died again on its second try"))))
                continue
            outcome = ChapterRun(**reply["outcome"])
            if reply["notebook"] is not None:
                target = output_dir / chapter.notebook_path(root).name
                target.write_bytes(reply["notebook"])
                outcome.output_notebook = str(target.relative_to(root)) if target.is_relative_to(root) else str(target)
            finish(chapter, outcome)
    except KeyboardInterrupt:
        # Said first, on stderr (line-buffered): an interrupted driver that hung once left an empty log behind.
        progress.write(f"interrupted: cancelling {len(running)} running chapter(s)", file=sys.stderr)
        cancel(ray, list(running))  # bounded: a loaded cluster may be slow to take the cancellations
        for ref, chapter in running.items():
            outcomes[chapter.id] = ChapterRun(chapter.id, run_mode, "interrupted", 0.0, [], "",
                                              error="the driver was interrupted while it ran")
        for chapter in waiting:
            outcomes[chapter.id] = ChapterRun(chapter.id, run_mode, "not_run", 0.0, [], "",
                                              error="the driver was interrupted before it started")
        raise InterruptedRun([outcomes[chapter.id] for chapter in chapters if chapter.id in outcomes]) from None
    return [outcomes[chapter.id] for chapter in chapters]


class InterruptedRun(KeyboardInterrupt):
    """The driver was interrupted; `outcomes` says what passed, what was running and what did not run."""

    def __init__(self, outcomes: list):
        super().__init__("interrupted")
        self.outcomes = outcomes


def describe_cluster(ray) -> dict:
    """Nodes, CPUs and GPUs of the connected cluster (for the run summary)."""
    resources = ray.cluster_resources()
    return {"nodes": sum(1 for node in ray.nodes() if node.get("Alive")), "cpus": resources.get("CPU", 0.0),
            "gpus": resources.get("GPU", 0.0)}
