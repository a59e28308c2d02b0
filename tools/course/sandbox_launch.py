"""Launcher of one sandboxed grading worker; standard library only, run by path as a script.

Two roles, both driven by a plan JSON written by `tools.course.sandbox`:

* `init`: PID 1 of the worker's new network/PID/mount namespaces, still root. It brings the
  loopback interface up (the kernel talks to nbgrader over 127.0.0.1), masks paths such as the
  course folder and root's home with empty tmpfs mounts (binding back what must stay visible,
  e.g. the Python installation), runs the command (nbgrader) and reaps orphans until it ends.
  When it exits the kernel kills every process left in the namespace.
* `kernel`: the argv of the worker's kernelspec. It sets the resource limits, drops to the
  worker's own unprivileged uid (copying the connection file for it) and execs ipykernel
  with a clean environment, in the kernel's own folder.

Each role writes what it actually applied to a JSON report before running untrusted code, and
fails closed: if a requested isolation step cannot be applied, nothing is executed.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys

EXIT_SETUP_FAILED = 70

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 2, 4, 32, 4096, 16384
_MNT_DETACH = 2
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_NO_NEW_PRIVS = 38

_LIMITS = {
    "memory_bytes": resource.RLIMIT_AS,
    "cpu_seconds": resource.RLIMIT_CPU,
    "file_size_bytes": resource.RLIMIT_FSIZE,
    "max_processes": resource.RLIMIT_NPROC,
}


class SetupError(RuntimeError):
    """An isolation step of the plan could not be applied."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data=None) -> None:
    encode = lambda value: None if value is None else os.fsencode(value)  # noqa: E731
    if _libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)) != 0:
        error = ctypes.get_errno()
        raise SetupError(f"mount {source} -> {target} ({fstype}): {os.strerror(error)}")


def _umount(target) -> None:
    if _libc().umount2(os.fsencode(target), _MNT_DETACH) != 0:
        raise SetupError(f"umount {target}: {os.strerror(ctypes.get_errno())}")


def loopback_up() -> list[str]:
    """Set `lo` up in this network namespace; return the interface names seen."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
    return sorted(name for _, name in socket.if_nameindex())


def mask_path(path: str, keep: list[str], staging: str, links: list[dict] | None = None) -> None:
    """Cover `path` with an empty tmpfs, bind each folder of `keep` (under `path`) back read-only,
    and recreate each symbolic link of `links` (`{"path", "target"}`) that the tmpfs hid."""
    staged = []
    for index, kept in enumerate(keep):
        stage = os.path.join(staging, f"keep-{index}")
        os.makedirs(stage, exist_ok=True)
        _mount(kept, stage, None, _MS_BIND | _MS_REC)
        staged.append((stage, kept))
    _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=4m")
    for stage, kept in staged:
        os.makedirs(kept, exist_ok=True)
        _mount(stage, kept, None, _MS_BIND | _MS_REC)
        _mount(None, kept, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
        _umount(stage)
    for link in links or []:
        if not os.path.lexists(link["path"]):
            os.makedirs(os.path.dirname(link["path"]), exist_ok=True)
            os.symlink(link["target"], link["path"])


def _write_report(path: str, report: dict) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
        handle.write("\n")


def run_init(plan: dict, command: list[str]) -> int:
    """Apply the namespace-side steps of the plan, run `command`, reap orphans, return its exit code."""
    os.umask(0o022)  # folders made inside the masks must stay passable for the kernel's uid
    report = {"pid_in_namespace": os.getpid(), "loopback_up": False, "interfaces": None, "masked": []}
    if plan.get("network_namespace"):
        report["interfaces"] = loopback_up()
        report["loopback_up"] = True
        if report["interfaces"] != ["lo"]:
            raise SetupError(f"the network namespace is not empty: {report['interfaces']}")
    for entry in plan.get("mask", []):
        if os.path.isdir(entry["path"]):
            mask_path(entry["path"], [kept for kept in entry.get("keep", []) if os.path.isdir(kept)], plan["staging"],
                      entry.get("links", []))
            report["masked"].append(entry["path"])
    os.umask(0o077)  # what the grader writes stays private to it
    report["umask"] = "077"
    _write_report(plan["init_report"], report)
    child = subprocess.Popen(command)
    while True:
        pid, status = os.wait()
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status)


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
        resource.setrlimit(which, (value, hard))
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


def run_kernel(plan: dict, connection_file: str | None, command: list[str]) -> None:
    """Apply limits, drop privileges, exec `command` (ipykernel) in the kernel folder; never returns."""
    workdir = plan["workdir"]
    report = {"limits": apply_limits(plan), "uid": None, "no_new_privs": False}
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
        report["no_new_privs"] = True
    uid, gid = plan.get("uid"), plan.get("gid")
    if connection_file and uid is not None:
        private = os.path.join(workdir, "connection.json")
        shutil.copyfile(connection_file, private)
        os.chown(private, uid, gid)
        os.chmod(private, 0o600)
        command = [private if part == connection_file else part for part in command]
    if uid is not None:
        report["uid"], report["gid"] = uid, gid
    _write_report(plan["kernel_report"], report)
    if uid is not None:
        drop_privileges(uid, gid)
    os.chdir(workdir)
    env = {key: value for key, value in os.environ.items() if key in plan.get("pass_env", [])}
    env.update(plan.get("env", {}))
    os.execve(command[0], command, env)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     usage="%(prog)s {init,kernel} --plan PLAN [--connection-file F] -- COMMAND...")
    parser.add_argument("role", choices=("init", "kernel"))
    parser.add_argument("--plan", required=True, help="plan JSON written by tools.course.sandbox")
    parser.add_argument("--connection-file", help="kernel role: the connection file jupyter_client wrote")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("a command is required after --")
    with open(args.plan, encoding="utf-8") as handle:
        plan = json.load(handle)
    try:
        if args.role == "init":
            return run_init(plan, command)
        run_kernel(plan, args.connection_file, command)
    except (SetupError, OSError) as error:
        print(f"sandbox {args.role} setup failed: {error}", file=sys.stderr, flush=True)
    return EXIT_SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main())
