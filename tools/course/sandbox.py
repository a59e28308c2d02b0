"""Limits and isolation for running untrusted submissions: what this host allows, and one worker run.

A worker is one folder (`worker_dir`) holding a private nbgrader course. On Linux as root with a
working `unshare`, nbgrader runs as PID 1's child in new network, PID and mount namespaces
(only loopback, course folder and root's home masked), and the kernel runs under the worker
slot's own uid with setrlimit limits on address space, CPU time, file size and process count.
Elsewhere only the kernel's rlimits and the wall-clock limits apply. Either way the worker
reports what was actually enforced (`WorkerSandbox.enforced`), never just what was asked for.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class Limits:
    """What a submission may use. None means not limited (recorded as such)."""

    cell_timeout_s: int = 30
    notebook_timeout_s: float = 600.0
    memory_mb: int | None = 4096
    cpu_seconds: int | None = 600
    max_processes: int | None = 64
    file_size_mb: int | None = 256

    def __post_init__(self) -> None:
        if not (isinstance(self.cell_timeout_s, int) and self.cell_timeout_s > 0):
            raise ConfigError(f"cell timeout must be a positive whole number of seconds, got {self.cell_timeout_s!r}")
        if not self.notebook_timeout_s > self.cell_timeout_s:
            raise ConfigError(f"notebook timeout ({self.notebook_timeout_s} s) must exceed the cell timeout "
                              f"({self.cell_timeout_s} s)")
        for name in ("memory_mb", "cpu_seconds", "max_processes", "file_size_mb"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ConfigError(f"{name} must be a positive whole number or None, got {value!r}")

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


@dataclass
class WorkerRun:
    returncode: int | None
    seconds: float
    killed_at_notebook_timeout: bool
    leftover_processes_killed: int


class WorkerSandbox:
    """The sandbox of one worker folder and slot: kernelspec, plan, command, run, enforced limits."""

    def __init__(self, worker_dir: Path, uid: int | None, limits: Limits, host: HostIsolation,
                 masks: list[dict], kernel_name: str = "python3"):
        """`uid`: the kernel's own uid from a `UidPool` (None when the host cannot separate uids)."""
        if uid is not None and not host.separate_uid:
            raise ConfigError(f"this host cannot run kernels under their own uid: {host.reason}")
        self.dir = worker_dir
        self.limits = limits
        self.host = host
        self.uid = uid
        self.kernel_dir = worker_dir / "kernel"
        self.meta_dir = worker_dir / "sandbox"
        self.plan_path = self.meta_dir / "plan.json"
        self.init_report = self.meta_dir / "init.json"
        self.kernel_report = self.meta_dir / "kernel.json"
        self.masks = masks
        self.kernel_name = kernel_name
        self.run_result: WorkerRun | None = None

    # -- set-up -------------------------------------------------------------
    def prepare(self) -> None:
        """Create the kernel's private folder, the plan and the sandboxed kernelspec."""
        self.meta_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.meta_dir / "staging").mkdir(mode=0o700, exist_ok=True)
        (self.kernel_dir / "tmp").mkdir(mode=0o700, parents=True, exist_ok=True)
        self.kernel_dir.chmod(0o700)
        if self.uid is not None:
            os.chmod(self.dir, 0o711)  # the kernel may pass through to its own folder, nothing else
            for path in (self.kernel_dir, self.kernel_dir / "tmp"):
                os.chown(path, self.uid, self.uid)
        home = str(self.kernel_dir)
        plan = {
            "network_namespace": self.host.namespaces,
            "staging": str(self.meta_dir / "staging"),
            "mask": self.masks if self.host.namespaces else [],
            "init_report": str(self.init_report),
            "kernel_report": str(self.kernel_report),
            "limits": self.limits.kernel_rlimits(),
            "uid": self.uid,
            "gid": self.uid,
            "workdir": home,
            "env": {**KERNEL_ENV, "HOME": home, "TMPDIR": str(self.kernel_dir / "tmp"),
                    "IPYTHONDIR": str(self.kernel_dir / ".ipython"),
                    "MPLCONFIGDIR": str(self.kernel_dir / ".matplotlib"),
                    "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])},
            "pass_env": list(KERNEL_PASS_ENV),
        }
        self.plan_path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
        spec_dir = self.dir / "jupyter" / "kernels" / self.kernel_name
        spec_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": [sys.executable, str(LAUNCHER), "kernel", "--plan", str(self.plan_path),
                     "--connection-file", "{connection_file}", "--",
                     sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (grading sandbox)",
            "language": "python",
            "interrupt_mode": "signal",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")

    def grader_env(self) -> dict:
        """Environment of the nbgrader process: only what it needs, Jupyter paths inside the worker."""
        home = self.dir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        return {
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
            "LANG": "C.UTF-8",
            "HOME": str(home),
            "PYTHONDONTWRITEBYTECODE": "1",
            "JUPYTER_PATH": str(self.dir / "jupyter"),
            "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
            "JUPYTER_DATA_DIR": str(home / ".local" / "share" / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(self.dir / "runtime"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "IPYTHONDIR": str(home / ".ipython"),
            "MPLCONFIGDIR": str(home / ".matplotlib"),
        }

    def command(self, inner: list[str]) -> list[str]:
        if not self.host.namespaces:
            return inner
        return [self.host.unshare, *UNSHARE_FLAGS, sys.executable, str(LAUNCHER), "init",
                "--plan", str(self.plan_path), "--", *inner]

    # -- run ----------------------------------------------------------------
    def run(self, inner: list[str], log_path: Path, cwd: Path | None = None) -> WorkerRun:
        """Run `inner` (nbgrader) in the sandbox; kill everything it started at the notebook timeout.

        Files the grader creates are private to it (umask 077), whatever the namespaces allow.
        """
        started = time.monotonic()
        killed = False
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen(self.command(inner), cwd=cwd or self.dir, env=self.grader_env(),
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
        leftovers = _kill_uid(self.uid) if self.uid is not None else 0
        self.run_result = WorkerRun(returncode, round(time.monotonic() - started, 2), killed, leftovers)
        return self.run_result

    # -- record -------------------------------------------------------------
    def enforced(self) -> dict:
        """What this worker actually enforced, from the launcher's own reports."""
        init = _read_json(self.init_report)
        kernel = _read_json(self.kernel_report)
        rlimits = (kernel or {}).get("limits", {})
        run = self.run_result
        return {
            "isolation": "namespaces" if self.host.namespaces else "none",
            "host": self.host.reason,
            "network": ("own network namespace, interfaces " + ",".join(init["interfaces"])
                        if init and init.get("loopback_up") else "not isolated"),
            "pid_namespace": bool(init and init.get("pid_in_namespace") == 1),
            "masked_paths": (init or {}).get("masked", []),
            "kernel_started": kernel is not None,
            "kernel_uid": (kernel or {}).get("uid"),
            "no_new_privs": (kernel or {}).get("no_new_privs"),
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
            "seconds": None if run is None else run.seconds,
        }


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
