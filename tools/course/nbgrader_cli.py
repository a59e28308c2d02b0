"""nbgrader's command line, run by this interpreter whether or not its venv is activated, and what the
course reads back from nbgrader: a course folder's settings and a student's scores in its gradebook.

nbgrader starts `alembic` from PATH whenever it creates a gradebook, so a bare
`.venv/bin/nbgrader ...` fails unless the venv's bin folder is on PATH. Every course command
that runs nbgrader goes through `run_nbgrader`, which puts this interpreter's bin folder first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tools.course.layout import NbgraderCourse
from tools.errors import ConfigError, GradingError

LOG_TAIL_LINES = 15


def venv_environment(base: dict | None = None) -> dict:
    """`base` (default: this environment) with this interpreter's bin folder first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_nbgrader(course: Path, args: list[str], log_path: Path | None = None) -> str:
    """Run `python -m nbgrader ARGS` in the course folder; return its output, raise GradingError on failure."""
    command = [sys.executable, "-m", "nbgrader", *args]
    completed = subprocess.run(command, cwd=course, capture_output=True, text=True, check=False,
                               env=venv_environment())
    output = completed.stdout + completed.stderr
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(command)}\n{output}\n")
    if completed.returncode != 0:
        tail = "\n".join(output.splitlines()[-LOG_TAIL_LINES:])
        raise GradingError(f"`nbgrader {' '.join(args)}` exited {completed.returncode}:\n{tail}")
    return output


def gradebook_scores(course: Path, slug: str, student: str) -> dict[str, tuple[float, float]]:
    """`grade_id -> (score, max_score)` of one student's notebook in the course gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(NbgraderCourse(course).gradebook_url) as gradebook:
        submission = gradebook.find_submission_notebook(slug, slug, student)
        return {grade.cell.name: (float(grade.score or 0.0), float(grade.max_score)) for grade in submission.grades}


def course_config(course: Path):
    """The traitlets config of the nbgrader course folder `course` (its `nbgrader_config.py`)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = NbgraderCourse(course).config
    if not config.is_file():
        raise ConfigError(f"{config} does not exist; --course-dir must be an nbgrader course folder")
    return PyFileConfigLoader(config.name, path=str(config.parent)).load_config()


def course_id(course: Path) -> str:
    """`CourseDirectory.course_id` of the course folder (nbgrader's default when unset)."""
    return str(course_config(course).CourseDirectory.get("course_id", "default_course"))


def course_cell_timeout(course: Path) -> int:
    """`Execute.timeout` of the course folder's config (nbgrader's default, 30 s, when unset)."""
    return int(course_config(course).Execute.get("timeout", 30))
