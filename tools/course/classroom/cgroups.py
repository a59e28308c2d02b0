"""One control group per submission: memory, process count and CPU limits that hold for the whole
submission (every process it starts), whatever the host offers.

`probe_cgroups` finds, once per process, what this host lets the grader use, in this order:

* **cgroup v2**: the unified hierarchy with the `memory`, `pids` and `cpu` controllers delegated to the
  grader's own group (`cgroup.subtree_control` holds them or accepts them);
* **cgroup v1**: the `memory`, `pids` and `cpu` hierarchies mounted separately (as on hosts that keep
  the legacy layout, with an empty cgroup2 at `/sys/fs/cgroup/unified`);
* **none**: only the kernel's per-process rlimits apply (`sandbox_launch.apply_limits`), and the batch
  record says so.

`BatchCgroups` makes one parent group per batch (under the grader's own group of each hierarchy) and,
per submission, a child group with its limits (`SubmissionCgroup`): memory (`memory.max`, or
`memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`), tasks (`pids.max`) and CPU (`cpu.max`, or
`cpu.cfs_quota_us`, plus an equal weight for every submission, so one that starts fifty spinners still
gets one submission's share). The kernel joins the group itself, before it drops its privileges
(`sandbox_launch.kernel_setup` writes `0` to each `cgroup.procs` it is given), so everything it starts is
counted. After the submission the host kills whatever is left in the group, reads what it used and
removes it.
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
CPU_WEIGHT_V2, CPU_SHARES_V1 = 100, 1024
"""Every submission's group gets the same weight: under contention each gets an equal share of the CPUs."""
KILL_ROUNDS = 50


@dataclass(frozen=True)
class CgroupHost:
    """What this host lets the grader use: `version` "v2", "v1" or None, and where its own groups are."""

    version: str | None
    reason: str
    bases: dict = field(default_factory=dict)  # v2: {"unified": dir}; v1: {controller: dir}


def _mounts(mountinfo: str) -> list[tuple[str, str, str]]:
    """`(mount point, filesystem type, super options)` of every mount in a /proc/self/mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        parts, rest = left.split(), right.split()
        if len(parts) >= 5 and len(rest) >= 3:
            found.append((parts[4].replace("\\040", " "), rest[0], rest[2]))
    return found


def _own_groups(cgroup_text: str) -> dict[str, str]:
    """`controller -> path` of this process's groups (v2 under the key "unified")."""
    groups = {}
    for line in cgroup_text.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            groups["unified"] = path
        for controller in filter(None, controllers.split(",")):
            groups[controller] = path
    return groups


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8").strip()


def _write(path: Path, value: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(value)


def probe_v2(mounts: list, groups: dict) -> tuple[CgroupHost | None, str]:
    """The v2 host, or None and why not."""
    mount = next((point for point, kind, _ in mounts if kind == "cgroup2"), None)
    if mount is None:
        return None, "no cgroup2 filesystem mounted"
    if "unified" not in groups:
        return None, "this process is in no cgroup2 group"
    base = Path(mount + groups["unified"]).resolve() if groups["unified"] != "/" else Path(mount)
    try:
        available = set(_read(base / "cgroup.controllers").split())
    except OSError as error:
        return None, f"cgroup2 at {base} unreadable: {error.strerror}"
    missing = [name for name in CONTROLLERS if name not in available]
    if missing:
        return None, f"cgroup2 at {mount}: controller(s) {', '.join(missing)} not delegated to {base}"
    enabled = set(_read(base / "cgroup.subtree_control").split())
    wanted = [name for name in CONTROLLERS if name not in enabled]
    if wanted:
        try:
            _write(base / "cgroup.subtree_control", " ".join(f"+{name}" for name in wanted))
        except OSError as error:
            return None, (f"cgroup2 at {base}: cannot enable {', '.join(wanted)} for child groups "
                          f"({error.strerror}; a group holding processes cannot delegate them)")
    return CgroupHost("v2", f"cgroup v2 at {base}: memory.max, pids.max, cpu.max per submission",
                      {"unified": str(base)}), ""


def probe_v1(mounts: list, groups: dict) -> tuple[CgroupHost | None, str]:
    """The v1 host (memory, pids and cpu hierarchies, and cpuacct's when mounted apart), or None and why not."""
    bases = {}
    for controller in (*CONTROLLERS, "cpuacct"):
        mount = next((point for point, kind, options in mounts
                      if kind == "cgroup" and controller in options.split(",")), None)
        if mount is None:
            if controller == "cpuacct":
                continue  # optional: only for the CPU seconds a submission used
            return None, f"no cgroup v1 hierarchy with the {controller} controller"
        own = groups.get(controller, "/")
        base = str(Path(mount + own) if own != "/" else Path(mount))
        if base not in bases.values():
            bases[controller] = base
    probe = Path(bases["pids"]) / f"course-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as error:
        return None, f"cgroup v1 at {bases['pids']}: cannot create groups ({error.strerror})"
    return CgroupHost("v1", "cgroup v1 (memory, pids, cpu hierarchies): memory.limit_in_bytes, pids.max, "
                            "cpu.cfs_quota_us per submission", bases), ""


@functools.lru_cache(maxsize=1)
def probe_cgroups() -> CgroupHost:
    """What this host offers, checked once per process (see the module docstring)."""
    if not os.path.isfile("/proc/self/cgroup") or os.geteuid() != 0:
        return CgroupHost(None, "no cgroups: not root on Linux; per-process rlimits only")
    try:
        mounts = _mounts(Path("/proc/self/mountinfo").read_text(encoding="utf-8"))
        groups = _own_groups(Path("/proc/self/cgroup").read_text(encoding="utf-8"))
    except OSError as error:
        return CgroupHost(None, f"no cgroups: {error}; per-process rlimits only")
    host, why_not_v2 = probe_v2(mounts, groups)
    if host is not None:
        return host
    host, why_not_v1 = probe_v1(mounts, groups)
    if host is not None:
        return CgroupHost(host.version, f"{host.reason} (no v2: {why_not_v2})", host.bases)
    return CgroupHost(None, f"no usable cgroups (v2: {why_not_v2}; v1: {why_not_v1}); per-process rlimits only")


@dataclass(frozen=True)
class CgroupLimits:
    memory_bytes: int | None
    max_tasks: int | None
    cpus: float | None


@dataclass
class SubmissionCgroup:
    """The group(s) of one submission: one folder per hierarchy (one in v2)."""

    version: str
    dirs: dict  # v2: {"unified": dir}; v1: {controller: dir}
    limits: CgroupLimits
    usage: dict | None = None
    name: str = ""
    batch: "BatchCgroups | None" = field(default=None, repr=False)

    @property
    def procs_files(self) -> list[str]:
        """What the kernel writes `0` into to join (every hierarchy)."""
        return [str(Path(folder) / "cgroup.procs") for folder in self.dirs.values()]

    @property
    def cpu_usage_file(self) -> str:
        """The file whose figure is the CPU time the group used (`contention.group_cpu_s` reads it)."""
        if self.version == "v2":
            return str(Path(self.dirs["unified"]) / "cpu.stat")
        folder = Path(self.dirs.get("cpuacct", self.dirs["cpu"]))
        return str(folder / "cpuacct.usage") if (folder / "cpuacct.usage").exists() else str(folder / "cpu.stat")

    def pids(self) -> set[int]:
        found = set()
        for folder in self.dirs.values():
            try:
                found |= {int(line) for line in _read(Path(folder) / "cgroup.procs").split()}
            except FileNotFoundError:
                continue
        return found

    def kill_all(self) -> int:
        """SIGKILL every process in the group until none is left; return how many were killed."""
        killed = 0
        kill_file = Path(self.dirs.get("unified", "")) / "cgroup.kill"
        for _ in range(KILL_ROUNDS):
            pids = self.pids()
            if not pids:
                return killed
            if self.version == "v2" and kill_file.is_file():
                _write(kill_file, "1")
                killed += len(pids)
            else:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        continue
            time.sleep(0.02)
        return killed

    def read_usage(self) -> dict:
        """Peak memory, OOM kills, peak task count, CPU seconds and the periods the CPU quota throttled the
        group (None where unknown)."""
        usage = {"memory_peak_bytes": None, "oom_kills": None, "tasks_peak": None, "cpu_seconds": None,
                 "cpu_throttled_periods": None}
        if self.version == "v2":
            base = Path(self.dirs["unified"])
            usage["memory_peak_bytes"] = _int_or_none(base / "memory.peak")
            usage["oom_kills"] = _keyed(base / "memory.events", "oom_kill")
            usage["tasks_peak"] = _int_or_none(base / "pids.peak")
            usec = _keyed(base / "cpu.stat", "usage_usec")
            usage["cpu_seconds"] = None if usec is None else round(usec / 1e6, 3)
            usage["cpu_throttled_periods"] = _keyed(base / "cpu.stat", "nr_throttled")
        else:
            memory, pids = Path(self.dirs["memory"]), Path(self.dirs["pids"])
            usage["memory_peak_bytes"] = _int_or_none(memory / "memory.max_usage_in_bytes")
            usage["oom_kills"] = _keyed(memory / "memory.oom_control", "oom_kill")
            usage["tasks_peak"] = _int_or_none(pids / "pids.peak")
            usage["cpu_seconds"] = _cpuacct_seconds(Path(self.dirs.get("cpuacct", self.dirs["cpu"])))
            usage["cpu_throttled_periods"] = _keyed(Path(self.dirs["cpu"]) / "cpu.stat", "nr_throttled")
        return usage

    def remove(self) -> dict:
        """Kill what is left, read the usage, remove the group(s); return the usage."""
        killed = self.kill_all()
        self.usage = {**self.read_usage(), "processes_killed_after": killed}
        for folder in self.dirs.values():
            _remove_dir(Path(folder))
        if self.batch is not None:
            self.batch.finished(self)
        return self.usage

    def describe(self) -> dict:
        return {"version": self.version, "memory_bytes": self.limits.memory_bytes, "max_tasks": self.limits.max_tasks,
                "cpus": self.limits.cpus}


def _int_or_none(path: Path) -> int | None:
    try:
        return int(_read(path))
    except (OSError, ValueError):
        return None


def _keyed(path: Path, key: str) -> int | None:
    try:
        for line in _read(path).splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _cpuacct_seconds(folder: Path) -> float | None:
    value = _int_or_none(folder / "cpuacct.usage")
    if value is not None:
        return round(value / 1e9, 3)
    usage = _keyed(folder / "cpu.stat", "usage_usec")  # some v1 kernels report it with the cpu controller
    return None if usage is None else round(usage / 1e6, 3)


def _remove_dir(folder: Path) -> None:
    """rmdir a group once its last task has gone (a killed task may take a moment to leave)."""
    for _ in range(100):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)
    folder.rmdir()


class BatchCgroups:
    """The parent group of one batch in each hierarchy, and one child group per submission."""

    def __init__(self, host: CgroupHost, slots: int = 1):
        """`slots`: submissions graded at once. The batch's group always weighs as much as the submissions
        it runs at the moment (one process of the host each, `_reweigh`): a submission gets what a plain
        kernel would, whether it runs alone or beside others, and one that spins many processes only
        shares its own weight among them."""
        if host.version is None:
            raise ValueError("no cgroups on this host")
        self.host = host
        self.name = f"course-grading-{os.getpid()}-{secrets.token_hex(4)}"
        self.dirs: dict[str, Path] = {}
        self.slots = slots
        self.active: set[str] = set()
        try:
            for key, base in host.bases.items():
                folder = Path(base) / self.name
                folder.mkdir()
                self.dirs[key] = folder
            if host.version == "v2":
                _write(self.dirs["unified"] / "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
            self._reweigh()
        except BaseException:
            self.close()
            raise

    def _reweigh(self) -> None:
        count = max(len(self.active), 1)
        if self.host.version == "v2":
            _write(self.dirs["unified"] / "cpu.weight", str(min(CPU_WEIGHT_V2 * count, 10_000)))
        else:
            _write(self.dirs["cpu"] / "cpu.shares", str(CPU_SHARES_V1 * count))

    def finished(self, group: "SubmissionCgroup") -> None:
        """A submission's group was removed: the batch weighs one process less."""
        self.active.discard(group.name)
        if self.dirs:
            self._reweigh()

    def submission(self, name: str, limits: CgroupLimits, weighs: bool = True) -> SubmissionCgroup:
        """A new child group with `limits` applied (OSError when the host refuses a limit). `weighs=False` for a
        group that runs only while its submission's kernel waits (the trusted grader): it adds nothing to the
        batch's weight."""
        dirs = {}
        group = SubmissionCgroup(self.host.version, dirs, limits, name=name, batch=self)
        try:
            for key, parent in self.dirs.items():
                folder = parent / name
                folder.mkdir()
                dirs[key] = str(folder)
            if self.host.version == "v2":
                _apply_v2(Path(dirs["unified"]), limits)
            else:
                _apply_v1({key: Path(value) for key, value in dirs.items()}, limits)
        except BaseException:
            for folder in dirs.values():
                _remove_dir(Path(folder))
            raise
        if weighs:
            self.active.add(name)
            self._reweigh()
        return group

    def close(self) -> None:
        """Remove the batch's groups (each submission's group is removed after it)."""
        for key, folder in self.dirs.items():
            for child in [path for path in folder.iterdir() if path.is_dir()]:
                SubmissionCgroup(self.host.version, {key: str(child)}, CgroupLimits(None, None, None)).kill_all()
                _remove_dir(child)
            _remove_dir(folder)
        self.dirs = {}


def _apply_v2(folder: Path, limits: CgroupLimits) -> None:
    if limits.memory_bytes is not None:
        _write(folder / "memory.max", str(limits.memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
    if limits.max_tasks is not None:
        _write(folder / "pids.max", str(limits.max_tasks))
    _write(folder / "cpu.weight", str(CPU_WEIGHT_V2))
    if limits.cpus is not None:
        _write(folder / "cpu.max", f"{int(limits.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")


def _apply_v1(dirs: dict[str, Path], limits: CgroupLimits) -> None:
    if limits.memory_bytes is not None:
        _write(dirs["memory"] / "memory.limit_in_bytes", str(limits.memory_bytes))
        swap = dirs["memory"] / "memory.memsw.limit_in_bytes"
        if swap.exists():  # memory + swap: no way around the limit through swap
            _write(swap, str(limits.memory_bytes))
    if limits.max_tasks is not None:
        _write(dirs["pids"] / "pids.max", str(limits.max_tasks))
    _write(dirs["cpu"] / "cpu.shares", str(CPU_SHARES_V1))
    if limits.cpus is not None:
        _write(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(dirs["cpu"] / "cpu.cfs_quota_us", str(int(limits.cpus * CPU_PERIOD_US)))
