"""Class grading works wherever an instructor keeps the checkout and its venv.

Each layout is a course checkout (the real `tools` package and the toy chapter) with its own
virtual environment, both started from that layout, as an instructor would type the commands:
`grading release`, then `grading autograde` on a reference and a stub submission. The venv is a
light one (no pip) that reaches this interpreter's packages through a `.pth` file, has the console
scripts nbgrader needs, and imports `tools` from the layout's checkout, never from this repository.

* private: the checkout lies in a folder only its owner may enter (a `mktemp -d` folder or a 0700
  home), its path has a space, and the venv sits inside the checkout;
* linked: the checkout is reached through a symbolic link in a private folder, and the venv lies
  outside the checkout, in another private folder;
* apart: the tools checkout and its venv lie in a private folder, and the graded course root
  (`COURSE_PROJECT_ROOT`) in another one (the layout of the test suite's own toy courses).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT, make_toy_project
from tools.course.classroom.batch import remove_tree
from tools.course.cells import read_notebook, write_notebook
from tools.course.classroom.sandbox import probe_host

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:.*not in session:sqlalchemy.exc.SAWarning")]

HOST = probe_host()
REFERENCE = {
    "add_rates": "import math\n\n\ndef add_rates(a, b):\n    if not (math.isfinite(a) and math.isfinite(b)):\n"
                 "        raise ValueError('rates must be finite')\n    return a + b\n",
    "halve": "def halve(x):\n    return x / 2\n",
}
CONSOLE_SCRIPT = (  # pip's form of a console script whose interpreter path has a space
    "#!/bin/sh\n'''exec' \"{python}\" \"$0\" \"$@\"\n' '''\n"
    "import sys\nfrom {module} import {function}\nsys.exit({function}())\n"
)


def make_checkout(folder: Path) -> Path:
    """The toy course with a copy of the real `tools` package (so the sandbox launcher lives in it)."""
    root = make_toy_project(folder)
    shutil.rmtree(root / "tools")
    shutil.copytree(REPO_ROOT / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def make_light_venv(folder: Path, checkout: Path) -> Path:
    """A venv whose site-packages points at this interpreter's packages and at `checkout`."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    ours = [path for path in site.getsitepackages() if Path(path).is_dir()]
    (purelib / "course.pth").write_text("\n".join([str(checkout), *ours]) + "\n", encoding="utf-8")
    (folder / "share").symlink_to(Path(sys.prefix) / "share")  # data files pip puts there (nbconvert templates)
    for name, module, function in (("alembic", "alembic.config", "main"), ("nbgrader", "nbgrader.apps.nbgraderapp", "main")):
        script = folder / "bin" / name
        script.write_text(CONSOLE_SCRIPT.format(python=python, module=module, function=function), encoding="utf-8")
        script.chmod(0o755)
    return python


def instructor(python: Path, cwd: Path, *args: str, course_root: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -m tools.course ARGS` from the layout, with a plain environment (no venv activated)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    if course_root is not None:
        env["COURSE_PROJECT_ROOT"] = str(course_root)
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if key in os.environ:
            env[key] = os.environ[key]
    return subprocess.run([str(python), "-m", "tools.course", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def grade_in_layout(python: Path, checkout: Path, course_root: Path | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """Build, release and autograde the toy chapter of `course_root` (default: the checkout itself)."""
    run = lambda *args: instructor(python, checkout, *args, course_root=course_root)  # noqa: E731
    built = run("grading", "build")  # a real checkout has the committed source
    assert built.returncode == 0, built.stdout + built.stderr
    released = run("grading", "release", "--chapter", "toy")
    assert released.returncode == 0, released.stdout + released.stderr
    course = (course_root or checkout) / "grading"
    release = read_notebook(course / "release" / "toy" / "toy.ipynb")
    for student, sources in (("ref", REFERENCE), ("stub", {})):
        notebook = copy.deepcopy(release)
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in sources:
                cell.source = sources[grade_id]
        write_notebook(notebook, course / "submitted" / student / "toy" / "toy.ipynb")
    out = (course_root or checkout) / "out"
    graded = run("grading", "autograde", "--chapter", "toy", "--jobs", "1", "--cell-timeout", "20",
                 "--output-dir", str(out), "--no-progress")
    record = json.loads((out / "autograde_toy.json").read_text(encoding="utf-8"))
    return {item["student"]: item for item in record["outcomes"]}, graded


@pytest.fixture
def private_base():
    base = Path(tempfile.mkdtemp(prefix="layout-"))  # 0700, like `mktemp -d`
    yield base
    remove_tree(base)


def check_outcomes(outcomes: dict, graded: subprocess.CompletedProcess, hidden_root: Path) -> None:
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert outcomes["ref"]["status"] == "graded" and outcomes["ref"]["score"] == 5.0
    assert outcomes["stub"]["status"] == "graded" and outcomes["stub"]["score"] == 0.0
    enforced = outcomes["ref"]["enforced"]
    if HOST.namespaces:
        assert enforced["kernel_uid"] not in (None, 0)
        assert any(Path(path) == hidden_root or Path(path) in hidden_root.parents
                   for path in enforced["masked_paths"]), enforced["masked_paths"]
    assert outcomes["ref"]["feedback"]["written"]


def test_grading_from_a_private_folder_with_a_space_in_the_path(private_base):
    assert oct(private_base.stat().st_mode & 0o777) == "0o700"
    checkout = make_checkout(private_base / "my course")
    python = make_light_venv(checkout / ".venv", checkout)
    outcomes, graded = grade_in_layout(python, checkout)
    check_outcomes(outcomes, graded, checkout)


def test_grading_from_a_symlinked_checkout_with_the_venv_outside_it(private_base):
    checkout = make_checkout(private_base / "real" / "course")
    link = private_base / "link"
    link.symlink_to(checkout)
    venv_home = Path(tempfile.mkdtemp(prefix="layout-venv-"))
    try:
        python = make_light_venv(venv_home / "venv", link)
        outcomes, graded = grade_in_layout(python, link)
        check_outcomes(outcomes, graded, checkout)
    finally:
        remove_tree(venv_home)


def test_grading_a_course_kept_apart_from_the_private_tools_checkout(private_base):
    """The tools checkout and its venv in one private folder, the graded course root in another
    (COURSE_PROJECT_ROOT), as the test suite's toy courses are: the launcher in `tools` must stay
    reachable though nothing of the course root lies near it."""
    tools_checkout = make_checkout(private_base / "tools checkout")
    python = make_light_venv(tools_checkout / ".venv", tools_checkout)
    class_home = Path(tempfile.mkdtemp(prefix="layout-class-"))
    try:
        course_root = make_toy_project(class_home / "class")
        outcomes, graded = grade_in_layout(python, tools_checkout, course_root)
        check_outcomes(outcomes, graded, course_root)
    finally:
        remove_tree(class_home)


def test_the_layouts_import_tools_from_their_own_checkout(private_base):
    checkout = make_checkout(private_base / "course")
    python = make_light_venv(checkout / ".venv", checkout)
    found = subprocess.run([str(python), "-c", "import tools; print(tools.__file__)"], cwd="/",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found).resolve().parent == (checkout / "tools").resolve()
    assert sysconfig.get_paths()["purelib"] != str(checkout)
