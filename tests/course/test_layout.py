"""`CourseLayout` and `NbgraderCourse` are the one owner of the course's grading and build paths."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.course.grader.build import build_sources
from tools.course.layout import CourseLayout, NbgraderCourse, hidden_tests_path, mutants_dir, source_notebook_path

NBGRADER_NAMES = {"source", "release", "submitted", "autograded", "feedback", "gradebook.db", "nbgrader_config.py",
                  "hidden_tests", "mutants", "grading", "build"}


def test_nbgrader_folders_are_where_nbgrader_itself_looks(tmp_path):
    """The same paths as nbgrader's own `CourseDirectory.format_path` (assignment id = notebook name = slug)."""
    from nbgrader.coursedir import CourseDirectory

    nbgrader = CourseDirectory(root=str(tmp_path))
    ours = NbgraderCourse(tmp_path)
    slug, student = "pt-rl-system", "s001"
    assert ours.source_dir(slug) == Path(nbgrader.format_path(nbgrader.source_directory, ".", slug)).resolve()
    assert ours.release(slug).parent == Path(nbgrader.format_path(nbgrader.release_directory, ".", slug)).resolve()
    assert ours.submission_dir(student, slug) == Path(nbgrader.format_path(nbgrader.submitted_directory, student, slug))
    assert ours.autograded_dir(student, slug) == Path(nbgrader.format_path(nbgrader.autograded_directory, student,
                                                                            slug))
    assert ours.feedback_dir(student, slug) == Path(nbgrader.format_path(nbgrader.feedback_directory, student, slug))
    assert ours.gradebook_url == nbgrader.db_url
    assert ours.source(slug).name == ours.release(slug).name == ours.submission(student, slug).name == f"{slug}.ipynb"


def test_the_course_grades_in_its_own_grading_folder_unless_told_otherwise(tmp_path):
    layout = CourseLayout(tmp_path)
    assert layout.grading == tmp_path / "grading" and layout.nbgrader.folder == tmp_path / "grading"
    elsewhere = CourseLayout(tmp_path, tmp_path / "class")
    assert elsewhere.nbgrader.source("x") == tmp_path / "class" / "source" / "x" / "x.ipynb"
    # the grading inputs stay the checkout's, wherever the class is graded
    assert elsewhere.hidden_tests("x") == layout.hidden_tests("x") == tmp_path / "grading" / "hidden_tests" / "x.py"
    assert elsewhere.mutants("x") == tmp_path / "grading" / "mutants" / "x"
    assert elsewhere.config_template == tmp_path / "grading" / "nbgrader_config.py"
    assert layout.run_dir("l") == tmp_path / "build" / "runs" / "l"
    assert layout.run_lock("l") == tmp_path / "build" / "locks" / "l.lock"
    assert layout.autograde_output("x", "l") == tmp_path / "build" / "grading" / "autograde" / "x" / "l"


def test_the_shortcuts_name_the_same_files_as_the_layout():
    chapter = find_chapter("pt-rl-system", REPO_ROOT)
    layout = CourseLayout(REPO_ROOT)
    assert hidden_tests_path(REPO_ROOT, chapter) == layout.hidden_tests(chapter.slug)
    assert hidden_tests_path(REPO_ROOT, chapter).is_file()
    assert mutants_dir(REPO_ROOT, chapter) == layout.mutants(chapter.slug) and layout.mutants(chapter.slug).is_dir()
    assert source_notebook_path(REPO_ROOT, chapter) == layout.nbgrader.source(chapter.slug)
    assert layout.nbgrader.source(chapter.slug).is_file() and layout.config_template.is_file()


def test_autograded_students_lists_only_graded_notebooks_of_the_chapter(tmp_path):
    course = NbgraderCourse(tmp_path)
    for student, slug in (("b", "ch"), ("a", "ch"), ("c", "other")):
        course.autograded(student, slug).parent.mkdir(parents=True)
        course.autograded(student, slug).write_text("{}", encoding="utf-8")
    course.autograded_dir("d", "ch").mkdir(parents=True)  # a folder without the notebook
    assert course.autograded_students("ch") == ["a", "b"]


def test_grading_build_writes_the_source_where_the_layout_says(tmp_path):
    root = tmp_path / "course"
    for folder in ("notebooks", "grading/hidden_tests", "grading/mutants"):
        os.makedirs(root / folder)
    chapter = find_chapter("pt-rl-system", REPO_ROOT)
    for relative in (chapter.notebook, "notebooks/catalog.toml", f"grading/hidden_tests/{chapter.slug}.py"):
        (root / relative).write_bytes((REPO_ROOT / relative).read_bytes())
    written = build_sources(root, [chapter])
    assert written == [str(CourseLayout(root).nbgrader.source(chapter.slug).relative_to(root))]
    assert CourseLayout(root).nbgrader.source(chapter.slug).read_bytes() == \
        CourseLayout(REPO_ROOT).nbgrader.source(chapter.slug).read_bytes()


def _in_template(node: ast.AST) -> bool:
    """A path inside the chapter template of `new-chapter` (`TEMPLATE_DIR / "mutants"`): its own files."""
    return isinstance(node, ast.Name) and node.id == "TEMPLATE_DIR"


def hand_built_paths(package: Path) -> list[str]:
    """`... / "source"`, `... / "gradebook.db"` and the like outside `layout.py`: a grading or build path
    built by hand (a path built twice is a bug waiting for a rename)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and not _in_template(node.left):
                names = [side.value for side in (node.left, node.right)
                         if isinstance(side, ast.Constant) and isinstance(side.value, str)]
                if any(name in NBGRADER_NAMES or name.split("/")[0] in NBGRADER_NAMES for name in names):
                    found.append(f"{path.relative_to(package.parent.parent)}:{node.lineno}")
            elif isinstance(node, ast.JoinedStr) and any(
                    isinstance(part, ast.Constant) and "gradebook.db" in part.value for part in node.values):
                found.append(f"{path.relative_to(package.parent.parent)}:{node.lineno}")
    return found


def test_no_grading_or_build_path_is_built_by_hand_in_tools_course():
    assert hand_built_paths(REPO_ROOT / "tools" / "course") == []


@pytest.mark.parametrize("line", ['course / "autograded" / student', 'root / "build" / "bench"',
                                  'f"sqlite:///{course / \'gradebook.db\'}"'])
def test_a_hand_built_path_is_reported(tmp_path, line):
    package = tmp_path / "tools" / "course"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(f"value = {line}\n", encoding="utf-8")
    assert hand_built_paths(package) == ["tools/course/probe.py:1"]
