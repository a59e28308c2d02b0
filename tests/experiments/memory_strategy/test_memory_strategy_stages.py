"""Tests of tools.experiments.memory_strategy.stages without papermill: the plan, the four stages through the
command line in cpu_smoke, write-once reruns, refusals before any work, and the G1 ladder's admission with
fake device memory."""

import json
import shutil
import subprocess
import sys

import pytest

from chapter_factory import REPO_ROOT
from tools.chapters.context import ChapterContext
from tools.core.records import sha256_file
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.memory_strategy import stages

LABEL = "pytest_stages_v1"
SLUG = "76-activation-memory-strategies"


def _snapshot(folder):
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*.json"))}


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stages") / "results"
    code = stages.main(["--run-mode", "cpu_smoke", "--label", LABEL, "--stage", "all", "--results-dir", str(folder)])
    records = {stage: json.loads((folder / SLUG / f"{SLUG}_{stage}_{LABEL}.json").read_text(encoding="utf-8"))
               for stage in stages.RECORD_STAGES}
    return {"code": code, "folder": folder, "records": records, "before": _snapshot(folder)}


def _plan(folder, label=LABEL, stage="all", run_mode="cpu_smoke"):
    return stages.plan_stages(stages.stage_records(run_mode, label, folder), stage=stage)


def test_all_stages_write_five_records_in_the_chapter_folders(cli_run):
    assert cli_run["code"] == stages.EXIT_OK
    assert sorted(cli_run["before"]) == sorted([
        f"73-training-performance/73-training-performance_training_baseline_{LABEL}.json",
        f"{SLUG}/{SLUG}_input_manifest_{LABEL}.json", f"{SLUG}/{SLUG}_g0_{LABEL}.json",
        f"{SLUG}/{SLUG}_g1_{LABEL}.json", f"{SLUG}/{SLUG}_close_{LABEL}.json"])
    for payload in cli_run["before"].values():
        record = json.loads(payload)
        assert record["run_mode"] == "cpu_smoke" and record["evidence_level"] == "cpu_smoke"


def test_records_bind_their_sources_by_relative_path_and_sha256(cli_run):
    folder, records = cli_run["folder"], cli_run["records"]
    g0_name = f"{SLUG}/{SLUG}_g0_{LABEL}.json"
    assert records["g1"]["source_g0"] == {"path": g0_name, "sha256": sha256_file(folder / g0_name)}
    assert records["close"]["source_g0"]["sha256"] == sha256_file(folder / g0_name)
    assert records["g0"]["source_baseline"]["path"].startswith("73-training-performance/")
    assert records["g0"]["runtime"]["python"] and records["close"]["schema_version"] == stages.DECISION_SCHEMA


def test_cpu_records_state_the_copy_method_and_never_hand_off(cli_run):
    g0, close = cli_run["records"]["g0"], cli_run["records"]["close"]
    assert g0["config"]["offload_copy"]["copy"] == "synchronous"
    assert g0["config"]["offload_copy"]["host_memory"] == "pageable" and g0["config"]["pin_memory"] is False
    assert g0["config"]["weights"] == "random_init" and g0["budget"]["cuda_context_margin_mb"] == 1024.0
    handoff = close["handoff"]
    assert handoff["consumer"] == "75_memory_budget_compression"
    assert handoff["gate"]["status"] == "no_valid_candidate" and handoff["ready"] is False
    assert "synchronous copy into pageable host memory" in handoff["throughput_note"]
    assert close["decision"]["decision"] == "tune" and close["decision"]["reason"] == "device_memory_not_measured"


def test_every_stage_rerun_changes_nothing(cli_run):
    results = stages.run_stages(_plan(cli_run["folder"]))
    assert [(item.stage, item.status) for item in results] == [
        ("prepare", "read_only"), ("g0", "already_complete"), ("g1", "already_complete"),
        ("close", "already_complete")]
    assert _snapshot(cli_run["folder"]) == cli_run["before"]


def test_auto_refuses_a_used_label_before_any_work(cli_run, capsys):
    code = stages.main(["--run-mode", "cpu_smoke", "--label", LABEL, "--stage", "auto",
                        "--results-dir", str(cli_run["folder"])])
    assert code == stages.EXIT_CONFIG and "was used before" in capsys.readouterr().err
    assert _snapshot(cli_run["folder"]) == cli_run["before"]


def test_a_changed_g0_is_refused_by_the_later_stages(cli_run, tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(cli_run["folder"], folder)
    (folder / SLUG / f"{SLUG}_close_{LABEL}.json").unlink()
    g0_path = folder / SLUG / f"{SLUG}_g0_{LABEL}.json"
    g0_path.write_text(g0_path.read_text(encoding="utf-8") + " ", encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="changed after G1"):
        stages.run_g1(_plan(folder, stage="g1"))
    with pytest.raises(UpstreamRecordError, match="another G0"):
        stages.run_close(_plan(folder, stage="close"))


@pytest.mark.parametrize("run_mode, stage, source, message", [
    ("real_gpu", "auto", "local", "one at a time"),
    ("cpu_smoke", "g2", "local", "unknown RUN_STAGE"),
    ("cpu_smoke", "g0", "hub", "unknown MODEL_SOURCE"),
])
def test_bad_stage_parameters_are_refused_before_any_work(tmp_path, run_mode, stage, source, message):
    with pytest.raises(ConfigError, match=message):
        stages.plan_stages(stages.stage_records(run_mode, "fresh_label", tmp_path), stage=stage, model_source=source)
    assert list(tmp_path.iterdir()) == []


def test_g1_needs_the_g0_of_its_label(tmp_path):
    with pytest.raises(UpstreamRecordError, match="run the g0 stage first"):
        stages.run_g1(_plan(tmp_path, label="no_g0_yet", stage="g1"))
    with pytest.raises(UpstreamRecordError, match="close needs the G0"):
        stages.run_close(_plan(tmp_path, label="no_g0_yet", stage="close"))


def test_real_gpu_g0_without_a_manifest_names_the_baseline_command(tmp_path, monkeypatch):
    plan = stages.plan_stages(stages.stage_records("real_gpu", "h200_v1", tmp_path), stage="g0",
                              model_source="random_init")
    monkeypatch.setattr(stages, "_require_device", lambda plan: None)
    with pytest.raises(UpstreamRecordError, match="memory_strategy.baseline --run-mode real_gpu --label h200_v1"):
        stages.run_g0(plan, models=object())
    assert "--model-source random_init" in plan.baseline_command()
    assert plan.expected_workload()["weights"] == "random_init"


def test_dry_run_plans_the_real_experiment_and_touches_nothing(tmp_path):
    plan = stages.plan_stages(stages.stage_records("dry_run", "replace_with_unique_label"), stage="auto")
    assert plan.stages == ("prepare",) and plan.model_id == "Qwen/Qwen2.5-0.5B-Instruct" and plan.device == "cuda"
    assert plan.ladder == (1024, 1280, 1536, 1792) and plan.g0_workload.seq_len == 768
    everything = stages.plan_stages(stages.stage_records("dry_run", "x_label"), stage="all")
    results = stages.run_stages(everything)
    assert [item.status for item in results] == ["planned"] * 4
    assert stages.models_for(everything) is None and stages.read_if_present(everything, "g0") is None
    assert "dry_run: nothing is read or written" in plan.describe()


def test_stage_records_name_and_write_records_as_the_chapter_context(tmp_path):
    context = ChapterContext("76", "cpu_smoke", "same_label", SLUG, tmp_path, REPO_ROOT, ())
    sink = stages.stage_records("cpu_smoke", "same_label", tmp_path)
    for stage in stages.RECORD_STAGES:
        assert sink.record_path(stage) == context.record_path(stage)
    path_a, _ = context.save_record("g0", {"value": 1}, schema_version=stages.RUN_SCHEMA)
    record_a = json.loads(path_a.read_text(encoding="utf-8"))
    path_b, _ = stages.StageRecords("cpu_smoke", "other_label", tmp_path).save_record(
        "g0", {"value": 1}, schema_version=stages.RUN_SCHEMA)
    record_b = json.loads(path_b.read_text(encoding="utf-8"))
    assert list(record_a) == list(record_b)
    with pytest.raises(RecordExistsError):
        sink.save_record("g0", {})  # the context wrote this label's g0: the sink sees the same file


def test_g1_admission_uses_the_reserved_peak_with_fake_device_memory(cli_run, tmp_path, monkeypatch):
    """The ladder stops before a length whose projected reserved peak exceeds the free memory minus the margin,
    and records the stop as a safety boundary (fake candidates and a fake 24 GiB device; no model runs)."""
    from tools.measure import training

    folder = tmp_path / "results"
    shutil.copytree(cli_run["folder"], folder)
    for stage in ("g1", "close"):
        (folder / SLUG / f"{SLUG}_{stage}_{LABEL}.json").unlink()

    def fake_candidates(plan, workload, models, log=None):
        scale = workload.seq_len / 64
        return [{"name": name, "status": "ok", "successful_runs": 3, "execution_path_verified": True,
                 "peak_memory_mb": 4000.0 * scale, "peak_reserved_mb": 9000.0 * scale, "samples_per_s": 5.0,
                 "step_time_ms": 200.0, "eval_loss": 6.0, "runs": []} for name in plan.strategies]

    monkeypatch.setattr(stages, "run_strategy_set", fake_candidates)
    monkeypatch.setattr(stages, "_require_device", lambda plan: None)
    monkeypatch.setattr(training, "device_memory_mb", lambda torch_module, device: {"free_mb": 20000.0,
                                                                                     "total_mb": 24576.0})
    result = stages.run_g1(_plan(folder, stage="g1"), models=object())
    record = result.record
    check = record["admission"]["checks"][0]
    # projected reserved 9000 x 96/64 = 13500 <= 20000 - max(2048, 0.15 x 24576) = 16313.6: admitted
    assert check["projected_peak_reserved_mb"] == pytest.approx(13500.0) and check["status"] == "admitted"
    assert record["status"] == "completed"
    monkeypatch.setattr(training, "device_memory_mb", lambda torch_module, device: {"free_mb": 15000.0,
                                                                                     "total_mb": 24576.0})
    (folder / SLUG / f"{SLUG}_g1_{LABEL}.json").unlink()
    blocked = stages.run_g1(_plan(folder, stage="g1"), models=object()).record
    # blocked when 13500 > 15000 - 3686.4, although the allocated peak (4000 x 1.5 = 6000) would have fitted
    assert blocked["admission"]["checks"][0]["status"] == "blocked"
    assert blocked["status"] == "completed_with_safety_boundary"
    assert [length["seq_len"] for length in blocked["length_records"]] == [64]


def test_cli_passes_its_arguments(monkeypatch, capsys):
    seen = {}

    def fake_plan(records, *, stage, model_source):
        seen.update(run_mode=records.run_mode, label=records.run_label, root=records.results_root, stage=stage,
                    source=model_source)
        raise RecordExistsError("label used")

    monkeypatch.setattr(stages, "plan_stages", fake_plan)
    code = stages.main(["--run-mode", "real_gpu", "--label", "h200_v2", "--stage", "g0", "--model-source",
                        "random_init", "--results-dir", "/tmp/elsewhere"])
    assert code == stages.EXIT_CONFIG and "ERROR: label used" in capsys.readouterr().err
    assert seen == {"run_mode": "real_gpu", "label": "h200_v2", "root": stages.Path("/tmp/elsewhere"),
                    "stage": "g0", "source": "random_init"}


@pytest.mark.slow
def test_the_module_runs_as_a_command():
    completed = subprocess.run([sys.executable, "-m", "tools.experiments.memory_strategy.stages", "--run-mode",
                                "dry_run", "--label", "any_label", "--stage", "all"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)  # a hang guard
    assert completed.returncode == 0, completed.stderr
    assert "g0 (dry_run): would train Qwen/Qwen2.5-0.5B-Instruct" in completed.stdout
    assert "close: planned" in completed.stdout
