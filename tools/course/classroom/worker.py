"""The long-lived grading worker: nbgrader imported once, then one submission autograded per request.

It runs inside a worker slot's sandbox, as root in the slot's namespaces: forked by
`tools.course.classroom.slot` from the batch process (nbgrader already imported), or started as
`python -m tools.course.classroom.worker`. It runs only nbgrader's code. Every submission's code runs
in a kernel of its own, a new process (in namespaces of its own, under the slot's uid) forked from
the worker's kernel zygote (`tools.course.classroom.zygote`) when the request gives the zygote's
environment (`zygote_env`), else started by the kernelspec's launcher.

Protocol: JSON lines. The worker answers `{"ready": ...}` once imported, then one reply per
request on its original stdout. Once started it points fds 0 and 1 at /dev/null and, for each
request, fds 1 and 2 at that submission's log, so nothing a kernel or nbgrader prints can reach
the protocol. A request names a fresh private course folder, the submission's student and the
environment (Jupyter paths of that submission's kernel folder); each is graded with a fresh
`Autograde` converter and config, so nothing of one submission is left for the next but the
modules nbgrader imported.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
import traceback

IMPORT_STARTED = time.monotonic()

from nbgrader.converters import Autograde  # noqa: E402 - timed: the import is what a worker pays once
from nbgrader.converters.base import NbGraderException  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from traitlets.config.loader import PyFileConfigLoader  # noqa: E402

from tools.course.classroom.contention import ContentionProbe  # noqa: E402
from tools.course.classroom.split_execute import use_split_execute  # noqa: E402
from tools.course.classroom.trusted import LazyTrusted, TrustedZygote  # noqa: E402
from tools.course.classroom.zygote import (  # noqa: E402
    KernelZygote,
    ZygoteKernelManager,
    reap_orphans,
    use_zygote,
)

PROTOCOL = "grading-worker/v1"
LOGGER = "grading_worker"
IMPORT_SECONDS = round(time.monotonic() - IMPORT_STARTED, 2)
_zygote: dict = {}  # the worker's kernel zygote and trusted chapter zygote, started with the first request


def protocol_streams() -> tuple:
    """The request and reply streams (duplicates of fds 0 and 1); fds 0 and 1 then point at /dev/null."""
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return requests, replies


def log_to(path: str) -> None:
    """Point fds 1 and 2 (nbgrader's log, and what the kernel inherits) at `path`."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def autograde(request: dict) -> dict:
    """Autograde one submission in its private course folder; return the reply."""
    started = time.monotonic()
    os.environ.clear()
    os.environ.update(request["env"])
    course, slug, student = request["course"], request["slug"], request["student"]
    config = PyFileConfigLoader("nbgrader_config.py", path=course).load_config()
    config.Execute.timeout = int(request["cell_timeout"])
    # Every cell's output is in hand when nbclient shuts the kernel down; the kernel and its whole
    # namespace are discarded anyway, so skip the graceful shutdown's wait.
    config.Execute.shutdown_kernel = "immediate"
    marks: dict[str, float] = {}
    config.Execute.on_notebook_start = lambda **_: marks.setdefault("kernel_ready", time.monotonic())
    config.Execute.on_cell_complete = lambda **_: marks.__setitem__("cells_done", time.monotonic())
    if request.get("sockets"):  # the kernel has a network namespace of its own: Unix sockets in a shared folder
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = os.path.join(request["sockets"], "kernel")
    manager = None
    if request.get("zygote_env"):
        if "zygote" not in _zygote:
            _zygote["zygote"] = KernelZygote(request["zygote_env"], _zygote.get("stderr"))
        use_zygote(config, _zygote["zygote"], request["log"])
        manager = ZygoteKernelManager
    report: dict = {}
    trusted = None
    hidden_inputs: list[str] = []
    setup_timeout = int(request.get("setup_timeout") or request["cell_timeout"])
    if request.get("trusted"):
        if "trusted" not in _zygote:
            _zygote["trusted"] = TrustedZygote(request["trusted_env"], _zygote.get("stderr"))
        _zygote["trusted"].ensure(request["trusted"], float(setup_timeout))
        trusted = LazyTrusted(_zygote["trusted"], request.get("trusted_cgroup_procs"), request.get("sockets"))
        use_split_execute(config, trusted, request["trusted"]["test_cells"], report,
                          int(request.get("output_bytes", 8 * 2 ** 20)), manager,
                          hidden_cells=request["trusted"].get("hidden_cells", ()), setup_timeout=setup_timeout,
                          probe=ContentionProbe(request.get("cgroup_usage_file"), request.get("cpus")),
                          report_path=request.get("report_path"), hidden_inputs=hidden_inputs)
    coursedir = CourseDirectory(root=course, assignment_id=slug, student_id=student, config=config)
    converter = Autograde(coursedir=coursedir, config=config, log=logging.getLogger(LOGGER))
    converter.force = True
    reply = {"status": "graded", "reason": None}
    try:
        converter.start()
    except NbGraderException as error:  # nbgrader logged the cause; the host reads the log's tail
        reply = {"status": "failed", "reason": f"nbgrader autograde failed: {error}"}
    except Exception as error:  # recorded for this submission; the worker goes on with the next
        traceback.print_exc()
        reply = {"status": "failed", "reason": f"grading worker error: {error.__class__.__name__}: {error}"}
    finally:
        if trusted is not None:
            trusted.close()
    if request.get("hidden_inputs_path"):
        with open(request["hidden_inputs_path"], "w", encoding="utf-8") as handle:
            json.dump(hidden_inputs, handle)
    reply["boundary"] = report
    reap_orphans()  # a kernel that ended unwaited for (adopted by this subreaper) leaves no zombie
    ended = time.monotonic()
    reply["seconds"] = round(ended - started, 2)
    reply["monotonic"] = {"started": started, **marks, "ended": ended}  # the host adds the launcher's own
    return reply


def serve(requests, replies) -> int:
    """Answer requests until the host closes the request stream."""
    replies.write(json.dumps({"ready": True, "protocol": PROTOCOL, "pid": os.getpid(),
                              "import_seconds": IMPORT_SECONDS}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        log_to(request["log"])
        reply = autograde(request)
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(json.dumps({"id": request["id"], **reply}) + "\n")
        replies.flush()
    return 0


def forget_inherited_event_loops() -> None:
    """In a worker forked from a process that ran asyncio (papermill and nbclient use jupyter_core's
    `run_sync`): drop the inherited event loops, which share their selectors with the parent's, and
    task runners whose threads did not survive the fork, so that nbclient makes its own. Run first in
    the child (`WorkerSandbox.fork(prepare=...)`): the loops close their descriptors when collected."""
    asyncio.set_event_loop(None)
    utils = sys.modules.get("jupyter_core.utils")
    if utils is not None:
        utils._loop.set(None)
        utils._runner_map.clear()


def main() -> int:
    """Serve requests on fds 0 and 1 (a new interpreter, or a child forked by `WorkerSandbox.fork`)."""
    requests, replies = protocol_streams()
    _zygote["stderr"] = os.dup(2)  # the worker's own log, for the zygote's messages
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    log = logging.getLogger(LOGGER)
    log.handlers = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    code = serve(requests, replies)
    replies.close()
    os._exit(code)  # nothing left to flush or clean up: skip the interpreter's slow teardown


if __name__ == "__main__":
    sys.exit(main())
