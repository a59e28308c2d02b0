"""Chapter 76 through the batch runner in cpu_smoke: four stages, their records, and an idempotent rerun.

The course run's execution (RUN_STAGE auto on a fresh label) writes the 73 baseline, the input manifest,
G0, G1 and the decision, each in its chapter's folder under the results root (`open_chapter` names them);
the checks read those records. A second execution with the same label and RUN_STAGE=all must change
nothing; the default RUN_STAGE (auto) must refuse the used label before any work. The same stages run
without papermill in tests/experiments/memory_strategy/test_memory_strategy_stages.py.
"""

import json
import math
import shutil

import pytest

from chapter_factory import REPO_ROOT
from conftest import COURSE_LABEL
from tools.core.catalog import find_chapter
from tools.course.runs.runner import run_chapter
from tools.core.records import sha256_file

LABEL = COURSE_LABEL
STRATEGIES = ("baseline", "checkpoint", "offload", "hybrid")
SLUG = "76-activation-memory-strategies"
BASELINE_SLUG = "73-training-performance"


def _name(stage, slug=SLUG):
    return f"{slug}/{slug}_{stage}_{LABEL}.json"


def _snapshot(folder):
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("course_run")]


@pytest.fixture(scope="module")
def staged_run(course_smoke_run, tmp_path_factory):
    """The course run's chapter 76 (RUN_STAGE auto on a fresh label runs every stage); then, on a copy
    of its records, the same label again with RUN_STAGE=all and once more with the default stage."""
    chapter = find_chapter("76", REPO_ROOT)
    base = tmp_path_factory.mktemp("ch76")
    results = base / "results"
    results.mkdir()
    for slug in (SLUG, BASELINE_SLUG):
        shutil.copytree(course_smoke_run.results / slug, results / slug)
    first = course_smoke_run.outcomes["76"]
    assert first.status == "passed", f"cell {first.failed_cell}: {first.error}"
    before = _snapshot(results)
    second = run_chapter(REPO_ROOT, chapter, run_mode="cpu_smoke", label=LABEL, results_dir=results,
                         output_dir=base / "second", extra_parameters={"RUN_STAGE": "all"})
    after_second = _snapshot(results)
    fresh = run_chapter(REPO_ROOT, chapter, run_mode="cpu_smoke", label=LABEL, results_dir=results,
                        output_dir=base / "auto")
    records = {stage: json.loads((results / _name(stage)).read_text(encoding="utf-8")) for stage in ("g0", "g1", "close")}
    return {"results": results, "first": first, "second": second, "fresh": fresh, "before": before,
            "after_second": after_second, "after_fresh": _snapshot(results), "records": records}


def test_all_stages_write_the_five_records(staged_run):
    """76's folder holds its manifest, G0, G1 and decision; 73's folder the baseline 76 read (beside 73's own
    audit and measurement records, which chapter 73 writes before 76 in the course run)."""
    names = sorted(staged_run["before"])
    assert [name for name in names if name.startswith(f"{SLUG}/")] == sorted(
        [_name("input_manifest"), _name("g0"), _name("g1"), _name("close")])
    assert _name("training_baseline", BASELINE_SLUG) in names
    assert {name for name in names if name.startswith(f"{BASELINE_SLUG}/")} <= {
        _name(stage, BASELINE_SLUG) for stage in ("training_baseline", "audit", "measurement")}
    for payload in staged_run["before"].values():  # every record of both folders is a cpu_smoke record
        record = json.loads(payload)
        assert record["evidence_level"] == "cpu_smoke" and record["run_mode"] == "cpu_smoke"


def test_four_strategies_give_equal_loss(staged_run):
    candidates = {c["name"]: c for c in staged_run["records"]["g0"]["candidates"]}
    assert set(candidates) == set(STRATEGIES)
    for name in STRATEGIES:
        assert candidates[name]["status"] == "ok" and candidates[name]["successful_runs"] == 3
        for key in ("loss", "eval_loss"):
            assert math.isclose(candidates[name][key], candidates["baseline"][key], rel_tol=1e-6), (name, key)


def test_saved_bytes_follow_each_strategy_path(staged_run):
    saved = staged_run["records"]["g0"]["saved_bytes"]
    baseline, checkpoint, offload, hybrid = (saved[name] for name in STRATEGIES)
    assert baseline["device_saved_bytes"] > 0 and baseline["host_offloaded_bytes"] == 0
    assert 0 < checkpoint["device_saved_bytes"] < baseline["device_saved_bytes"]
    assert checkpoint["host_offloaded_bytes"] == 0 and checkpoint["recomputed_layer_calls"] > 0
    assert offload["device_saved_bytes"] == 0 < offload["host_offloaded_bytes"]
    assert offload["recomputed_layer_calls"] == 0
    assert hybrid["device_saved_bytes"] == 0 < hybrid["host_offloaded_bytes"] < offload["host_offloaded_bytes"]
    assert hybrid["recomputed_layer_calls"] > 0
    for name in ("baseline", "checkpoint", "hybrid"):
        ratio = saved[name]["host_ratio"] if name == "hybrid" else saved[name]["device_ratio"]
        assert ratio is not None and 0.98 <= ratio <= 1.02, (name, ratio)


def test_every_path_is_verified_from_evidence(staged_run):
    g0, g1 = staged_run["records"]["g0"], staged_run["records"]["g1"]
    groups = [g0["candidates"]] + [length["candidates"] for length in g1["length_records"]]
    assert [length["seq_len"] for length in g1["length_records"]] == [64, 96]
    for candidates in groups:
        for candidate in candidates:
            assert candidate["execution_path_verified"] is True, candidate["name"]
            for run in candidate["runs"]:
                assert run["execution_path"]["execution_path_verified"] is True
                assert run["execution_path"]["reasons"] == []


def test_decision_is_scoped_honest_and_bound_by_sha256(staged_run):
    results, decision = staged_run["results"], staged_run["records"]["close"]
    assert decision["source_g0"]["path"] == _name("g0")  # relative to the results root
    assert decision["source_g0"]["sha256"] == sha256_file(results / _name("g0"))
    assert decision["source_g1"]["sha256"] == sha256_file(results / _name("g1"))
    assert decision["source_input_manifest"]["sha256"] == sha256_file(results / _name("input_manifest"))
    assert staged_run["records"]["g1"]["source_g0"]["sha256"] == decision["source_g0"]["sha256"]
    scopes = decision["decision_scopes"]
    assert scopes["full_training_adoption"]["decision"] == "tune"  # no device memory on a CPU
    assert scopes["activation_memory_mechanism"]["decision"] == "measure"
    assert scopes["activation_memory_mechanism"]["promotable_to_full_training"] is False
    assert decision["handoff"]["ready"] is False  # no device memory measured: nothing to hand to 75
    assert decision["handoff"]["gate"]["status"] == "no_valid_candidate"
    assert decision["handoff"]["offload_copy"]["copy"] == "synchronous"
    assert decision["saved_bytes"] == staged_run["records"]["g0"]["saved_bytes"]


def test_same_label_rerun_changes_nothing(staged_run):
    second = staged_run["second"]
    assert second.status == "passed", f"cell {second.failed_cell}: {second.error}"
    assert second.records_written == []
    assert staged_run["after_second"] == staged_run["before"]


def test_default_stage_refuses_a_used_label(staged_run):
    fresh = staged_run["fresh"]
    assert fresh.status == "failed" and "RecordExistsError" in fresh.error
    assert staged_run["after_fresh"] == staged_run["before"]
