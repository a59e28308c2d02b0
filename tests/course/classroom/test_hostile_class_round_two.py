"""A hostile class, round two (issue 33): every attack of the issue against chapter 17, honest submissions beside.

Chapter 17 is graded with `python -m tools.course grading autograde --jobs 2`; each attack (`aNN_*`) is followed
by an honest probe (`aNNz_honest`, the reference), so that with two slots most attacks run beside an honest
submission. The attacks:

1. **mirrored state**: a wrong `sequence_logprobs` that zeroes `logits` in place and answers what the
   reference gives on zeroed logits (a test that read its expected value from `logits` after the call agreed
   with it while the boundary mirrored every in-place effect): it earns no more than the same wrong answer
   without the overwrite, and its calls fail with "changed its inputs";
2. **display updates**: a learner function logs every argument it receives into a display handle of its own
   cell (`update_display_data`) and a background thread prints what it saw; a second one prints its
   arguments during the calls (shown with the test's output, the instructor's copy): nothing logged reaches
   the autograded notebook or the feedback, and the printed inputs of hidden tests are withheld;
3. **the output cap through display updates**: 200 displays sharing one display id, then one 1 MiB update;
4. **a reply past the codec's limits**: the kernel's serving code replaced to answer a JSON tree of 300,001
   objects; the trusted grader counts and refuses it before parsing, inside its own control group;
   **a 2 MiB markdown cell**: rendered in the feedback subprocess, cut to a few kB, not highlighted;
5. **functions that never return**: the learner's own time, graded as it is and not graded again unless the
   host measurably starved it;
7. **hardening**: from a cell of its own the learner tries to create a user namespace, mount, ptrace, lists
   /etc and reads /proc/net; its folder holds a `timestamp.txt` dated 2000-01-01.

(Issue item 6, a loaded host grading nobody, is `test_loaded_host.py`.) The wall time is printed, not
asserted; HANG_GUARD_S only stops a batch that hangs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from chapter_factory import REPO_ROOT
from class_factory import _notebook, _solution_ids, prepare_course

from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.classroom.benchmark import DISPLAY_LOG
from tools.course.classroom.feedback import LEARNER_CELL_CHARS, WITHHELD_INPUTS
from tools.course.grader.build import reference_source
from tools.course.grader.oracle import run_oracle

CHAPTER_SLUG = "17-dpo"
JOBS = 2
CELL_TIMEOUT_S = 10
NOTEBOOK_TIMEOUT_S = 400
MEMORY_MB = 1536
OUTPUT_MB = 4
HANG_GUARD_S = 2400

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning"),
    pytest.mark.skipif(not (REPO_ROOT / "notebooks" / f"{CHAPTER_SLUG}.ipynb").is_file(), reason="chapter 17 not present"),
]


def wrong_on_zeroed_logits(reference: str, overwrite: bool) -> str:
    """The reference run on zeroed logits (every response token gets log(1/V)); with `overwrite` the test's own
    `logits` are zeroed in place as well."""
    target = "args[0]" if overwrite else "_zeroed"
    return (reference.replace("def sequence_logprobs(", "def _wrong_sequence_logprobs(", 1) + f"""


def sequence_logprobs(*args, **kwargs):
    import torch
    _zeroed = args[0].detach().clone()
    with torch.no_grad():
        {target}.zero_()
    return _wrong_sequence_logprobs(*(({target},) + tuple(args[1:])), **kwargs)
""")


DISPLAY_LOGGER = DISPLAY_LOG  # the benchmark's display-update attack, planted the same way here
DISPLAY_LOGGER_CALL = '''

_quiet_sequence_logprobs = sequence_logprobs


def sequence_logprobs(*args, **kwargs):
    _seen.append(repr(args))
    _handle.update("LOGGED: " + repr(args)[:2000])  # into this cell's display, while a test runs
    return _quiet_sequence_logprobs(*args, **kwargs)
'''
PRINTER_CALL = '''

_silent_sequence_logprobs = sequence_logprobs


def sequence_logprobs(*args, **kwargs):
    print("ARGS", args)  # shown with the test's output: the instructor's copy holds hidden tests' outputs
    return _silent_sequence_logprobs(*args, **kwargs)
'''
DISPLAY_CAP = '''
from IPython.display import display, update_display
for _ in range(200):
    display("x", display_id="one-id")  # 200 outputs share it
update_display("y" * 2 ** 20, display_id="one-id")  # one 1 MiB update rewrites all of them: 200 MiB
'''
HUGE_REPLY = '''
import struct
import tools.course.classroom.learner_server as _server
_tree = b'{"list":[' + b'{"int":"1"},' * 300_000 + b'{"int":"1"}]}'  # 3.6 MB of JSON: 300,001 objects to parse
_server.serve_request = lambda payload, namespace, limit=None: struct.pack(">QQ", len(_tree), 0) + _tree
'''
NEVER_RETURNS = '''
import time


def dpo_loss(*args, **kwargs):
    time.sleep(3600)  # never returns: every test of dpo_loss runs into its cell limit
'''
HARDENING_PROBE = '''
import ctypes, json, os, subprocess
_libc = ctypes.CDLL(None, use_errno=True)
def _errno(result):
    return "allowed" if result == 0 else os.strerror(ctypes.get_errno())
print("HARDENING:" + json.dumps({
    "unshare_user": _errno(_libc.unshare(0x10000000)),
    "mount": _errno(_libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)),
    "ptrace": _errno(_libc.ptrace(0, 0, None, None)),
    "unshare_command": subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode,
    "etc": sorted(os.listdir("/etc")),
    "tcp": open("/proc/net/tcp").read().splitlines()[1:],
    "unix_paths": [line.split()[-1] for line in open("/proc/net/unix").read().splitlines()[1:] if len(line.split()) > 7],
}))
'''
PLANTED_TIMESTAMP = "2000-01-01 00:00:00.000000 UTC"


def autograde(course: Path, out: Path) -> tuple[subprocess.CompletedProcess, float, dict]:
    command = [sys.executable, "-m", "tools.course", "grading", "autograde", "--chapter", CHAPTER_SLUG,
               "--jobs", str(JOBS), "--course-dir", str(course), "--cell-timeout", str(CELL_TIMEOUT_S),
               "--notebook-timeout", str(NOTEBOOK_TIMEOUT_S), "--memory-mb", str(MEMORY_MB),
               "--output-mb", str(OUTPUT_MB), "--output-dir", str(out), "--no-progress"]
    started = time.monotonic()
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                               check=False)
    elapsed = time.monotonic() - started
    path = out / f"autograde_{CHAPTER_SLUG}.json"
    assert path.is_file(), (completed.stdout + completed.stderr)[-5000:]
    return completed, elapsed, json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    chapter = find_chapter(CHAPTER_SLUG, REPO_ROOT)
    base = tmp_path_factory.mktemp("hostile-two")
    course = base / "course"
    source, release = prepare_course(course, chapter)
    exercises = _solution_ids(release)
    chapter_notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    reference = {name: reference_source(chapter_notebook, name) for name in exercises}
    logprobs = reference["sequence_logprobs"]
    attacks = {
        "a01_mirrored": ({**reference, "sequence_logprobs": wrong_on_zeroed_logits(logprobs, True)}, None),
        "a02_display_log": ({**reference, "sequence_logprobs": DISPLAY_LOGGER + logprobs + DISPLAY_LOGGER_CALL}, None),
        "a03_printer": ({**reference, "sequence_logprobs": logprobs + PRINTER_CALL}, None),
        "a04_display_cap": (reference, DISPLAY_CAP),
        "a05_huge_reply": ({**reference, "sequence_logprobs": HUGE_REPLY + logprobs}, None),
        "a06_markdown_bomb": (reference, "markdown"),
        "a07_never_returns": ({**reference, "dpo_loss": NEVER_RETURNS}, None),
        "a08_hardening": (reference, HARDENING_PROBE),
    }
    students = []
    for student, (sources, added) in attacks.items():
        notebook = _notebook(release, sources)
        if added == "markdown":
            notebook.cells.append(nbformat.v4.new_markdown_cell("# notes\n" + "<b>bold</b> `x` *y* " * 100_000))
        elif added is not None:
            notebook.cells.append(nbformat.v4.new_code_cell(added))
        for who, book in ((student, notebook), (f"{student[:3]}z_honest", _notebook(release, reference))):
            write_notebook(book, course / "submitted" / who / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")
            students.append(who)
    stubs = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in release.cells
             if cell.metadata.get("nbgrader", {}).get("solution")}
    write_notebook(_notebook(release, stubs), course / "submitted" / "b_stub" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")
    (course / "submitted" / "a08_hardening" / CHAPTER_SLUG / "timestamp.txt").write_text(PLANTED_TIMESTAMP + "\n")
    wrong_only = run_oracle(source, {"wrong": {**reference, "sequence_logprobs": wrong_on_zeroed_logits(logprobs, False)}},
                            cell_timeout_s=60, submission_timeout_s=600)["wrong"]
    completed, elapsed, record = autograde(course, base / "out")
    print(f"\nhostile class, round two: {len(students) + 1} submissions in {elapsed:.0f} s\n{completed.stdout}")
    points = {cell.metadata["nbgrader"]["grade_id"]: float(cell.metadata["nbgrader"]["points"]) for cell in source.cells
              if cell.metadata.get("nbgrader", {}).get("grade")}
    exercise_of = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata.get("course", {}).get("exercise")
                   for cell in source.cells if cell.metadata.get("nbgrader", {}).get("grade")}
    return SimpleNamespace(course=course, record=record, completed=completed, source=source, points=points,
                           exercise_of=exercise_of, wrong_only=wrong_only, students=students,
                           outcomes={item["student"]: item for item in record["outcomes"]})


def _autograded(hostile, student: str):
    return read_notebook(hostile.course / "autograded" / student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb")


def _texts(notebook) -> str:
    return json.dumps([cell.get("outputs", []) for cell in notebook.cells])


def _printed(notebook) -> list[str]:
    """Every line a cell printed (streams)."""
    return [line for cell in notebook.cells for output in cell.get("outputs", []) if output.get("output_type") == "stream"
            for line in "".join(output.get("text", "")).splitlines()]


def _feedback(hostile, student: str) -> str:
    folder = hostile.course / "feedback" / student / CHAPTER_SLUG
    return "".join(path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.*")))


def _tests(outcome) -> dict[str, float]:
    return {test["name"]: test["score"] for item in outcome["exercises"] for test in item["tests"]}


def test_honest_submissions_keep_full_marks_beside_every_attack(hostile):
    full = sum(hostile.points.values())
    honest = [student for student in hostile.students if student.endswith("z_honest")]
    assert len(honest) == 8
    for student in honest:
        outcome = hostile.outcomes[student]
        assert outcome["status"] == "graded" and outcome["score"] == full, (student, outcome.get("reason"))
        assert outcome["feedback"]["written"], outcome["feedback"]
    assert hostile.outcomes["b_stub"]["score"] == 0


def test_a_wrong_answer_that_overwrites_its_input_earns_nothing_for_it(hostile):
    attack = hostile.outcomes["a01_mirrored"]
    wrong_only = sum(score for score, _ in hostile.wrong_only.scores.values())
    assert attack["status"] == "graded" and attack["score"] <= wrong_only < sum(hostile.points.values())
    assert _tests(attack)["masked_positions_change_nothing"] == 0
    assert "changed its inputs" in _texts(_autograded(hostile, "a01_mirrored"))


def test_nothing_leaves_through_outputs_while_tests_run(hostile):
    for student in ("a02_display_log", "a03_printer"):
        outcome = hostile.outcomes[student]
        assert outcome["status"] == "graded" and outcome["score"] == sum(hostile.points.values()), student
    logger = hostile.outcomes["a02_display_log"]
    assert logger["boundary"]["discarded_while_serving"] > 0
    autograded = _autograded(hostile, "a02_display_log")
    assert "LOGGED" not in _texts(autograded)  # the learner's own code (which the feedback shows) aside
    assert "LOGGED: (tensor" not in _feedback(hostile, "a02_display_log")
    assert "a progress bar" in _texts(autograded)  # its display was frozen as the cell left it
    printer = hostile.outcomes["a03_printer"]
    assert printer["boundary"]["hidden_inputs_withheld"] > 0
    hidden = [cell for cell in _autograded(hostile, "a03_printer").cells
              if cell.metadata.get("nbgrader", {}).get("grade_id", "").startswith("hidden_sequence_logprobs")]
    shown = _texts(nbformat.from_dict({"cells": hidden}))
    assert WITHHELD_INPUTS.strip() in shown and "ARGS (tensor(" not in shown


def test_display_updates_count_against_the_output_cap(hostile):
    outcome = hostile.outcomes["a04_display_cap"]
    assert outcome["boundary"]["output_capped"]["cap_bytes"] == OUTPUT_MB * 2 ** 20
    assert outcome["boundary"].get("kernel_stopped_for_output") is True
    assert outcome["score"] == sum(hostile.points.values())  # its cell comes after every test
    path = hostile.course / "autograded" / "a04_display_cap" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb"
    assert path.stat().st_size < 3 * OUTPUT_MB * 2 ** 20 and outcome["feedback"]["written"]


def test_a_reply_past_the_codecs_limits_is_refused_inside_the_trusted_graders_own_limits(hostile):
    outcome = hostile.outcomes["a05_huge_reply"]
    assert outcome["status"] == "graded" and outcome["score"] == 0
    assert "more than 200000 nested values" in _texts(_autograded(hostile, "a05_huge_reply"))
    trusted = outcome["enforced"]["trusted_cgroup"]
    assert trusted["memory_bytes"] == 2048 * 2 ** 20 and trusted["usage"]["oom_kills"] in (0, None)
    assert trusted["usage"]["memory_peak_bytes"] < 1024 * 2 ** 20, trusted


def test_a_huge_markdown_cell_is_cut_and_never_highlighted(hostile):
    outcome = hostile.outcomes["a06_markdown_bomb"]
    assert outcome["status"] == "graded" and outcome["feedback"]["written"], outcome["feedback"]
    page = Path(outcome["feedback"]["html"]).read_text(encoding="utf-8")
    assert page.count("bold") < LEARNER_CELL_CHARS // 10 and "more characters not shown" in page
    assert "&lt;b&gt;bold" in page and "<b>bold" not in page


def test_a_learner_that_never_returns_spends_only_its_own_time(hostile):
    outcome = hostile.outcomes["a07_never_returns"]
    dpo = sum(points for grade_id, points in hostile.points.items() if hostile.exercise_of[grade_id] == "dpo_loss")
    assert outcome["status"] == "graded" and outcome["score"] == sum(hostile.points.values()) - dpo
    timeouts = outcome["boundary"]["timeouts"]
    assert len(timeouts) == sum(1 for exercise in hostile.exercise_of.values() if exercise == "dpo_loss")
    assert max(item["learner_s"] for item in timeouts) >= 0.8 * CELL_TIMEOUT_S  # waiting for its replies
    if outcome["regraded"] is not None:  # only with a measured starvation of the host, which it then names
        assert "waited" in outcome["regraded"]["first_reason"], outcome["regraded"]
    else:
        assert len(outcome["boundary"]["learners_time"]["cells"]) == len(timeouts)
    assert hostile.record["time"]["learner_timeouts"] >= 1


def test_the_kernel_is_hardened_and_the_timestamp_is_the_collection_time(hostile):
    from nbgrader.api import Gradebook

    outcome = hostile.outcomes["a08_hardening"]
    assert outcome["score"] == sum(hostile.points.values())
    printed = next(line for line in _printed(_autograded(hostile, "a08_hardening")) if line.startswith("HARDENING:"))
    view = json.loads(printed.removeprefix("HARDENING:"))
    if outcome["enforced"]["isolation"] == "namespaces" and os.uname().machine == "x86_64":
        assert view["unshare_user"] == view["mount"] == view["ptrace"] == "Operation not permitted"
        assert view["unshare_command"] != 0
        assert len(view["etc"]) <= 12
        kernel_uid = outcome["enforced"]["kernel_uid"]
        assert {int(line.split()[7]) for line in view["tcp"]} <= {kernel_uid}  # its own sockets, none of the slot's
        assert not [path for path in view["unix_paths"] if "trusted.sock" in path]
    with Gradebook(f"sqlite:///{hostile.course / 'gradebook.db'}") as book:
        stamp = book.find_submission(CHAPTER_SLUG, "a08_hardening").timestamp
    assert stamp.year > 2000 and outcome["collected_utc"].startswith(str(stamp.year))
    assert abs((datetime.fromisoformat(outcome["collected_utc"].removesuffix(" UTC")) - stamp).total_seconds()) < 1
