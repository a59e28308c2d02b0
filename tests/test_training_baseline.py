"""Tests of tools.training_baseline: the 73 baseline record, the 76 input manifest and its checks."""

import json
import shutil

import pytest

from tools import training_baseline as tb
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.core.records import sha256_file

LABEL = "pytest_baseline_v1"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    result = tb.run_training_baseline(run_mode="cpu_smoke", label=LABEL, results_dir=folder)
    return folder, result


@pytest.fixture
def copy_of(written, tmp_path):
    """A private copy of the written records that a test may tamper with."""
    folder, result = written
    for path in (result["baseline_path"], result["manifest_path"]):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path, tmp_path / result["baseline_path"].name, tmp_path / result["manifest_path"].name


def test_cpu_smoke_baseline_record_carries_the_actual_workload(written):
    folder, result = written
    assert result["status"] == "ok"
    assert result["baseline_path"] == folder / tb.baseline_file_name("cpu_smoke", LABEL)
    record = json.loads(result["baseline_path"].read_text(encoding="utf-8"))
    assert record["schema_version"] == tb.BASELINE_SCHEMA_VERSION
    assert record["evidence_level"] == "cpu_smoke" and record["chapter"] == "73"
    config = record["config"]
    assert (config["model_id"], config["batch_size"], config["seq_len"], config["warmup"], config["iters"],
            config["seed"], config["optimizer"], config["dtype"]) == ("tiny", 1, 64, 2, 5, 42, "AdamW", "float32")
    measurement = record["measurement"]
    assert measurement["status"] == "ok" and measurement["execution_path_verified"] is True
    assert measurement["peak_memory_mb"] is None  # a CPU run never claims device memory
    assert measurement["saved_tensors"]["last_step"]["device_saved_bytes"] > 0


def test_manifest_points_to_the_baseline_by_sha256(written):
    _, result = written
    manifest = json.loads(result["manifest_path"].read_text(encoding="utf-8"))
    assert manifest["schema_version"] == tb.MANIFEST_SCHEMA_VERSION
    entry = manifest["source_artifacts"]["training_baseline"]
    assert entry["path"] == result["baseline_path"].name
    assert entry["sha256"] == sha256_file(result["baseline_path"]) == result["baseline_sha256"]
    assert result["manifest_sha256"] == sha256_file(result["manifest_path"])


def test_load_input_manifest_accepts_the_matching_workload(written):
    _, result = written
    loaded = tb.load_input_manifest(result["manifest_path"], tb.expected_workload("cpu_smoke"))
    assert loaded["baseline_sha256"] == result["baseline_sha256"]
    assert loaded["baseline"]["config"]["seq_len"] == 64


def test_a_changed_baseline_is_refused_by_sha256(copy_of):
    _, baseline, manifest = copy_of
    record = json.loads(baseline.read_text(encoding="utf-8"))
    record["measurement"]["step_time_ms"] = 1.0
    baseline.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="sha256"):
        tb.load_input_manifest(manifest, tb.expected_workload("cpu_smoke"))


def test_a_workload_mismatch_is_refused_and_named(written):
    _, result = written
    with pytest.raises(UpstreamRecordError, match="seq_len"):
        tb.load_input_manifest(result["manifest_path"], tb.expected_workload("real_gpu", model_id="tiny"))


def test_a_missing_baseline_or_manifest_is_a_clear_error(copy_of):
    folder, baseline, manifest = copy_of
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        tb.load_input_manifest(folder / "76_absent.json", tb.expected_workload("cpu_smoke"))
    baseline.unlink()
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        tb.load_input_manifest(manifest, tb.expected_workload("cpu_smoke"))


def test_the_same_label_is_refused_before_any_work_and_nothing_changes(written, monkeypatch):
    folder, result = written
    before = {path: sha256_file(path) for path in folder.iterdir()}

    def must_not_run(*args, **kwargs):
        raise AssertionError("the workload ran although the records exist")

    monkeypatch.setattr(tb, "run_memory_strategy", must_not_run)
    with pytest.raises(RecordExistsError, match="write-once"):
        tb.run_training_baseline(run_mode="cpu_smoke", label=LABEL, results_dir=folder)
    assert {path: sha256_file(path) for path in folder.iterdir()} == before


@pytest.mark.parametrize("kwargs, message", [
    ({"run_mode": "dry_run"}, "cpu_smoke or real_gpu"),
    ({"run_mode": "gpu"}, "RUN_MODE"),
    ({"label": "replace_with_unique_label"}, "placeholder"),
    ({"model_id": "Qwen/Qwen2.5-0.5B-Instruct"}, "tiny model only"),
    ({"model_id": "gpt2"}, "unknown model"),
    ({"weights": "hub"}, "unknown weights"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, kwargs, message):
    arguments = {"run_mode": "cpu_smoke", "label": "fresh_label", "results_dir": tmp_path, **kwargs}
    with pytest.raises(ConfigError, match=message):
        tb.run_training_baseline(**arguments)
    assert list(tmp_path.iterdir()) == []


def test_cli_passes_its_arguments_and_reports_errors_as_exit_codes(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        raise RecordExistsError("record x already exists")

    monkeypatch.setattr(tb, "run_training_baseline", fake_run)
    code = tb.main(["--run-mode", "real_gpu", "--label", "cli_label", "--results-dir", str(tmp_path),
                    "--weights", "random_init"])
    assert code == tb.EXIT_CONFIG and "ERROR: record x already exists" in capsys.readouterr().err
    assert seen == {"run_mode": "real_gpu", "label": "cli_label", "results_dir": str(tmp_path),
                    "model_id": None, "weights": "random_init"}


def test_cli_exits_non_zero_when_the_baseline_did_not_complete(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tb, "run_training_baseline", lambda **kwargs: {
        "status": "oom", "baseline_path": tmp_path / "b.json", "baseline_sha256": "0" * 64,
        "manifest_path": None, "manifest_sha256": None})
    assert tb.main(["--run-mode", "cpu_smoke", "--label", "cli_label"]) == tb.EXIT_RUN_FAILED
    assert "no input manifest" in capsys.readouterr().err
