"""The grading sandbox on its own (no nbgrader): limits hold, isolation is real, and the record says so."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from chapter_factory import REPO_ROOT

from tools.course.classroom import sandbox
from tools.course.classroom.batch import remove_tree
from tools.course.classroom.cgroups import BatchCgroups, probe_cgroups
from tools.course.classroom.sandbox import (
    LAUNCHER,
    HostIsolation,
    Limits,
    UidPool,
    WorkerSandbox,
    plan_masks,
    probe_host,
)
from tools.errors import ConfigError

HOST = probe_host()
needs_namespaces = pytest.mark.skipif(not HOST.namespaces, reason=f"no namespaces here: {HOST.reason}")

PROBE = """
import json, os, socket, sys, time
report = {"uid": os.getuid()}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    report["network"] = "connected"
except OSError as error:
    report["network"] = type(error).__name__
report["repo_listing"] = sorted(os.listdir(sys.argv[2]))
try:
    block = bytearray(3 * 2 ** 30)
    report["memory"] = "allocated"
except MemoryError:
    report["memory"] = "MemoryError"
if sys.argv[3] == "fork":
    children = 0
    try:
        for _ in range(500):
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
    except OSError as error:
        report["fork"] = f"{type(error).__name__} after {children}"
print(json.dumps(report))
"""


@pytest.fixture
def worker():
    """A worker folder the sandbox uid can pass through to (pytest's tmp_path is closed to other users)."""
    root = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    root.chmod(0o711)
    (root / "worker").mkdir(mode=0o700)
    yield root / "worker"
    remove_tree(root)


def run_probe(worker, host: HostIsolation, *, fork: bool, limits: Limits | None = None):
    limits = limits or Limits(cell_timeout_s=5, notebook_timeout_s=60, memory_mb=1024, max_processes=16)
    with UidPool(1 if host.separate_uid else 0) as uids:
        return _run_probe(worker, host, fork, limits, uids.uids[0] if uids.uids else None)


def _run_probe(worker, host, fork, limits, uid):
    box = WorkerSandbox(worker, uid, limits, host, plan_masks(REPO_ROOT, REPO_ROOT / "grading"), repo_root=REPO_ROOT)
    box.prepare()
    kernel = box.new_kernel(worker / "submission")
    probe = kernel.home / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    if box.uid is not None:
        os.chown(probe, box.uid, box.uid)
    server = socket.create_server(("127.0.0.1", 0))
    try:
        inner = [sys.executable, str(LAUNCHER), "kernel", "--plan", str(kernel.plan_path), "--",
                 sys.executable, str(probe), str(server.getsockname()[1]), str(REPO_ROOT), "fork" if fork else "-"]
        run = box.run(inner, worker / "log.txt", kernel=kernel)
    finally:
        server.close()
    output = (worker / "log.txt").read_text(encoding="utf-8")
    return run, json.loads(output.strip().splitlines()[-1]), box.enforced(kernel), box


def test_limits_refuse_bad_values():
    with pytest.raises(ConfigError, match="cell timeout"):
        Limits(cell_timeout_s=0)
    with pytest.raises(ConfigError, match="must exceed"):
        Limits(cell_timeout_s=30, notebook_timeout_s=30)
    with pytest.raises(ConfigError, match="memory_mb"):
        Limits(memory_mb=-1)


@pytest.fixture
def layout():
    """A folder others may pass through, holding a private folder with a checkout (a name with a space),
    a symbolic link to it, a private folder with a site folder, and a course folder."""
    base = Path(tempfile.mkdtemp(prefix="mask-test-"))
    base.chmod(0o711)
    private = base / "private"
    repo = private / "my course"
    for folder in (repo / ".venv", repo / "tools", base / "elsewhere" / "site", base / "course"):
        folder.mkdir(parents=True)
    private.chmod(0o700)
    (base / "elsewhere").chmod(0o700)
    (private / "link").symlink_to(repo)
    yield base
    remove_tree(base)


def test_masks_hide_private_folders_and_the_repository_but_keep_what_the_kernel_needs(layout, monkeypatch):
    private, repo = layout / "private", layout / "private" / "my course"
    needs = [repo / ".venv", private / "link" / "tools", layout / "elsewhere" / "site"]
    monkeypatch.setattr(sandbox, "kernel_paths", lambda repo_root=None: needs)
    masks = {entry["path"]: entry for entry in plan_masks(repo, layout / "course")}
    assert set(masks) == {str(private), str(layout / "elsewhere"), str(layout / "course")}
    # the repository is hidden by the private folder around it; only what the kernel needs comes back
    assert masks[str(private)]["keep"] == sorted([str(repo / ".venv"), str(repo / "tools")])
    assert masks[str(private)]["links"] == [{"path": str(private / "link"), "target": str(repo)}]
    assert masks[str(layout / "elsewhere")]["keep"] == [str(layout / "elsewhere" / "site")]
    assert masks[str(layout / "course")]["keep"] == []


def test_a_kept_folder_never_uncovers_the_repository_inside_it(layout, monkeypatch):
    private = layout / "private"
    monkeypatch.setattr(sandbox, "kernel_paths", lambda repo_root=None: [private / "my course"])
    repo = private / "my course" / "tools"  # a repository inside what the kernel needs
    plan = plan_masks(repo, layout / "course")
    paths = [entry["path"] for entry in plan]
    assert paths.index(str(private)) < paths.index(str(repo))  # the inner mask is applied after the outer one


def test_kernel_paths_never_include_the_repository_or_a_folder_around_it(monkeypatch):
    monkeypatch.setattr(sys, "path", [str(REPO_ROOT), str(REPO_ROOT / "notebooks"), str(REPO_ROOT.parent), *sys.path])
    paths = [path.resolve() for path in sandbox.kernel_paths(REPO_ROOT)]
    assert REPO_ROOT not in paths and REPO_ROOT / "notebooks" not in paths and REPO_ROOT.parent not in paths
    import tools

    assert Path(tools.__file__).parent.resolve() in paths and Path(sys.prefix).resolve() in paths


@needs_namespaces
def test_namespaces_cut_the_network_hide_the_course_and_enforce_the_limits(worker):
    run, report, enforced, box = run_probe(worker, HOST, fork=True)
    assert run.returncode == 0 and not run.killed_at_notebook_timeout
    assert report["uid"] == box.uid != 0
    assert report["network"] == "ConnectionRefusedError"  # 127.0.0.1 is the namespace's own loopback
    assert report["repo_listing"] == sorted(["tools"] + ([".venv"] if (REPO_ROOT / ".venv").is_dir() and
                                                         sys.prefix.startswith(str(REPO_ROOT)) else []))
    assert report["memory"] == "MemoryError"
    assert report["fork"].startswith("BlockingIOError")
    assert int(report["fork"].split()[-1]) < 16
    assert enforced["network"] == "own network namespace, interfaces lo" and enforced["pid_namespace"]
    assert enforced["kernel_uid"] == box.uid and enforced["memory_bytes"] == 1024 * 2 ** 20
    assert enforced["max_processes"] == 16 and enforced["no_new_privs"] is True
    assert any(Path(path) == REPO_ROOT or Path(path) in REPO_ROOT.parents for path in enforced["masked_paths"])
    assert enforced["leftover_processes_killed"] == 0  # the sleeping children died with the namespace


@needs_namespaces
def test_the_notebook_timeout_kills_the_whole_namespace(worker):
    uids = UidPool(1)
    box = WorkerSandbox(worker, uids.uids[0], Limits(cell_timeout_s=1, notebook_timeout_s=3), HOST,
                        plan_masks(REPO_ROOT, REPO_ROOT / "grading"))
    box.prepare()
    kernel = box.new_kernel(worker / "submission")
    sleeper = textwrap.dedent("""
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                os.setsid()  # escape the process group: only the namespace can catch it
                break
        time.sleep(600)
    """)
    inner = [sys.executable, str(LAUNCHER), "kernel", "--plan", str(kernel.plan_path), "--", sys.executable, "-c", sleeper]
    started = time.monotonic()
    run = box.run(inner, worker / "log.txt", kernel=kernel)
    assert run.killed_at_notebook_timeout and time.monotonic() - started < 300  # a hang guard: the sleep lasts 600 s
    time.sleep(0.5)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) == box.uid]
    assert box.enforced()["killed_at_notebook_timeout"] is True
    uids.release()


@needs_namespaces
def test_concurrent_pools_never_share_a_uid():
    with UidPool(2) as first, UidPool(2) as second:
        assert len(set(first.uids) | set(second.uids)) == 4


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def test_without_namespaces_the_rlimits_still_hold_and_the_record_says_what_is_missing(worker):
    host = HostIsolation(False, False, "forced for this test")
    run, report, enforced, _ = run_probe(worker, host, fork=False)
    assert run.returncode == 0
    assert report["uid"] == os.getuid()
    assert report["network"] == "connected"  # honest: nothing blocked it, and the record says so
    assert enforced["network"] == "not isolated" and enforced["isolation"] == "none"
    assert enforced["kernel_uid"] is None and enforced["masked_paths"] == []
    assert report["memory"] == "MemoryError" and enforced["memory_bytes"] == 1024 * 2 ** 20
    if os.geteuid() == 0:
        assert enforced["max_processes"] is None and enforced["max_processes_not_enforced"]
    else:
        assert enforced["max_processes"] > 16 and enforced["max_processes_counts_existing_tasks"]


def test_each_kernel_gets_its_own_scratch_folders_with_its_home_and_what_python_needs(tmp_path):
    """/tmp, /var/tmp and /dev/shm are covered; under them the kernel's home comes back writable,
    what it needs read-only (with the links on the way), and a folder it needs whole stays uncovered."""
    home = Path(tempfile.mkdtemp(prefix="private-dirs-")) / "kernel"
    venv = Path(tempfile.mkdtemp(prefix="private-dirs-venv-"))
    link = Path(tempfile.gettempdir()) / f"{venv.name}-link"
    link.symlink_to(venv)
    try:
        home.mkdir()
        plan = {entry["path"]: entry for entry in sandbox.plan_private_dirs([link, Path(sys.prefix)], home)}
        tmp = str(Path(tempfile.gettempdir()).resolve())
        assert tmp in plan and plan[tmp]["writable"] == [str(home.resolve())]
        assert str(venv.resolve()) in plan[tmp]["keep"]
        assert {"path": str(link), "target": str(venv.resolve())} in plan[tmp]["links"]
        assert str(Path(tmp)) not in {entry["path"] for entry in sandbox.plan_private_dirs([Path(tmp)], home)}
    finally:
        link.unlink()
        remove_tree(home.parent)
        remove_tree(venv)


def test_the_zygote_starts_ipykernel_only(tmp_path):
    """A request for any other command is refused before anything runs, and the zygote goes on."""
    report = tmp_path / "kernel.json"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"workdir": str(tmp_path), "kernel_report": str(report), "limits": {}, "env": {}}),
                    encoding="utf-8")
    zygote = subprocess.Popen([sys.executable, str(LAUNCHER), "zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert json.loads(zygote.stdout.readline()) == {"ready": True}
        for command in ([sys.executable, "-c", "print('not a kernel')"], ["/bin/sh", "-m", "ipykernel_launcher"]):
            request = {"plan": str(plan), "connection_file": str(tmp_path / "c.json"), "command": command,
                       "log": str(tmp_path / "log.txt"), "env": {}}
            zygote.stdin.write(json.dumps(request) + "\n")
            zygote.stdin.flush()
            assert "error" in json.loads(zygote.stdout.readline())
        assert "ipykernel_launcher" in (tmp_path / "log.txt").read_text(encoding="utf-8")
        assert not report.exists()
    finally:
        zygote.stdin.close()
        assert zygote.wait(timeout=30) == 0


FORK_PREPARE_SCRIPT = """
import json, os, sys
from pathlib import Path
from tools.course.classroom.sandbox import HostIsolation, Limits, WorkerSandbox

parent_stdout = os.fstat(1)
seen = {}


def prepare():
    seen["inherited_stdout"] = os.fstat(1).st_ino == parent_stdout.st_ino


def target():
    os.write(1, (json.dumps(seen) + "\\n").encode())
    return 0


worker = Path(sys.argv[1])
box = WorkerSandbox(worker, None, Limits(), HostIsolation(False, False, "forced for this test"), [])
box.prepare()
process = box.fork(target, worker / "log.txt", {"PATH": "/usr/bin:/bin"}, prepare=prepare)
try:
    print(process.stdout.readline().decode().strip(), process.wait(timeout=30))
finally:
    box.stop(process)
"""


def test_fork_prepares_the_child_before_it_rearranges_its_file_descriptors(worker):
    """`prepare` runs while the child still holds the descriptors it inherited (its fd 1 is the parent's),
    so whatever it drops is collected, closing its own descriptors, before fds 0-2 become the pipes and
    the log and the child opens new ones (a loop collected later could close those: issue 15).

    Forking needs a process that runs one thread, which a pytest worker that ran other tests need not
    be: the fork happens in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", FORK_PREPARE_SCRIPT, str(worker)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr
    seen, returncode = done.stdout.strip().rsplit(" ", 1)
    assert json.loads(seen) == {"inherited_stdout": True} and returncode == "0", done.stdout


# ---------------------------------------------------------------------------
# A sandbox per submission: control groups, IPC namespace, the kernel's own filesystem
# ---------------------------------------------------------------------------

CGROUPS = probe_cgroups()
needs_cgroups = pytest.mark.skipif(not (HOST.namespaces and CGROUPS.version),
                                   reason=f"no namespaces or no cgroups here: {HOST.reason}; {CGROUPS.reason}")


def run_script(worker, script: str, limits: Limits, *, cgroups=None, args=(), box_dir_name="submission"):
    """Run `script` as one submission's kernel would run (launcher `kernel` role) in a fresh sandbox; return
    the run, the last line the script printed (JSON), what was enforced and the kernel folder."""
    with UidPool(1) as uids:
        box = WorkerSandbox(worker, uids.uids[0], limits, HOST, plan_masks(REPO_ROOT, REPO_ROOT / "grading"),
                            repo_root=REPO_ROOT, cgroups=cgroups)
        box.prepare()
        kernel = box.new_kernel(worker / box_dir_name)
        (kernel.home / "script.py").write_text(script, encoding="utf-8")
        os.chown(kernel.home / "script.py", box.uid, box.uid)
        inner = [sys.executable, str(LAUNCHER), "kernel", "--plan", str(kernel.plan_path), "--",
                 sys.executable, "script.py", *map(str, args)]
        log = worker / f"{box_dir_name}.log"
        run = box.run(inner, log, kernel=kernel)
        lines = log.read_text(encoding="utf-8").strip().splitlines()
        try:
            reply = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            reply = {"log": lines[-20:]}
        return run, reply, box.enforced(kernel), kernel


HUNGRY_CHILDREN = """
import json, os, time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(300 * 2 ** 20)  # each under the per-process limit, together above the submission's
        for index in range(0, len(block), 4096):
            block[index] = 1
        time.sleep(3)
        os._exit(0)
    children.append(pid)
print(json.dumps({"exits": [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]}))
"""


@needs_cgroups
@pytest.mark.slow
def test_many_children_together_are_held_to_the_submissions_memory(worker):
    batch = BatchCgroups(CGROUPS)
    try:
        limits = Limits(cell_timeout_s=5, notebook_timeout_s=60, memory_mb=512, max_processes=16)
        run, reply, enforced, _ = run_script(worker, HUNGRY_CHILDREN, limits, cgroups=batch)
    finally:
        batch.close()
    assert run.returncode == 0, reply
    assert -9 in reply["exits"], reply  # the kernel's OOM killer ended at least one child: 4 x 300 MiB > 512 MiB
    usage = enforced["cgroup"]["usage"]
    assert usage["memory_peak_bytes"] <= 512 * 2 ** 20 and usage["oom_kills"] >= 1, usage
    assert enforced["limits_by"] == f"cgroup {CGROUPS.version} and rlimits"
    assert enforced["cgroup"]["memory_bytes"] == 512 * 2 ** 20 and enforced["cgroup"]["max_tasks"] == 16


SPINNERS = """
import json, os, sys, time
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os.setsid()  # out of the kernel's session: only the control group still holds it
        while True:
            pass
started = time.monotonic()
time.sleep(3)
print(json.dumps({"wall_s": time.monotonic() - started}))
"""


@needs_cgroups
@pytest.mark.slow
def test_setsid_spinners_get_the_submissions_cpu_quota_and_are_killed_with_it(worker):
    batch = BatchCgroups(CGROUPS)
    try:
        limits = Limits(cell_timeout_s=5, notebook_timeout_s=60, max_processes=32, cpus=0.25)
        run, reply, enforced, _ = run_script(worker, SPINNERS, limits, cgroups=batch, args=(12,))
    finally:
        batch.close()
    assert run.returncode == 0, reply
    usage = enforced["cgroup"]["usage"]
    # twelve spinners on every CPU of the host would use many CPU seconds in 3 s; the quota is a quarter CPU
    assert usage["cpu_seconds"] <= 0.25 * (reply["wall_s"] + 2) + 0.5, usage
    assert usage["cpu_throttled_periods"] > 0, usage  # they asked for more than the quota and were held to it
    assert usage["tasks_peak"] >= 13 and usage["processes_killed_after"] == 0  # they died with the namespace
    assert enforced["cgroup"]["cpus"] == 0.25


SYSV_WRITER = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0x5EC2E7, 4096, 0o1666)  # IPC_CREAT | rw for everyone, never removed
print(json.dumps({"segment": segment}))
"""
SYSV_READER = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
found = libc.shmget(0x5EC2E7, 0, 0o666)
print(json.dumps({"found": found, "visible": open("/proc/sysvipc/shm").read().count("\\n") - 1}))
"""


def _host_segments(key: int) -> int:
    lines = Path("/proc/sysvipc/shm").read_text(encoding="utf-8").splitlines()[1:]
    return sum(1 for line in lines if int(line.split()[0]) == key)


@needs_namespaces
@pytest.mark.slow
def test_a_sysv_segment_left_by_one_submission_is_gone_for_the_next_and_for_the_host(worker):
    limits = Limits(cell_timeout_s=5, notebook_timeout_s=60)
    _, written, enforced, _ = run_script(worker, SYSV_WRITER, limits, box_dir_name="writer")
    assert written["segment"] >= 0 and enforced["ipc_namespace"] and enforced["sysv_objects_at_start"] == 0
    _, read, _, _ = run_script(worker, SYSV_READER, limits, box_dir_name="reader")
    assert read == {"found": -1, "visible": 0}
    assert _host_segments(0x5EC2E7) == 0


FILESYSTEM_VIEW = """
import json, os, sys
repo = sys.argv[1]
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as error:
        return type(error).__name__
def can_write(path):
    try:
        with open(os.path.join(path, "planted"), "w") as handle:
            handle.write("x" * 1024)
        return True
    except OSError:
        return False
home = os.path.expanduser("~")
writable = {path: can_write(path) for path in ("/", "/etc", "/usr", repo + "/tools", home, "/tmp")}
filled = 0
try:
    with open(os.path.join(home, "big"), "wb") as handle:
        for _ in range(64):
            handle.write(b"x" * 2 ** 20)
            filled += 1
except OSError as error:
    filled = f"{filled} MiB then {type(error).__name__}"
print(json.dumps({"top": listing("/"), "repo_parent": listing(os.path.dirname(repo)), "repo": listing(repo),
                  "run_lock": listing("/run/lock"), "root_home": listing("/root"), "grading": listing(repo + "/grading"),
                  "write": writable,
                  "home_filled": filled}))
"""


@needs_namespaces
@pytest.mark.slow
def test_the_kernel_sees_only_what_it_needs_and_writes_only_to_capped_scratch(worker, monkeypatch):
    monkeypatch.setattr(sandbox, "PRIVATE_DIR_MB", 16)
    run, view, enforced, kernel = run_script(worker, FILESYSTEM_VIEW, Limits(cell_timeout_s=5, notebook_timeout_s=60),
                                             args=(REPO_ROOT,))
    assert run.returncode == 0, view
    assert "run" not in view["top"] and "home" not in view["top"] and "mnt" not in view["top"], view["top"]
    assert view["run_lock"] == "FileNotFoundError" and view["grading"] == "FileNotFoundError"
    assert view["repo_parent"] == [REPO_ROOT.name]  # no other checkout beside this one
    assert set(view["repo"]) <= {"tools", ".venv"}
    assert view["write"] == {"/": False, "/etc": False, "/usr": False, str(REPO_ROOT / "tools"): False,
                             str(kernel.home): True, "/tmp": True}
    assert view["home_filled"].startswith("16 MiB then OSError") or view["home_filled"].startswith("15 MiB then"), view
    assert enforced["kernel_filesystem"]["home_mb"] == 16


HARDENING_VIEW = """
import ctypes, json, os, socket, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return "allowed" if result == 0 else os.strerror(ctypes.get_errno())
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
report = {"seccomp_mode": status["Seccomp"].strip()}
report["unshare_user"] = errno_of(libc.unshare(0x10000000))
report["unshare_mount"] = errno_of(libc.unshare(0x00020000))
report["mount_tmpfs"] = errno_of(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None))
report["ptrace_traceme"] = errno_of(libc.ptrace(0, 0, None, None))
report["keyctl"] = errno_of(libc.syscall(250, 0, 0, 0, 0))
report["bpf"] = errno_of(libc.syscall(321, 0, 0, 0))
report["unshare_command"] = subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode
def policy(which):
    try:
        os.sched_setscheduler(0, which, os.sched_param(0))
        return "allowed"
    except OSError as error:
        return error.strerror
report["sched_idle"] = policy(os.SCHED_IDLE)
report["sched_other"] = policy(os.SCHED_OTHER)
import zmq
context = zmq.Context()
context.socket(zmq.PAIR).close()  # libzmq sets its I/O thread's (normal) scheduling policy again
context.term()
report["zmq"] = "ran"
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
report["thread"] = "ran"
report["subprocess"] = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip()
pid = os.fork()
if pid == 0:
    os._exit(7)
report["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
report["etc"] = sorted(os.listdir("/etc"))
report["passwd"] = open("/etc/passwd").read().splitlines()
report["tcp"] = open("/proc/net/tcp").read().splitlines()[1:]
report["unix"] = [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:] if len(line.split()) > 7]
report["interfaces"] = sorted(name for _, name in socket.if_nameindex())
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    report["slot_port"] = "connected"
except OSError as error:
    report["slot_port"] = type(error).__name__
print(json.dumps(report))
"""


@needs_namespaces
@pytest.mark.slow
def test_the_kernel_cannot_create_namespaces_or_mount_sees_a_minimal_etc_and_none_of_the_slots_sockets(worker):
    """Issue 33's hardening: a seccomp filter (no user namespace, no mount, no ptrace, bpf or keyrings; threads,
    fork and subprocesses still work), an /etc of a few generated and linker files instead of the host's, and a
    network namespace of its own (its /proc/net shows none of the slot's sockets, a port the slot listens on is
    out of reach)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the seccomp filter is written for x86_64")
    server = socket.create_server(("127.0.0.1", 0))  # stands for the slot's sockets (the trusted grader's, ...)
    try:
        run, view, enforced, kernel = run_script(worker, HARDENING_VIEW, Limits(cell_timeout_s=5, notebook_timeout_s=60),
                                                 args=(server.getsockname()[1],))
    finally:
        server.close()
    assert run.returncode == 0, view
    assert view["seccomp_mode"] == "2" and enforced["seccomp"]["applied"] is True
    for call in ("unshare_user", "unshare_mount", "mount_tmpfs", "ptrace_traceme", "keyctl", "bpf"):
        assert view[call] == "Operation not permitted", (call, view[call])
    assert view["unshare_command"] != 0
    assert view["sched_idle"] == "Operation not permitted" and view["sched_other"] == "allowed"
    assert view["thread"] == "ran" and view["subprocess"] == "42" and view["fork"] == 7 and view["zmq"] == "ran"
    assert len(view["etc"]) <= 12 and "shadow" not in view["etc"] and "ld.so.cache" in view["etc"], view["etc"]
    assert len(os.listdir("/etc")) > 3 * len(view["etc"])
    assert [line.split(":")[0] for line in view["passwd"]] == ["root", "learner"]
    assert view["tcp"] == [] and view["interfaces"] == ["lo"] and view["slot_port"] == "ConnectionRefusedError"
    assert enforced["kernel_network_namespace"] == {"interfaces": ["lo"]}
    assert enforced["kernel_filesystem"]["etc"] == view["etc"]
