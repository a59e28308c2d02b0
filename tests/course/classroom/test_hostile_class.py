"""A hostile class (issue 19): every attack on class grading loses only its own submission's points.

Chapter 33 is graded with `python -m tools.course grading autograde --jobs 2`. Honest submissions
(`hNN_*`) are interleaved with attacks (`aNN_*`), so that with two slots most attacks run beside an
honest one. The attacks:

* the five of the issue: a watcher that records every line of code its kernel sees (IPython hooks,
  an audit hook, a trace function) and prints it encoded; a rewriter that turns every later cell into
  `pass`; a patcher of the modules and builtins a test could rely on; many children that together hold
  more memory than the submission may use; setsid spinners; a SysV segment, files in /run/lock, /tmp,
  /dev/shm and the home left for the next submission; a snooper that looks for other checkouts and
  hidden tests on the host; a huge output; raw HTML and a script in outputs and in an added cell;
* and more: a forged reply to the trusted grader (a pickle that would run a command when unpickled),
  forged test cells appended to the notebook, and a daemon left running.

Each attack stands at the top of one exercise's cell and ends it with an error, so the submission must
earn exactly its other exercises (expected scores: `class_factory.oracle_scores`), or it sits on the
released stub, which must stay at 0. Then a second batch's reader finds nothing of the first, and no
hidden line of any chapter appears in any file written for learners.

The wall time of each batch is printed, not asserted; HANG_GUARD_S only stops a batch that hangs.
"""

from __future__ import annotations

import base64
import copy
import html
import json
import os
import re
import subprocess
import sys
import time
import uuid
import zlib
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from chapter_factory import REPO_ROOT
from class_factory import (
    UNDEFINED,
    Member,
    _notebook,
    _solution_ids,
    oracle_scores,
    prepare_course,
)

from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.classroom.feedback import active_elements
from tools.course.grader.build import reference_source

CHAPTER_SLUG = "33-post-training-admission"
JOBS = 2
CELL_TIMEOUT_S = 10
MEMORY_MB = 1536
OUTPUT_MB = 4
HANG_GUARD_S = 1800
TOKEN = uuid.uuid4().hex[:12]
HOST_MARKERS = [Path(f"/tmp/course-hostile-{TOKEN}"), Path(f"/tmp/course-exploited-{TOKEN}"),
                Path(f"/run/lock/course-hostile-{TOKEN}"), Path(f"/dev/shm/course-hostile-{TOKEN}")]
SYSV_KEY = 0x5EC000 + (int(TOKEN[:4], 16) & 0xFFF)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning"),
    pytest.mark.skipif(not (REPO_ROOT / "notebooks" / f"{CHAPTER_SLUG}.ipynb").is_file(), reason="chapter 33 not present"),
]

FAIL = "\nraise RuntimeError('the attack ends this cell')\n"

WATCHER = '''
import base64, sys, zlib
_seen, _told = set(), set()
def _on_cell(info):
    _seen.add(getattr(info, "raw_cell", "") or "")
def _audit(event, args):
    if event in ("exec", "compile") and args:
        code = args[0]
        _seen.add(code if isinstance(code, str) else repr(getattr(code, "co_consts", "")))
def _tracer(frame, event, arg):
    _seen.add(frame.f_code.co_filename + ":" + frame.f_code.co_name)
    return None
def _report(result):
    new = _seen - _told
    _told.update(new)
    print("WATCHED:" + base64.b64encode(zlib.compress("\\n".join(sorted(new)).encode())).decode())
get_ipython().events.register("pre_run_cell", _on_cell)
get_ipython().events.register("post_run_cell", _report)
sys.addaudithook(_audit)
sys.settrace(_tracer)
'''
WATCHER_REPORTS_IN_CALLS = '''

_watched_function = classify_failures


def classify_failures(*args, **kwargs):
    _report(None)  # what it saw while tests ran, printed where the test's output shows it
    return _watched_function(*args, **kwargs)
'''
REWRITER = 'get_ipython().input_transformers_cleanup.append(lambda lines: ["pass\\n"])\n'
PATCHER = '''
import builtins, math, sys
math.isclose = lambda *args, **kwargs: True
builtins.AssertionError = type("AssertionError", (Exception,), {})
for _name in ("tools.course.grader.differential", "tools.course.grader.boundary"):
    try:
        __import__(_name)
        _module = sys.modules[_name]
        for _attribute in ("compare_call", "difference", "run_cell"):
            if hasattr(_module, _attribute):
                setattr(_module, _attribute, lambda *args, **kwargs: None)
    except Exception:
        pass
try:
    import torch
    torch.allclose = torch.equal = lambda *args, **kwargs: True
except Exception:
    pass
'''
FORGED_REPLY = f'''
import os, pickle
class _Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/course-exploited-{TOKEN}",))
import tools.course.classroom.learner_server as _server
_server.serve_request = lambda payload, namespace, limit=None: pickle.dumps({{"value": _Exploit()}})
'''
MEMORY_CHILDREN = '''
import subprocess, sys
_grab = "import time\\nblock = bytearray(400 * 2 ** 20)\\nfor i in range(0, len(block), 4096):\\n    block[i] = 1\\ntime.sleep(4)"
_children = [subprocess.Popen([sys.executable, "-c", _grab]) for _ in range(5)]  # 2 GB together, 400 MB each
print("CHILDREN:", [child.wait() for child in _children])
'''
SPINNERS = '''
import os
for _ in range(40):
    if os.fork() == 0:
        os.setsid()
        os.nice(19)  # they take all the CPU the submission may use, yet leave its own kernel first in line
        while True:
            pass
'''
PLANTER = f'''
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_segment = _libc.shmget({SYSV_KEY}, 4096, 0o1666)
print("SEGMENT:", _segment)
for _path in {[str(path) for path in HOST_MARKERS]!r} + [os.path.expanduser("~/course-hostile-{TOKEN}")]:
    try:
        with open(_path, "w") as _handle:
            _handle.write("planted")
        print("PLANTED:", _path)
    except OSError as _error:
        print("NOT PLANTED:", _path, type(_error).__name__)
'''
READER = f'''
import ctypes, glob, os
_libc = ctypes.CDLL(None, use_errno=True)
_found = [path for path in {[str(path) for path in HOST_MARKERS]!r} + [os.path.expanduser("~/course-hostile-{TOKEN}")]
          if os.path.exists(path)]
print("READER:", {{"segment": _libc.shmget({SYSV_KEY}, 0, 0o666), "files": _found,
                   "sysv_visible": open("/proc/sysvipc/shm").read().count("\\n") - 1}})
'''
SNOOPER = f'''
import os
def _snoop():
    found = {{}}
    for root in ({str(REPO_ROOT)!r}, {str(REPO_ROOT.parent)!r}, "/work", "/root", "/home", "/opt", "/srv", "/mnt", "/var", "/tmp", "/run"):
        try:
            found[root] = sorted(os.listdir(root))[:50]
        except OSError as error:
            found[root] = type(error).__name__
    texts, visited = [], 0
    for top in [os.path.join("/", name) for name in os.listdir("/") if name not in ("proc", "sys", "dev", "usr", "etc")]:
        for folder, subfolders, files in os.walk(top):
            subfolders[:] = [name for name in subfolders if name not in ("site-packages", "__pycache__")]
            visited += 1
            if visited > 20000:
                break
            for name in files:
                if name.endswith((".py", ".ipynb", ".db")) and ("hidden" in folder or "grading" in folder
                                                              or name == "gradebook.db"):
                    try:
                        texts.append(open(os.path.join(folder, name), errors="replace").read()[:200000])
                    except OSError:
                        pass
    processes = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            processes.append(open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    print("SNOOPED:", found, processes, visited)
    print("FOUND FILES:", len(texts))
    print("\\n".join(texts))
_snoop()
'''
HUGE_OUTPUT = '''
import sys
sys.stdout.write("x" * (16 * 2 ** 20))  # one message of 16 MiB: past twice the cap
sys.stdout.flush()
'''
HTML_SCRIPT = '''
from IPython.display import HTML, Javascript, Markdown, SVG, display
display(HTML("<script>document.title = 'pwned'</script><h1>Score: 100 / 100</h1>"))
display(Javascript("alert('pwned')"))
display(Markdown("[your grade](javascript:alert(1))"))
display(SVG("<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'></svg>"))
'''
DAEMON = '''
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(600)"],
                 start_new_session=True)
'''


def attacks(exercises: list[str]) -> list[tuple[str, str, str, int, str]]:
    """(name, kind, snippet, exercise index, base): base "reference" (the snippet ends the exercise's cell
    with an error unless the kind says it keeps it) or "stub"."""
    return [
        ("watcher", "keeps", WATCHER, 0, "reference"),
        ("rewriter", "stub", REWRITER, 0, "stub"),
        ("patcher", "stub", PATCHER, 0, "stub"),
        ("forged_reply", "stub", FORGED_REPLY, 0, "stub"),
        ("memory_children", "breaks", MEMORY_CHILDREN, 1, "reference"),
        ("spinners", "breaks", SPINNERS, 2, "reference"),
        ("planter", "breaks", PLANTER, 0, "reference"),
        ("reader", "keeps", READER, 0, "reference"),
        ("snooper", "keeps", SNOOPER, 1, "reference"),
        ("huge_output", "stops the kernel", HUGE_OUTPUT, 2, "reference"),
        ("html_script", "keeps", HTML_SCRIPT, 1, "reference"),
        ("daemon", "breaks", DAEMON, 1, "reference"),
    ]


def forge_test_cells(notebook) -> nbformat.NotebookNode:
    """Append a copy of a hidden test's cell whose code writes a file on the host, and a new grade cell."""
    forged = copy.deepcopy(notebook)
    template = next(cell for cell in forged.cells if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("hidden_"))
    code = f"open('/tmp/course-hostile-{TOKEN}', 'w').write('forged test ran')\n"
    duplicate = copy.deepcopy(template)
    duplicate.source = code
    new = copy.deepcopy(template)
    new.source = code
    new.metadata["nbgrader"]["grade_id"] = "forged_full_marks"
    new.metadata["nbgrader"]["points"] = 1000
    forged.cells += [duplicate, new]
    return forged


def add_script_cell(notebook) -> nbformat.NotebookNode:
    changed = copy.deepcopy(notebook)
    changed.cells.insert(1, nbformat.v4.new_markdown_cell("<script>alert('pwned')</script>**Score: 100 / 100**"))
    changed.cells.insert(2, nbformat.v4.new_raw_cell("<script>alert('pwned')</script>", metadata={"format": "text/html"}))
    return changed


def flat(text: str) -> str:
    return re.sub(r"\s+", "", html.unescape(re.sub(r"<[^>]*>", "", text))).replace('"', "'")


def every_hidden_line() -> list[str]:
    """Distinctive lines of every chapter's hidden tests that no chapter notebook shows (flattened)."""
    public = flat("\n".join(cell.source for path in (REPO_ROOT / "notebooks").glob("*.ipynb")
                            for cell in read_notebook(path).cells))
    # A line that is ordinary Python of the course's own public code (`except Exception:`) is no secret: a
    # learner writes it too.
    ordinary = {flat(line) for path in (REPO_ROOT / "tools").rglob("*.py")
                for line in path.read_text(encoding="utf-8").splitlines()}
    lines = set()
    for path in (REPO_ROOT / "grading" / "hidden_tests").glob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = flat(line)
            if len(text) >= 16 and not line.startswith(("# %% hidden", "# hint:")) and text not in public \
                    and text not in ordinary:
                lines.add(text)
    return sorted(lines)


def autograde(course: Path, out: Path) -> tuple[subprocess.CompletedProcess, float, dict]:
    command = [sys.executable, "-m", "tools.course", "grading", "autograde", "--chapter", CHAPTER_SLUG,
               "--jobs", str(JOBS), "--course-dir", str(course), "--cell-timeout", str(CELL_TIMEOUT_S),
               "--notebook-timeout", "240", "--memory-mb", str(MEMORY_MB), "--output-mb", str(OUTPUT_MB),
               "--output-dir", str(out), "--no-progress"]
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                               check=False)
    elapsed = time.monotonic() - started
    path = out / f"autograde_{CHAPTER_SLUG}.json"
    assert path.is_file(), (completed.stdout + completed.stderr)[-5000:]
    record = json.loads(path.read_text(encoding="utf-8"))
    return completed, elapsed, record


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    chapter = find_chapter(CHAPTER_SLUG, REPO_ROOT)
    base = tmp_path_factory.mktemp("hostile")
    course = base / "course"
    source, release = prepare_course(course, chapter)
    exercises = _solution_ids(release)
    chapter_notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    reference = {name: reference_source(chapter_notebook, name) for name in exercises}
    stubs = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in release.cells
             if cell.metadata.get("nbgrader", {}).get("solution")}
    members, notebooks = [], {}

    def add(member: Member, notebook) -> None:
        members.append(member)
        notebooks[member.student] = notebook

    for number, (name, kind, snippet, index, base_kind) in enumerate(attacks(exercises), start=1):
        target = exercises[index]
        sources = dict(reference if base_kind == "reference" else stubs)
        if kind == "breaks":
            sources[target] = snippet + FAIL + sources[target]
            expected = {**reference, target: UNDEFINED}
            member = Member(f"a{number:02d}_{name}", name, expected, {target})
        elif kind == "stops the kernel":  # every test comes after the last exercise: none can pass
            sources[target] = snippet + FAIL + sources[target]
            member = Member(f"a{number:02d}_{name}", name, dict.fromkeys(exercises, UNDEFINED), set(exercises))
        else:
            sources[target] = snippet + sources[target] + (WATCHER_REPORTS_IN_CALLS if name == "watcher" else "")
            member = Member(f"a{number:02d}_{name}", name, dict(reference if base_kind == "reference" else stubs))
        notebook = _notebook(release, sources)
        if name == "html_script":
            notebook = add_script_cell(notebook)
        add(member, notebook)
        probe = Member(f"a{number:02d}z_honest", "honest probe", dict(reference))
        add(probe, _notebook(release, reference))
    forged = forge_test_cells(_notebook(release, reference))
    add(Member("a99_forged_tests", "forged test cells", None), forged)  # None: nbgrader's own rules decide
    add(Member("b_stub", "released stub", dict(stubs)), _notebook(release, stubs))
    for member in members:
        write_notebook(notebooks[member.student],
                       course / "submitted" / member.student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")
    expected = oracle_scores(source, [m for m in members if m.solutions is not None])
    completed, elapsed, record = autograde(course, base / "out")
    hosts_after_first = {path: path.exists() for path in HOST_MARKERS}
    segments_after_first = _host_segments(SYSV_KEY)

    second = base / "second"
    prepare_course(second, chapter)
    write_notebook(_notebook(release, {**reference, exercises[0]: READER + reference[exercises[0]]}),
                   second / "submitted" / "next_batch_reader" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")
    second_completed, second_elapsed, second_record = autograde(second, base / "out2")
    print(f"\nhostile class: {len(members)} submissions in {elapsed:.0f} s, second batch {second_elapsed:.0f} s\n"
          f"{completed.stdout}")
    return SimpleNamespace(chapter=chapter, course=course, second=second, members=members, expected=expected,
                           completed=completed, record=record, elapsed=elapsed + second_elapsed,
                           second_record=second_record, second_completed=second_completed, source=source,
                           outcomes={item["student"]: item for item in record["outcomes"]},
                           hosts_after_first=hosts_after_first, segments_after_first=segments_after_first,
                           exercises=exercises)


def _host_segments(key: int) -> int:
    lines = Path("/proc/sysvipc/shm").read_text(encoding="utf-8").splitlines()[1:]
    return sum(1 for line in lines if int(line.split()[0]) == key)


def _names(source) -> dict[str, str]:
    names = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            names[meta["grade_id"]] = cell.metadata.get("course", {}).get("hidden_test") or meta["grade_id"]
    return names


def _printed(hostile, student: str, course: Path | None = None) -> str:
    """What a submission's cells printed (the instructor's autograded copy)."""
    path = (course or hostile.course) / "autograded" / student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb"
    notebook = read_notebook(path)
    return "".join(output.get("text", "") for cell in notebook.cells for output in cell.get("outputs", []))


def test_every_submission_earns_exactly_what_its_own_code_earns(hostile):
    names = _names(hostile.source)
    full = sum(hostile.expected["a01z_honest"].values())
    assert full > 0 and sum(hostile.expected["b_stub"].values()) == 0
    for member in hostile.members:
        outcome = hostile.outcomes[member.student]
        if member.solutions is None:
            continue
        assert outcome["status"] == "graded", (member.student, outcome["reason"])
        got = {test["name"]: test["score"] for item in outcome["exercises"] for test in item["tests"]}
        want = {names[grade_id]: score for grade_id, score in hostile.expected[member.student].items()}
        assert got == want, member.student
        if member.kind == "honest probe":
            assert outcome["score"] == full and not outcome["boundary"].get("timeouts"), member.student
    for stub_attack in ("rewriter", "patcher", "forged_reply"):
        student = next(m.student for m in hostile.members if m.kind == stub_attack)
        assert hostile.outcomes[student]["score"] == 0, stub_attack  # the stub earns 0, whatever its kernel does


def test_forged_test_cells_never_run_on_the_trusted_side_and_earn_nothing(hostile):
    outcome = hostile.outcomes["a99_forged_tests"]
    assert outcome["status"] in ("graded", "failed")
    if outcome["status"] == "graded":
        assert outcome["score"] <= hostile.outcomes["a01z_honest"]["score"]
    else:
        assert "nbgrader" in outcome["reason"]
    assert not hostile.hosts_after_first[HOST_MARKERS[0]]


def test_the_watcher_never_saw_a_hidden_line(hostile):
    printed = _printed(hostile, "a01_watcher")
    payloads = re.findall(r"WATCHED:([A-Za-z0-9+/=]+)", printed)
    assert payloads, "the watcher reported nothing"
    seen = flat("\n".join(zlib.decompress(base64.b64decode(payload)).decode(errors="replace") for payload in payloads))
    assert "learner_server.py:serve" in seen and "defbaseline_gap_report" in seen  # it did watch its kernel
    secrets = every_hidden_line()
    assert len(secrets) > 200
    assert [secret for secret in secrets if secret in seen] == []


def test_the_snooper_found_no_checkout_and_no_hidden_test(hostile):
    printed = _printed(hostile, "a09_snooper")
    assert "FOUND FILES: 0" in printed
    flat_printed = flat(printed)
    assert [secret for secret in every_hidden_line() if secret in flat_printed] == []
    assert str(REPO_ROOT / "grading") not in printed


def test_memory_cpu_and_output_are_held_per_submission(hostile):
    children = hostile.outcomes["a05_memory_children"]["enforced"]["cgroup"]
    assert children["memory_bytes"] == MEMORY_MB * 2 ** 20
    assert children["usage"]["memory_peak_bytes"] <= MEMORY_MB * 2 ** 20 and children["usage"]["oom_kills"] >= 1
    spinners = hostile.outcomes["a06_spinners"]
    group = spinners["enforced"]["cgroup"]
    # forty spinners on every CPU of the host would use more; the quota holds them to one CPU (how much of
    # it they get depends on the host's load, so only the upper bound is checked)
    assert group["cpus"] == 1.0 and group["usage"]["tasks_peak"] >= 40
    assert group["usage"]["cpu_seconds"] <= 1.0 * spinners["seconds"] + 1.0, (group, spinners["seconds"])
    huge = hostile.outcomes["a10_huge_output"]
    assert huge["boundary"]["output_capped"]["cap_bytes"] == OUTPUT_MB * 2 ** 20
    assert huge["boundary"]["kernel_stopped_for_output"] is True
    autograded = hostile.course / "autograded" / huge["student"] / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb"
    assert autograded.stat().st_size < 3 * OUTPUT_MB * 2 ** 20
    assert huge["feedback"]["written"]
    assert Path(huge["feedback"]["html"]).stat().st_size < 3 * OUTPUT_MB * 2 ** 20


@pytest.mark.skipif(not Path("/proc/sysvipc/shm").exists(), reason="no SysV IPC here")
def test_nothing_survives_into_the_next_submission_or_the_next_batch(hostile):
    assert "SEGMENT:" in _printed(hostile, "a07_planter")
    assert hostile.segments_after_first == 0 and _host_segments(SYSV_KEY) == 0
    assert not any(hostile.hosts_after_first.values()) and not any(path.exists() for path in HOST_MARKERS)
    for course, student in ((hostile.course, "a08_reader"), (hostile.second, "next_batch_reader")):
        line = next(line for line in _printed(hostile, student, course).splitlines() if line.startswith("READER:"))
        assert line == "READER: {'segment': -1, 'files': [], 'sysv_visible': 0}", (student, line)
    uids = {item["enforced"]["kernel_uid"] for item in hostile.record["outcomes"] if item.get("enforced")}
    uids |= {item["enforced"]["kernel_uid"] for item in hostile.second_record["outcomes"] if item.get("enforced")}
    uids.discard(None)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) in uids]


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def test_no_hidden_line_of_any_chapter_and_nothing_active_in_any_file_written_for_learners(hostile):
    secrets = every_hidden_line()
    files = sorted((hostile.course / "feedback").rglob("*.*")) + sorted((hostile.second / "feedback").rglob("*.*"))
    assert len(files) >= 2 * len([m for m in hostile.members if m.solutions is not None])
    for path in files:
        text = flat(path.read_text(encoding="utf-8"))
        assert [secret for secret in secrets if secret in text] == [], path
    honest = active_elements((hostile.course / "feedback" / "a01z_honest" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.html")
                             .read_text(encoding="utf-8"))
    for path in [p for p in files if p.suffix == ".html"]:
        assert active_elements(path.read_text(encoding="utf-8")) == honest, path
    page = (hostile.course / "feedback" / "a11_html_script" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.html").read_text(
        encoding="utf-8")
    assert not [element for element in active_elements(page) if "alert" in element or "pwned" in element]
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page or "&lt;script&gt;" in page  # as text
