"""Tests of the core runtime through its product name `tools.project_runtime` (a facade over
`tools.core`): root discovery, run parameters, records, preflight, snapshot."""

import json
import math
import os
from pathlib import Path

import pytest

from tools import project_runtime as pr
from tools.core import paths as core_paths
from tools.core import records as core_records
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError

from chapter_factory import REPO_ROOT  # noqa: E402


def test_root_is_found_by_walking_up_from_a_notebook_folder(monkeypatch):
    monkeypatch.delenv(pr.PROJECT_ROOT_ENV, raising=False)
    assert pr.resolve_project_root(REPO_ROOT / "notebooks") == REPO_ROOT


def test_root_override_must_point_at_the_repository(monkeypatch, tmp_path):
    monkeypatch.setenv(pr.PROJECT_ROOT_ENV, str(REPO_ROOT))
    assert pr.resolve_project_root(tmp_path) == REPO_ROOT
    monkeypatch.setenv(pr.PROJECT_ROOT_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match=pr.PROJECT_ROOT_ENV):
        pr.resolve_project_root()


def test_outside_the_repository_the_package_checkout_is_used(monkeypatch, tmp_path):
    monkeypatch.delenv(pr.PROJECT_ROOT_ENV, raising=False)
    assert pr.resolve_project_root(tmp_path) == REPO_ROOT


def test_root_outside_any_checkout_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv(pr.PROJECT_ROOT_ENV, raising=False)
    monkeypatch.setattr(core_paths, "_package_checkout_root", lambda: None)
    with pytest.raises(ConfigError, match="cannot find the course repository"):
        pr.resolve_project_root(tmp_path)


@pytest.mark.parametrize("mode", ["dry_run", "cpu_smoke", "real_gpu"])
def test_known_run_modes_pass(mode):
    assert pr.validate_run_mode(mode) == mode


@pytest.mark.parametrize("mode", ["gpu", "DRY_RUN", "", None])
def test_unknown_run_mode_is_refused(mode):
    with pytest.raises(ConfigError, match="RUN_MODE"):
        pr.validate_run_mode(mode)


@pytest.mark.parametrize("label", ["replace_with_unique_label", "my_TODO_run", "placeholder1", "a", "has space",
                                   "-leading", "x" * 97, None])
def test_bad_labels_are_refused(label):
    with pytest.raises(ConfigError):
        pr.validate_run_label(label)


@pytest.mark.parametrize("label", ["h200_rl_system_v1", "smoke-20261129T101010Z", "run.2"])
def test_good_labels_pass(label):
    assert pr.validate_run_label(label) == label


def test_evidence_level_follows_the_mode():
    assert pr.evidence_level("dry_run") is None
    assert pr.evidence_level("cpu_smoke") == "cpu_smoke"
    assert pr.evidence_level("real_gpu") == "real_gpu"


@pytest.mark.parametrize("value,kwargs", [(math.nan, {}), (math.inf, {}), ("abc", {}), (-1, {"minimum": 0}),
                                          (0, {"positive": True})])
def test_require_finite_refuses(value, kwargs):
    with pytest.raises(ConfigError):
        pr.require_finite("rate", value, **kwargs)


def test_record_is_written_once_and_never_overwritten(tmp_path):
    path = tmp_path / "sub" / "record.json"
    digest = pr.save_json_record_once(path, {"value": 1, "missing": None})
    assert digest == pr.sha256_file(path)
    assert json.loads(path.read_text(encoding="utf-8")) == {"value": 1, "missing": None}
    with pytest.raises(RecordExistsError, match="RUN_LABEL"):
        pr.save_json_record_once(path, {"value": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"value": 1, "missing": None}
    assert sorted(p.name for p in path.parent.iterdir()) == ["record.json"]


def test_a_record_that_cannot_be_encoded_leaves_nothing(tmp_path):
    path = tmp_path / "record.json"
    with pytest.raises(ValueError):
        pr.save_json_record_once(path, {"peak": math.nan})
    with pytest.raises(TypeError):
        pr.save_json_record_once(path, {"obj": object()})
    assert list(tmp_path.iterdir()) == []


def test_write_race_loser_gets_record_exists(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    real_link = os.link

    def racing_link(source, target):
        Path(target).write_text("{}", encoding="utf-8")  # another writer wins between check and link
        return real_link(source, target)

    monkeypatch.setattr(core_records.os, "link", racing_link)
    with pytest.raises(RecordExistsError):
        pr.save_json_record_once(path, {"value": 1})
    assert path.read_text(encoding="utf-8") == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_load_record_checks_schema_and_sha256(tmp_path):
    path = tmp_path / "r.json"
    digest = pr.save_json_record_once(path, {"schema_version": "x/v1"})
    assert pr.load_record(path, schema_version="x/v1", expected_sha256=digest)["schema_version"] == "x/v1"
    with pytest.raises(UpstreamRecordError, match="schema"):
        pr.load_record(path, schema_version="y/v1")
    with pytest.raises(UpstreamRecordError, match="sha256"):
        pr.load_record(path, expected_sha256="0" * 64)
    with pytest.raises(UpstreamRecordError, match="does not exist"):
        pr.load_record(tmp_path / "missing.json")


def test_record_header_validates_before_work():
    header = pr.record_header(schema_version="s/v1", chapter="C", stage="s", run_mode="cpu_smoke", run_label="lab_1")
    assert header["evidence_level"] == "cpu_smoke" and header["run_label"] == "lab_1"
    with pytest.raises(ConfigError):
        pr.record_header(schema_version="s/v1", chapter="C", stage="s", run_mode="gpu", run_label="lab_1")


def test_lineage_entry_is_relative_to_the_results_root_and_reads_back(tmp_path):
    path = tmp_path / "results" / "a" / "r.json"
    digest = pr.save_json_record_once(path, {"schema_version": "s/v1", "k": 1})
    entry = pr.lineage_entry(path, tmp_path / "results")
    assert entry == {"path": "a/r.json", "sha256": digest}
    moved = tmp_path / "elsewhere"  # a committed record read in another checkout
    (tmp_path / "results").rename(moved)
    assert pr.resolve_lineage(entry, moved, schema_version="s/v1")["k"] == 1


def test_lineage_refuses_machine_paths_and_changed_records(tmp_path):
    path = tmp_path / "outside.json"
    pr.save_json_record_once(path, {"k": 1})
    with pytest.raises(ConfigError, match="outside the results root"):
        pr.lineage_entry(path, tmp_path / "results")
    with pytest.raises(UpstreamRecordError, match="relative"):
        pr.resolve_lineage({"path": str(path), "sha256": "0" * 64}, tmp_path)
    with pytest.raises(UpstreamRecordError, match="expected"):
        pr.resolve_lineage({"path": "outside.json", "sha256": "0" * 64}, tmp_path)


def test_preflight_ready_with_installed_pins(tmp_path):
    requirements = tmp_path / "req.txt"
    requirements.write_text(f"pytest=={pr.installed_version('pytest')}\n", encoding="utf-8")
    report = pr.preflight_report(requirements_file=requirements)
    assert report["status"] == "ready" and pr.preflight_exit_code(report) == 0


def test_preflight_blocked_names_the_fix(tmp_path):
    requirements = tmp_path / "req.txt"
    requirements.write_text("surely-not-installed-pkg==1.0\n", encoding="utf-8")
    report = pr.preflight_report(requirements_file=requirements, require_cuda=True)
    assert report["status"] == "blocked" and pr.preflight_exit_code(report) == 3
    assert any("surely-not-installed-pkg" in reason for reason in report["reasons"])
    assert any("pip install" in action for action in report["next_actions"])
    assert "BLOCKED" in pr.format_preflight(report)


def test_preflight_model_cache_only_exits_4(tmp_path):
    report = pr.preflight_report(model_paths=[("m/x", tmp_path / "absent", "hf download m/x")])
    assert report["only_model_cache_missing"] and pr.preflight_exit_code(report) == 4
    assert report["next_actions"] == ["hf download m/x"]
    existing = tmp_path / "out.json"
    existing.write_text("{}", encoding="utf-8")
    both = pr.preflight_report(model_paths=[("m/x", tmp_path / "absent", "dl")], output_paths=[existing])
    assert pr.preflight_exit_code(both) == 3


def test_preflight_version_mismatch_is_a_warning(tmp_path):
    requirements = tmp_path / "req.txt"
    requirements.write_text("pytest==0.0.1\n", encoding="utf-8")
    report = pr.preflight_report(requirements_file=requirements)
    assert report["status"] == "warning" and pr.preflight_exit_code(report) == 0


def test_runtime_snapshot_reports_torch_and_git():
    snapshot = pr.runtime_snapshot(REPO_ROOT)
    assert snapshot["torch"] and snapshot["python"]
    assert snapshot["cuda_available"] is False and snapshot["device"] == "cpu"
    assert set(snapshot) >= {"git_commit", "git_dirty", "transformers", "peft"}


def test_the_cuda_preflight_reads_nvml_and_never_touches_torch_cuda(monkeypatch):
    import sys
    import types

    import torch

    from tools.core.preflight import cuda_device_facts

    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByUUID=lambda uuid: calls.append(("uuid", uuid)) or "handle",
        nvmlDeviceGetHandleByIndex=lambda index: calls.append(("index", index)) or "handle",
        nvmlDeviceGetName=lambda handle: b"NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=141 * 2**30))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: (_ for _ in ()).throw(AssertionError("CUDA init")))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: (_ for _ in ()).throw(AssertionError("CUDA init")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234,GPU-5678")
    ok, detail, memory_ok, memory_detail = cuda_device_facts(16)
    assert ok and "NVIDIA H200" in detail and memory_ok and "141.0 GiB" in memory_detail
    assert ("uuid", "GPU-1234") in calls and calls[-1] == "shutdown"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert cuda_device_facts(200)[2] is False and ("index", 1) in calls
