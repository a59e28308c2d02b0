"""`grading autograde --executor ray` on a local 2-CPU Ray cluster (tools.course.classroom.ray_grading).

The same toy class graded by the local executor and by Ray actors gets the same scores, the same statuses
and the same gradebook; an actor that dies mid-submission loses no grade (graded again on a fresh actor) and
one that dies twice is reported as not graded, never half-merged; an unreachable address fails before any work.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from chapter_factory import make_toy_project, submit
from tools.core.catalog import load_catalog, select_chapters
from tools.course.classroom import ray_grading
from tools.course.classroom.batch import autograde_chapter, ensure_assignment
from tools.course.cells import read_notebook
from tools.course.grader.build import build_sources
from tools.course.ray_cluster import connect
from tools.course.scratch import is_orphan
from tools.errors import ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("ray"), pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning")]

REFERENCE = {
    "add_rates": "import math\n\n\ndef add_rates(a, b):\n    if not (math.isfinite(a) and math.isfinite(b)):\n"
                 "        raise ValueError('rates must be finite')\n    return a + b\n",
    "halve": "def halve(x):\n    return x / 2\n",
}
CLASS = {"ref": REFERENCE, "stub": {}, "half": {**REFERENCE, "halve": "def halve(x):\n    return x // 2\n"},
         "nofinite": {**REFERENCE, "add_rates": "def add_rates(a, b):\n    return a + b\n"}}


def toy_class(folder, students=CLASS):
    """A toy project whose grading course holds `students`' submissions (and one corrupt notebook)."""
    root = make_toy_project(folder)
    build_sources(root, load_catalog(root))
    course = root / "grading"
    (root / "logs").mkdir()
    ensure_assignment(course, "toy", root / "logs")
    release = read_notebook(course / "release" / "toy" / "toy.ipynb")
    for student, bodies in students.items():
        submit(course, student, release, bodies)
    (course / "submitted" / "broken" / "toy").mkdir(parents=True)
    (course / "submitted" / "broken" / "toy" / "toy.ipynb").write_text('{"nbformat": 4', encoding="utf-8")
    return root


def grade(root, executor):
    chapter = select_chapters(["toy"], root)[0]
    report = autograde_chapter(root, chapter, jobs=2, output_dir=root / f"out-{executor}", show_progress=False,
                               remote=ray_grading.ray_executor(executor))
    return report, {outcome.student: outcome for outcome in report.outcomes}


def gradebook_scores(course):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book:
        return {(submission.student.id, grade.name): grade.score
                for assignment in book.assignments for submission in assignment.submissions
                for notebook in submission.notebooks for grade in notebook.grades}


@pytest.fixture(scope="module")
def ray_cluster():
    ray = connect(None, num_cpus=2)
    yield ray
    ray.shutdown()


def test_an_unreachable_address_or_an_unknown_executor_fails_before_any_work(tmp_path, monkeypatch, capsys):
    from tools.course.__main__ import main

    root = toy_class(tmp_path, {"ref": REFERENCE})
    with pytest.raises(ConfigError, match="127.0.0.1:9"):
        ray_grading.ray_executor("ray", "127.0.0.1:9")
    with pytest.raises(ConfigError, match="--executor must be"):
        ray_grading.ray_executor("dask")
    with pytest.raises(ConfigError, match="--executor ray"):
        ray_grading.ray_executor("local", "127.0.0.1:6379")
    monkeypatch.setenv("COURSE_PROJECT_ROOT", str(root))
    command = ["grading", "autograde", "--chapter", "toy", "--output-dir", str(root / "out"), "--no-progress"]
    assert main([*command, "--executor", "ray", "--address", "127.0.0.1:9"]) == 2
    assert "127.0.0.1:9" in capsys.readouterr().err
    assert main([*command, "--address", "127.0.0.1:6379"]) == 2
    assert "--executor ray" in capsys.readouterr().err
    assert not (root / "out").exists() and not (root / "grading" / "autograded").exists()


def test_ray_actors_grade_the_class_as_the_local_workers_do(tmp_path, ray_cluster):
    local_root = toy_class(tmp_path / "local")
    ray_root = tmp_path / "ray"
    shutil.copytree(local_root, ray_root, symlinks=True)
    local, by_local = grade(local_root, "local")
    remote, by_ray = grade(ray_root, "ray")
    assert sorted(by_ray) == sorted(by_local) == ["broken", "half", "nofinite", "ref", "stub"]
    for student, outcome in by_local.items():
        theirs = by_ray[student]
        assert (theirs.status, theirs.score, theirs.max_score) == (outcome.status, outcome.score, outcome.max_score)
        assert [item["score"] for item in theirs.exercises] == [item["score"] for item in outcome.exercises]
    assert by_ray["ref"].score == by_ray["ref"].max_score > by_ray["half"].score > by_ray["stub"].score == 0
    assert gradebook_scores(ray_root / "grading") == gradebook_scores(local_root / "grading") != {}
    record = json.loads((ray_root / "out-ray" / "autograde_toy.json").read_text(encoding="utf-8"))
    assert record["executor"]["executor"] == "ray" and record["executor"]["actors"] == 2
    assert (ray_root / "grading" / "feedback" / "ref" / "toy" / "toy.html").is_file()
    assert (ray_root / "grading" / "autograded" / "ref" / "toy" / "toy.ipynb").is_file()


class FlakySlot(ray_grading.NodeSlot):
    """A slot whose process dies grading `unlucky` the first time (a marker file says so) and `doomed` always."""

    marker = None

    def grade(self, index, student, files, collected):
        if student == "doomed" or student == "unlucky" and not os.path.exists(self.marker):
            if student == "unlucky":
                open(self.marker, "w").close()
            os._exit(1)
        return super().grade(index, student, files, collected)


def test_an_actor_that_dies_loses_no_grade_and_two_deaths_are_reported(tmp_path, ray_cluster, monkeypatch):
    from ray import cloudpickle  # Ray's own copy pickles the actor class

    root = toy_class(tmp_path, {"ref": REFERENCE, "unlucky": REFERENCE, "doomed": REFERENCE})
    FlakySlot.marker = str(tmp_path / "unlucky-died-once")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    monkeypatch.setattr(ray_grading, "NodeSlot", FlakySlot)
    report, outcomes = grade(root, "ray")
    assert os.path.exists(FlakySlot.marker)
    assert outcomes["unlucky"].status == outcomes["ref"].status == "graded"
    assert outcomes["unlucky"].score == outcomes["ref"].score == outcomes["ref"].max_score
    assert outcomes["doomed"].status == "failed" and "died twice" in outcomes["doomed"].reason
    assert {student for student, _ in gradebook_scores(root / "grading")} == {"ref", "unlucky"}
    assert not (root / "grading" / "autograded" / "doomed").exists()
    # the three dead actors' folders (the course's sources among them) were removed by their replacements
    left = [folder for prefix in ("course-ray-slot-", "class-grading-")
            for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*") if is_orphan(folder)]
    assert left == []


@pytest.mark.slow
@pytest.mark.parametrize("chapter_id", ["33"])  # PT-RL-SYSTEM: `bench --grading-only --ray`
def test_a_real_chapters_class_gets_the_same_scores_from_ray_and_local_workers(tmp_path, ray_cluster, chapter_id):
    """Two reference submissions and one wrong one (the chapter's first mutant on its first exercise)."""
    from chapter_factory import REPO_ROOT
    from tools.course.classroom.benchmark import class_of_copies
    from tools.course.grader.build import load_mutants, mutants_dir

    chapter = select_chapters([chapter_id], REPO_ROOT)[0]
    mutant = load_mutants(mutants_dir(REPO_ROOT, chapter), read_notebook(chapter.notebook_path(REPO_ROOT)))[0]
    by_executor = {}
    for executor in ("local", "ray"):
        course = class_of_copies(REPO_ROOT, chapter, tmp_path / executor, 2,
                                 extra={"wrong": {mutant.exercise: mutant.source}})
        report = autograde_chapter(REPO_ROOT, chapter, course=course, jobs=2, show_progress=False,
                                   output_dir=tmp_path / f"{executor}-out",
                                   remote=ray_grading.ray_executor(executor))
        by_executor[executor] = {o.student: (o.status, o.score, o.max_score,
                                             [item["score"] for item in o.exercises]) for o in report.outcomes}
    assert by_executor["ray"] == by_executor["local"]
    full = by_executor["local"]["s000"][2]
    assert by_executor["local"]["s000"][1] == by_executor["local"]["s001"][1] == full > by_executor["local"]["wrong"][1]
