"""A synthetic class of submissions for a graded chapter, and an independent oracle of their scores.

The class is made from the nbgrader release of the chapter: reference solutions, the stub,
partial solutions, every planted mutant, tampered test cells and metadata, hostile code
(an endless loop, an endless sleep, unbounded allocation, a socket to the grading host, a
fork bomb) and corrupt files. Each hostile snippet stands at the top of one exercise's cell,
so that cell fails before it defines anything: the submission must earn exactly its other
exercises.

The oracle does not use nbgrader or the sandbox: it executes the source notebook's cells in
this process (setup once, then per submission its solution cells and the restored test cells)
and scores a test cell by whether it raises, which is nbgrader's rule for code grade cells.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from chapter_factory import REPO_ROOT
from tools.core.catalog import Chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.grader.build import load_mutants, mutants_dir, reference_source, render_source_notebook
from tools.course.nbgrader_cli import venv_environment

UNDEFINED = None
"""A solution cell that fails before defining anything (hostile code at its top)."""


def hostile_snippets(port: int) -> dict[str, str]:
    return {
        "looping": "while True:  # never finishes\n    pass\n",
        "sleeping": "import time\ntime.sleep(10 ** 6)  # sleeps forever\n",
        "memory_hungry": ("def _grab():\n    blocks = []\n    while True:\n"
                          "        blocks.append(bytearray(256 * 2 ** 20))\n\n\n_grab()\n"),
        "socket_opening": (f"import socket\nwith socket.create_connection(('127.0.0.1', {port}), timeout=5) as link:\n"
                           "    link.sendall(b'exfiltrated answers')\n"),
        "forking": ("import os\nimport time\nwhile True:\n    if os.fork() == 0:\n"
                    "        time.sleep(300)\n        os._exit(0)\n"),
    }


@dataclass
class Member:
    """One student of the synthetic class."""

    student: str
    kind: str
    solutions: dict | None  # exercise -> source (None: undefined); None for a corrupt submission
    breaks: set = field(default_factory=set)  # exercises whose cell the hostile code defeats
    deleted_tests: set = field(default_factory=set)  # grade cells removed from the submission
    planted_in: str | None = None  # a mutant's exercise


@dataclass
class SyntheticClass:
    course: Path
    chapter: Chapter
    exercises: list[str]
    members: list[Member]
    source: nbformat.NotebookNode
    release: nbformat.NotebookNode


def prepare_course(course: Path, chapter: Chapter, root: Path = REPO_ROOT) -> tuple:
    """A course folder with the chapter's config and source, and its release made by nbgrader."""
    course.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text((root / "grading" / "nbgrader_config.py").read_text(encoding="utf-8"),
                                               encoding="utf-8")
    source_path = course / "source" / chapter.slug / f"{chapter.slug}.ipynb"
    source_path.parent.mkdir(parents=True, exist_ok=True)
    source_path.write_text(render_source_notebook(root, chapter), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter.slug, "--force"], cwd=course,
                   check=True, capture_output=True, env=venv_environment())
    return read_notebook(source_path), read_notebook(course / "release" / chapter.slug / f"{chapter.slug}.ipynb")


def _solution_ids(notebook) -> list[str]:
    return [cell.metadata["nbgrader"]["grade_id"] for cell in notebook.cells
            if cell.metadata.get("nbgrader", {}).get("solution")]


def _notebook(release, solutions: dict) -> nbformat.NotebookNode:
    notebook = copy.deepcopy(release)
    for cell in notebook.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solutions:
            cell.source = solutions[grade_id]
    return notebook


def _tamper_tests(notebook) -> nbformat.NotebookNode:
    tampered = copy.deepcopy(notebook)
    for index, cell in enumerate(c for c in tampered.cells if c.metadata.get("nbgrader", {}).get("grade")):
        cell.source = "pass" if index % 2 else "assert True  # edited test"
    return tampered


def _tamper_metadata(notebook) -> tuple[nbformat.NotebookNode, str]:
    """Inflate every test's points, rewrite hints, delete the first visible test cell (returned by id).

    nbgrader restores the source and points of the cells that remain; a deleted test cell is not
    run (`OverwriteCells.add_missing_cells` is off), so it earns nothing.
    """
    tampered = copy.deepcopy(notebook)
    first_visible = None
    for cell in tampered.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 100
            if cell.metadata.get("course", {}).get("hidden_test"):
                cell.metadata["course"]["hint"] = "TAMPERED HINT"
            elif first_visible is None:
                first_visible = cell
    tampered.cells.remove(first_visible)
    return tampered, first_visible.metadata["nbgrader"]["grade_id"]


def make_class(course: Path, chapter: Chapter, port: int, root: Path = REPO_ROOT) -> SyntheticClass:
    """Write every member's submission under `course/submitted/` and return the class."""
    source, release = prepare_course(course, chapter, root)
    chapter_notebook = read_notebook(chapter.notebook_path(root))
    exercises = _solution_ids(release)
    stubs = {cell.metadata["nbgrader"]["grade_id"]: cell.source for cell in release.cells
             if cell.metadata.get("nbgrader", {}).get("solution")}
    reference = {name: reference_source(chapter_notebook, name) for name in exercises}
    members = [Member(f"correct_{i}", "correct", dict(reference)) for i in (1, 2, 3)]
    members.append(Member("stub", "released stub", dict(stubs)))
    for size in (1, 2):
        for start in range(len(exercises)):
            missing = {exercises[(start + k) % len(exercises)] for k in range(size)}
            members.append(Member(f"partial_{'_'.join(sorted(missing))}", "partly correct",
                                  {name: stubs[name] if name in missing else reference[name] for name in exercises}))
    mutants = load_mutants(mutants_dir(root, chapter), chapter_notebook)
    for mutant in mutants:
        members.append(Member(f"mutant_{mutant.name}", f"mutant: {mutant.mistake}",
                              {**reference, mutant.exercise: mutant.source}, planted_in=mutant.exercise))
    notebooks = {member.student: _notebook(release, member.solutions) for member in members}
    first_mutant = next(m for m in members if m.student == f"mutant_{mutants[0].name}")
    tampered_metadata, deleted = _tamper_metadata(notebooks["correct_1"])
    tampered = [
        (Member("tampered_mutant", "mutant with edited test cells", dict(first_mutant.solutions),
                planted_in=first_mutant.planted_in),
         _tamper_tests(notebooks[first_mutant.student])),
        (Member("tampered_stub", "stub with edited test cells", dict(stubs)), _tamper_tests(notebooks["stub"])),
        (Member("tampered_metadata", "reference with inflated points, rewritten hints, a deleted test",
                dict(reference), deleted_tests={deleted}), tampered_metadata),
    ]
    for member, notebook in tampered:
        members.append(member)
        notebooks[member.student] = notebook
    targets = {"looping": 1, "sleeping": 2, "memory_hungry": 1, "socket_opening": 0, "forking": 2}
    for kind, snippet in hostile_snippets(port).items():
        target = exercises[targets[kind] % len(exercises)]
        solutions = {**reference, target: snippet + reference[target]}
        member = Member(kind, f"{kind.replace('_', ' ')} code in {target}", {**reference, target: UNDEFINED},
                        {target})
        members.append(member)
        notebooks[kind] = _notebook(release, solutions)
    for member in members:
        target = course / "submitted" / member.student / chapter.slug / f"{chapter.slug}.ipynb"
        write_notebook(notebooks[member.student], target)
    corrupt = {
        "corrupt_bytes": b"\x89PNG\r\n\x1a\n not a notebook at all \xff\xfe",
        "corrupt_json": json.dumps({"cells": "nope", "metadata": {}}).encode("utf-8"),
        "corrupt_truncated": nbformat.writes(notebooks["correct_1"]).encode("utf-8")[:2000],
    }
    for student, payload in corrupt.items():
        folder = course / "submitted" / student / chapter.slug
        folder.mkdir(parents=True)
        (folder / f"{chapter.slug}.ipynb").write_bytes(payload)
        members.append(Member(student, "corrupt file", None))
    folder = course / "submitted" / "wrong_file_name" / chapter.slug
    folder.mkdir(parents=True)
    write_notebook(notebooks["correct_2"], folder / "my-answers.ipynb")
    members.append(Member("wrong_file_name", "notebook under another name", None))
    return SyntheticClass(course, chapter, exercises, members, source, release)


# ---------------------------------------------------------------------------
# Oracle
# ---------------------------------------------------------------------------

def oracle_scores(source, members: list[Member]) -> dict[str, dict[str, float]]:
    """`student -> grade_id -> expected score` by executing the cells in this process."""
    import matplotlib

    matplotlib.use("Agg")
    cells = [cell for cell in source.cells if cell.cell_type == "code"]
    meta = [cell.metadata.get("nbgrader", {}) for cell in cells]
    first_solution = next(i for i, m in enumerate(meta) if m.get("solution"))
    assert not any(m.get("grade") or m.get("solution") for m in meta[:first_solution])
    assert not any(not (m.get("grade") or m.get("solution")) for m in meta[first_solution:]), \
        "the oracle expects setup cells before the exercises and only exercises and tests after them"
    base: dict = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for cell in cells[:first_solution]:
            exec(compile(cell.source, "<setup>", "exec"), base)
    expected = {}
    for member in members:
        if member.solutions is None:
            continue
        namespace = dict(base)
        scores = {}
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for cell, m in zip(cells[first_solution:], meta[first_solution:]):
                if m["grade_id"] in member.deleted_tests:
                    scores[m["grade_id"]] = 0.0
                    continue
                if m.get("solution"):
                    code = member.solutions[m["grade_id"]]
                    if code is not UNDEFINED:
                        try:
                            exec(compile(code, f"<{member.student}:{m['grade_id']}>", "exec"), namespace)
                        except Exception:  # the solution cell errors, as it would in the kernel
                            pass
                    continue
                try:
                    exec(compile(cell.source, f"<test {m['grade_id']}>", "exec"), namespace)
                    scores[m["grade_id"]] = float(m["points"])
                except Exception:  # a raising test cell scores zero
                    scores[m["grade_id"]] = 0.0
        expected[member.student] = scores
    return expected


def main(argv: list[str] | None = None) -> int:
    """`python tests/class_factory.py FOLDER [PORT]`: write the PT-RL-SYSTEM class under FOLDER/course
    and print the grading command (used to time `--jobs 1` against `--jobs 2` outside the test suite)."""
    import argparse

    from tools.core.catalog import find_chapter

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--chapter", default="pt-rl-system")
    parser.add_argument("--port", type=int, default=9, help="port the socket-opening submission dials")
    args = parser.parse_args(argv)
    chapter = find_chapter(args.chapter, REPO_ROOT)
    course = Path(args.folder).resolve() / "course"
    synthetic = make_class(course, chapter, args.port)
    print(f"{len(synthetic.members)} submissions under {course / 'submitted'}")
    print(f"python -m tools.course grading autograde --chapter {args.chapter} --course-dir {course} "
          f"--cell-timeout 10 --notebook-timeout 120 --memory-mb 2048 --jobs N")
    return 0


if __name__ == "__main__":
    sys.exit(main())
