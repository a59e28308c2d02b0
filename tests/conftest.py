"""Fixtures shared by several test files.

`course_smoke_run` executes every implemented chapter once in cpu_smoke, in catalog order, with one
label and one results folder, as `make run` does (the lifecycle page writes the shared verl record
that the system page then reads). The chapter, shared-verl and chapter-76 tests read that one run
instead of executing the same notebooks again; they carry the xdist group `course_run`, so under
`pytest -n 2 --dist loadgroup` the run happens once, on one worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import implemented_chapters
from tools.course.runs.runner import ChapterRun, run_chapter

COURSE_LABEL = "pytest_course"


@dataclass
class CourseRun:
    label: str
    results: Path
    outputs: Path
    outcomes: dict[str, ChapterRun]


@pytest.fixture(scope="session")
def course_smoke_run(tmp_path_factory) -> CourseRun:
    base = tmp_path_factory.mktemp("course_run")
    results = base / "results"
    outcomes = {}
    for chapter in implemented_chapters(REPO_ROOT):
        outcomes[chapter.id] = run_chapter(REPO_ROOT, chapter, run_mode="cpu_smoke", label=COURSE_LABEL,
                                           results_dir=results, output_dir=base / "runs" / chapter.slug)
    return CourseRun(COURSE_LABEL, results, base / "runs", outcomes)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under `--dist loadgroup`, keep the tests that share a module-scoped fixture on one worker, so
    the fixture is built once; every other test is distributed on its own."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        fixtures = getattr(item, "_fixtureinfo", None)
        scopes = {definition.scope for definitions in (fixtures.name2fixturedefs.values() if fixtures else ())
                  for definition in definitions}
        if "module" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.fixture(scope="module")
def one_cpu_thread():
    """The tiny model's matrices are too small for several threads; on a busy machine they only wait."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def lab_models() -> dict[str, Path]:
    """`{"lab": folder, "lab-teacher": folder}`: the lab models, built once (about 1-2 minutes each on one
    core) and cached under build/lab_models by recipe hash, so a later session only checks them. Load one
    with `tools.models.loading.load_causal_lm(folder)` (a fresh copy per test that trains it)."""
    from tools.models.lab import build_lab_models

    return build_lab_models()
