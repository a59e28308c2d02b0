"""Done-when test of the class-scale grading workflow (issue 7) on PT-RL-SYSTEM.

A synthetic class (38 submissions with the 16 mutants of today; correct, stub, partly correct, every mutant, tampered,
looping, sleeping, memory-hungry, socket-opening, forking, corrupt) is graded with
`python -m tools.course grading autograde --jobs 2`: two long-lived workers, each grading about half
of the class, one kernel (in namespaces of its own) per submission. Expected scores come from an oracle that
executes the cells in this process, without nbgrader or the sandbox (tests/class_factory.py).

The run's wall time is recorded, not judged: times belong to `python -m tools.course bench` (its
`grading_*` columns). A test only guards against a hang, with HANG_GUARD_S far above any plausible run
(about 5 minutes on 2 loaded CPU cores; per-cell limit 10 s, used once each by the looping and sleeping
submissions).
"""

from __future__ import annotations

import html
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from chapter_factory import REPO_ROOT
from class_factory import make_class, oracle_scores
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import hidden_tests_path, load_mutants, mutants_dir, parse_hidden_tests

CHAPTER_SLUG = "pt-rl-system"
JOBS = 2
CELL_TIMEOUT_S = 10
MEMORY_MB = 2048
HANG_GUARD_S = 1800

pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    not ((REPO_ROOT / "notebooks" / f"{CHAPTER_SLUG}.ipynb").is_file()
         and (REPO_ROOT / "grading" / "hidden_tests" / f"{CHAPTER_SLUG}.py").is_file()),
    reason="PT-RL-SYSTEM chapter or its hidden tests not present")]
# The planted mutants are read with `load_mutants` (both `.mutant` edits and whole `.py` files) by
# `make_class`; a chapter without any fails `test_the_class_is_large_enough...`, it is never skipped.


class Listener:
    """A TCP server on the grading host that counts the connections it receives."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except socket.timeout:
                continue
            self.connections += 1
            connection.close()

    def close(self):
        self.stop.set()
        self.thread.join()
        self.server.close()


def flat(text: str) -> str:
    """Plain text for the leak check: no HTML tags, entities decoded, no whitespace, one kind of quote."""
    return re.sub(r"\s+", "", html.unescape(re.sub(r"<[^>]*>", "", text))).replace('"', "'")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    chapter = find_chapter(CHAPTER_SLUG, REPO_ROOT)
    base = tmp_path_factory.mktemp("class")
    listener = Listener()
    try:
        synthetic = make_class(base / "course", chapter, listener.port)
        expected = oracle_scores(synthetic.source, synthetic.members)
        command = [sys.executable, "-m", "tools.course", "grading", "autograde", "--chapter", CHAPTER_SLUG,
                   "--jobs", str(JOBS), "--course-dir", str(synthetic.course), "--cell-timeout", str(CELL_TIMEOUT_S),
                   "--notebook-timeout", "120", "--memory-mb", str(MEMORY_MB), "--output-dir", str(base / "out"),
                   "--no-progress"]
        started = time.monotonic()
        completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S)
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    print(f"\nclass run: {len(synthetic.members)} submissions, --jobs {JOBS}: {elapsed:.1f} s\n{completed.stdout}")
    record_path = base / "out" / f"autograde_{CHAPTER_SLUG}.json"
    assert record_path.is_file(), completed.stdout + completed.stderr
    record = json.loads(record_path.read_text(encoding="utf-8"))
    return SimpleNamespace(chapter=chapter, synthetic=synthetic, expected=expected, completed=completed,
                           elapsed=elapsed, record=record, out=base / "out", listener=listener,
                           outcomes={item["student"]: item for item in record["outcomes"]})


def grade_id_names(source) -> dict[str, str]:
    """grade_id -> the test name the record uses (hidden tests by their name)."""
    names = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            names[meta["grade_id"]] = cell.metadata.get("course", {}).get("hidden_test") or meta["grade_id"]
    return names


def expected_for(graded, member) -> dict[str, float]:
    """The oracle's per-test scores; the socket submission is only cut off where the network was isolated."""
    if member.student == "socket_opening" and not graded.record["host"]["namespaces"]:
        return graded.expected["correct_1"]
    return graded.expected[member.student]


def test_the_class_is_large_enough_and_the_exit_code_reports_the_failures(graded):
    members = graded.synthetic.members
    assert len(members) >= 30
    kinds = {member.kind.split(":")[0].split(" code in")[0] for member in members}
    assert {"correct", "released stub", "partly correct", "mutant", "looping", "sleeping", "memory hungry",
            "socket opening", "forking", "corrupt file"} <= kinds
    planted = load_mutants(mutants_dir(REPO_ROOT, graded.chapter), read_notebook(graded.chapter.notebook_path(REPO_ROOT)))
    assert len(planted) >= 8, "every graded chapter plants at least 8 mutants (.mutant edits or .py files)"
    assert sorted(m.student for m in members if m.student.startswith("mutant_")) == \
        sorted(f"mutant_{mutant.name}" for mutant in planted)
    corrupt = [m.student for m in members if m.solutions is None]
    assert graded.completed.returncode == 1, graded.completed.stdout + graded.completed.stderr
    for student in corrupt:
        assert f"FAILED {student}:" in graded.completed.stdout
    assert graded.record["summary"]["graded"] == len(members) - len(corrupt)


def test_every_score_matches_the_oracle(graded):
    names = grade_id_names(graded.synthetic.source)
    max_total = sum(float(c.metadata["nbgrader"]["points"]) for c in graded.synthetic.source.cells
                    if c.metadata["nbgrader"].get("grade"))
    assert graded.expected["correct_1"] and sum(graded.expected["correct_1"].values()) == max_total
    assert sum(graded.expected["stub"].values()) == 0
    for member in graded.synthetic.members:
        if member.solutions is None:
            continue
        outcome = graded.outcomes[member.student]
        assert outcome["status"] == "graded", (member.student, outcome["reason"])
        got = {test["name"]: test["score"] for item in outcome["exercises"] for test in item["tests"]}
        want = {names[grade_id]: score for grade_id, score in expected_for(graded, member).items()}
        assert got == want, member.student
        assert outcome["score"] == sum(want.values()) and outcome["max_score"] == max_total
        per_exercise = {item["exercise"]: item for item in outcome["exercises"]}
        for exercise in member.breaks:
            if member.student != "socket_opening" or graded.record["host"]["namespaces"]:
                assert per_exercise[exercise]["score"] == 0, (member.student, exercise)
        if member.breaks:
            assert all(item["passed"] for name, item in per_exercise.items() if name not in member.breaks), member.student
        if member.kind.startswith("mutant"):
            assert not per_exercise[member.planted_in]["passed"], member.student


def test_graded_scores_are_in_the_course_gradebook_and_corrupt_ones_are_not(graded):
    from nbgrader.api import Gradebook, MissingEntry

    course = graded.synthetic.course
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        for member in graded.synthetic.members:
            if member.solutions is None:
                with pytest.raises(MissingEntry):
                    book.find_submission(CHAPTER_SLUG, member.student)
                assert not (course / "feedback" / member.student).exists()
                assert "corrupt" in graded.outcomes[member.student]["reason"] or \
                    "missing notebook" in graded.outcomes[member.student]["reason"]
            else:
                submission = book.find_submission(CHAPTER_SLUG, member.student)
                assert submission.score == graded.outcomes[member.student]["score"]
                assert (course / "autograded" / member.student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.ipynb").is_file()


def test_hostile_submissions_were_contained_and_the_limits_recorded(graded):
    host = graded.record["host"]
    for member in graded.synthetic.members:
        if member.solutions is None:
            continue
        enforced = graded.outcomes[member.student]["enforced"]
        assert enforced["kernel_started"] and not enforced["killed_at_notebook_timeout"], member.student
        assert enforced["cell_timeout_s"] == CELL_TIMEOUT_S and enforced["memory_bytes"] == MEMORY_MB * 2 ** 20
        assert enforced["max_processes"] and enforced["cpu_seconds"]
        if host["namespaces"]:
            assert enforced["network"] == "own network namespace, interfaces lo" and enforced["pid_namespace"]
            assert enforced["kernel_uid"] is not None and enforced["leftover_processes_killed"] == 0
    if host["namespaces"]:
        assert graded.listener.connections == 0
        kernel_uids = {graded.outcomes[m.student]["enforced"]["kernel_uid"] for m in graded.synthetic.members
                       if m.solutions is not None}
        assert len(kernel_uids) == JOBS
        assert [pid for pid in os.listdir("/proc") if pid.isdigit() and _uid(pid) in kernel_uids] == []
    errors = {}
    for student in ("looping", "sleeping", "memory_hungry", "socket_opening", "forking"):
        feedback = json.loads((graded.synthetic.course / "feedback" / student / CHAPTER_SLUG / f"{CHAPTER_SLUG}.json")
                              .read_text(encoding="utf-8"))
        errors[student] = " ".join(item["solution_cell_error"] or "" for item in feedback["exercises"])
    assert "KeyboardInterrupt" in errors["looping"] and "KeyboardInterrupt" in errors["sleeping"]
    assert "MemoryError" in errors["memory_hungry"]
    assert "BlockingIOError" in errors["forking"]
    if host["namespaces"]:
        assert "ConnectionRefusedError" in errors["socket_opening"]


def _uid(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def _hidden_lines(graded) -> list[str]:
    """Distinctive lines of the hidden tests file that the learner has not seen in the release."""
    seen = flat("\n".join(cell.source for cell in graded.synthetic.release.cells))
    lines = set()
    for test in parse_hidden_tests(hidden_tests_path(REPO_ROOT, graded.chapter)):
        for line in test.source.splitlines():
            text = flat(line)
            if len(text) >= 12 and text not in seen:
                lines.add(text)
    return sorted(lines)


def test_no_hidden_test_source_appears_in_any_feedback_file(graded):
    secrets = _hidden_lines(graded)
    assert len(secrets) > 50
    files = sorted((graded.synthetic.course / "feedback").rglob("*.*"))
    graded_students = [m.student for m in graded.synthetic.members if m.solutions is not None]
    assert {path.parent.parent.name for path in files} == set(graded_students)
    assert {path.suffix for path in files} == {".html", ".json"}
    for path in files:
        text = flat(path.read_text(encoding="utf-8"))
        leaked = [secret for secret in secrets if secret in text]
        assert not leaked, f"{path}: {leaked[:3]}"


def test_feedback_shows_hidden_tests_as_name_points_result_and_the_true_hint(graded):
    hints = {test.name: test.hint for test in parse_hidden_tests(hidden_tests_path(REPO_ROOT, graded.chapter))}
    for student in ("stub", "tampered_metadata"):
        folder = graded.synthetic.course / "feedback" / student / CHAPTER_SLUG
        record = json.loads((folder / f"{CHAPTER_SLUG}.json").read_text(encoding="utf-8"))
        hidden = [test for item in record["exercises"] for test in item["tests"] if test["kind"] == "hidden"]
        assert {test["name"] for test in hidden} == set(hints)
        for test in hidden:
            assert set(test) == {"exercise", "kind", "name", "points", "score", "passed", "hint"}
            assert test["hint"] == hints[test["name"]]
            assert test["passed"] is (student == "tampered_metadata")
        page = flat((folder / f"{CHAPTER_SLUG}.html").read_text(encoding="utf-8"))
        assert "TAMPEREDHINT" not in page
        assert all(flat(f"Hint: {hint}") in page for hint in hints.values())


def test_the_leak_check_detects_what_stock_nbgrader_feedback_shows(graded, tmp_path):
    """Control: nbgrader's own generate_feedback of the same autograded notebook shows hidden tests."""
    import shutil

    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    course = graded.synthetic.course
    shutil.copytree(course / "autograded" / "stub", tmp_path / "autograded" / "stub")
    shutil.copy(course / "gradebook.db", tmp_path / "gradebook.db")
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    converter = GenerateFeedback(coursedir=CourseDirectory(root=str(tmp_path), assignment_id=CHAPTER_SLUG,
                                                           student_id="stub"), config=config)
    converter.force = True
    converter.start()
    stock = flat((tmp_path / "feedback" / "stub" / CHAPTER_SLUG / f"{CHAPTER_SLUG}.html").read_text(encoding="utf-8"))
    assert sum(secret in stock for secret in _hidden_lines(graded)) > 50


def test_the_class_report_names_the_hardest_exercise(graded):
    exercises = graded.synthetic.exercises
    names = grade_id_names(graded.synthetic.source)
    exercise_of = {names[cell.metadata["nbgrader"]["grade_id"]]: cell.metadata["course"]["exercise"]
                   for cell in graded.synthetic.source.cells
                   if cell.metadata["nbgrader"].get("grade") and not cell.metadata["nbgrader"].get("solution")}
    points = {names[c.metadata["nbgrader"]["grade_id"]]: float(c.metadata["nbgrader"]["points"])
              for c in graded.synthetic.source.cells
              if c.metadata["nbgrader"].get("grade") and not c.metadata["nbgrader"].get("solution")}
    passes = dict.fromkeys(exercises, 0)
    graded_members = [m for m in graded.synthetic.members if m.solutions is not None]
    for member in graded_members:
        scores = {names[g]: s for g, s in expected_for(graded, member).items()}
        for exercise in exercises:
            passes[exercise] += all(scores[t] == points[t] for t in scores if exercise_of[t] == exercise)
    ranked = sorted(exercises, key=lambda name: passes[name])
    assert passes[ranked[0]] < passes[ranked[1]], f"the synthetic class must have one hardest exercise: {passes}"
    assert graded.record["hardest_exercise"] == ranked[0]
    report = (graded.out / "class_report.md").read_text(encoding="utf-8")
    assert f"**Hardest exercise: `{ranked[0]}`**" in report
    assert f"{100 * passes[ranked[0]] / len(graded_members):.0f}% of graded submissions" in report
    assert (graded.out / "class_report.png").stat().st_size > 10_000
    assert "## Most common failing tests" in report


def test_the_class_run_records_its_wall_time(graded):
    """A hang would have stopped the fixture at HANG_GUARD_S; the time itself is the benchmark's to judge."""
    seconds = graded.record["wall_seconds"]
    assert isinstance(seconds, (int, float)) and 0 < seconds <= graded.elapsed, (seconds, graded.elapsed)
