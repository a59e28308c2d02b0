"""Launcher of one sandboxed grading worker and its kernels; standard library only, run by path as a script.

Three roles, driven by plan JSON files written by `tools.course.classroom.sandbox`:

* `init`: PID 1 of the worker's new network/PID/mount namespaces, still root. It brings the
  loopback interface up (the kernel talks to nbgrader over 127.0.0.1), masks paths such as the
  course folder and root's home with empty tmpfs mounts (binding back what must stay visible,
  e.g. the Python installation), runs the command (the grader) and reaps orphans until it ends.
  When it exits the kernel kills every process left in the namespace. `run_init_forked` does
  the same for a grader already in memory (a forked child), without `unshare` or a new interpreter.
* `kernel`: the argv of the worker's kernelspec. Where the plan asks for it (root in the
  worker's namespaces), it first moves into a PID and mount namespace of the kernel's own,
  stays behind as a small shim that jupyter_client manages, and the kernel becomes PID 1 of
  that namespace: when it ends, everything the submission started ends with it. There it
  mounts a private /proc and covers /tmp, /var/tmp and /dev/shm with empty tmpfs (binding
  back its own folder and what Python needs), so nothing of an earlier submission is left
  for it to find. It then sets the resource limits, drops to the worker's own unprivileged
  uid (copying the connection file for it) and execs ipykernel with a clean environment, in
  the kernel's own folder.
* `zygote`: imports ipykernel once, then per request forks a kernel, sets it up exactly as the
  `kernel` role does (`kernel_setup`) and runs ipykernel in the fork (see `run_zygote`).

A kernel with namespaces of its own also gets its own network namespace (only its loopback: its sockets
and /proc/net show nothing of the slot's; it talks to the grader through Unix sockets in a folder bound
into its filesystem), a minimal /etc (`ETC_FILES` and generated `passwd`, `group`, `hosts`,
`nsswitch.conf`, nothing else of the host's), and, last, a seccomp filter (`seccomp_program`) that refuses
the system calls a learner's code never needs: new namespaces (`unshare`, `setns`, namespace flags of
`clone`; `clone3` answers ENOSYS so that the C library falls back to `clone`), mounts, `ptrace`, `bpf`,
keyrings, kernel modules, `perf_event_open`, `userfaultfd`, `io_uring`, real-time and idle scheduling
policies and the rest listed in `DENIED_SYSCALLS`, and any call of another ABI (32-bit, x32).

Each role writes what it actually applied to a JSON report before running untrusted code, and
fails closed: if a requested isolation step cannot be applied, nothing is executed.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

STARTED = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the host, so the grader can compare
EXIT_SETUP_FAILED = 70

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 2, 4, 8, 32, 4096, 16384
_MS_PRIVATE = 1 << 18
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET, _CLONE_NEWIPC = 0x00020000, 0x20000000, 0x40000000, 0x08000000
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
"""The device nodes a kernel's filesystem holds (bound from the host); nothing else of /dev."""
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 1, 38, 22, 2
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
             "/etc/fonts")
"""What of the host's /etc a kernel sees (the dynamic linker's cache and configuration, the time zone, the
font configuration plotting libraries read)."""

# -- the seccomp filter (x86_64) ----------------------------------------------
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_RET_ALLOW, _SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGE_K, _BPF_JSET_K, _BPF_RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
SYSCALLS_X86_64 = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "move_mount": 429, "open_tree": 428,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "unshare": 272,
    "setns": 308, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250, "add_key": 248, "request_key": 249,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "fanotify_init": 300, "swapon": 167, "swapoff": 168,
    "reboot": 169, "syslog": 103, "acct": 163, "quotactl": 179, "quotactl_fd": 443, "iopl": 172, "ioperm": 173,
    "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159, "sethostname": 170,
    "setdomainname": 171, "lookup_dcookie": 212, "vhangup": 153, "uselib": 134, "nfsservctl": 180,
    "sched_setattr": 314,
}
DENIED_SYSCALLS = tuple(sorted(SYSCALLS_X86_64))
_CLONE, _CLONE3, _SCHED_SETSCHEDULER = 56, 435, 144
_BPF_AND_K = 0x54
_SCHED_RESET_ON_FORK = 0x40000000
_SCHED_OTHER, _SCHED_BATCH = 0, 3

_LIMITS = {"memory_bytes": "RLIMIT_AS", "cpu_seconds": "RLIMIT_CPU", "file_size_bytes": "RLIMIT_FSIZE",
           "max_processes": "RLIMIT_NPROC"}


class SetupError(RuntimeError):
    """An isolation step of the plan could not be applied."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> None:
    encode = lambda value: None if value is None else os.fsencode(value)  # noqa: E731
    if _libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)) != 0:
        error = ctypes.get_errno()
        raise SetupError(f"mount {source} -> {target} ({fstype}): {os.strerror(error)}")


def loopback_up() -> list[str]:
    """Set `lo` up in this network namespace; return the interface names seen."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
    return sorted(name for _, name in socket.if_nameindex())


def mask_path(path: str, keep: list[str], links: list[dict] | None = None, *, writable: list[str] | None = None,
              size_mb: int = 4) -> None:
    """Cover `path` with an empty tmpfs, bind each folder of `keep` (under `path`) back read-only and
    each of `writable` back as it was, and recreate each symbolic link of `links` (`{"path", "target"}`)
    that the tmpfs hid. The folders are held open (O_PATH) while `path` is covered, then bound
    from `/proc/self/fd`, so no staging folder is needed."""
    held = []
    try:
        for kept, read_only in [(kept, True) for kept in keep] + [(kept, False) for kept in writable or []]:
            held.append((os.open(kept, os.O_PATH | os.O_DIRECTORY), kept, read_only))
        mode = "1777" if writable is not None else "0755"
        _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode},size={size_mb}m")
        for fd, kept, read_only in sorted(held, key=lambda item: len(item[1])):
            os.makedirs(kept, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", kept, None, _MS_BIND | _MS_REC)
            if read_only:
                _mount(None, kept, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
    finally:
        for fd, _, _ in held:
            os.close(fd)
    for link in links or []:
        if not os.path.lexists(link["path"]):
            os.makedirs(os.path.dirname(link["path"]), exist_ok=True)
            os.symlink(link["target"], link["path"])


def _write_report(path: str, report: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")


def init_namespace(plan: dict) -> dict:
    """As PID 1 of the worker's namespaces: loopback up, paths masked, umask 077; write and return the report."""
    os.umask(0o022)  # folders made inside the masks must stay passable for the kernel's uid
    report = {"pid_in_namespace": os.getpid(), "loopback_up": False, "interfaces": None, "masked": []}
    if plan.get("network_namespace"):
        report["interfaces"] = loopback_up()
        report["loopback_up"] = True
        if report["interfaces"] != ["lo"]:
            raise SetupError(f"the network namespace is not empty: {report['interfaces']}")
    for entry in plan.get("mask", []):
        if os.path.isdir(entry["path"]):
            mask_path(entry["path"], [kept for kept in entry.get("keep", []) if os.path.isdir(kept)],
                      entry.get("links", []))
            report["masked"].append(entry["path"])
    os.umask(0o077)  # what the grader writes stays private to it
    report["umask"] = "077"
    _write_report(plan["init_report"], report)
    return report


def reap_until(child: int) -> int:
    """As PID 1: reap every orphan until `child` ends; return its exit code."""
    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def run_init(plan: dict, command: list[str]) -> int:
    """Apply the namespace-side steps of the plan, run `command`, reap orphans, return its exit code."""
    init_namespace(plan)
    return reap_until(subprocess.Popen(command).pid)


def run_init_forked(plan: dict, target) -> None:
    """What `unshare --net --pid --fork --mount-proc --kill-child ... init` does, for code already in
    this (just forked, single-threaded) process: new namespaces, PID 1 applies the plan and reaps,
    its child returns `target()`'s exit code. Never returns; this process stays outside as the shim."""
    enter_namespaces(_CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWPID)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    init_namespace(plan)
    worker = os.fork()
    if worker == 0:
        os._exit(target())
    os._exit(reap_until(worker))


def _tasks_of_uid(uid: int) -> int:
    """Processes and threads whose real uid is `uid` (what RLIMIT_NPROC counts)."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", encoding="utf-8") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:  # the process ended while we looked: it no longer counts
            continue
        if int(fields["Uid"].split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def apply_limits(plan: dict) -> dict:
    """setrlimit for every limit in the plan; return what was set (None = not limited)."""
    import resource  # here, not at the top: a kernel forked from the zygote drops it again (`_kernel_from_zygote`)

    applied = {}
    limits = plan.get("limits", {})
    for key, which in _LIMITS.items():
        value = limits.get(key)
        if value is None:
            applied[key] = None
            continue
        value = int(value)
        if key == "max_processes" and plan.get("uid") is None and os.geteuid() == 0:
            # Root is exempt from RLIMIT_NPROC: without a uid of its own the limit cannot hold.
            applied[key] = None
            applied["max_processes_not_enforced"] = "the kernel runs as root"
            continue
        if key == "max_processes" and plan.get("uid") is None:
            # Same uid as the grader: the limit counts every task of that user, so allow
            # `value` more than it runs now.
            value += _tasks_of_uid(os.getuid())
            applied["max_processes_counts_existing_tasks"] = True
        hard = value + 5 if key == "cpu_seconds" else value  # SIGXCPU first, SIGKILL 5 s later
        resource.setrlimit(getattr(resource, which), (value, hard))
        applied[key] = value
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    applied["core_dumps"] = False
    return applied


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SetupError("the uid did not change")
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SetupError("root could be regained after dropping privileges")


def enter_namespaces(flags: int, report_to: int | None = None) -> None:
    """Unshare the namespaces of `flags` (a new PID namespace among them, or none at all) and fork; the
    child returns (PID 1 of the new PID namespace). The parent never returns: in the launcher it stays
    outside as the shim that forwards the child's exit status; in the zygote (`report_to`, a pipe) it
    writes the child's pid there once the child leads a session of its own, and exits, so that the
    kernel passes to the grading worker (a child subreaper) as a process it can wait for and signal."""
    if flags and _libc().unshare(ctypes.c_int(flags)) != 0:
        raise SetupError(f"unshare of new namespaces: {os.strerror(ctypes.get_errno())}")
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_read)
        if report_to is None:
            _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        else:
            os.close(report_to)
            os.setsid()  # jupyter_client signals the kernel's process group, as for a kernel it started
        os.close(ready_write)
        return
    os.close(ready_write)
    if report_to is None:
        os.close(ready_read)
        _shim(child)
    os.read(ready_read, 1)  # end of file: the child has closed its end, after setsid
    os.write(report_to, str(child).encode("ascii"))
    os._exit(0)


def _shim(child: int) -> None:
    """Wait for the child and exit as it did. SIGINT reaches the child itself (jupyter_client
    signals the process group); SIGTERM is turned into SIGKILL of the child, which as PID 1
    takes its whole namespace with it. If the shim is killed, the child gets SIGKILL too."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))
    while True:
        pid, status = os.waitpid(child, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def _private_mounts(plan: dict) -> list[str]:
    """In the kernel's own mount namespace: its own /proc, and empty tmpfs over the shared scratch folders."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    covered = []
    for entry in plan.get("private_dirs", []):
        if os.path.isdir(entry["path"]):
            mask_path(entry["path"], [kept for kept in entry.get("keep", []) if os.path.isdir(kept)],
                      entry.get("links", []), writable=[kept for kept in entry.get("writable", []) if os.path.isdir(kept)],
                      size_mb=int(entry.get("size_mb", 64)))
            covered.append(entry["path"])
    return covered


def seccomp_program(denied: dict[str, int] | None = None) -> list[tuple[int, int, int, int]]:
    """The classic BPF program of the kernel's seccomp filter (x86_64), as `(code, jt, jf, k)`: another ABI
    is refused, `clone` with a namespace flag is refused, `clone3` answers ENOSYS, `sched_setscheduler` is
    allowed only for the normal and batch policies (libzmq sets its threads' current policy again; real-time
    and idle policies are refused), every call of `denied` (default `SYSCALLS_X86_64`) answers EPERM,
    everything else is allowed."""
    numbers = sorted(set((denied if denied is not None else SYSCALLS_X86_64).values()))
    refuse = (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EPERM)
    allow = (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW)
    program = [(_BPF_LD_W_ABS, 0, 0, 4), (_BPF_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64), refuse,
               (_BPF_LD_W_ABS, 0, 0, 0), (_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT), refuse,
               (_BPF_JEQ_K, 0, 1, _CLONE3), (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),
               (_BPF_JEQ_K, 0, 4, _CLONE), (_BPF_LD_W_ABS, 0, 0, 16), (_BPF_JSET_K, 0, 1, _NAMESPACE_FLAGS), refuse,
               allow,
               (_BPF_JEQ_K, 0, 6, _SCHED_SETSCHEDULER), (_BPF_LD_W_ABS, 0, 0, 24),  # args[1]: the policy
               (_BPF_AND_K, 0, 0, ~_SCHED_RESET_ON_FORK & 0xFFFFFFFF), (_BPF_JEQ_K, 2, 0, _SCHED_OTHER),
               (_BPF_JEQ_K, 1, 0, _SCHED_BATCH), refuse, allow]
    for number in numbers:
        program += [(_BPF_JEQ_K, 0, 1, number), refuse]
    return program + [(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW)]


def apply_seccomp() -> dict:
    """Install the kernel's seccomp filter on this process (no_new_privs must be set); what was applied. Only on
    x86_64 (`{"applied": False, "reason"}` elsewhere); a failure there raises SetupError."""
    if platform.machine() != "x86_64":
        return {"applied": False, "reason": f"no filter for {platform.machine()}"}
    program = seccomp_program()

    class _Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]

    instructions = (_Instruction * len(program))(*[_Instruction(*item) for item in program])
    fprog = _Program(len(program), ctypes.cast(instructions, ctypes.POINTER(_Instruction)))
    if _libc().prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise SetupError(f"seccomp filter: {os.strerror(ctypes.get_errno())}")
    return {"applied": True, "denied": list(DENIED_SYSCALLS), "clone_namespace_flags": "refused",
            "sched_setscheduler": "normal and batch policies only", "other_abis": "refused",
            "instructions": len(program)}


def minimal_etc(target: str, spec: dict) -> list[str]:
    """Fill `target` (the kernel's /etc, on its root tmpfs) with the host files of `ETC_FILES` (bound read-only,
    links recreated) and the generated files of `spec["files"]`; return what it holds."""
    os.makedirs(target, exist_ok=True)
    for path in spec.get("host", ETC_FILES):
        inside = os.path.join(target, os.path.basename(path))
        if os.path.islink(path):
            os.symlink(os.readlink(path), inside)
        elif os.path.exists(path):
            _bind(path, inside, read_only=True)
    for name, text in spec.get("files", {}).items():
        with open(os.path.join(target, name), "w", encoding="utf-8") as handle:
            handle.write(text)
    return sorted(os.listdir(target))


def join_cgroups(procs_files: list[str]) -> list[str]:
    """Move this process (and so all it will start) into the submission's control groups; fail closed."""
    for path in procs_files:
        try:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("0")
        except OSError as error:
            raise SetupError(f"cannot join the control group {os.path.dirname(path)}: {error.strerror}") from None
    return list(procs_files)


def sysv_objects() -> int | None:
    """SysV shared memory segments, semaphore sets and message queues this IPC namespace shows."""
    count = 0
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="utf-8") as handle:
                count += max(len(handle.read().splitlines()) - 1, 0)
        except OSError:
            return None
    return count


def _bind(source: str, target: str, *, read_only: bool, device: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    _mount(source, target, None, _MS_BIND | _MS_REC)
    flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | (0 if device else _MS_NODEV) | (_MS_RDONLY if read_only else 0)
    _mount(None, target, None, flags)


def _tmpfs(target: str, size_mb: int, mode: str, extra: str = "", *, flags: int = _MS_NOSUID | _MS_NODEV) -> None:
    os.makedirs(target, exist_ok=True)
    _mount("tmpfs", target, "tmpfs", flags, f"mode={mode},size={size_mb}m{extra}")


def _copy_home(source: str, target: str, uid: int | None, gid: int | None) -> int:
    """Copy the kernel's prepared folder (regular files and folders, no links) into its tmpfs home."""
    copied = 0
    for current, folders, files in os.walk(source):
        relative = os.path.relpath(current, source)
        destination = os.path.normpath(os.path.join(target, relative))
        for name in folders:
            if not os.path.islink(os.path.join(current, name)):
                os.makedirs(os.path.join(destination, name), exist_ok=True)
        for name in files:
            path = os.path.join(current, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            shutil.copyfile(path, os.path.join(destination, name))
            shutil.copymode(path, os.path.join(destination, name))
            copied += 1
    if uid is not None:
        for current, folders, files in os.walk(target):
            for name in [*folders, *files]:
                os.lchown(os.path.join(current, name), uid, gid)
    return copied


def pivot_into(root: str) -> None:
    """Make `root` this mount namespace's `/` and detach the old root entirely."""
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise SetupError(f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(root)
    if _libc().syscall(ctypes.c_long(number), b".", b".") != 0:
        raise SetupError(f"pivot_root: {os.strerror(ctypes.get_errno())}")
    if _libc().umount2(b".", ctypes.c_int(_MNT_DETACH)) != 0:
        raise SetupError(f"detaching the old root: {os.strerror(ctypes.get_errno())}")
    os.chdir("/")


def build_root(spec: dict, uid: int | None, gid: int | None) -> dict:
    """Build the kernel's whole filesystem from what it needs and pivot into it (see
    `sandbox.plan_kernel_root`): a read-only tmpfs `/` holding the host paths of `read_only` bound
    read-only (the interpreter, the venv, the course's `tools`), the links on the way to them, the
    device nodes of `DEVICES`, a fresh /proc, size-capped scratch tmpfs (/tmp, /var/tmp, /dev/shm) and
    the kernel's home on a size-capped tmpfs of its own, filled from its prepared folder. Nothing else
    of the host (other checkouts, /run/lock, /root, the grader's folders) exists there."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    root = spec["dir"]
    _tmpfs(root, 4, "0755")
    inside = lambda path: os.path.join(root, path.lstrip("/"))  # noqa: E731
    _tmpfs(inside("/dev"), 1, "0755", flags=_MS_NOSUID | _MS_NOEXEC)
    for device in DEVICES:
        if os.path.exists(device):
            _bind(device, inside(device), read_only=False, device=True)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, inside(f"/dev/{name}"))
    for entry in spec.get("scratch", []):
        _tmpfs(inside(entry["path"]), int(entry["size_mb"]), "1777")
    bound = []
    for path in spec.get("read_only", []):
        if os.path.exists(path):
            _bind(path, inside(path), read_only=True)
            bound.append(path)
    for path in spec.get("shared", []):  # the folder of the Unix sockets it talks to the grader through
        _bind(path, inside(path), read_only=False)
    etc = minimal_etc(inside("/etc"), spec["etc"]) if spec.get("etc") is not None else None
    for link in spec.get("links", []):
        location = inside(link["path"])
        if not os.path.lexists(location):
            os.makedirs(os.path.dirname(location), exist_ok=True)
            os.symlink(link["target"], location)
    os.makedirs(inside("/proc"), exist_ok=True)
    _mount("proc", inside("/proc"), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    home = spec["home"]
    owner = "" if uid is None else f",uid={uid},gid={gid}"
    _tmpfs(inside(home["path"]), int(home["size_mb"]), "0700", owner)
    copied = _copy_home(home["path"], inside(home["path"]), uid, gid)
    pivot_into(root)
    _mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return {"read_only": bound, "scratch": {entry["path"]: entry["size_mb"] for entry in spec.get("scratch", [])},
            "home": home["path"], "home_mb": home["size_mb"], "files_copied_home": copied,
            "top_level": sorted(os.listdir("/")), "etc": etc, "shared": list(spec.get("shared", []))}


def kernel_setup(plan: dict, connection_file: str | None, command: list[str], environ: dict,
                 report_to: int | None = None) -> tuple[list[str], dict]:
    """Everything the kernel role does before ipykernel runs: namespaces (see `enter_namespaces` for
    `report_to`), private mounts, limits, the report, the kernel's uid, folder and environment (the
    plan's, plus the keys of `pass_env` found in `environ`). Returns the command and its environment."""
    workdir = plan["workdir"]
    uid, gid = plan.get("uid"), plan.get("gid")
    if connection_file and uid is not None:
        private = os.path.join(workdir, "connection.json")
        shutil.copyfile(connection_file, private)
        os.chown(private, uid, gid)
        os.chmod(private, 0o600)
        command = [private if part == connection_file else part for part in command]
    report = {"started_by": "launcher" if report_to is None else "zygote", "pid_namespace": False,
              "ipc_namespace": False, "private_dirs": [], "root": None}
    report_file = open(plan["kernel_report"], "w", encoding="utf-8")  # noqa: SIM115 - the new root hides its folder
    report["cgroup_joined"] = join_cgroups(plan.get("cgroup_procs", []))
    if plan.get("own_namespaces") or report_to is not None:
        network = _CLONE_NEWNET if plan.get("network_namespace") else 0
        enter_namespaces(_CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | network if plan.get("own_namespaces") else 0,
                         report_to)
    if plan.get("own_namespaces") and plan.get("network_namespace"):
        report["network_namespace"] = {"interfaces": loopback_up()}
    if plan.get("own_namespaces"):
        umask = os.umask(0o022)  # folders made in the new root must stay passable for the kernel's uid
        if plan.get("root"):
            report["root"] = build_root(plan["root"], uid, gid)
            report["private_dirs"] = [entry["path"] for entry in plan["root"].get("scratch", [])]
        else:
            report["private_dirs"] = _private_mounts(plan)
        os.umask(umask)
        report["pid_namespace"] = os.getpid() == 1
        report["ipc_namespace"] = True
        report["sysv_objects_visible"] = sysv_objects()
    report.update({"limits": apply_limits(plan), "uid": None, "no_new_privs": False})
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        report["no_new_privs"] = True
    report["seccomp"] = apply_seccomp() if plan.get("seccomp") else {"applied": False, "reason": "not asked for"}
    if uid is not None:
        report["uid"], report["gid"] = uid, gid
    report["monotonic"] = {"launcher_started": STARTED, "exec": time.monotonic()}
    with report_file:
        json.dump(report, report_file, indent=2)
        report_file.write("\n")
    if uid is not None:
        drop_privileges(uid, gid)
    os.chdir(workdir)
    env = {key: value for key, value in environ.items() if key in plan.get("pass_env", [])}
    env.update(plan.get("env", {}))
    return command, env


def run_kernel(plan: dict, connection_file: str | None, command: list[str]) -> None:
    """Apply namespaces, limits, drop privileges, exec `command` (ipykernel) in the kernel folder; never returns."""
    command, env = kernel_setup(plan, connection_file, command, dict(os.environ))
    os.execve(command[0], command, env)


# ---------------------------------------------------------------------------
# The kernel zygote
# ---------------------------------------------------------------------------

def run_zygote() -> int:
    """The `zygote` role: import ipykernel once, then fork one kernel per request (JSON lines on stdin:
    `plan`, `connection_file`, `command` (the kernelspec's, after `--`), `log`, `env`; one reply per
    request on stdout: `pid` or `error`).

    Each kernel is set up exactly as the `kernel` role sets up the one it execs (`kernel_setup`), then
    runs ipykernel in the forked process as `python -m ipykernel_launcher -f FILE` would, so it starts
    with what such a process has imported before any cell runs and nothing else. The zygote is root and
    runs no submission code; a kernel cannot signal it or read its memory."""
    import random  # noqa: F401 - reseeded in every kernel

    from ipykernel import kernelapp  # noqa: F401 - the import the zygote is there to do once

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.write(json.dumps(fork_kernel(request)) + "\n")
        sys.stdout.flush()
    return 0


def fork_kernel(request: dict) -> dict:
    """Fork, set up and start one kernel; return `{"pid"}` (as seen here) or `{"error"}`."""
    report_read, report_write = os.pipe()
    sys.stderr.flush()
    intermediate = os.fork()
    if intermediate == 0:
        code = EXIT_SETUP_FAILED
        try:
            os.close(report_read)
            _kernel_from_zygote(request, report_write)
            code = 0
        except SystemExit as stop:  # the kernel ended (e.g. `exit()` in a cell ends ipykernel's loop)
            code = stop.code if isinstance(stop.code, int) else 0
        except BaseException as error:  # reported in the submission's log, which the host shows
            print(f"sandbox kernel setup failed: {error.__class__.__name__}: {error}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    os.close(report_write)
    with os.fdopen(report_read, "rb") as handle:
        pid = handle.read()
    os.waitpid(intermediate, 0)
    return {"pid": int(pid)} if pid else {"error": "the kernel could not be set up (see the submission's log)"}


def _kernel_from_zygote(request: dict, report_write: int) -> None:
    """In the forked child: the submission's log on fds 1 and 2, the kernel's set-up, then ipykernel."""
    global STARTED
    STARTED = time.monotonic()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, report_write)
    os.closerange(report_write + 1, os.sysconf("SC_OPEN_MAX"))
    stdin, _ = os.pipe()  # as jupyter_client gives a kernel: a pipe nobody writes to (its write end stays open here)
    os.dup2(stdin, 0)
    os.close(stdin)
    with open(request["plan"], encoding="utf-8") as handle:
        plan = json.load(handle)
    command = request["command"]
    if command[:3] != [sys.executable, "-m", "ipykernel_launcher"]:
        raise SetupError(f"the zygote starts `{sys.executable} -m ipykernel_launcher ...` only, not {command[:3]}")
    imported = set(sys.modules)
    command, env = kernel_setup(plan, request["connection_file"], command, request.get("env", {}),
                                report_to=report_write)
    for name in set(sys.modules) - imported:  # the set-up's own imports (`resource`): a new interpreter has none
        del sys.modules[name]
    start_ipykernel(command[3:], env)


def start_ipykernel(arguments: list[str], env: dict) -> None:
    """What `python -m ipykernel_launcher ARGUMENTS` does, in this already set-up process."""
    import atexit
    import importlib.util
    import random
    import runpy  # noqa: F401 - `python -m` has imported it

    os.environ.clear()
    os.environ.update(env)
    sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *arguments]
    del sys.path[0]  # the launcher's folder, where `python -m` would have put the kernel's cwd, then removed it
    random.seed()  # a forked process shares its parent's random state; a kernel starts with its own
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a new interpreter has them
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    import site

    site.USER_BASE = site.USER_SITE = None  # computed from HOME at start-up: the kernel's, not the zygote's
    site.getusersitepackages()
    from ipykernel import kernelapp

    try:
        # `parent_handle` is the one setting ipykernel takes from the environment when it is imported
        # (on Linux): here it is imported before the kernel's environment exists, so it is passed.
        kernelapp.IPKernelApp.launch_instance(parent_handle=int(env.get("JPY_PARENT_PID") or 0))
    finally:
        atexit._run_exitfuncs()  # what the interpreter would do at the end of `python -m ipykernel_launcher`


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     usage="%(prog)s {init,kernel} --plan PLAN [--connection-file F] -- COMMAND... "
                                           "| %(prog)s zygote")
    parser.add_argument("role", choices=("init", "kernel", "zygote"))
    parser.add_argument("--plan", help="plan JSON written by tools.course.classroom.sandbox (init and kernel roles)")
    parser.add_argument("--connection-file", help="kernel role: the connection file jupyter_client wrote")
    args = parser.parse_args(argv[:split])
    if args.role == "zygote":
        return run_zygote()
    command = argv[split + 1:]
    if not command or not args.plan:
        parser.error("the init and kernel roles need --plan and a command after --")
    with open(args.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    pid = os.getpid()
    try:
        if args.role == "init":
            return run_init(plan, command)
        run_kernel(plan, args.connection_file, command)
    except (SetupError, OSError) as error:
        print(f"sandbox {args.role} setup failed: {error}", file=sys.stderr, flush=True)
    if os.getpid() != pid:  # the kernel's namespace child (PID 1 there): never return into the shim's code
        os._exit(EXIT_SETUP_FAILED)
    return EXIT_SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main())
