"""Limits and isolation for running untrusted submissions: what this host allows, a worker's sandbox
and each kernel's.

A worker slot is one folder (`worker_dir`) and one uid. On Linux as root with a working
`unshare`, the grader (nbgrader, or the long-lived grading worker) runs as PID 1's child in new
network, PID and mount namespaces (only loopback; the repository, the course folder and private
folders masked). Each kernel (one submission) gets a folder of its own (`KernelFolder`: home, cwd
and TMPDIR, plan, kernelspec) and, in those namespaces:

* a control group of its own (`tools.course.classroom.cgroups`: cgroup v2 where delegated, else v1;
  memory, tasks and a CPU quota over all its processes), which the kernel joins before it starts
  anything, emptied and removed after the submission (`finish_kernel`);
* its own PID, mount and IPC namespaces: every process, SysV object and POSIX queue of the
  submission ends with it;
* a filesystem built from what it needs (`plan_kernel_root`, `sandbox_launch.build_root`): system
  paths, the interpreter, the venv and the course's `tools`, read-only; its home, /tmp, /var/tmp and
  /dev/shm on size-capped tmpfs; nothing else of the host (no other checkout, no /run/lock);
* the slot's unprivileged uid, no_new_privs, and setrlimit limits on address space, CPU time, file
  size and process count.

Elsewhere only the kernel's rlimits (and, as root, the control group) and the wall-clock limits apply.
Either way the sandbox reports what was actually enforced (`WorkerSandbox.enforced`: which mechanism
held each limit, what the submission used), never just what was asked for.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tools.course.classroom.cgroups import BatchCgroups, CgroupLimits, SubmissionCgroup
from tools.errors import ConfigError

LAUNCHER = Path(__file__).with_name("sandbox_launch.py")
UNSHARE_FLAGS = ("--net", "--pid", "--fork", "--mount-proc", "--kill-child")
SANDBOX_UID_BASE = 64200
SANDBOX_UID_SPAN = 2048
"""Kernels run as uids (and gids) from SANDBOX_UID_BASE on, no passwd entry needed; `UidPool` hands
each worker slot one that no other batch on this host holds and no process runs as."""
UID_LOCK_DIR = Path(tempfile.gettempdir()) / "course-sandbox-uids"

KERNEL_ENV = {
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""Fixed environment of every kernel: nothing of the grader's environment (tokens, paths) leaks in.
Math libraries get one thread each, so N parallel workers do not oversubscribe the CPUs."""
KERNEL_PASS_ENV = ("NBGRADER_EXECUTION", "JPY_PARENT_PID", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
"""Passed through when set. The OpenBLAS pair is set on machines whose processors make older OpenBLAS
builds crash or compute wrong results; a kernel must see the same setting as the grader."""
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
"""Shared scratch folders that each kernel (with namespaces) sees as its own empty tmpfs."""
PRIVATE_DIR_MB = 256
LEFTOVER_GRACE_S = 5.0
"""How long a kernel's processes may take to vanish with its namespace before they count as leftovers."""
SETUP_TIMEOUT_MIN_S = 120
TRUSTED_MAX_TASKS = 32


@dataclass(frozen=True)
class Limits:
    """What a submission may use. None means not limited (recorded as such)."""

    cell_timeout_s: int = 30
    notebook_timeout_s: float = 600.0
    memory_mb: int | None = 4096
    cpu_seconds: int | None = 600
    max_processes: int | None = 64
    file_size_mb: int | None = 256
    cpus: float | None = 1.0
    output_mb: int = 8
    setup_timeout_s: int | None = None
    """Each setup cell's limit (the locked cells before the first exercise, on both sides); None: the larger of
    `SETUP_TIMEOUT_MIN_S` and four cell limits."""
    trusted_memory_mb: int | None = 2048
    """The memory of a submission's trusted grader process beyond what its chapter zygote holds (its own group)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.cell_timeout_s, int) and self.cell_timeout_s > 0):
            raise ConfigError(f"cell timeout must be a positive whole number of seconds, got {self.cell_timeout_s!r}")
        if not self.notebook_timeout_s > self.cell_timeout_s:
            raise ConfigError(f"notebook timeout ({self.notebook_timeout_s} s) must exceed the cell timeout "
                              f"({self.cell_timeout_s} s)")
        for name in ("memory_mb", "cpu_seconds", "max_processes", "file_size_mb", "setup_timeout_s",
                     "trusted_memory_mb"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ConfigError(f"{name} must be a positive whole number or None, got {value!r}")
        if self.cpus is not None and not (isinstance(self.cpus, (int, float)) and 0.01 <= self.cpus <= 1024):
            raise ConfigError(f"cpus must be a number of CPUs between 0.01 and 1024 or None, got {self.cpus!r}")
        if not (isinstance(self.output_mb, int) and self.output_mb > 0):
            raise ConfigError(f"output_mb must be a positive whole number, got {self.output_mb!r}")

    @property
    def setup_s(self) -> int:
        """Each setup cell's limit (see `setup_timeout_s`)."""
        return self.setup_timeout_s or max(SETUP_TIMEOUT_MIN_S, 4 * self.cell_timeout_s)

    def cgroup_limits(self) -> CgroupLimits:
        """What a submission's control group allows: all its processes together."""
        return CgroupLimits(None if self.memory_mb is None else self.memory_mb * 1024 * 1024, self.max_processes,
                            self.cpus)

    def trusted_cgroup_limits(self) -> CgroupLimits:
        """What a submission's trusted grader process may use: its own group beside the kernel's."""
        return CgroupLimits(None if self.trusted_memory_mb is None else self.trusted_memory_mb * 1024 * 1024,
                            TRUSTED_MAX_TASKS, self.cpus)

    def kernel_rlimits(self) -> dict:
        mib = 1024 * 1024
        return {
            "memory_bytes": None if self.memory_mb is None else self.memory_mb * mib,
            "cpu_seconds": self.cpu_seconds,
            "file_size_bytes": None if self.file_size_mb is None else self.file_size_mb * mib,
            "max_processes": self.max_processes,
        }


@dataclass(frozen=True)
class HostIsolation:
    """What this host lets a worker use."""

    namespaces: bool
    separate_uid: bool
    reason: str
    unshare: str | None = None


@functools.lru_cache(maxsize=1)
def probe_host() -> HostIsolation:
    """Check once per process whether workers can get namespaces and their own uid."""
    if not sys.platform.startswith("linux"):
        return HostIsolation(False, False, f"{sys.platform}: Linux namespaces unavailable")
    if os.geteuid() != 0:
        return HostIsolation(False, False, "not root: no network namespace, kernel shares the grader's uid")
    # Without a mount namespace an unprivileged uid can only run this Python if no folder above it is closed.
    own_uid = not kernel_needs_masks()
    unshare = shutil.which("unshare")
    if unshare is None:
        return HostIsolation(False, own_uid, "root, but `unshare` (util-linux) is not installed")
    try:
        probe = subprocess.run([unshare, *UNSHARE_FLAGS, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return HostIsolation(False, own_uid, f"`unshare` could not run: {error}")
    if probe.returncode != 0:
        return HostIsolation(False, own_uid, f"`unshare {' '.join(UNSHARE_FLAGS)}` failed: {probe.stderr.strip()}")
    return HostIsolation(True, True, "root with working unshare: network, PID and mount namespaces, own uid", unshare)


def blocked_ancestor(path: Path) -> Path | None:
    """The outermost folder above `path` that other users cannot traverse, if any."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not os.stat(parent).st_mode & 0o001:
            return parent
    return None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def tools_root() -> str:
    """The folder that holds the course's `tools` package, as this process imported it: on a kernel's
    PYTHONPATH so that its serving cell finds `tools` whatever the venv's `.pth` files say (in the kernel's
    filesystem that folder holds `tools` and nothing else of the checkout)."""
    import tools

    return str(Path(os.path.abspath(tools.__file__)).parent.parent)


def kernel_paths(repo_root: Path | None = None) -> list[Path]:
    """What a kernel started with this interpreter must reach, as absolute (unresolved) paths.

    The interpreter's prefixes and bin folder, the `tools` package actually imported (the
    launcher lives there) and every folder on `sys.path` (site-packages, `.pth` entries) except
    the repository itself, folders inside it and folders around it: those would expose hidden
    tests. Nothing here is guessed from where a checkout usually keeps its venv.
    """
    import tools

    executable_dir = Path(os.path.abspath(sys.executable)).parent
    found = [Path(sys.base_prefix), Path(sys.prefix), executable_dir, Path(tools.__file__).parent]
    repo = repo_root.resolve() if repo_root is not None else None
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        path = Path(os.path.abspath(entry))
        resolved = path.resolve()
        if repo is not None and (_inside(resolved, repo) or repo in resolved.parents or _inside(repo, resolved)):
            continue
        found.append(path)
    unique: list[Path] = []
    for path in found:
        path = Path(os.path.abspath(path))
        if path not in unique:
            unique.append(path)
    return unique


def symlinks_on(path: Path) -> list[tuple[str, str]]:
    """`(location, target)` of every symbolic link on the way to `path`, locations resolved up to
    the link itself, so that a masked folder can show the same link again."""
    links, current = [], Path("/")
    for part in path.parts[1:]:
        candidate = current / part
        if os.path.islink(candidate):
            links.append((str(candidate), os.path.realpath(candidate)))
            current = Path(os.path.realpath(candidate))
        else:
            current = candidate
    return links


def plan_masks(repo_root: Path, course: Path) -> list[dict]:
    """What submissions must not see, and what must stay visible inside it.

    Hidden: the repository (hidden tests, gradebooks, git history), the course folder, and every
    folder above what the kernel needs (`kernel_paths`) that other users cannot enter, such as a
    private home or a `mktemp -d` folder holding the checkout. Kept (bound back read-only): what
    the kernel needs, plus each symbolic link on the way to it that a mask would hide, recreated.

    An entry nested in another merges into it unless one of the outer entry's kept folders holds
    it; such an entry is applied on its own after the outer one, so a kept folder never uncovers
    what must stay hidden.
    """
    repo_root, course = repo_root.resolve(), course.resolve()
    needs = kernel_paths(repo_root)
    entries = [{"path": repo_root, "keep": set()}]
    if not _inside(course, repo_root):
        entries.append({"path": course, "keep": set()})
    for need in needs:
        resolved = need.resolve()
        if _inside(resolved, repo_root):
            entries[0]["keep"].add(resolved)
        blocked = blocked_ancestor(resolved)
        if blocked is not None:
            entries.append({"path": blocked, "keep": {resolved}})
    links = {link for need in needs for link in symlinks_on(need)}
    merged: list[dict] = []
    for entry in sorted(entries, key=lambda item: len(item["path"].parts)):
        outer = next((m for m in merged if _inside(entry["path"], m["path"])
                      and not any(_inside(entry["path"], kept) for kept in m["keep"])), None)
        if outer is None:
            merged.append({"path": entry["path"], "keep": set(entry["keep"])})
        else:
            outer["keep"] |= entry["keep"]
    plan = []
    for entry in merged:
        hidden_links = sorted((location, target) for location, target in links
                              if _inside(Path(location), entry["path"]) and Path(location) != entry["path"])
        plan.append({"path": str(entry["path"]), "keep": sorted(str(path) for path in entry["keep"]),
                     "links": [{"path": location, "target": target} for location, target in hidden_links]})
    return plan


def kernel_needs_masks(repo_root: Path | None = None) -> bool:
    """True when some folder the kernel needs lies under a folder other users cannot enter."""
    return any(blocked_ancestor(path.resolve()) is not None for path in kernel_paths(repo_root))


def _uid_in_use(uid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    return True
            except FileNotFoundError:
                continue
    return False


class UidPool:
    """`count` kernel uids held with flock for the life of the pool: concurrent batches never share one."""

    def __init__(self, count: int):
        self._held: dict[int, int] = {}
        UID_LOCK_DIR.mkdir(mode=0o755, exist_ok=True)
        for uid in range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SANDBOX_UID_SPAN):
            if len(self._held) == count:
                break
            fd = os.open(UID_LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if _uid_in_use(uid):
                os.close(fd)
                continue
            self._held[uid] = fd
        if len(self._held) < count:
            self.release()
            raise ConfigError(f"no {count} free sandbox uids in {SANDBOX_UID_BASE}-{SANDBOX_UID_BASE + SANDBOX_UID_SPAN}")

    @property
    def uids(self) -> list[int]:
        return sorted(self._held)

    def release(self) -> None:
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    def __enter__(self) -> "UidPool":
        return self

    def __exit__(self, *_) -> None:
        self.release()


def plan_private_dirs(needs: list[Path], workdir: Path, size_mb: int = PRIVATE_DIR_MB) -> list[dict]:
    """Mask entries that give a kernel empty /tmp, /var/tmp and /dev/shm of its own, its folder
    `workdir` bound back writable and what it needs (`needs`, e.g. a venv under /tmp) read-only."""
    workdir = workdir.resolve()
    plan = []
    for name in PRIVATE_DIRS:
        folder = Path(name)
        if not folder.is_dir():
            continue
        folder = folder.resolve()
        keep = sorted({str(need.resolve()) for need in needs if _inside(need.resolve(), folder)})
        if str(folder) in keep or any(_inside(folder, need.resolve()) for need in needs):
            continue  # the kernel needs the whole folder: nothing to hide there
        links = sorted({link for need in needs for link in symlinks_on(need)
                        if _inside(Path(link[0]), folder) and Path(link[0]) != folder})
        plan.append({"path": str(folder), "keep": keep, "size_mb": size_mb,
                     "writable": [str(workdir)] if _inside(workdir, folder) else [],
                     "links": [{"path": location, "target": target} for location, target in links]})
    return plan


SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys/devices/system/cpu")
"""Host paths every kernel's filesystem holds read-only: programs, libraries and the CPU topology that torch
reads. Of /etc only `sandbox_launch.ETC_FILES`; what else it holds comes from `kernel_paths`."""
ROOT_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
LEARNER_NAME = "learner"


def kernel_etc(uid: int | None, home: Path) -> dict:
    """The kernel's /etc: the dynamic linker's files and the time zone from the host, and generated user,
    group, host and name-service tables that name only root and the kernel's own uid."""
    uid_line = f"{LEARNER_NAME}:x:{uid}:{uid}:{LEARNER_NAME}:{home}:/usr/sbin/nologin\n" if uid is not None else ""
    group_line = f"{LEARNER_NAME}:x:{uid}:\n" if uid is not None else ""
    return {"files": {"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" + uid_line,
                      "group": "root:x:0:\n" + group_line,
                      "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost\n",
                      "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
                      "resolv.conf": ""}}


def plan_kernel_root(needs: list[Path], home: Path, root_dir: Path, size_mb: int | None = None,
                     uid: int | None = None, shared: list[Path] | None = None) -> dict:
    """The kernel's own filesystem (`sandbox_launch.build_root`): what it needs read-only (system paths
    and `needs`, resolved, each once), the symbolic links on the way to them, a minimal /etc (`kernel_etc`),
    `shared` folders bound writable (its Unix sockets to the grader), scratch tmpfs folders and its home on a
    tmpfs, each of `size_mb` (default `PRIVATE_DIR_MB`) at most. Built in `root_dir` (an empty folder only
    root can enter)."""
    size_mb = PRIVATE_DIR_MB if size_mb is None else size_mb
    read_only, links = [], set()
    for path in [Path(p) for p in SYSTEM_PATHS] + list(needs):
        if not os.path.lexists(path):
            continue
        links |= set(symlinks_on(path))
        resolved = str(path.resolve())
        if not any(_inside(Path(resolved), Path(kept)) for kept in read_only):
            read_only = [kept for kept in read_only if not _inside(Path(kept), Path(resolved))] + [resolved]
    return {
        "dir": str(root_dir),
        "read_only": sorted(read_only, key=lambda path: (len(Path(path).parts), path)),
        "links": [{"path": location, "target": target} for location, target in sorted(links)],
        "scratch": [{"path": path, "size_mb": size_mb} for path in ROOT_SCRATCH],
        "home": {"path": str(home), "size_mb": size_mb},
        "etc": kernel_etc(uid, home),
        "shared": [str(path) for path in shared or []],
    }


@dataclass(frozen=True)
class KernelFolder:
    """One kernel's own folder: its home, cwd and TMPDIR (`home`, owned by the slot's uid), the
    plan the launcher reads, its report, the kernelspec (`jupyter`) and the connection files (`runtime`)."""

    dir: Path
    home: Path
    plan_path: Path
    report_path: Path
    jupyter: Path
    runtime: Path
    sockets: Path | None = None  # where it and the grader meet (Unix sockets), with a network namespace of its own
    cgroup: SubmissionCgroup | None = None
    trusted_cgroup: SubmissionCgroup | None = None  # the submission's trusted grader process, beside the kernel

    def report(self) -> dict | None:
        return _read_json(self.report_path)


class ForkedProcess:
    """A child forked by `WorkerSandbox.fork`, with the parts of `subprocess.Popen` the slot uses."""

    def __init__(self, pid: int, stdin, stdout):
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


@dataclass
class WorkerRun:
    returncode: int | None
    seconds: float
    killed_at_notebook_timeout: bool
    leftover_processes_killed: int
    cleaned: dict = field(default_factory=dict)  # `WorkerSandbox.finish_kernel`'s account


class WorkerSandbox:
    """The sandbox of one worker slot: its namespaces and masks, its uid, its kernels' folders, and the
    processes run in it (one-shot `run`, or a long-lived `start`)."""

    def __init__(self, worker_dir: Path, uid: int | None, limits: Limits, host: HostIsolation,
                 masks: list[dict], kernel_name: str = "python3", repo_root: Path | None = None,
                 cgroups: BatchCgroups | None = None):
        """`uid`: the kernel's own uid from a `UidPool` (None when the host cannot separate uids).
        `repo_root`: the checkout, never counted among what a kernel needs (`kernel_paths`).
        `cgroups`: the batch's control groups, where each kernel gets one of its own (None: rlimits only)."""
        if uid is not None and not host.separate_uid:
            raise ConfigError(f"this host cannot run kernels under their own uid: {host.reason}")
        self.dir = worker_dir
        self.limits = limits
        self.host = host
        self.uid = uid
        self.meta_dir = worker_dir / "sandbox"
        self.plan_path = self.meta_dir / "plan.json"
        self.init_report = self.meta_dir / "init.json"
        self.masks = masks
        self.kernel_name = kernel_name
        self.needs = kernel_paths(repo_root)
        self.cgroups = cgroups
        self.run_result: WorkerRun | None = None

    # -- set-up -------------------------------------------------------------
    def prepare(self) -> None:
        """Create the worker's folders and the plan of its namespaces (the launcher's `init` role)."""
        self.meta_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.uid is not None:
            os.chmod(self.dir, 0o711)  # the kernel may pass through to its own folder, nothing else
        plan = {
            "network_namespace": self.host.namespaces,
            "mask": self.masks if self.host.namespaces else [],
            "init_report": str(self.init_report),
        }
        self.plan_path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")

    def new_kernel(self, folder: Path) -> KernelFolder:
        """A fresh folder, plan and kernelspec for one kernel (one submission) under `folder`."""
        folder.mkdir(mode=0o711 if self.uid is not None else 0o700, exist_ok=True)
        group = self.cgroups.submission(f"{self.dir.name}-{folder.name}", self.limits.cgroup_limits()) \
            if self.cgroups is not None else None
        trusted = self.cgroups.submission(f"{self.dir.name}-{folder.name}-trusted", self.limits.trusted_cgroup_limits(),
                                          weighs=False) if self.cgroups is not None else None
        sockets = folder / "sockets" if self.host.namespaces else None
        kernel = KernelFolder(folder, folder / "kernel", folder / "sandbox" / "kernel-plan.json",
                              folder / "sandbox" / "kernel.json", folder / "jupyter", folder / "runtime", sockets,
                              group, trusted)
        kernel.plan_path.parent.mkdir(mode=0o700)
        (kernel.plan_path.parent / "root").mkdir(mode=0o700)
        (kernel.home / "tmp").mkdir(mode=0o700, parents=True)
        kernel.home.chmod(0o700)
        if sockets is not None:
            sockets.mkdir(mode=0o700)
        if self.uid is not None:
            for path in (kernel.home, kernel.home / "tmp", *([sockets] if sockets is not None else [])):
                os.chown(path, self.uid, self.uid)
        home = str(kernel.home)
        plan = {
            "own_namespaces": self.host.namespaces,
            "network_namespace": self.host.namespaces,
            "seccomp": True,
            "root": plan_kernel_root(self.needs, kernel.home, kernel.plan_path.parent / "root", uid=self.uid,
                                     shared=[sockets] if sockets is not None else [])
            if self.host.namespaces else None,
            "kernel_report": str(kernel.report_path),
            "cgroup_procs": group.procs_files if group is not None else [],
            "limits": self.limits.kernel_rlimits(),
            "uid": self.uid,
            "gid": self.uid,
            "workdir": home,
            "env": {**KERNEL_ENV, "HOME": home, "TMPDIR": str(kernel.home / "tmp"), "PYTHONPATH": tools_root(),
                    "IPYTHONDIR": str(kernel.home / ".ipython"),
                    "MPLCONFIGDIR": str(kernel.home / ".matplotlib"),
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])},
            "pass_env": list(KERNEL_PASS_ENV),
        }
        kernel.plan_path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
        spec_dir = kernel.jupyter / "kernels" / self.kernel_name
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, str(LAUNCHER), "kernel", "--plan", str(kernel.plan_path),
                     "--connection-file", "{connection_file}", "--",
                     sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (grading sandbox)",
            "language": "python",
            "interrupt_mode": "signal",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        kernel.runtime.mkdir(mode=0o700)
        return kernel

    def finish_kernel(self, kernel: KernelFolder) -> dict:
        """After a submission: kill whatever is left in its control group and remove it (what it used is
        kept on `kernel.cgroup.usage`), and, where kernels share the host's IPC namespace, remove the SysV
        objects the slot's uid left. Returns what was cleaned up."""
        cleaned = {"cgroup_processes_killed": None, "sysv_objects_removed": None}
        if kernel.cgroup is not None and kernel.cgroup.usage is None:
            cleaned["cgroup_processes_killed"] = kernel.cgroup.remove()["processes_killed_after"]
        if kernel.trusted_cgroup is not None and kernel.trusted_cgroup.usage is None:
            kernel.trusted_cgroup.remove()
        if self.uid is not None and not self.host.namespaces:
            cleaned["sysv_objects_removed"] = remove_sysv_objects(self.uid)
        return cleaned

    def grader_env(self, kernel: KernelFolder | None = None) -> dict:
        """Environment of the grader: only what it needs, Jupyter paths inside the worker (and `kernel`)."""
        home = self.dir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        env = {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8",
            "HOME": str(home),
            "PYTHONDONTWRITEBYTECODE": "1",
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(home / ".local" / "share" / "jupyter"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "IPYTHONDIR": str(home / ".ipython"),
            "MPLCONFIGDIR": str(home / ".matplotlib"),
        }
        if kernel is not None:
            env.update(JUPYTER_PATH=str(kernel.jupyter), JUPYTER_RUNTIME_DIR=str(kernel.runtime))
        return env

    def trusted_env(self) -> dict:
        """Environment of the slot's trusted grader process (`tools.course.classroom.trusted`): its own home,
        and the course's `tools` importable as the masks keep it."""
        home = self.dir / "trusted"
        home.mkdir(mode=0o700, exist_ok=True)
        return {"HOME": str(home), "TMPDIR": str(home), "MPLCONFIGDIR": str(home / ".matplotlib"),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
                "PYTHONPATH": tools_root()}

    def zygote_env(self) -> dict:
        """Environment of the slot's kernel zygote (`sandbox_launch.py zygote`): the kernels' own (each
        kernel gets its plan's at fork), so that the interpreter starts as theirs would; its own home."""
        home = self.dir / "zygote"
        return {**KERNEL_ENV, "HOME": str(home), "TMPDIR": str(home), "PYTHONPATH": tools_root(),
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}

    def command(self, inner: list[str]) -> list[str]:
        if not self.host.namespaces:
            return inner
        return [self.host.unshare, *UNSHARE_FLAGS, sys.executable, str(LAUNCHER), "init",
                "--plan", str(self.plan_path), "--", *inner]

    # -- run ----------------------------------------------------------------
    def run(self, inner: list[str], log_path: Path, cwd: Path | None = None,
            kernel: KernelFolder | None = None) -> WorkerRun:
        """Run `inner` once in the sandbox; kill everything it started at the notebook timeout.

        Files the grader creates are private to it (umask 077), whatever the namespaces allow.
        """
        started = time.monotonic()
        killed = False
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen(self.command(inner), cwd=cwd or self.dir, env=self.grader_env(kernel),
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True, umask=0o077)
            with _RUNNING_LOCK:
                _RUNNING.add(process)
            try:
                returncode = process.wait(timeout=self.limits.notebook_timeout_s)
            except subprocess.TimeoutExpired:
                killed = True
                _kill_tree(process)
                returncode = process.wait()
            finally:
                with _RUNNING_LOCK:
                    _RUNNING.discard(process)
        cleaned = self.finish_kernel(kernel) if kernel is not None else {}
        leftovers = self.kill_leftovers()
        self.run_result = WorkerRun(returncode, round(time.monotonic() - started, 2), killed, leftovers, cleaned)
        return self.run_result

    def start(self, inner: list[str], log_path: Path, env: dict, cwd: Path | None = None) -> subprocess.Popen:
        """Start `inner` (a long-lived grader) in the sandbox with pipes on stdin and stdout; stderr to `log_path`."""
        with open(log_path, "a", encoding="utf-8") as log:
            process = subprocess.Popen(self.command(inner), cwd=cwd or self.dir, env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=log, start_new_session=True, umask=0o077)
        with _RUNNING_LOCK:
            _RUNNING.add(process)
        return process

    def fork(self, target, log_path: Path, env: dict, prepare=None) -> ForkedProcess:
        """Like `start`, for a `target()` already imported in this process: a forked child instead of a
        new interpreter, in the same namespaces (`sandbox_launch.run_init_forked`). Call it only while
        this process runs a single thread: a lock another thread holds would stay locked in the child.

        `prepare()` runs first in the child, while every file descriptor is still the one inherited:
        objects it drops (e.g. event loops) are collected then, and close their own descriptors, not
        the numbers the child gives its pipes and log next."""
        from tools.course.classroom import sandbox_launch

        if threading.active_count() != 1:
            raise ConfigError("a grading worker can only be forked while one thread runs")
        plan = json.loads(self.plan_path.read_text(encoding="utf-8"))
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = sandbox_launch.EXIT_SETUP_FAILED
            try:
                os.setsid()
                if prepare is not None:
                    prepare()
                gc.collect()
                for fd, target_fd in ((request_read, 0), (reply_write, 1), (log, 2)):
                    os.dup2(fd, target_fd)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                sys.stdin = open(0, encoding="utf-8", closefd=False)
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
                for signum in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(signum, signal.SIG_DFL)
                os.umask(0o077)
                os.chdir(self.dir)
                os.environ.clear()
                os.environ.update(env)
                if self.host.namespaces:
                    sandbox_launch.run_init_forked(plan, target)
                code = target()
            except BaseException as error:  # reported in the worker's log (fd 2); the slot reads its tail
                os.write(2, f"{traceback.format_exc()}grading worker setup failed: {error.__class__.__name__}: "
                            f"{error}\n".encode())
            finally:
                os._exit(code)
        for fd in (request_read, reply_write, log):
            os.close(fd)
        process = ForkedProcess(pid, os.fdopen(request_write, "wb"), os.fdopen(reply_read, "rb"))
        with _RUNNING_LOCK:
            _RUNNING.add(process)
        return process

    def stop(self, process: subprocess.Popen, *, kill: bool = False, wait_s: float = 10.0) -> int:
        """End a process from `start`: close its input and wait, or kill everything it started."""
        try:
            if not kill:
                process.stdin.close()
                try:
                    return process.wait(timeout=wait_s)
                except subprocess.TimeoutExpired:
                    pass
            _kill_tree(process)
            return process.wait()
        finally:
            for stream in (process.stdin, process.stdout):
                if stream and not stream.closed:
                    stream.close()
            with _RUNNING_LOCK:
                _RUNNING.discard(process)

    def kill_leftovers(self, grace_s: float = 0.0) -> int:
        """Kill what still runs as the slot's uid once its kernels' namespaces had `grace_s` to vanish."""
        if self.uid is None:
            return 0
        deadline = time.monotonic() + grace_s
        while _uid_in_use(self.uid) and time.monotonic() < deadline:
            time.sleep(0.02)
        return _kill_uid(self.uid)

    # -- record -------------------------------------------------------------
    def enforced(self, kernel: KernelFolder | None = None, run: WorkerRun | None = None) -> dict:
        """What this worker actually enforced for `kernel`, from the launcher's own reports."""
        init = _read_json(self.init_report)
        report = kernel.report() if kernel is not None else None
        rlimits = (report or {}).get("limits", {})
        run = run or self.run_result
        group = kernel.cgroup if kernel is not None else None
        root = (report or {}).get("root") or {}
        return {
            "isolation": "namespaces" if self.host.namespaces else "none",
            "host": self.host.reason,
            "limits_by": f"cgroup {group.version} and rlimits" if group is not None and (report or {}).get(
                "cgroup_joined") else "rlimits only",
            "cgroup": None if group is None else {**group.describe(), "usage": group.usage},
            "trusted_cgroup": None if kernel is None or kernel.trusted_cgroup is None else {
                **kernel.trusted_cgroup.describe(), "usage": kernel.trusted_cgroup.usage},
            "ipc_namespace": (report or {}).get("ipc_namespace", False),
            "sysv_objects_at_start": (report or {}).get("sysv_objects_visible"),
            "kernel_filesystem": {"top_level": root.get("top_level"), "read_only": root.get("read_only"),
                                  "home_mb": root.get("home_mb"), "etc": root.get("etc")} if root else None,
            "kernel_network_namespace": (report or {}).get("network_namespace"),
            "seccomp": (report or {}).get("seccomp"),
            "network": ("own network namespace, interfaces " + ",".join(init["interfaces"])
                        if init and init.get("loopback_up") else "not isolated"),
            "pid_namespace": bool(init and init.get("pid_in_namespace") == 1),
            "masked_paths": (init or {}).get("masked", []),
            "kernel_started": report is not None,
            "kernel_started_by": (report or {}).get("started_by"),
            "kernel_pid_namespace": (report or {}).get("pid_namespace", False),
            "kernel_private_dirs": (report or {}).get("private_dirs", []),
            "kernel_uid": (report or {}).get("uid"),
            "no_new_privs": (report or {}).get("no_new_privs"),
            "cell_timeout_s": self.limits.cell_timeout_s,
            "notebook_timeout_s": self.limits.notebook_timeout_s,
            "memory_bytes": rlimits.get("memory_bytes"),
            "cpu_seconds": rlimits.get("cpu_seconds"),
            "file_size_bytes": rlimits.get("file_size_bytes"),
            "max_processes": rlimits.get("max_processes"),
            "max_processes_counts_existing_tasks": rlimits.get("max_processes_counts_existing_tasks", False),
            "max_processes_not_enforced": rlimits.get("max_processes_not_enforced"),
            "killed_at_notebook_timeout": None if run is None else run.killed_at_notebook_timeout,
            "leftover_processes_killed": None if run is None else run.leftover_processes_killed,
            "cleaned_after": None if run is None else run.cleaned,
            "seconds": None if run is None else run.seconds,
        }


def remove_sysv_objects(uid: int) -> int:
    """Remove the SysV shared memory segments, semaphore sets and message queues owned by `uid` in this
    IPC namespace (where kernels have no IPC namespace of their own); return how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    removers = {"shm": libc.shmctl, "sem": libc.semctl, "msg": libc.msgctl}
    ipc_rmid, removed = 0, 0
    for kind, remove in removers.items():
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        header = lines[0].split() if lines else []
        for line in lines[1:]:
            fields = dict(zip(header, line.split()))
            if int(fields.get("uid", -1)) == uid or int(fields.get("cuid", -1)) == uid:
                ident = int(fields["shmid"] if kind == "shm" else fields["semid"] if kind == "sem" else fields["msqid"])
                args = (ident, 0, ipc_rmid) if kind == "sem" else (ident, ipc_rmid, None)
                removed += remove(*args) == 0
    return removed


_RUNNING: set = set()
_RUNNING_LOCK = threading.Lock()


def kill_running() -> int:
    """Kill every worker still running in this process (e.g. on Ctrl-C); return how many."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for process in running:
        _kill_tree(process)
    return len(running)


def _kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL the worker's process group and every descendant (the kernel runs in its own session)."""
    descendants = _descendants(process.pid)
    _kill_group(process.pid)
    for pid in descendants:
        _kill(pid)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _kill(pid: int) -> bool:
    """SIGKILL `pid`; False when it is already gone (or not ours to kill)."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_group(pid: int) -> bool:
    """SIGKILL the process group led by `pid`; False when it is already gone."""
    try:
        os.killpg(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _kill_uid(uid: int) -> int:
    """Kill every process still running as the worker's uid (none should survive its namespace)."""
    killed = 0
    for _ in range(3):
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.stat(f"/proc/{entry}").st_uid == uid:
                        found.append(int(entry))
                except FileNotFoundError:
                    continue
        if not found:
            break
        killed += sum(_kill(pid) for pid in found)
        time.sleep(0.1)
    return killed


def limits_record(limits: Limits) -> dict:
    return asdict(limits)
