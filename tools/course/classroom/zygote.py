"""Kernels forked from a zygote that imported ipykernel once, for nbgrader inside a grading worker.

A fresh `python -m ipykernel_launcher` spends most of its start importing ipykernel, IPython, zmq
and tornado. The worker's zygote (`sandbox_launch.py zygote`, root, in the worker's namespaces,
running no submission code) does that once; per kernel it forks, applies the kernel's plan
exactly as the launcher's `kernel` role does (namespaces, private mounts, limits, uid, folder,
environment) and starts ipykernel in the fork. The worker is a child subreaper, so each kernel
becomes its child: `ZygoteProvisioner` waits for it and signals it (its process group) as
jupyter_client's `LocalProvisioner` does a kernel it started itself.

nbgrader's `Execute` preprocessor fixes its kernel manager class, so `ZygoteExecute` takes its
place in `Autograde.autograde_preprocessors` (`use_zygote`); its config (`Execute.*`) still applies.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import signal
import subprocess
import sys
import uuid
from typing import Any

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute
from traitlets import Unicode

from tools.course.classroom.sandbox import LAUNCHER, ForkedProcess
from tools.errors import GradingError

_PR_SET_CHILD_SUBREAPER = 36


class KernelZygote:
    """The worker's zygote process: started on first use (again if it died), one JSON line per kernel;
    it ends with the worker (end of its input, or its namespace). A failure raises `GradingError`,
    which nbgrader records for the submission; the submission's log says why."""

    def __init__(self, env: dict, stderr: int | None = None):
        self.env, self.stderr = env, stderr
        self.process: subprocess.Popen | None = None

    def _start(self) -> None:
        if _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise GradingError(f"cannot become a child subreaper: {os.strerror(ctypes.get_errno())}")
        home = pathlib.Path(self.env["HOME"])
        home.mkdir(mode=0o700, exist_ok=True)
        self.process = subprocess.Popen([sys.executable, str(LAUNCHER), "zygote"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, env=self.env, cwd=home)
        hello = self.process.stdout.readline()
        if not hello or not json.loads(hello).get("ready"):
            raise GradingError(f"the kernel zygote did not start (exit {self.process.wait()})")

    def fork_kernel(self, plan: str, connection_file: str, command: list[str], log: str, env: dict) -> int:
        """Have the zygote start one kernel; return its pid (a child of this process)."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        request = {"plan": plan, "connection_file": connection_file, "command": command, "log": log, "env": env}
        self.process.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise GradingError(f"the kernel zygote exited {self.process.wait()}")
        reply = json.loads(line)
        if "pid" not in reply:
            raise GradingError(reply.get("error", "the zygote started no kernel"))
        return reply["pid"]



class ZygoteKernel(ForkedProcess):
    """A kernel forked by the zygote, with the parts of `subprocess.Popen` jupyter_client uses."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        super().__init__(pid, None, None)

    def poll(self) -> int | None:
        try:
            return super().poll()
        except ChildProcessError:  # reaped already: it has ended, how is not known
            self.returncode = -1
            return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGKILL)  # PID 1 of its own namespace, the kernel has no SIGTERM handler


class ZygoteProvisioner(LocalProvisioner):
    """`LocalProvisioner`, except that the kernel comes from the worker's zygote."""

    log_path = Unicode("", help="the submission's log: the kernel's stdout and stderr").tag(config=True)
    zygote: KernelZygote | None = None  # set by the worker

    async def launch_kernel(self, cmd: list[str], **kwargs: Any):
        if self.zygote is None:
            raise GradingError("no kernel zygote in this process")
        plan, connection = cmd[cmd.index("--plan") + 1], cmd[cmd.index("--connection-file") + 1]
        env = {**(kwargs.get("env") or os.environ), "JPY_PARENT_PID": str(os.getpid())}  # as `launch_kernel` sets it
        pid = self.zygote.fork_kernel(plan, connection, cmd[cmd.index("--") + 1:], self.log_path or os.devnull, env)
        self.process = ZygoteKernel(pid)
        self.pid = self.pgid = pid  # the kernel leads its own session, as `launch_kernel` makes a kernel do
        self.cwd = kwargs.get("cwd", pathlib.Path.cwd())
        return self.connection_info


class ZygoteKernelManager(AsyncKernelManager):
    """An `AsyncKernelManager` whose kernels come from the zygote (`ZygoteProvisioner`)."""

    async def _async_pre_start_kernel(self, **kw: Any):
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = ZygoteProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)

    pre_start_kernel = _async_pre_start_kernel


class ZygoteExecute(Execute):
    """nbgrader's `Execute`, with kernels from the zygote."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("kernel_manager_class", ZygoteKernelManager)
        super().__init__(*args, **kwargs)


def use_zygote(config, zygote: KernelZygote, log_path: str) -> None:
    """Configure an `Autograde` run (its `config`) to take its kernels from `zygote`."""
    ZygoteProvisioner.zygote = zygote
    config.ZygoteProvisioner.log_path = log_path
    steps = config.Autograde.get("autograde_preprocessors") or Autograde.class_traits()["autograde_preprocessors"].default()
    config.Autograde.autograde_preprocessors = [ZygoteExecute if step is Execute else step for step in steps]


def reap_orphans() -> int:
    """Reap children that ended unwaited for (a subreaper adopts orphans); return how many."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1


def _libc():
    return ctypes.CDLL(None, use_errno=True)
