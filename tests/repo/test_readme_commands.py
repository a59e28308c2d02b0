"""Every shell command the README documents works as written.

Each fenced bash block of README.md carries a marker on the line above it, and this file checks
every block by its marker, in a temporary copy of the repository (the working tree, with `.venv`
linked to this interpreter's venv) and with a PATH that has no venv on it:

* `run`: each command is executed with bash and must exit 0 (`after=NAME` prepares the copy first);
* `call`: each `python -m tools.course` command (also those a `make` target runs) goes through the
  real CLI with its expensive library call replaced by a recorder; the CLI must exit 0 and reach it;
* `gpu`: needs a GPU machine or the internet: course commands must parse with the real parsers,
  files they name must exist, and every other line must be a known set-up step;
* `learner`: `make` targets of the quickstart must exist (`make -n`).
A bash block without a marker fails the test: nothing documented goes unchecked.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from chapter_factory import REPO_ROOT

README = REPO_ROOT / "README.md"
MARKER = re.compile(r"<!-- readme-test: (\w+)(?: after=(\w+))? -->\n```bash\n(.*?)```", re.S)
FENCE = re.compile(r"^```bash$", re.M)
KNOWN_SETUP = ("python -m venv ", ". .venv-verl/bin/activate", "pip install ", "export ", "hf download ",
               "bash benchmarks/gpu/", "ray start ", "ray stop")


def readme_blocks() -> list[tuple[str, str | None, list[str]]]:
    text = README.read_text(encoding="utf-8")
    blocks = [(kind, after, commands(body)) for kind, after, body in MARKER.findall(text)]
    assert len(blocks) == len(FENCE.findall(text)), "every ```bash block in README.md needs a readme-test marker"
    return blocks


def commands(body: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = body.replace("\\\n", " ")
    found = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).strip()
        if line and not line.startswith("#"):
            found.append(line)
    return found


def blocks_of(kind: str) -> list[tuple[str | None, list[str]]]:
    return [(after, lines) for block_kind, after, lines in readme_blocks() if block_kind == kind]


def course_args(line: str) -> list[str] | None:
    """The arguments after `-m tools.course` of a command line, or None for another command."""
    words = shlex.split(line)
    if "-m" in words and words[words.index("-m") + 1] == "tools.course":
        return words[words.index("-m") + 2:]
    return None


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the working tree (tracked and untracked-but-not-ignored files) with `.venv` linked."""
    target = tmp_path_factory.mktemp("readme") / "course"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO_ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    (target / ".venv").symlink_to(Path(sys.prefix))
    return target


def plain_env() -> dict:
    """No venv on PATH, no course variables: a fresh shell."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def plant_submissions(checkout: Path) -> None:
    """A reference and a stub submission of pt-rl-system, as learners would hand them in."""
    from tools.core.catalog import find_chapter
    from tools.course.cells import read_notebook, write_notebook
    from tools.course.grader.build import reference_source

    chapter = find_chapter("PT-RL-SYSTEM", checkout)
    release_path = checkout / "grading" / "release" / chapter.slug / f"{chapter.slug}.ipynb"
    if not release_path.is_file():
        subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-m", "tools.course", "grading", "release",
                        "--chapter", chapter.id], cwd=checkout, env=plain_env(), check=True, capture_output=True)
    release = read_notebook(release_path)
    reference = copy.deepcopy(release)
    chapter_notebook = read_notebook(chapter.notebook_path(checkout))
    for cell in reference.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = reference_source(chapter_notebook, meta["grade_id"])
    for student, notebook in (("ref", reference), ("stub", release)):
        write_notebook(notebook, checkout / "grading" / "submitted" / student / chapter.slug / f"{chapter.slug}.ipynb")


PREPARE = {"plant_submissions": plant_submissions}


def test_every_bash_block_has_a_known_marker():
    kinds = {kind for kind, _, _ in readme_blocks()}
    assert kinds <= {"run", "call", "gpu", "learner"}, kinds
    assert {"run", "call", "gpu"} <= kinds


@pytest.mark.integration
def test_run_blocks_execute_as_pasted(checkout):
    ran = 0
    for after, lines in blocks_of("run"):
        if after:
            PREPARE[after](checkout)
        for line in lines:
            completed = subprocess.run(["bash", "-c", line], cwd=checkout, env=plain_env(), capture_output=True,
                                       text=True, timeout=900)
            assert completed.returncode == 0, f"README command failed: {line}\n{completed.stdout}{completed.stderr}"
            if "tools.course run" in line:  # the batch operator reads progress and the summary, not kernel logs
                assert "IPKernelApp] WARNING" not in completed.stderr, completed.stderr[-2000:]
            ran += 1
    assert ran >= 5
    feedback = checkout / "grading" / "feedback" / "ref" / "pt-rl-system" / "pt-rl-system.html"
    assert feedback.is_file(), "README: feedback lands in grading/feedback/<student>/<slug>/"


class Recorder:
    """Stands in for an expensive library function and remembers that the CLI called it."""

    def __init__(self, result):
        self.result, self.calls = result, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.result(*args, **kwargs) if callable(self.result) else self.result


def recorders(monkeypatch) -> dict[str, Recorder]:
    import tools.course.runs.bench as bench
    import tools.course.grader.verify as grading_verify
    import tools.course.runs.runner as runner

    fakes = {
        "run": Recorder(("readme-label", [])),
        "verify": Recorder(SimpleNamespace(passed=True)),
        "bench": Recorder(lambda root, chapter, **_: {"chapter": chapter.id}),
        "suite": Recorder({}),
    }
    monkeypatch.setattr(runner, "run_chapters", fakes["run"])
    monkeypatch.setattr(runner, "format_summary", lambda outcomes: "")
    monkeypatch.setattr(grading_verify, "verify_chapter", fakes["verify"])
    monkeypatch.setattr(grading_verify, "format_matrix", lambda report: "")
    monkeypatch.setattr(bench, "bench_chapter", fakes["bench"])
    monkeypatch.setattr(bench, "bench_suite", fakes["suite"])
    monkeypatch.setattr(bench, "format_bench", lambda chapters, suite: "")
    return fakes


def expand_make(line: str, checkout: Path) -> list[str]:
    """The command lines `make TARGET` would run (make -n), as the README user's make would."""
    words = shlex.split(line)
    if words[0] != "make":
        return [line]
    printed = subprocess.run(["make", "-n", *words[1:]], cwd=checkout, capture_output=True, text=True, check=True)
    return [row for row in printed.stdout.splitlines() if "-m tools.course" in row]


def test_call_blocks_reach_the_library(checkout, monkeypatch):
    from tools.course.__main__ import main

    monkeypatch.chdir(checkout)
    monkeypatch.delenv("COURSE_PROJECT_ROOT", raising=False)
    fakes = recorders(monkeypatch)
    called = 0
    for _, lines in blocks_of("call"):
        for line in lines:
            for command in expand_make(line, checkout):
                args = course_args(command)
                assert args is not None, f"a call block runs a course command: {command}"
                before = sum(len(fake.calls) for fake in fakes.values())
                assert main(args) == 0, command
                assert sum(len(fake.calls) for fake in fakes.values()) > before, f"{command} reached no library call"
                called += 1
    assert called >= 3
    full = [kwargs.get("full") for _, kwargs in fakes["verify"].calls]
    assert True in full and False in full  # `make verify-full` asks for the full matrix, the chapter line does not


def test_gpu_blocks_parse_and_name_existing_files(checkout):
    from tools.course.__main__ import build_parser
    from tools.experiments.memory_strategy import baseline, stages

    module_parsers = {"tools.experiments.memory_strategy.baseline": baseline.build_parser,
                      "tools.experiments.memory_strategy.stages": stages.build_parser}

    for _, lines in blocks_of("gpu"):
        for line in lines:
            args = course_args(line)
            words = shlex.split(line)
            if args is not None:
                build_parser().parse_args(args)
            elif "-m" in words and words[words.index("-m") + 1] in module_parsers:
                module = words[words.index("-m") + 1]
                module_parsers[module]().parse_args(words[words.index(module) + 1:])
            else:
                assert line.startswith(KNOWN_SETUP), f"unknown GPU-runbook step: {line}"
                if words[0] == "bash":
                    assert (checkout / words[1]).is_file(), f"{line}: {words[1]} does not exist"
            for index, word in enumerate(words[:-1]):
                if word == "-r":
                    assert (checkout / words[index + 1]).is_file(), f"{line}: {words[index + 1]} does not exist"


def test_learner_make_targets_exist(checkout):
    targets = set()
    text = README.read_text(encoding="utf-8")
    for line in re.findall(r"^make (\w[\w-]*)", text, flags=re.M):
        targets.add(line)
    assert {"run", "test", "lab"} <= targets
    for target in sorted(targets):
        completed = subprocess.run(["make", "-n", target], cwd=checkout, capture_output=True, text=True)
        assert completed.returncode == 0, f"make {target}: {completed.stderr}"
