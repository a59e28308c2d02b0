"""Chapter 73's baseline and 76's stages through the experiment contract: the same five records as the
stage command writes, each kept by the run's RecordSink; plans the chapter cannot run are refused
before any work; G1's length ladder stops at the run's time limit and says so."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from tools.errors import ConfigError
from tools.experiments.contract import Limits, Plan, RecordSink, run
from tools.experiments.memory_strategy import judge, stages

LABEL = "pytest_contract_76"
SLUG = "76-activation-memory-strategies"


def _plan(folder, **changes) -> Plan:
    return Plan(**{"experiment": "memory_strategy", "chapter": "76", "run_mode": "cpu_smoke", "label": LABEL,
                   "results_dir": folder, "stage": "all", **changes})


@pytest.fixture(scope="module")
def contract_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("contract76") / "results"
    return folder, run(_plan(folder))


def test_all_stages_through_the_contract_keep_five_records_in_the_sink(contract_run):
    folder, records = contract_run
    assert [(ref.stage, ref.action) for ref in records] == [
        ("training_baseline", "written"), ("input_manifest", "written"), ("g0", "written"), ("g1", "written"),
        ("close", "written")]
    assert sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*.json")) == sorted(
        ref.path.relative_to(folder).as_posix() for ref in records)
    assert [ref.status for ref in records] == ["ok", None, "complete", "completed", "tune"]


@pytest.mark.slow
def test_the_contract_writes_the_records_the_stage_command_writes(contract_run, tmp_path):
    folder, records = contract_run
    label = "pytest_contract_cli"
    assert stages.main(["--run-mode", "cpu_smoke", "--label", label, "--stage", "all",
                        "--results-dir", str(tmp_path)]) == stages.EXIT_OK
    for ref in records:
        other = tmp_path / ref.path.relative_to(folder).as_posix().replace(LABEL, label)
        ours, theirs = ref.load(), json.loads(other.read_text(encoding="utf-8"))
        assert list(ours) == list(theirs), ref.stage
        assert ours["schema_version"] == theirs["schema_version"] and ours["chapter"] == theirs["chapter"]
    g1 = records[3].load()
    assert g1["time_admission"] == {"budget_s": None, "checks": [],
                                    "projection": "previous length's wall time, linear in seq_len"}


def test_a_rerun_through_the_contract_reads_every_record_back(contract_run):
    folder, records = contract_run
    again = run(_plan(folder, stage="all"))
    assert [(ref.stage, ref.action) for ref in again] == [("g0", "existing"), ("g1", "existing"),
                                                           ("close", "existing")]
    assert [ref.sha256 for ref in again] == [ref.sha256 for ref in records[2:]]


@pytest.mark.parametrize("changes, message", [
    ({"variants": ("checkpoint",)}, "keep 'baseline'"),
    ({"seeds": (7,)}, "takes no --seed"),
    ({"model": "Qwen/Qwen2.5-0.5B-Instruct"}, "measures tiny on cpu"),
    ({"stage": "g2"}, "unknown stage 'g2'"),
    ({"chapter": "73"}, "serves chapters 76"),
])
def test_plans_the_chapter_cannot_run_are_refused_before_any_work(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        run(_plan(tmp_path, label="pytest_refused_76", **changes))
    assert list(tmp_path.iterdir()) == []


def test_the_baseline_experiment_writes_through_the_sink(tmp_path):
    sink = RecordSink(run_mode="cpu_smoke", run_label="pytest_baseline_sink", results_root=tmp_path, chapter_id="73",
                      slug="73-training-performance")
    records = run(Plan(experiment="training_baseline", chapter="73", run_mode="cpu_smoke",
                       label="pytest_baseline_sink", results_dir=tmp_path), sink)
    assert [ref.stage for ref in records] == ["training_baseline", "input_manifest"] and records == sink.records
    manifest = records[1].load(schema_version="memory-strategy-input-manifest/v1")
    assert manifest["source_artifacts"]["training_baseline"]["sha256"] == records[0].sha256
    assert records[0].load()["environment"]["python"]  # the baseline keeps its field name
    other = RecordSink(run_mode="cpu_smoke", run_label="pytest_baseline_sink", results_root=tmp_path / "x",
                       chapter_id="73")
    with pytest.raises(ConfigError, match="the record sink writes under"):
        from tools.experiments.memory_strategy.baseline import run_training_baseline

        run_training_baseline(run_mode="cpu_smoke", label="pytest_other_v1", results_dir=tmp_path, sink=other)


@pytest.mark.parametrize("elapsed, budget, status", [(10.0, 100.0, "admitted"), (75.0, 100.0, "blocked"),
                                                     (70.0, None, "not_limited")])
def test_time_admission_projects_the_next_length_from_the_previous_wall_time(elapsed, budget, status):
    check = judge.admit_by_time(previous_seq_len=64, previous_seconds=20.0, next_seq_len=96, elapsed_s=elapsed,
                                budget_s=budget)
    assert check["status"] == status
    assert check["projected_s"] == (None if budget is None else pytest.approx(30.0))


def test_g1_stops_at_the_time_limit_and_close_says_so(contract_run, tmp_path, monkeypatch):
    """A ladder whose next length is projected past the run's deadline is not started; the G1 record
    says so, keeps the lengths it measured, and close lists the limitation (fake candidates)."""
    folder = tmp_path / "results"
    shutil.copytree(contract_run[0], folder)
    for stage in ("g1", "close"):
        (folder / SLUG / f"{SLUG}_{stage}_{LABEL}.json").unlink()

    def slow_candidates(plan, workload, models, log=None):
        time.sleep(0.3)
        return [{"name": name, "status": "ok", "successful_runs": 3, "execution_path_verified": True,
                 "peak_memory_mb": None, "peak_reserved_mb": None, "samples_per_s": 5.0, "step_time_ms": 200.0,
                 "eval_loss": 6.0, "runs": []} for name in plan.strategies]

    monkeypatch.setattr(stages, "run_strategy_set", slow_candidates)
    monkeypatch.setattr(stages, "TIME_MARGIN_S", 0.0)
    records = run(_plan(folder, stage="g1", limits=Limits(time_s=0.35)))
    g1 = records[-1].load()
    assert g1["status"] == "completed_with_time_boundary"
    assert [length["seq_len"] for length in g1["length_records"]] == [64]
    check = g1["time_admission"]["checks"][0]
    assert check["status"] == "blocked" and check["seq_len"] == 96 and check["projected_s"] > 0.3
    close = run(_plan(folder, stage="close"))[-1].load()
    assert "length_ladder_stopped_at_the_time_limit" in close["decision_scopes"]["activation_memory_mechanism"][
        "limitations"]
