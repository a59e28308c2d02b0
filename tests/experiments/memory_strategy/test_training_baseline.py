"""Tests of tools.experiments.memory_strategy.baseline: the 73 baseline record, 76's input manifest and its checks."""

import json
import shutil

import pytest

from tools.core.records import sha256_file
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.memory_strategy import baseline as tb

LABEL = "pytest_baseline_v1"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    result = tb.run_training_baseline(run_mode="cpu_smoke", label=LABEL, results_dir=folder)
    return folder, result


@pytest.fixture
def copy_of(written, tmp_path):
    """A private copy of the written records (same layout under a new results root) that a test may tamper with."""
    folder, result = written
    copies = []
    for path in (result["baseline_path"], result["manifest_path"]):
        target = tmp_path / path.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
        copies.append(target)
    return tmp_path, copies[0], copies[1]


def test_records_go_to_each_chapters_folder(written):
    """Is the 73 baseline in 73's folder and the manifest in 76's, named as ChapterContext names records?"""
    folder, result = written
    assert result["baseline_path"] == folder / "73-training-performance" / f"73-training-performance_training_baseline_{LABEL}.json"
    assert result["manifest_path"] == (folder / "76-activation-memory-strategies"
                                       / f"76-activation-memory-strategies_input_manifest_{LABEL}.json")


def test_the_slugs_are_the_catalogs():
    from chapter_factory import REPO_ROOT
    from tools.core.catalog import find_chapter

    assert find_chapter("73", REPO_ROOT).slug == tb.BASELINE_SLUG
    assert find_chapter("76", REPO_ROOT).slug == tb.CHAPTER_SLUG


def test_cpu_smoke_baseline_record_carries_the_actual_workload(written):
    _, result = written
    assert result["status"] == "ok"
    record = json.loads(result["baseline_path"].read_text(encoding="utf-8"))
    assert record["schema_version"] == tb.BASELINE_SCHEMA_VERSION
    assert record["evidence_level"] == "cpu_smoke" and record["chapter"] == "73"
    config = record["config"]
    assert (config["model_id"], config["weights"], config["batch_size"], config["seq_len"], config["warmup"],
            config["iters"], config["seed"], config["optimizer"], config["dtype"]) == (
        "tiny", "random_init", 1, 64, 2, 5, 42, "AdamW", "float32")
    measurement = record["measurement"]
    assert measurement["status"] == "ok" and measurement["execution_path_verified"] is True
    assert measurement["peak_memory_mb"] is None  # a CPU run never claims device memory
    assert measurement["saved_tensors"]["last_step"]["device_saved_bytes"] > 0


def test_manifest_points_to_the_baseline_by_sha256_relative_to_the_results_root(written):
    _, result = written
    manifest = json.loads(result["manifest_path"].read_text(encoding="utf-8"))
    assert manifest["schema_version"] == tb.MANIFEST_SCHEMA_VERSION
    entry = manifest["source_artifacts"]["training_baseline"]
    assert entry["path"] == f"73-training-performance/{result['baseline_path'].name}"
    assert entry["path_relative_to"] == "results_root"
    assert entry["sha256"] == sha256_file(result["baseline_path"]) == result["baseline_sha256"]
    assert result["manifest_sha256"] == sha256_file(result["manifest_path"])
    assert manifest["workload"]["weights"] == "random_init"


def test_load_input_manifest_accepts_the_matching_workload(written):
    folder, result = written
    loaded = tb.load_input_manifest(result["manifest_path"], tb.expected_workload("cpu_smoke"), folder)
    assert loaded["baseline_sha256"] == result["baseline_sha256"]
    assert loaded["baseline"]["config"]["seq_len"] == 64


def test_weights_are_part_of_the_workload_identity(written):
    """issue 13: a random_init baseline must not satisfy a run on pretrained weights (before the fix,
    `expected_workload` had no weights, so this manifest was accepted for any weights)."""
    folder, result = written
    assert "weights" in tb.IDENTITY_KEYS
    assert tb.expected_workload("real_gpu", tb.QWEN, "local")["weights"] == "pretrained"
    assert tb.expected_workload("real_gpu", tb.QWEN, "random_init")["weights"] == "random_init"
    assert tb.expected_workload("cpu_smoke")["weights"] == "random_init"  # the tiny model is built with random weights
    pretrained = {**tb.expected_workload("cpu_smoke"), "weights": "pretrained"}
    with pytest.raises(UpstreamRecordError, match="weights"):
        tb.load_input_manifest(result["manifest_path"], pretrained, folder)


def test_a_changed_baseline_is_refused_by_sha256(copy_of):
    folder, baseline, manifest = copy_of
    record = json.loads(baseline.read_text(encoding="utf-8"))
    record["measurement"]["step_time_ms"] = 1.0
    baseline.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="sha256"):
        tb.load_input_manifest(manifest, tb.expected_workload("cpu_smoke"), folder)


def test_a_workload_mismatch_is_refused_and_named(written):
    folder, result = written
    with pytest.raises(UpstreamRecordError, match="seq_len"):
        tb.load_input_manifest(result["manifest_path"], tb.expected_workload("real_gpu", model_id="tiny"), folder)


def test_a_missing_baseline_or_manifest_is_a_clear_error(copy_of):
    folder, baseline, manifest = copy_of
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        tb.load_input_manifest(folder / "76_absent.json", tb.expected_workload("cpu_smoke"), folder)
    baseline.unlink()
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        tb.load_input_manifest(manifest, tb.expected_workload("cpu_smoke"), folder)


def test_the_same_label_is_refused_before_any_work_and_nothing_changes(written, monkeypatch):
    folder, _ = written
    before = {path: sha256_file(path) for path in folder.rglob("*.json")}

    def must_not_run(*args, **kwargs):
        raise AssertionError("the workload ran although the records exist")

    monkeypatch.setattr(tb, "run_memory_strategy", must_not_run)
    with pytest.raises(RecordExistsError, match="write-once"):
        tb.run_training_baseline(run_mode="cpu_smoke", label=LABEL, results_dir=folder)
    assert {path: sha256_file(path) for path in folder.rglob("*.json")} == before


@pytest.mark.parametrize("kwargs, message", [
    ({"run_mode": "dry_run"}, "cpu_smoke or real_gpu"),
    ({"run_mode": "gpu"}, "RUN_MODE"),
    ({"label": "replace_with_unique_label"}, "placeholder"),
    ({"model_id": "Qwen/Qwen2.5-0.5B-Instruct"}, "tiny model only"),
    ({"model_id": "gpt2"}, "unknown model"),
    ({"model_source": "hub"}, "unknown model source"),
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
                    "--weights", "random_init"])  # --weights is the older spelling of --model-source
    assert code == tb.EXIT_CONFIG and "ERROR: record x already exists" in capsys.readouterr().err
    assert seen == {"run_mode": "real_gpu", "label": "cli_label", "results_dir": str(tmp_path),
                    "model_id": None, "model_source": "random_init"}
    tb.main(["--run-mode", "cpu_smoke", "--label", "cli_label", "--model-source", "local"])
    assert seen["model_source"] == "local"


def test_cli_exits_non_zero_when_the_baseline_did_not_complete(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(tb, "run_training_baseline", lambda **kwargs: {
        "status": "oom", "baseline_path": tmp_path / "b.json", "baseline_sha256": "0" * 64,
        "manifest_path": None, "manifest_sha256": None})
    assert tb.main(["--run-mode", "cpu_smoke", "--label", "cli_label"]) == tb.EXIT_RUN_FAILED
    assert "no input manifest" in capsys.readouterr().err


@pytest.mark.slow
def test_the_module_runs_as_a_command(tmp_path):
    """`python -m tools.experiments.memory_strategy.baseline` parses and fails before any work on a bad label."""
    import subprocess
    import sys

    from chapter_factory import REPO_ROOT

    completed = subprocess.run([sys.executable, "-m", "tools.experiments.memory_strategy.baseline", "--run-mode",
                                "cpu_smoke", "--label", "replace_with_unique_label", "--results-dir", str(tmp_path)],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)  # a hang guard
    assert completed.returncode == tb.EXIT_CONFIG and "placeholder" in completed.stderr
    assert list(tmp_path.iterdir()) == []
