"""Chapter 75 through the batch runner in cpu_smoke: it reads 76's decision of the same label (after 73 and 76
in the course run), and refuses to start, before any work, when that decision is missing."""

from __future__ import annotations

import json

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.core.records import sha256_file
from tools.course.runs.runner import run_chapter

SLUG = "75-memory-budget"
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]


def test_75_reads_76s_decision_of_the_course_run(course_smoke_run):
    outcome = course_smoke_run.outcomes["75"]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    record = json.loads((course_smoke_run.results / SLUG / f"{SLUG}_budget_{course_smoke_run.label}.json")
                        .read_text(encoding="utf-8"))
    close = course_smoke_run.results / record["sources"]["close"]["path"]
    assert record["sources"]["close"]["sha256"] == sha256_file(close)
    assert record["sources"]["close"]["path"].startswith("76-activation-memory-strategies/")
    assert record["decision"]["decision"] == "measure_on_gpu" and record["status"] == "ok"
    assert {entry["source"] for entry in record["mechanism"].values()} == {"reference"}
    assert record["consistency"]["disagreements"] == []


def test_a_missing_decision_stops_75_in_its_setup_cell(tmp_path):
    outcome = run_chapter(REPO_ROOT, find_chapter("75", REPO_ROOT), run_mode="cpu_smoke", label="pytest_no_76",
                          results_dir=tmp_path / "results", output_dir=tmp_path / "out")
    assert outcome.status == "failed" and "UpstreamRecordError" in (outcome.error or "") + str(outcome.failure)
    assert "--chapter 73 --chapter 76 --chapter 75" in str(outcome.failure)
    assert outcome.records_written == [] and not (tmp_path / "results" / SLUG).exists()
