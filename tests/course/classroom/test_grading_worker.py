"""The long-lived grading worker on the toy chapter: one worker grades many submissions, each from a
clean state, and a submission that runs past the notebook limit costs the worker, never the next one.

Two submissions graded by one worker (`--jobs 1`): the first plants files in its cwd, home, TMPDIR,
/tmp, /var/tmp and /dev/shm, a module it then imports, an environment variable, an entry in
`sys.modules` and a detached process; the second reports what it can see of them. A control
grades the same pair with the kernel's home deliberately reused and never cleared, and shows
that the same check then finds the planted files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chapter_factory import REPO_ROOT, make_toy_project, submit
from tools.core.catalog import load_catalog
from tools.course.classroom import batch as autograde_batch
from tools.course.__main__ import main
from tools.course.classroom.batch import ensure_assignment
from tools.course.cells import read_notebook
from tools.course.grader.build import build_sources
from tools.course.classroom.slot import GradingSlot

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning")]

REFERENCE = {
    "add_rates": "import math\n\n\ndef add_rates(a, b):\n    if not (math.isfinite(a) and math.isfinite(b)):\n"
                 "        raise ValueError('rates must be finite')\n    return a + b\n",
    "halve": "def halve(x):\n    return x / 2\n",
}
PLACES = '(os.getcwd(), os.path.expanduser("~"), tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm")'
WRITER = f"""
import os, subprocess, sys, tempfile, types
for folder in {PLACES}:
    try:
        with open(os.path.join(folder, "planted-by-writer.txt"), "w") as handle:
            handle.write("left for the next submission")
    except OSError as error:
        print("could not plant in", folder, type(error).__name__)
with open("planted_module.py", "w") as handle:
    handle.write("VALUE = 42\\n")
import planted_module
os.environ["PLANTED_BY_WRITER"] = str(planted_module.VALUE)
sys.modules["planted_fake_module"] = types.ModuleType("planted_fake_module")
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # planted sleeper"], start_new_session=True)
"""
READER = f"""
import glob, importlib.util, json, os, sys, tempfile
def _sleepers():
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as handle:
                found += b"planted sleeper" in handle.read()
        except OSError:
            pass
    return found
seen = {{
    "files": sorted({{path for folder in {PLACES} for path in glob.glob(os.path.join(folder, "planted*"))}}),
    "environment": sorted(key for key in os.environ if key.startswith("PLANTED")),
    "modules": sorted(name for name in sys.modules if name.startswith("planted")),
    "importable": importlib.util.find_spec("planted_module") is not None,
    "sleepers": _sleepers(),
}}
print("CLEAN-STATE " + json.dumps(seen))
"""
SLOW = "import time\ntime.sleep(4.5)  # just under the cell limit, twice: past the notebook limit\n"


def toy_course(base, students: dict):
    root = make_toy_project(base)
    build_sources(root, load_catalog(root))
    course = root / "grading"
    (root / "logs").mkdir()
    ensure_assignment(course, "toy", root / "logs")
    release = read_notebook(course / "release" / "toy" / "toy.ipynb")
    for student, sources in students.items():
        submit(course, student, release, sources)
    return root, course


def grade(root, monkeypatch, *args):
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    code = main(["grading", "autograde", "--chapter", "toy", "--jobs", "1", "--output-dir", str(root / "out"),
                 "--no-progress", *args])
    record = json.loads((root / "out" / "autograde_toy.json").read_text(encoding="utf-8"))
    return code, record, {item["student"]: item for item in record["outcomes"]}


def what_the_reader_saw(course) -> dict:
    notebook = read_notebook(course / "autograded" / "b_reader" / "toy" / "toy.ipynb")
    text = "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []))
    line = next(line for line in text.splitlines() if line.startswith("CLEAN-STATE "))
    return json.loads(line[len("CLEAN-STATE "):])


def contamination(seen: dict, namespaces: bool) -> dict:
    """What of the writer's traces the reader saw. /tmp, /var/tmp, /dev/shm and processes are only
    private to each kernel where the host gives kernels namespaces (the record says so)."""
    shared = ("/tmp/", "/var/tmp/", "/dev/shm/")
    files = [path for path in seen["files"] if namespaces or not path.startswith(shared) or "/kernel/" in path]
    found = {"files": files, "environment": seen["environment"], "modules": seen["modules"],
             "importable": seen["importable"], "sleepers": seen["sleepers"] if namespaces else 0}
    return {key: value for key, value in found.items() if value}


def clean_state_pair(base):
    return toy_course(base, {"a_writer": {**REFERENCE, "add_rates": WRITER + REFERENCE["add_rates"]},
                             "b_reader": {**REFERENCE, "add_rates": READER + REFERENCE["add_rates"]}})


def test_nothing_a_submission_leaves_is_visible_to_the_next_one_of_the_same_worker(tmp_path, monkeypatch):
    root, course = clean_state_pair(tmp_path)
    code, record, outcomes = grade(root, monkeypatch)
    assert code == 0, outcomes
    assert outcomes["a_writer"]["score"] == outcomes["b_reader"]["score"] == 5.0
    first, second = outcomes["a_writer"]["worker"], outcomes["b_reader"]["worker"]
    assert (first["slot"], first["process"], first["submission"]) == ("slot-0", 1, 1)
    assert (second["slot"], second["process"], second["submission"]) == ("slot-0", 1, 2)  # the same worker
    namespaces = record["host"]["namespaces"]
    seen = what_the_reader_saw(course)
    assert contamination(seen, namespaces) == {}, seen
    if namespaces:
        enforced = outcomes["a_writer"]["enforced"]
        assert enforced["kernel_pid_namespace"] and enforced["leftover_processes_killed"] == 0
        assert set(enforced["kernel_private_dirs"]) >= {"/tmp", "/dev/shm"}


FORK_AFTER_ASYNCIO = """
import asyncio, sys, threading
from jupyter_core.utils import run_sync
from tqdm import tqdm
from tools.course.__main__ import main

async def nothing():
    await asyncio.sleep(0)

run_sync(nothing)()  # as papermill does in `bench` before the class is graded in the same process
tqdm(total=1, disable=True)  # a disabled bar too (papermill's, an earlier batch's) starts tqdm's monitor thread
assert [thread.name for thread in threading.enumerate()] == ["MainThread", "tqdm_monitor"]
sys.exit(main(sys.argv[1:]))
"""


def test_a_worker_forked_from_a_process_that_ran_asyncio_makes_its_own_event_loop(tmp_path):
    """The worker is forked from a process that ran an event loop, which the worker must not reuse, and
    started tqdm's idle monitor thread, which is stopped so that the process can fork at all."""
    root, _ = toy_course(tmp_path, {"ref": REFERENCE})
    env = {**os.environ, "COURSE_PROJECT_ROOT": str(root)}
    completed = subprocess.run([sys.executable, "-c", FORK_AFTER_ASYNCIO, "grading", "autograde", "--chapter", "toy",
                                "--jobs", "1", "--output-dir", str(root / "out"), "--no-progress"],
                               cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    outcome = json.loads((root / "out" / "autograde_toy.json").read_text(encoding="utf-8"))["outcomes"][0]
    assert outcome["score"] == 5.0 and outcome["worker"]["started_as"] == "forked"


def test_control_the_check_finds_a_kernel_home_reused_without_clearing(tmp_path, monkeypatch):
    """Same pair, but the second kernel gets the first one's folder back, never cleared. Where kernels get
    a filesystem of their own, the home is a fresh tmpfs each time, so the control runs them without one
    (no namespaces, no control groups), with the home on the host's disk."""
    from tools.course.classroom.cgroups import CgroupHost
    from tools.course.classroom.sandbox import HostIsolation

    monkeypatch.setattr(autograde_batch, "probe_host", lambda: HostIsolation(False, False, "forced for the control"))
    monkeypatch.setattr(autograde_batch, "probe_cgroups", lambda: CgroupHost(None, "forced for the control"))
    root, course = clean_state_pair(tmp_path)
    first, new_kernel, remove_tree = {}, GradingSlot.new_kernel, autograde_batch.remove_tree

    def reuse(self, folder):
        if "kernel" not in first:
            first["kernel"] = new_kernel(self, folder)
        folder.mkdir(exist_ok=True)  # the submission's own course still goes here
        return first["kernel"]

    monkeypatch.setattr(GradingSlot, "new_kernel", reuse)
    monkeypatch.setattr(autograde_batch, "remove_tree",
                        lambda path: None if path.name in ("kernel", "submission-0000") else remove_tree(path))
    code, record, _ = grade(root, monkeypatch)
    found = contamination(what_the_reader_saw(course), record["host"]["namespaces"])
    assert found["importable"] and len(found["files"]) >= 3, found  # cwd = home, TMPDIR inside it


def test_a_submission_past_the_notebook_limit_costs_its_worker_not_the_next_submission(tmp_path, monkeypatch):
    slow = {name: SLOW + source for name, source in REFERENCE.items()}
    root, course = toy_course(tmp_path, {"a_hang": slow, "b_ref": REFERENCE})
    code, record, outcomes = grade(root, monkeypatch, "--cell-timeout", "5", "--notebook-timeout", "7")
    assert code == 1
    hung, ref = outcomes["a_hang"], outcomes["b_ref"]
    assert hung["status"] == "failed" and "per-notebook limit of 7 s" in hung["reason"]
    assert hung["enforced"]["killed_at_notebook_timeout"] is True
    # its own sleeps passed the limit: graded again only if the host measurably starved it (most of its time)
    assert hung["regraded"] is None or "waited" in hung["regraded"]["first_reason"], hung["regraded"]
    assert hung["worker"]["process"] == (1 if hung["regraded"] is None else 3)
    assert ref["status"] == "graded" and ref["score"] == 5.0
    assert ref["worker"] == {"slot": "slot-0", "process": 2, "started_as": "new interpreter", "submission": 1}
    assert ref["enforced"]["killed_at_notebook_timeout"] is False
    if record["host"]["separate_uid"]:
        uid = ref["enforced"]["kernel_uid"]
        assert uid and not [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) == uid]


KERNEL_VIEW = """
import json, os, signal, sys, threading, random
print("KERNEL-VIEW " + json.dumps({
    "path": sys.path, "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:-2]], "environment": sorted(os.environ),
    "cwd_is_home": os.getcwd() == os.path.expanduser("~"), "modules": sorted(sys.modules),
    "signals": {name: str(signal.getsignal(getattr(signal, name))) for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD")},
    "flags": [sys.flags.dont_write_bytecode, sys.flags.isolated, sys.flags.no_user_site], "threads": threading.active_count(),
    "umask": os.umask(0o077), "root": os.getuid() == 0, "pid_is_1": os.getpid() == 1, "random": random.random()}))
"""


def kernel_views(tmp_path, monkeypatch, *, zygote: bool) -> tuple[dict, set]:
    from tools.course.classroom import sandbox

    if not zygote:
        monkeypatch.setattr(sandbox.WorkerSandbox, "zygote_env", lambda self: None)
    probe = {**REFERENCE, "add_rates": KERNEL_VIEW + REFERENCE["add_rates"]}
    root, course = toy_course(tmp_path, {"first": probe, "second": probe})
    code, _, outcomes = grade(root, monkeypatch)
    assert code == 0, outcomes
    views = {}
    for student in ("first", "second"):
        notebook = read_notebook(course / "autograded" / student / "toy" / "toy.ipynb")
        text = "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []))
        views[student] = json.loads(next(line for line in text.splitlines() if line.startswith("KERNEL-VIEW "))[12:])
    return views, {outcome["enforced"]["kernel_started_by"] for outcome in outcomes.values()}


def test_a_kernel_forked_from_the_zygote_starts_as_a_launched_one(tmp_path, monkeypatch):
    """Same interpreter state as `python -m ipykernel_launcher` started by the kernelspec's launcher, and
    its own random state (a fork would otherwise share the zygote's)."""
    forked, started_by = kernel_views(tmp_path / "zygote", monkeypatch, zygote=True)
    monkeypatch.undo()
    launched, started_by_launcher = kernel_views(tmp_path / "kernelspec", monkeypatch, zygote=False)
    assert (started_by, started_by_launcher) == ({"zygote"}, {"launcher"})
    for view in (forked, launched):
        assert view["first"]["random"] != view["second"]["random"]
    for key in ("path", "argv", "environment", "cwd_is_home", "modules", "signals", "flags", "threads", "umask", "root",
                "pid_is_1"):
        assert forked["first"][key] == launched["first"][key], key


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None
