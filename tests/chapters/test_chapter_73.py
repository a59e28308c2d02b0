"""Chapter 73 through the batch runner in cpu_smoke: its records, the baseline it hands to 76, the page's
framework checks and effect sentences; and (papermill) a learner's own, differently written function is the
one Step 5 runs."""

from __future__ import annotations

import json

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.runs.runner import run_chapter

SLUG = "73-training-performance"
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]


def _record(course_smoke_run, stage, slug=SLUG):
    return json.loads((course_smoke_run.results / slug / f"{slug}_{stage}_{course_smoke_run.label}.json")
                      .read_text(encoding="utf-8"))


def _printed(notebook_path) -> str:
    notebook = json.loads(notebook_path.read_text(encoding="utf-8"))
    return "\n".join("".join(output.get("text", "")) for cell in notebook["cells"] if cell["cell_type"] == "code"
                     for output in cell.get("outputs", []))


def test_the_course_run_writes_73s_records_with_the_reference(course_smoke_run):
    outcome = course_smoke_run.outcomes["73"]
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    for stage in ("audit", "measurement", "training_baseline"):
        record = _record(course_smoke_run, stage)
        assert record["evidence_level"] == "cpu_smoke" and record["chapter"] == "73"
        assert {entry["source"] for entry in record["mechanism"].values()} == {"reference"}, stage
    manifest = _record(course_smoke_run, "input_manifest", "76-activation-memory-strategies")
    assert manifest["source_artifacts"]["training_baseline"]["path"].startswith(f"{SLUG}/")


def test_the_page_shows_the_checks_and_the_effects(course_smoke_run):
    printed = _printed(REPO_ROOT / course_smoke_run.outcomes["73"].output_notebook)  # an absolute path stays one
    assert printed.count("agree: True") == 3
    assert "审计结论：在全部 3 个模拟设备上" in printed and "吞吐被高估" in printed and "倍" in printed
    assert "Step 5 runs: phase_peaks (reference), step_time_report (reference), time_steps (reference)" in printed


LEARNER_TIME_STEPS = '''def time_steps(device, warmup, repeats):
    """A learner's version: the same contract, written with while loops and one helper."""
    for count, least in ((warmup, 0), (repeats, 1)):
        if type(count) is not int or count < least:
            raise ValueError("counts must be ints in range")

    def timed_once():
        device.synchronize()
        begin = device.clock()
        device.step()
        device.synchronize()
        return device.clock() - begin

    done = 0
    while done < warmup:
        device.step()
        done += 1
    return [timed_once() for _ in range(repeats)]'''


@pytest.mark.slow
def test_a_learners_own_time_steps_is_the_one_step5_runs(tmp_path):
    """A copy of the notebook whose TODO 1 cell holds a correct learner implementation (not the reference's
    text), executed in cpu_smoke: every 73 record says time_steps came from the learner, the rest from the
    reference, and the audit still reads the truth."""
    chapter = find_chapter("73", REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    cell = next(c for c in notebook.cells if c.metadata.get("course", {}).get("exercise") == "time_steps")
    cell.source = LEARNER_TIME_STEPS
    root = tmp_path / "copy"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / f"{SLUG}.ipynb").write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    results = tmp_path / "results"
    outcome = run_chapter(root, chapter, run_mode="cpu_smoke", label="pytest_learner_73", results_dir=results,
                          output_dir=tmp_path / "out")
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    for stage in ("audit", "measurement", "training_baseline"):
        record = json.loads((results / SLUG / f"{SLUG}_{stage}_pytest_learner_73.json").read_text(encoding="utf-8"))
        assert record["mechanism"]["time_steps"]["source"] == "learner", stage
        assert record["mechanism"]["step_time_report"]["source"] == "reference", stage
    audit = json.loads((results / SLUG / f"{SLUG}_audit_pytest_learner_73.json").read_text(encoding="utf-8"))
    assert audit["status"] == "reads_the_truth"
