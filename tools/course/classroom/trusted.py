"""The trusted grader process: where every test cell of a submission runs, outside the learner's sandbox.

Per grading worker, one **chapter zygote** (`python -m tools.course.classroom.trusted --control FD`,
started by the worker in its own namespaces, never under a kernel's uid) runs the chapter's shared
setup cells (the locked cells before the first exercise, from the trusted source notebook) once. Per
submission it forks a **trusted child** that holds a copy of that namespace in which every exercise name
is a `LearnerFunction` proxy (`tools.course.grader.boundary`), joins the submission's trusted control group
(memory, tasks and CPU of its own, beside the kernel's) and listens for the learner's kernel (a Unix socket
in the folder the kernel shares, which has a network namespace of its own; else the loopback interface); for each test cell the worker (`split_execute`) has the kernel run
`learner_server.serve(port, token, globals())` while the child runs the cell (`boundary.run_cell`): each
call of a learner's function crosses to the kernel and back through the safe codec. The child sends the
cell's outputs to the worker, which puts them in the notebook that nbgrader scores.

Control messages (worker <-> zygote, and worker <-> child) are frames of JSON (`learner_server` framing);
the zygote hands each child's end of a new socket pair to the worker with SCM_RIGHTS.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

from tools.course.classroom.hidden_inputs import InputRecorder
from tools.course.classroom.learner_server import DONE, recv_frame, send_frame
from tools.course.grader.boundary import (
    BoundaryError,
    CellTimeout,
    Contract,
    exercise_contract,
    learner_proxies,
    run_cell,
)
from tools.course.grader.codec import MAX_REPLY_BYTES, shared_names
from tools.errors import GradingError

TRUSTED_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "LANG": "C.UTF-8",
}
"""One thread per math library (the zygote forks), a plotting backend without a display."""
ACCEPT_GRACE_S = 2.0
"""At the end of a cell that called no learner function: how long to wait for the kernel's connection
so that its serving cell can end at once."""


def _json_frame(link: socket.socket, message: dict) -> None:
    send_frame(link, json.dumps(message).encode("utf-8"))


def _read_json(link: socket.socket) -> dict:
    return json.loads(recv_frame(link).decode("utf-8"))


# ---------------------------------------------------------------------------
# Inside the trusted child: the link to the learner's kernel
# ---------------------------------------------------------------------------

class KernelGone(BoundaryError):
    """The worker saw the kernel's serving cell end before the test cell did: no call can be answered."""


class KernelLink:
    """The trusted side's channel to the learner's kernel for one submission: per test cell, the
    kernel's connection with that cell's token; a timeout or a broken reply closes it for the cell.
    While it waits for the kernel it also watches the worker's control socket: the worker says
    `kernel-gone` when the kernel's serving cell ended first (e.g. the learner's code replaced it)."""

    def __init__(self, listener: socket.socket, control: socket.socket | None = None):
        self.listener, self.control = listener, control
        self.token: bytes | None = None
        self.connection: socket.socket | None = None
        self.status = "idle"
        self.gone: set[bytes] = set()  # cells whose serving ended (the notice may come before the cell)
        self.waited = 0.0  # seconds this cell waited for the kernel (its connection and its replies)

    def begin(self, token: str) -> None:
        """A new test cell: the kept connection when the worker kept its serving cell (same token), else a
        new one to wait for."""
        token_bytes = token.encode("ascii")
        self.waited = 0.0
        if self.status == "kept" and self.connection is not None and token_bytes == self.token:
            self.status = "connected"
            return
        if self.connection is not None:
            self.connection.close()
        self.token, self.connection, self.status = token_bytes, None, "waiting"

    def kernel_gone(self, token: str) -> None:
        self.gone.add(token.encode("ascii"))

    def _wait_for(self, sock: socket.socket, deadline: float | None) -> bool:
        """Wait until `sock` is readable (True) or the deadline passes (False); KernelGone if the worker
        says so for this cell."""
        watched = [sock] if self.control is None else [sock, self.control]
        while True:
            if self.token in self.gone:
                raise KernelGone("the learner's kernel is not serving this cell")
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0)
            readable, _, _ = select.select(watched, [], [], timeout)
            if not readable:
                return False
            if self.control in readable:
                message = _read_json(self.control)
                if message.get("op") == "kernel-gone":
                    self.kernel_gone(str(message.get("token", "")))
                continue
            return True

    def _accept(self, timeout: float | None) -> socket.socket | None:
        """The kernel's connection for this cell (others are closed); None when none came in time."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not self._wait_for(self.listener, deadline):
                return None
            connection, _ = self.listener.accept()
            connection.settimeout(10.0)
            try:
                token = recv_frame(connection, limit=256)
            except (OSError, ValueError):
                connection.close()
                continue
            if secrets.compare_digest(token, self.token or b""):
                connection.settimeout(None)
                return connection
            connection.close()

    def exchange(self, payload: bytes) -> bytes:
        if self.status in ("broken", "timed out"):
            raise BoundaryError(f"the learner's kernel is no longer answering in this cell ({self.status})")
        started = time.monotonic()
        try:
            if self.connection is None:
                self.connection = self._accept(None)  # bounded by the cell's time limit (SIGALRM)
                self.status = "connected"
            send_frame(self.connection, payload)
            self._wait_for(self.connection, None)
            return recv_frame(self.connection, limit=MAX_REPLY_BYTES + 64)
        except CellTimeout:
            self.status = "timed out"
            raise
        except KernelGone:
            self.status = "broken"
            raise
        except (OSError, ValueError) as error:
            self.status = "broken"
            raise BoundaryError(f"the learner's kernel did not answer: {error.__class__.__name__}: {error}") from None
        finally:
            self.waited += time.monotonic() - started

    def end(self, keep: bool = False) -> str:
        """Tell the kernel's serving cell to end, or with `keep` keep it (and the connection) for the next
        test cell; return how the cell ended on the kernel's side ("done", "kept", "not connected", ...)."""
        if self.connection is None and self.status == "waiting":
            try:
                self.connection = self._accept(ACCEPT_GRACE_S)
            except KernelGone:
                self.connection = None
            self.status = "connected" if self.connection is not None else "not connected"
        if keep and self.status == "connected" and self.token not in self.gone:
            self.status = "kept"
            return self.status
        if self.connection is not None:
            try:
                if self.status == "connected":
                    send_frame(self.connection, DONE)
                    self.status = "done"
            except OSError:
                self.status = "broken"
            finally:
                self.connection.close()
                self.connection = None
        return self.status


def listen(socket_dir: str | None) -> tuple[socket.socket, int | str]:
    """Where the learner's kernel connects: a Unix socket in `socket_dir` (the folder bound into the kernel's
    own filesystem), else a port on the loopback interface."""
    if not socket_dir:
        listener = socket.create_server(("127.0.0.1", 0))
        return listener, listener.getsockname()[1]
    path = os.path.join(socket_dir, "trusted.sock")
    if os.path.lexists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o666)  # its folder is the kernel's own (0700): only it (and root) can reach the socket
    listener.listen(8)
    return listener, path


def serve_submission(control: socket.socket, namespace: dict, shared: dict, exercises: list[str],
                     contracts: dict[str, dict] | None = None, socket_dir: str | None = None) -> None:
    """In a forked child: run the test cells the worker sends, with the exercises as proxies. Each result
    says how long the cell waited for the learner's kernel (`learner_s`) and, for a hidden test, what it sent
    (`inputs`: `hidden_inputs.InputRecorder` fingerprints, for the leak scan)."""
    listener, address = listen(socket_dir)
    link = KernelLink(listener, control)
    own = {name: Contract.from_json(item) for name, item in (contracts or {}).items()}
    recorder = InputRecorder()
    trusted = {**namespace, **learner_proxies(exercises, link, shared, own, recorder)}
    _json_frame(control, {"address": address, "pid": os.getpid()})
    while True:
        try:
            request = _read_json(control)
        except ConnectionError:
            return
        if request.get("op") == "kernel-gone":
            link.kernel_gone(str(request.get("token", "")))  # about a cell done, or about the next one
            continue
        if request.get("op") != "run":
            return
        link.begin(request["token"])
        recorder.active = bool(request.get("hidden"))
        started = time.monotonic()
        outputs = run_cell(request["source"], trusted, float(request["timeout"]))
        kernel = link.end(bool(request.get("keep")))
        _json_frame(control, {"outputs": outputs, "kernel": kernel, "seconds": round(time.monotonic() - started, 3),
                              "learner_s": round(link.waited, 3), "inputs": recorder.take()})


# ---------------------------------------------------------------------------
# The chapter zygote
# ---------------------------------------------------------------------------

def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def run_zygote(control: socket.socket) -> int:
    """Run the setup cells the first message names, then fork one trusted child per `fork` request."""
    setup = _read_json(control)
    os.chdir(setup["cwd"])
    namespace: dict = {"__name__": "__main__"}
    problems = []
    for index, source in enumerate(setup["cells"]):
        outputs = run_cell(source, namespace, float(setup["timeout"]))
        problems += [f"setup cell {index}: {output['ename']}: {output['evalue']}" for output in outputs
                     if output["output_type"] == "error"]
    shared = shared_names(namespace)
    _json_frame(control, {"ready": not problems, "problems": problems})
    if problems:
        return 1
    while True:
        try:
            request = _read_json(control)
        except ConnectionError:
            return 0
        if request.get("op") != "fork":
            return 0
        _reap()
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the trusted child: never returns into the zygote's loop
            code = 0
            try:
                control.close()
                ours.close()
                join_group(request.get("cgroup_procs") or [])
                serve_submission(theirs, namespace, shared, setup["exercises"], setup.get("contracts"),
                                 request.get("socket_dir"))
            except BaseException:  # noqa: BLE001 - reported in the worker's log; the worker sees the closed socket
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        socket.send_fds(control, [json.dumps({"pid": pid}).encode("utf-8")], [ours.fileno()])
        ours.close()


def join_group(procs_files: list[str]) -> None:
    """Move this process into its submission's trusted control group (each hierarchy's `cgroup.procs`)."""
    for path in procs_files:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the trusted grader process (chapter zygote)")
    parser.add_argument("--control", type=int, required=True, help="file descriptor of the control socket")
    args = parser.parse_args(argv)
    control = socket.socket(fileno=args.control)
    code = run_zygote(control)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ---------------------------------------------------------------------------
# The worker's side
# ---------------------------------------------------------------------------

def trusted_spec(source, cwd: Path) -> dict:
    """What the trusted side of a chapter needs, from its trusted nbgrader source notebook: the shared
    setup cells (code cells before the first solution cell), the exercise names (solution cells), the
    test cells (grade id -> source) and a key that changes with any of them."""
    import hashlib

    cells = [cell for cell in source.cells if cell.cell_type == "code"]
    meta = [cell.metadata.get("nbgrader", {}) for cell in cells]
    first = next((index for index, item in enumerate(meta) if item.get("solution")), len(cells))
    spec = {
        "hidden_cells": sorted(item["grade_id"] for cell, item in zip(cells, meta)
                               if item.get("grade") and cell.metadata.get("course", {}).get("hidden_test")),
        "setup_cells": [cell.source for cell in cells[:first]],
        "exercises": [item["grade_id"] for item in meta if item.get("solution")],
        "contracts": {item["grade_id"]: exercise_contract(item["grade_id"], cell.source, cell.metadata).to_json()
                      for cell, item in zip(cells, meta) if item.get("solution")},
        "test_cells": {item["grade_id"]: cell.source for cell, item in zip(cells, meta)
                       if item.get("grade") and not item.get("solution")},
        "cwd": str(cwd),
    }
    spec["key"] = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()
    return spec


class TrustedSubmission:
    """The worker's handle on one trusted child: the address the kernel connects to, and `run`."""

    def __init__(self, control: socket.socket):
        self.control = control
        try:
            hello = _read_json(control)
            address = hello["address"]
            self.address = address if isinstance(address, str) else int(address)
            self.pid = int(hello["pid"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            control.close()
            raise GradingError(f"the trusted grader process for this submission did not start: "
                               f"{error.__class__.__name__}: {error}") from None

    def run(self, source: str, timeout_s: float, token: str, kernel_gone: bool = False, keep: bool = False,
            hidden: bool = False) -> dict:
        """Run one test cell; `{"outputs", "kernel", "seconds", "learner_s", "inputs"}` (GradingError if the
        child is gone). With `kernel_gone` no kernel serves it: each call of a learner's function fails at once.
        With `keep` the kernel's serving cell is kept for the next test cell (`"kernel": "kept"`). With `hidden`
        (a hidden test) the arguments sent are recorded (`inputs`)."""
        try:
            if kernel_gone:
                self.kernel_gone(token)
            _json_frame(self.control, {"op": "run", "source": source, "timeout": timeout_s, "token": token,
                                       "keep": keep, "hidden": hidden})
            return _read_json(self.control)
        except (OSError, ValueError) as error:
            raise GradingError(f"the trusted grader process ended: {error.__class__.__name__}: {error}") from None

    def kernel_gone(self, token: str) -> None:
        """Tell the child that the kernel's serving cell for `token` has ended (called while `run` waits)."""
        try:
            _json_frame(self.control, {"op": "kernel-gone", "token": token})
        except OSError:
            pass

    def close(self) -> None:
        try:
            _json_frame(self.control, {"op": "exit"})
        except OSError:
            pass
        self.control.close()


class LazyTrusted:
    """A `TrustedSubmission` forked from `zygote` on first use (the first test cell), so that the zygote's
    setup overlaps with the kernel's start and the cells before the first test; the child joins the
    control group whose `cgroup.procs` files are `cgroup_procs` (the submission's trusted group)."""

    def __init__(self, zygote: TrustedZygote, cgroup_procs: list[str] | None = None, socket_dir: str | None = None):
        self.zygote = zygote
        self.cgroup_procs = list(cgroup_procs or [])
        self.socket_dir = socket_dir
        self.submission: TrustedSubmission | None = None

    def _get(self) -> TrustedSubmission:
        if self.submission is None:
            self.submission = self.zygote.fork(self.cgroup_procs, self.socket_dir)
        return self.submission

    @property
    def address(self) -> int | str:
        return self._get().address

    @property
    def pid(self) -> int | None:
        return None if self.submission is None else self.submission.pid

    def run(self, source: str, timeout_s: float, token: str, kernel_gone: bool = False, keep: bool = False,
            hidden: bool = False) -> dict:
        return self._get().run(source, timeout_s, token, kernel_gone, keep, hidden)

    def kernel_gone(self, token: str) -> None:
        if self.submission is not None:
            self.submission.kernel_gone(token)

    def close(self) -> None:
        if self.submission is not None:
            self.submission.close()


class TrustedZygote:
    """The worker's chapter zygote: started for a source notebook's setup (again when the chapter or the
    process changes), then one `TrustedSubmission` per submission."""

    def __init__(self, env: dict, stderr: int | None = None):
        self.env, self.stderr = env, stderr
        self.process: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.key: str | None = None
        self.ready = False

    def ensure(self, spec: dict, timeout_s: float) -> None:
        """Start the zygote for `spec` (`trusted_spec`) unless it runs already; its setup runs meanwhile
        (`fork` waits for it), so that it overlaps with the kernel's start."""
        if self.process is not None and self.process.poll() is None and self.key == spec["key"]:
            return
        self.close()
        ours, theirs = socket.socketpair()
        env = {**self.env, **TRUSTED_ENV}
        self.process = subprocess.Popen([sys.executable, "-m", "tools.course.classroom.trusted",
                                         "--control", str(theirs.fileno())], pass_fds=(theirs.fileno(),), env=env,
                                        cwd=spec["cwd"], stdin=subprocess.DEVNULL, stdout=self.stderr,
                                        stderr=self.stderr)
        theirs.close()
        self.control, self.key, self.ready = ours, spec["key"], False
        _json_frame(ours, {"cells": spec["setup_cells"], "exercises": spec["exercises"], "cwd": spec["cwd"],
                           "contracts": spec.get("contracts", {}), "timeout": timeout_s})

    def _wait_ready(self) -> None:
        if self.ready:
            return
        try:
            reply = _read_json(self.control)
        except (OSError, ValueError) as error:
            self.close()
            raise GradingError(f"the trusted grader process ended during the setup cells: {error}") from None
        if not reply.get("ready"):
            self.close()
            raise GradingError("the chapter's setup cells failed in the trusted grader process: "
                               + "; ".join(reply.get("problems", []))[:2000])
        self.ready = True

    def fork(self, cgroup_procs: list[str] | None = None, socket_dir: str | None = None) -> TrustedSubmission:
        if self.control is None:
            raise GradingError("the trusted grader process is not running")
        self._wait_ready()
        _json_frame(self.control, {"op": "fork", "cgroup_procs": list(cgroup_procs or []), "socket_dir": socket_dir})
        message, fds, _, _ = socket.recv_fds(self.control, 4096, 1)
        if not fds:
            raise GradingError(f"the trusted grader process did not fork a child: {message!r}")
        return TrustedSubmission(socket.socket(fileno=fds[0]))

    def close(self) -> None:
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


if __name__ == "__main__":
    sys.exit(main())
