"""One worker slot, host side: a uid, its sandbox, and a long-lived grading worker in it.

The slot starts `tools.course.classroom.worker` in its sandbox, forked from this process while it
runs one thread (`WorkerSandbox.fork`: no second import of nbgrader) or as a new interpreter
(`WorkerSandbox.start`), and hands it one submission at a time. Per submission it enforces the
notebook time limit, and afterwards gives the kernel's namespace `LEFTOVER_GRACE_S` to vanish
before it kills (and counts) whatever still runs as the slot's uid, so the next submission never
meets a process of the last one. A worker that passes the limit is killed with everything it
started (its namespaces); one that dies is reaped. Either way the slot starts a fresh worker (a
new interpreter) for its next submission and records how many it started (`SlotResult.worker`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import tools
from tools.course.classroom import worker as grading_worker
from tools.course.classroom.sandbox import (
    LEFTOVER_GRACE_S,
    HostIsolation,
    KernelFolder,
    Limits,
    WorkerRun,
    WorkerSandbox,
)

START_TIMEOUT_S = 300.0
"""How long a fresh worker may take to import nbgrader and answer `ready` (not counted per notebook)."""
WORKER_MODULE = grading_worker.__name__
LOG_TAIL_LINES = 12


@dataclass
class SlotResult:
    status: str  # "graded" | "failed"
    reason: str | None
    run: WorkerRun
    worker: dict = field(default_factory=dict)  # {"process": n-th worker of the slot, "started_as", "submission": k-th}
    marks: dict = field(default_factory=dict)  # the worker's CLOCK_MONOTONIC marks: started, kernel_ready, ...
    boundary: dict = field(default_factory=dict)  # `SplitExecute.report`: timeouts, output cap


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    interesting = [line for line in lines if "ERROR" in line or "Error" in line or "failed" in line]
    return "\n".join((interesting or lines)[-LOG_TAIL_LINES:])


class GradingSlot:
    """A worker slot: the sandbox of one uid and the grading worker running in it."""

    def __init__(self, folder: Path, uid: int | None, limits: Limits, host: HostIsolation, masks: list[dict],
                 kernel_name: str = "python3", repo_root: Path | None = None, cgroups=None):
        folder.mkdir(mode=0o700)
        self.sandbox = WorkerSandbox(folder, uid, limits, host, masks, kernel_name, repo_root, cgroups)
        self.sandbox.prepare()
        self.log_path = folder / "worker.log"
        self.process: subprocess.Popen | None = None
        self.started = 0  # worker processes started by this slot
        self.how: str | None = None  # how the current one was started: "forked" or "new interpreter"
        self.graded = 0  # submissions handed to the current worker
        self._ready = False
        self._buffer = b""

    @property
    def dir(self) -> Path:
        return self.sandbox.dir

    @property
    def uid(self) -> int | None:
        return self.sandbox.uid

    def new_kernel(self, folder: Path) -> KernelFolder:
        return self.sandbox.new_kernel(folder)

    # -- the worker process --------------------------------------------------
    def start(self, fork: bool = False) -> None:
        """Start a worker: a child forked from this process (`fork`, nbgrader already imported; only
        while one thread runs), else a new interpreter that imports nbgrader in the background."""
        env = self.sandbox.grader_env()
        if fork:
            self.process = self.sandbox.fork(grading_worker.main, self.log_path, env,
                                             prepare=grading_worker.forget_inherited_event_loops)
        else:
            env["PYTHONPATH"] = str(Path(os.path.abspath(tools.__file__)).parent.parent)  # as the masks keep it
            self.process = self.sandbox.start([sys.executable, "-m", WORKER_MODULE], self.log_path, env)
        self.how = "forked" if fork else "new interpreter"
        self.started += 1
        self.graded = 0
        self._ready = False
        self._buffer = b""

    def close(self) -> None:
        """Let the worker finish (end of its input), or kill it if it does not."""
        if self.process is not None:
            self.sandbox.stop(self.process)
            self.process = None

    def _kill(self) -> None:
        if self.process is not None:
            self.sandbox.stop(self.process, kill=True)
            self.process = None

    def _read_line(self, deadline: float) -> bytes | None:
        """One reply line; None at the deadline; b"" when the worker closed its output (it died)."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return b""
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _ensure_ready(self) -> str | None:
        """Start the worker if there is none and wait for its `ready`; the reason it failed, or None."""
        if self.process is None or self.process.poll() is not None:
            if self.process is not None:
                self._kill()
            self.start()
        if self._ready:
            return None
        line = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if line:
            hello = json.loads(line)
            if hello.get("ready"):
                self._ready = True
                return None
        self._kill()
        why = "did not answer in time" if line is None else "exited"
        return f"grading worker {why} at start: {_tail(self.log_path)}"

    # -- one submission --------------------------------------------------------
    def grade(self, request: dict, kernel: KernelFolder | None = None) -> SlotResult:
        """Have the worker autograde one submission (`request`: see `grading_worker.autograde`) whose kernel
        folder is `kernel`; afterwards its control group is emptied and removed (`finish_kernel`)."""
        started = time.monotonic()
        problem = self._ensure_ready()
        worker = {"process": self.started, "started_as": self.how, "submission": self.graded + 1}
        if problem is not None:
            cleaned = self.sandbox.finish_kernel(kernel) if kernel is not None else {}
            run = WorkerRun(None, round(time.monotonic() - started, 2), False, self.sandbox.kill_leftovers(), cleaned)
            return SlotResult("failed", problem, run, worker)
        self.graded += 1
        begun = time.monotonic()
        killed, returncode, reply = False, 0, None
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
            self.process.stdin.flush()
            line = self._read_line(begun + self.sandbox.limits.notebook_timeout_s)
        except BrokenPipeError:
            line = b""
        if line is None:
            killed = True
            self._kill()
            returncode = None
        elif line == b"":
            returncode = self.process.wait()
            self._kill()
        else:
            reply = json.loads(line)
        cleaned = self.sandbox.finish_kernel(kernel) if kernel is not None else {}
        leftovers = self.sandbox.kill_leftovers(LEFTOVER_GRACE_S)
        run = WorkerRun(returncode, round(time.monotonic() - begun, 2), killed, leftovers, cleaned)
        if killed:
            return SlotResult("failed", f"killed at the per-notebook limit of "
                                        f"{self.sandbox.limits.notebook_timeout_s:g} s", run, worker)
        if reply is None:
            return SlotResult("failed", f"grading worker exited {returncode}: {_tail(Path(request['log']))}",
                              run, worker)
        marks, boundary = reply.get("monotonic", {}), reply.get("boundary") or {}
        if reply["status"] != "graded":
            return SlotResult("failed", f"{reply['reason']}: {_tail(Path(request['log']))}", run, worker, marks,
                              boundary)
        return SlotResult("graded", None, run, worker, marks, boundary)
