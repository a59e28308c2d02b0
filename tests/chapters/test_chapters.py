"""Every implemented chapter executes headless with papermill in dry_run and cpu_smoke."""

import json
import re
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import implemented_chapters
from tools.course.runs.runner import run_chapter

pytestmark = pytest.mark.integration

CHAPTERS = implemented_chapters(REPO_ROOT)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[chapter.id for chapter in CHAPTERS])
def test_chapter_runs_in_dry_run_and_writes_nothing(chapter, tmp_path):
    outcome = run_chapter(REPO_ROOT, chapter, run_mode="dry_run", label="pytest_dry", results_dir=None,
                          output_dir=tmp_path)
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    assert outcome.records_written == []


@pytest.mark.xdist_group("course_run")
@pytest.mark.parametrize("chapter", CHAPTERS, ids=[chapter.id for chapter in CHAPTERS])
def test_chapter_runs_in_cpu_smoke_and_records_say_so(chapter, course_smoke_run, tmp_path):
    outcome = course_smoke_run.outcomes[chapter.id]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    for path in outcome.records_written:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if "evidence_level" in record:
            assert record["evidence_level"] == "cpu_smoke" and record["run_mode"] == "cpu_smoke", path
    rerun = run_chapter(REPO_ROOT, chapter, run_mode="cpu_smoke", label=course_smoke_run.label,
                        results_dir=course_smoke_run.results, output_dir=tmp_path / "again")
    if outcome.records_written:
        assert rerun.status == "failed", "a reused label must be refused"
        assert rerun.records_written == []


# A POSIX path ("/home/...", "//host/share") or a Windows one ("C:\\...", "\\\\host"); a bare operator such as "//" is not.
_MACHINE_PATH = re.compile(r"^(/{1,2}[\w.~-]|[A-Za-z]:[\\/]|\\\\)")


def _absolute_paths(value, where=""):
    if isinstance(value, dict):
        return [found for key, item in value.items() for found in _absolute_paths(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in _absolute_paths(item, f"{where}[{index}]")]
    return [f"{where} = {value}"] if isinstance(value, str) and _MACHINE_PATH.match(value) else []


@pytest.mark.xdist_group("course_run")
def test_no_record_carries_a_machine_path(course_smoke_run):
    """Records are committed from cloud GPUs: paths in them are relative to the results root, or names."""
    records = sorted(course_smoke_run.results.rglob("*.json"))
    assert len(records) >= len(CHAPTERS)
    found = {path.name: _absolute_paths(json.loads(path.read_text(encoding="utf-8"))) for path in records}
    assert not {name: paths for name, paths in found.items() if paths}
