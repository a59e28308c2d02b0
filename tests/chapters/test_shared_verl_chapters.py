"""PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM share one verl experiment record per run label.

Run headless in the designed order (the lifecycle page runs the experiment, the system page reads
it) with one label and one results folder: exactly one shared record is written, by the first
chapter; the second chapter's executed notebook says it read the record, and the record's bytes do
not change. In dry_run neither chapter writes anything (preflight only).
"""

import hashlib
from pathlib import Path

import nbformat
import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import load_catalog
from tools.course.runs.runner import run_chapter
from tools.verl_mechanism_closure import SCHEMA, read_summary

pytestmark = pytest.mark.integration

SHARED_FOLDER = "pt_verl_closure"
READ_LINE = "already exists: it is read, and the experiment is not run again"
RAN_LINE = "running the experiment once"


def chapter(chapter_id):
    return next(c for c in load_catalog(REPO_ROOT) if c.id == chapter_id)


def gpu_stage_text(outcome) -> str:
    """Everything the gpu-stage cells of a chapter's executed notebook printed."""
    path = Path(outcome.output_notebook)
    notebook = nbformat.read(str(path if path.is_absolute() else REPO_ROOT / path), as_version=4)
    return "".join(output.get("text", "") for cell in notebook.cells
                   if "gpu-stage" in cell.metadata.get("tags", [])
                   for output in cell.get("outputs", []) if output.get("output_type") == "stream")


def files_under(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.xdist_group("course_run")
def test_lifecycle_runs_the_shared_record_and_system_reads_it(course_smoke_run):
    results, label = course_smoke_run.results, course_smoke_run.label
    shared = results / SHARED_FOLDER / f"{label}.json"

    first = course_smoke_run.outcomes["PT-ROLLOUT-LIFECYCLE"]
    assert first.status == "passed", f"cell {first.failed_cell}: {first.error}"
    assert str(shared) in first.records_written
    first_text = gpu_stage_text(first)
    assert RAN_LINE in first_text and READ_LINE not in first_text
    digest = hashlib.sha256(shared.read_bytes()).hexdigest()
    assert f"sha256 {digest}" in first_text
    page_record = results / "pt-rollout-lifecycle" / f"pt-rollout-lifecycle_admission_recheck_{label}.json"
    assert page_record.is_file() and str(page_record) in first.records_written

    second = course_smoke_run.outcomes["PT-RL-SYSTEM"]
    assert second.status == "passed", f"cell {second.failed_cell}: {second.error}"
    assert not [path for path in second.records_written if f"/{SHARED_FOLDER}/" in path], second.records_written
    assert second.records_written == [str(results / "pt-rl-system" / f"pt-rl-system_ledger_{label}.json")]
    second_text = gpu_stage_text(second)
    assert READ_LINE in second_text and RAN_LINE not in second_text
    assert f"shared record (read): {shared}" in second_text
    assert hashlib.sha256(shared.read_bytes()).hexdigest() == digest, "the shared record must not change"
    assert sorted(p.name for p in (results / SHARED_FOLDER).glob("*.json")) == [shared.name]

    summary = read_summary(shared, "system")
    assert summary["schema_version"] == SCHEMA and summary["run_label"] == label
    assert summary["evidence_level"] == "cpu_smoke" and summary["status"] == "pass"
    assert "cpu_smoke" in second_text and "不是 GPU 结果" in second_text


def test_dry_run_writes_nothing(tmp_path):
    results, label = tmp_path / "results", "pytest_shared_verl_dry"
    defaults = [REPO_ROOT / "build" / "results" / SHARED_FOLDER, REPO_ROOT / "benchmarks" / "results" / SHARED_FOLDER]
    before = {folder: files_under(folder) for folder in defaults}
    for chapter_id in ("PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM"):
        outcome = run_chapter(REPO_ROOT, chapter(chapter_id), run_mode="dry_run", label=label, results_dir=results,
                              output_dir=tmp_path / chapter_id)
        assert outcome.status == "passed", f"{chapter_id} cell {outcome.failed_cell}: {outcome.error}"
        assert outcome.records_written == []
        text = gpu_stage_text(outcome)
        assert "preflight of the real_gpu plan" in text and "preflight of the cpu_smoke plan" in text
        assert "=> cpu_smoke: ready (exit 0)" in text
    assert not results.exists(), files_under(results)
    assert {folder: files_under(folder) for folder in defaults} == before


def test_existing_record_with_another_label_is_refused(tmp_path):
    """A file at the derived path that belongs to another label is an error, not silently read."""
    results, label = tmp_path / "results", "pytest_wrong_owner"
    shared = results / SHARED_FOLDER / f"{label}.json"
    shared.parent.mkdir(parents=True)
    shared.write_text(f'{{"schema_version": "{SCHEMA}", "run_label": "someone_else"}}\n', encoding="utf-8")
    outcome = run_chapter(REPO_ROOT, chapter("PT-ROLLOUT-LIFECYCLE"), run_mode="cpu_smoke", label=label,
                          results_dir=results, output_dir=tmp_path / "out")
    assert outcome.status == "failed"
    assert "UpstreamRecordError" in outcome.error and "someone_else" in outcome.error
    assert outcome.records_written == []
