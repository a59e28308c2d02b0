"""`grading autograde` on the toy chapter: merging keeps other grades, exits report failures, bad input stops early."""

from __future__ import annotations

import json

import pytest

from chapter_factory import make_toy_project, submit, toy_notebook
from tools.course.__main__ import main
from tools.course.classroom.batch import copy_regular_files, ensure_assignment, notebook_problem
from tools.core.catalog import load_catalog
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import build_sources

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning")]

REFERENCE = {
    "add_rates": "import math\n\n\ndef add_rates(a, b):\n    if not (math.isfinite(a) and math.isfinite(b)):\n"
                 "        raise ValueError('rates must be finite')\n    return a + b\n",
    "halve": "def halve(x):\n    return x / 2\n",
}


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    from nbgrader.api import Gradebook

    root = make_toy_project(tmp_path_factory.mktemp("toy"))
    build_sources(root, load_catalog(root))
    course = root / "grading"
    (root / "logs").mkdir()
    ensure_assignment(course, "toy", root / "logs")
    release = read_notebook(course / "release" / "toy" / "toy.ipynb")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:  # an earlier grading round
        for student in ("alice", "stub"):
            book.add_student(student)
            book.add_submission("toy", student)
        book.find_grade("test_add_rates", "toy", "toy", "alice").auto_score = 1.0
        book.find_grade("test_halve", "toy", "toy", "stub").manual_score = 1.0
        book.db.commit()
    submit(course, "ref", release, REFERENCE)
    submit(course, "stub", release, {})
    targets = [str(root), str(course / "gradebook.db"), str(root / "grading" / "hidden_tests" / "toy.py")]
    snoop = (f"import os\nfor path in {targets!r}:\n    try:\n"
             f"        print('visible', sorted(os.listdir(path)) if os.path.isdir(path) else open(path, 'rb').read(8))\n"
             f"    except OSError as error:\n        print('blocked', type(error).__name__)\n"
             f"print('assert halve(3) ' + '== 1.5')\n")
    submit(course, "snoop", release, {**REFERENCE, "add_rates": snoop + REFERENCE["add_rates"]})
    (course / "submitted" / "broken" / "toy").mkdir(parents=True)
    (course / "submitted" / "broken" / "toy" / "toy.ipynb").write_text('{"nbformat": 4', encoding="utf-8")
    import os

    previous = os.environ.get("COURSE_PROJECT_ROOT")
    os.environ["COURSE_PROJECT_ROOT"] = str(root)
    try:
        code = main(["grading", "autograde", "--chapter", "toy", "--jobs", "2", "--cell-timeout", "10",
                     "--notebook-timeout", "120", "--output-dir", str(root / "out"), "--no-progress"])
    finally:
        if previous is None:
            del os.environ["COURSE_PROJECT_ROOT"]
        else:
            os.environ["COURSE_PROJECT_ROOT"] = previous
    record = json.loads((root / "out" / "autograde_toy.json").read_text(encoding="utf-8"))
    return root, course, code, {item["student"]: item for item in record["outcomes"]}


def test_a_corrupt_submission_fails_the_exit_code_but_not_the_batch(toy_run):
    _, course, code, outcomes = toy_run
    assert code == 1
    assert outcomes["broken"]["status"] == "failed" and "corrupt notebook" in outcomes["broken"]["reason"]
    assert [outcomes[s]["score"] for s in ("ref", "snoop")] == [5.0, 5.0]
    assert (course / "feedback" / "ref" / "toy" / "toy.html").is_file()


def test_merging_keeps_other_students_and_manual_scores(toy_run):
    from nbgrader.api import Gradebook

    _, course, _, outcomes = toy_run
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        assert book.find_grade("test_add_rates", "toy", "toy", "alice").auto_score == 1.0
        kept = book.find_grade("test_halve", "toy", "toy", "stub")
        assert kept.auto_score == 0.0 and kept.manual_score == 1.0 and kept.needs_manual_grade
        assert book.find_submission("toy", "ref").score == 5.0
    assert outcomes["stub"]["score"] == 1.0  # the instructor's manual point stands


def test_a_snooping_submission_sees_no_course_files_and_its_echo_is_withheld(toy_run):
    root, course, _, outcomes = toy_run
    autograded = read_notebook(course / "autograded" / "snoop" / "toy" / "toy.ipynb")
    printed = "".join(output.get("text", "") for cell in autograded.cells for output in cell.get("outputs", []))
    if outcomes["snoop"]["enforced"]["isolation"] == "namespaces":
        assert printed.count("blocked ") == 3 and "visible" not in printed
    page = (course / "feedback" / "snoop" / "toy" / "toy.html").read_text(encoding="utf-8")
    assert "output withheld" in page and "assert halve(3) == 1.5" not in page


def test_feedback_is_rewritten_from_the_gradebook_after_manual_grading(toy_run, monkeypatch, capsys):
    from nbgrader.api import Gradebook

    root, course, _, _ = toy_run
    feedback = course / "feedback" / "ref" / "toy" / "toy.json"
    before = json.loads(feedback.read_text(encoding="utf-8"))
    assert before["score"] == 5.0 and before["limits"] is not None
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:  # the instructor takes a point away
        book.find_grade("test_halve", "toy", "toy", "ref").manual_score = 0.0
        book.db.commit()
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    try:
        assert main(["grading", "feedback", "--chapter", "toy"]) == 0
    finally:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
            book.find_grade("test_halve", "toy", "toy", "ref").manual_score = None
            book.db.commit()
    after = json.loads(feedback.read_text(encoding="utf-8"))
    assert after["score"] == 4.0 and after["limits"] == before["limits"]
    assert "feedback for TOY" in capsys.readouterr().out
    page = (course / "feedback" / "ref" / "toy" / "toy.html").read_text(encoding="utf-8")
    assert "assert halve(3) == 1.5" not in page  # still no hidden-test source


@pytest.mark.parametrize("content,problem", [
    (None, "missing notebook"),
    (b"\xff\xfe binary", "not JSON"),
    (b'{"cells": [', "not JSON"),
    (b'{"cells": [], "nbformat": 3}', "not an nbformat-4 notebook"),
    (b'{"cells": [{"cell_type": "code"}], "nbformat": 4, "nbformat_minor": 5, "metadata": {}}', "corrupt notebook"),
])
def test_notebook_problems_are_named(tmp_path, content, problem):
    path = tmp_path / "toy.ipynb"
    if content is not None:
        path.write_bytes(content)
    assert problem in notebook_problem(path)
    write_notebook(toy_notebook(), path)
    assert notebook_problem(path) is None


def test_links_are_never_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("instructor only", encoding="utf-8")
    folder = tmp_path / "submitted" / "eve" / "toy"
    folder.mkdir(parents=True)
    (folder / "toy.ipynb").symlink_to(secret)
    (folder / "data.csv").symlink_to(secret)
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    (folder / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    assert "symbolic link" in notebook_problem(folder / "toy.ipynb")
    copy_regular_files(folder, tmp_path / "copy")
    assert sorted(path.name for path in (tmp_path / "copy").rglob("*")) == ["notes.txt"]


@pytest.mark.parametrize("setup,args,message", [
    ("none", ["--jobs", "0"], "--jobs must be a positive"),
    ("no-source", [], "run `python -m tools.course grading build`"),
    ("stale", [], "is stale"),
    ("no-submissions", [], "no submissions of toy"),
])
def test_bad_input_stops_before_any_work(tmp_path, monkeypatch, capsys, setup, args, message):
    root = make_toy_project(tmp_path)
    if setup != "no-source":
        build_sources(root, load_catalog(root))
    if setup == "stale":
        notebook = toy_notebook()
        notebook.cells[0].source += " (edited)"
        make_toy_project(root, notebook)
    if setup != "no-submissions":
        (root / "grading" / "submitted" / "ann" / "toy").mkdir(parents=True)
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    assert main(["grading", "autograde", "--chapter", "toy", *args, "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not (root / "grading" / "gradebook.db").exists() and not (root / "build").exists()


def test_every_idle_tqdm_monitor_is_stopped_so_the_workers_can_be_forked():
    """tqdm.auto's class keeps its own monitor thread; a live one makes the batch start new interpreters."""
    import threading

    from tqdm import _monitor
    from tqdm.auto import tqdm as auto_tqdm

    from tools.course.classroom.batch import stop_idle_tqdm_monitor

    for _ in auto_tqdm(range(2), disable=False, mininterval=0):
        pass
    stop_idle_tqdm_monitor()
    assert not [thread for thread in threading.enumerate() if isinstance(thread, _monitor.TMonitor)]


def test_a_submission_that_spends_its_own_time_is_graded_as_it_is_and_never_again(tmp_path, monkeypatch):
    """With two jobs, a learner's function that sleeps past the cell limit and a notebook that never ends (it
    ignores the interrupt) spend their own time: the first keeps what its other tests earn, the second is
    reported as not graded at its notebook limit; neither is graded again (no contention evidence), the honest
    ones keep full marks, and the record, the summary and the class report account for the time."""
    root = make_toy_project(tmp_path)
    build_sources(root, load_catalog(root))
    course = root / "grading"
    (root / "logs").mkdir()
    ensure_assignment(course, "toy", root / "logs")
    release = read_notebook(course / "release" / "toy" / "toy.ipynb")
    submit(course, "a_ref", release, REFERENCE)
    submit(course, "b_slow_function", release, {**REFERENCE, "halve": "import time\n\n\ndef halve(x):\n"
                                                                   "    time.sleep(60)\n    return x / 2\n"})
    submit(course, "c_hangs", release, {**REFERENCE, "add_rates": "import signal, time\n"
                                        "signal.signal(signal.SIGINT, signal.SIG_IGN)  # the interrupt cannot stop it\n"
                                        "while True:\n    time.sleep(1)\n"})
    submit(course, "d_ref", release, REFERENCE)
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    code = main(["grading", "autograde", "--chapter", "toy", "--jobs", "2", "--cell-timeout", "3",
                 "--notebook-timeout", "20", "--output-dir", str(root / "out"), "--no-progress"])
    record = json.loads((root / "out" / "autograde_toy.json").read_text(encoding="utf-8"))
    outcomes = {item["student"]: item for item in record["outcomes"]}
    assert code == 1 and set(outcomes) == {"a_ref", "b_slow_function", "c_hangs", "d_ref"}
    for honest in ("a_ref", "d_ref"):
        assert outcomes[honest]["regraded"] is None and outcomes[honest]["score"] == 5.0
    slow = outcomes["b_slow_function"]
    assert slow["status"] == "graded" and slow["regraded"] is None
    assert slow["score"] == 2.0  # its two tests of halve ran out of time; add_rates keeps its points
    timeouts = slow["boundary"]["timeouts"]
    assert len(timeouts) == 2 and all(item["learner_s"] >= 2.0 for item in timeouts)  # waiting for its replies
    assert len(slow["boundary"]["learners_time"]["cells"]) == 2
    hangs = outcomes["c_hangs"]
    assert hangs["status"] == "failed" and hangs["regraded"] is None and "per-notebook limit" in hangs["reason"]
    assert record["summary"]["graded_again_alone"] == 0 and record["summary"]["not_graded"] == 1
    assert record["time"]["budget_s"] == 40 and record["time"]["graded_again"] == 0
    assert record["time"]["learner_timeouts"] == 2  # its cells, and the hanging one's solution cell
    report = (root / "out" / "class_report.md").read_text(encoding="utf-8")
    assert "## Time" in report and "| b_slow_function |" in report and "## Graded again" not in report
