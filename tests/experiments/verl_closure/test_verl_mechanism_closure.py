"""End-to-end cpu_smoke test of the shared experiment (torch backend, tiny model, CPU).

The experiment runs ONCE for this module (fixture `smoke`), with a fake resource sampler whose
interval is so long that it samples exactly once: every later phase then has no sample, and
its peaks must be null, not 0.
"""

import copy
import itertools
import json
import sys
from pathlib import Path

import pytest

from tools import verl_mechanism_closure as vmc
from tools.core.preflight import preflight_exit_code
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.verl_closure.backends import common
from tools.experiments.verl_closure.backends import torch_backend
from tools.measure.sampler import ResourceSampler

FAKE_GPU_MB, FAKE_HOST_MB = 512.0, 1024.0


def smoke_config(output: Path, **overrides) -> vmc.ClosureConfig:
    values = dict(run_label="cpu_smoke_closure_test", output=output, backend="torch", model="tiny", device="cpu")
    values.update(overrides)
    return vmc.ClosureConfig(**values)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    output = tmp_path_factory.mktemp("closure") / "cpu_smoke_closure_test.json"
    sampler = ResourceSampler(lambda: (FAKE_GPU_MB, FAKE_HOST_MB), interval_s=3600.0,
                              description={"gpu_source": "fake", "host_source": "fake"})
    result = vmc.run_experiment(smoke_config(output), sampler=sampler)
    return result


@pytest.fixture(scope="module")
def record(smoke):
    return json.loads(Path(smoke["path"]).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------
# The record
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_record_is_cpu_smoke_evidence_with_identity(smoke, record):
    assert record == smoke["record"]
    assert record["schema_version"] == vmc.SCHEMA
    assert record["run_mode"] == "cpu_smoke" and record["evidence_level"] == "cpu_smoke"
    assert record["model"]["model_id"] == "tiny" and record["model"]["weights"] == "random_init"
    assert record["runtime"]["torch"] and record["runtime"]["python"]
    assert record["tasks"]["task_count"] == 8 and len(record["tasks"]["pool_sha256"]) == 64


@pytest.mark.slow
def test_every_check_holds(record):
    decision = record["system_decision"]
    assert decision["checks"], "no checks recorded"
    assert all(isinstance(value, bool) for value in decision["checks"].values())
    assert [name for name, ok in decision["checks"].items() if not ok] == []
    assert decision["status"] == "pass"


@pytest.mark.slow
def test_pairing_and_update_hashes(record):
    release, retain = record["groups"]["release"], record["groups"]["retain"]
    assert release["initial_lora_sha256"] == retain["initial_lora_sha256"]
    assert release["updated_lora_sha256"] == retain["updated_lora_sha256"]
    assert release["initial_lora_sha256"] != release["updated_lora_sha256"]
    comparison = record["updated_lora_comparison"]
    assert comparison["bit_identical"] is True and comparison["relative_difference"] == 0.0  # CPU is deterministic
    assert comparison["tolerance"] == record["config"]["updated_lora_relative_tolerance"] == 0.2
    for group in (release, retain):
        assert 0 < group["changed_tensor_count"] <= group["lora_tensor_count"]
        assert group["changed_tensor_count"] == len(group["changed_tensors"])


@pytest.mark.slow
def test_engine_release_and_resume_only_in_release_group(record):
    state_events = [e for e in record["worker_events"] if e["event"] in ("engine_release", "engine_resume")]
    assert {e["group"] for e in state_events} == {"release"}
    kinds = {e["event"] for e in state_events}
    assert kinds == {"engine_release", "engine_resume"}
    assert record["groups"]["release"]["resume_calls"] > 0
    assert record["groups"]["retain"]["resume_calls"] == 0 and record["groups"]["retain"]["release_calls"] == 0
    release_phases = {e["phase"] for e in record["stage_events"] if e["group"] == "release"}
    retain_phases = {e["phase"] for e in record["stage_events"] if e["group"] == "retain"}
    assert set(vmc.RELEASE_ONLY_PHASES) <= release_phases
    assert not set(vmc.RELEASE_ONLY_PHASES) & retain_phases
    syncs = [e for e in record["worker_events"] if e["event"] == "weight_sync"]
    assert {e["group"] for e in syncs} == {"release", "retain"}


@pytest.mark.slow
def test_unsampled_phase_has_null_peaks_not_zero(record):
    phases = [(group, name, value) for group, m in record["system_decision"]["measurements"].items()
              for name, value in m["phases"].items()]
    unsampled = [(g, n, v) for g, n, v in phases if v["sample_count"] == 0]
    assert unsampled, "the fake sampler should leave phases without samples"
    for _, _, value in unsampled:
        assert value["gpu_peak_mb"] is None and value["host_peak_mb"] is None
    assert sum(v["sample_count"] for _, _, v in phases) <= record["resource_samples"]["sample_count"] == 1
    assert record["sampled_gpu_peak_mb"]["run"] == FAKE_GPU_MB
    assert record["sampled_host_peak_mb"]["run"] == FAKE_HOST_MB
    assert record["sampled_gpu_peak_mb"]["retain"] is None  # the retain group ran after the only sample


@pytest.mark.slow
def test_stage_events_are_ordered_on_one_clock(record):
    for group in vmc.GROUPS:
        rows = [e for e in record["stage_events"] if e["group"] == group]
        assert [e["phase"] for e in rows] == vmc.expected_phases(group)
        assert rows[0]["phase"] == "initialisation"
        for earlier, later in zip(rows, rows[1:]):
            assert earlier["start_s"] <= earlier["end_s"] <= later["start_s"]
    release_end = max(e["end_s"] for e in record["stage_events"] if e["group"] == "release")
    retain_start = min(e["start_s"] for e in record["stage_events"] if e["group"] == "retain")
    assert release_end <= retain_start
    measurements = record["system_decision"]["measurements"]["release"]
    assert measurements["initialisation_s"] == measurements["phases"]["initialisation"]["duration_s"]


@pytest.mark.slow
def test_frozen_rollouts_carry_identity_and_behaviour(record):
    frozen = record["frozen_rollouts"]
    assert frozen["count"] == 32 and frozen["samples_per_task"] == 4
    assert frozen["temperature"] == 1.0 and frozen["seed"] == 42 and frozen["policy_version"] == 0
    prompt_hashes = {t["task_id"]: t["prompt_sha256"] for t in record["tasks"]["tasks"]}
    per_task = {}
    for rollout in frozen["rollouts"]:
        per_task[rollout["task_id"]] = per_task.get(rollout["task_id"], 0) + 1
        assert rollout["prompt_sha256"] == prompt_hashes[rollout["task_id"]]
        assert len(rollout["response_token_ids"]) == len(rollout["behaviour_logprobs"]) == sum(rollout["action_mask"])
        assert 0 < len(rollout["response_token_ids"]) <= record["config"]["response_token_cap"]
        assert all(value <= 0 for value in rollout["behaviour_logprobs"])
    assert set(per_task.values()) == {4} and len(per_task) == 8
    assert vmc.rollouts_sha256(frozen["rollouts"]) == frozen["sha256"]
    assert record["groups"]["retain"]["frozen_sha256"] == frozen["sha256"]


@pytest.mark.slow
def test_rescoring_and_admission(record):
    mean_limit, p99_limit = (record["config"]["same_version_mean_abs_limit"],
                             record["config"]["same_version_p99_abs_limit"])
    assert (mean_limit, p99_limit) == (0.05, 0.25)
    for group in record["groups"].values():
        for comparison in (group["same_version_before_update"], group["same_version_after_sync"]):
            assert comparison["mean_abs_error"] <= mean_limit and comparison["p99_abs_error"] <= p99_limit
            assert comparison["mean_abs_error"] <= comparison["p99_abs_error"] <= comparison["max_abs_error"] < 1e-3
            assert comparison["token_count"] > 0
        assert group["engine_reported_versions"] == {"generation": [0], "post_sync_generation": [1]}
        admission = group["admission"]
        assert admission["admitted"] + admission["rejected"] == 32
        assert {d["version_lag"] for d in admission["decisions"]} == {1}
        assert group["trainer_version_after_update"] == group["engine_version_after_sync"] == 1
        before, after = group["rescored_logprobs"]["before_update"], group["rescored_logprobs"]["after_update"]
        assert before != after  # the update moved the policy


@pytest.mark.slow
def test_group_settings_differ_only_in_free_cache_engine(record):
    release, retain = record["group_settings"]["release"], record["group_settings"]["retain"]
    assert [k for k in release if release[k] != retain[k]] == ["free_cache_engine"]
    assert release["free_cache_engine"] is True and retain["free_cache_engine"] is False


# ---------------------------------------------------------------------------
# Checks must be able to fail
# ---------------------------------------------------------------------------

SETTLED = {"before_group": {"retain": {"settled": True}}}


def _checks(smoke, groups, comparison=None, settling=SETTLED):
    return vmc.system_checks(groups, settings=smoke["settings"], overrides=smoke["overrides"],
                             config=smoke_config(smoke["path"]), sample_count=1,
                             update_comparison=comparison or smoke["update_comparison"], memory_settling=settling)


@pytest.mark.slow
def test_different_initial_lora_is_a_failed_pairing(smoke):
    groups = copy.deepcopy(smoke["groups"])
    groups["retain"]["initial_lora_sha256"] = "0" * 64
    checks = _checks(smoke, groups)
    assert checks["initial_lora_hash_equal"] is False
    assert vmc.decide(checks)["status"] == "pairing_failed"


@pytest.mark.slow
@pytest.mark.parametrize("mutate, check", [
    (lambda g: g["retain"].update(release_calls=1), "release_resume_match_config"),
    (lambda g: g["release"].update(resume_calls=0), "release_resume_match_config"),
    (lambda g: g["release"]["phases"].reverse(), "stage_events_complete"),
    (lambda g: g["retain"].update(changed_tensor_count=0), "parameters_changed"),
    (lambda g: g["retain"]["same_version_after_sync"].update(mean_abs_error=0.06), "same_version_after_sync_within_limits"),
    (lambda g: g["retain"]["same_version_after_sync"].update(p99_abs_error=0.3), "same_version_after_sync_within_limits"),
    (lambda g: g["release"]["same_version_before_update"].update(mean_abs_error=5.7),
     "same_version_before_update_within_limits"),
    (lambda g: g["retain"].update(frozen_sha256="f" * 64), "frozen_rollouts_shared"),
    (lambda g: g["release"].update(engine_version_after_sync=0), "policy_versions_consistent"),
    (lambda g: g["retain"]["engine_reported_versions"].update(post_sync_generation=[0]), "policy_versions_consistent"),
    (lambda g: g["release"]["engine_reported_versions"].update(generation=[None]), "policy_versions_consistent"),
])
def test_each_check_can_fail(smoke, mutate, check):
    groups = copy.deepcopy(smoke["groups"])
    mutate(groups)
    checks = _checks(smoke, groups)
    assert checks[check] is False
    assert vmc.decide(checks)["status"] == "checks_failed"


@pytest.mark.slow
def test_settings_that_differ_elsewhere_fail_the_pairing_check(smoke):
    settings = copy.deepcopy(smoke["settings"])
    settings["retain"]["learning_rate"] = 0.5
    checks = vmc.system_checks(smoke["groups"], settings=settings, overrides=None,
                               config=smoke_config(smoke["path"]), sample_count=1,
                               update_comparison=smoke["update_comparison"], memory_settling=SETTLED)
    assert checks["config_differs_only_in_free_cache_engine"] is False


@pytest.mark.slow
@pytest.mark.parametrize("relative, ok", [(0.0, True), (0.2, True), (0.21, False), (1.4, False), (None, False)])
def test_updated_lora_is_judged_with_the_stated_tolerance(smoke, relative, ok):
    comparison = {**smoke["update_comparison"], "relative_difference": relative, "bit_identical": False}
    assert _checks(smoke, copy.deepcopy(smoke["groups"]), comparison)["updated_lora_within_tolerance"] is ok


@pytest.mark.slow
@pytest.mark.parametrize("settled, ok", [(True, True), (None, True), (False, False)])
def test_a_group_that_starts_before_memory_settled_fails_a_check(smoke, settled, ok):
    settling = {"before_group": {"retain": {"settled": settled}}}
    checks = _checks(smoke, copy.deepcopy(smoke["groups"]), settling=settling)
    assert checks["device_memory_settled_between_groups"] is ok


def test_admission_rejects_a_drifted_rollout():
    frozen = [{"rollout_id": "a", "policy_version": 0, "behaviour_logprobs": [-1.0, -2.0], "action_mask": [1, 1]},
              {"rollout_id": "b", "policy_version": 0, "behaviour_logprobs": [-1.0, -2.0], "action_mask": [1, 0]}]
    result = vmc.admission(frozen, [[-1.05, -2.05], [-3.0, -9.0]], threshold=0.2, trainer_version=1)
    assert (result["admitted"], result["rejected"]) == (1, 1)
    assert [d["state"] for d in result["decisions"]] == ["admitted", "rejected"]
    assert result["decisions"][1]["behaviour_drift"] == pytest.approx(2.0)  # masked token ignored


@pytest.mark.slow
def test_initial_adapter_is_fixed_by_its_seed(smoke, tmp_path):
    config = smoke_config(tmp_path / "unused.json")
    model_path = common.prepare_model(config, tmp_path / "w").path
    first = common.initial_adapter(model_path, config, 0, tmp_path / "a")
    again = common.initial_adapter(model_path, config, 0, tmp_path / "b")
    other = common.initial_adapter(model_path, config, 1, tmp_path / "c")
    assert common.adapter_sha256(first) == common.adapter_sha256(again)
    assert common.adapter_sha256(first) != common.adapter_sha256(other)


# ---------------------------------------------------------------------------
# read_summary
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_lifecycle_summary(smoke, record):
    summary = vmc.read_summary(smoke["path"], "lifecycle")
    assert summary["run_label"] == record["run_label"] and summary["evidence_level"] == "cpu_smoke"
    assert summary["frozen_rollouts"]["count"] == 32
    assert summary["task_version"] == record["tasks"]["task_version"]
    for name in vmc.GROUPS:
        group = summary["groups"][name]
        assert group["admitted"] + group["rejected"] == 32
        assert group["policy_version"] == {"frozen": 0, "trainer_after_update": 1, "engine_after_sync": 1}
        assert group["engine_reported_versions"] == {"generation": [0], "post_sync_generation": [1]}
        assert group["initial_lora_sha256"] == record["groups"][name]["initial_lora_sha256"]
        assert set(group["same_version_after_sync"]) == {"token_count", "mean_abs_error", "p99_abs_error",
                                                         "max_abs_error"}
        assert len(group["admission_decisions"]) == len(group["rescored_after_update"]) == 32
    assert summary["same_version_limits"] == {"mean_abs": 0.05, "p99_abs": 0.25}
    assert summary["updated_lora_comparison"]["bit_identical"] is True
    assert summary["rollouts"] == record["frozen_rollouts"]["rollouts"]
    assert sum(summary["frozen_rollouts"]["finish_reasons"].values()) == 32
    assert summary["checks"] == record["system_decision"]["checks"] and summary["failed_checks"] == []


@pytest.mark.slow
def test_system_summary(smoke, record):
    summary = vmc.read_summary(smoke["path"], "system")
    assert summary["status"] == "pass"
    assert summary["sampled_gpu_peak_mb"] == record["sampled_gpu_peak_mb"]
    assert summary["groups"]["release"]["resume_calls"] > 0 and summary["groups"]["retain"]["resume_calls"] == 0
    assert list(summary["groups"]["retain"]["phases"]) == vmc.expected_phases("retain")
    assert all(set(p) == {"duration_s", "sample_count", "gpu_peak_mb", "host_peak_mb"}
               for p in summary["groups"]["release"]["phases"].values())
    assert {e["group"] for e in summary["worker_events"] if e["event"] == "engine_resume"} == {"release"}
    assert summary["timeline"]["stage_events"] == record["stage_events"]
    assert len(summary["timeline"]["samples"]) == record["resource_samples"]["sample_count"]
    assert summary["memory_settling"]["measured"] is False  # a CPU run has no device memory to settle
    assert summary["memory_settling"]["before_group"]["retain"]["settled"] is None
    assert summary["compilation"]["torch_compile"] is False
    assert "no KV cache" in summary["engine_description"]["release"]


@pytest.mark.slow
def test_read_summary_refuses_unknown_pages_and_other_records(smoke, tmp_path):
    with pytest.raises(ConfigError):
        vmc.read_summary(smoke["path"], "everything")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema_version": "something-else/v1"}), encoding="utf-8")
    with pytest.raises(UpstreamRecordError):
        vmc.read_summary(other, "system")


# ---------------------------------------------------------------------------
# Write-once, invalid input, failures
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_second_run_with_the_same_output_refuses_to_overwrite(smoke, capsys):
    path = Path(smoke["path"])
    before = path.read_bytes()
    with pytest.raises(RecordExistsError):
        vmc.run_experiment(smoke_config(path))
    code = vmc.main(["--mode", "run", "--run-label", "cpu_smoke_closure_test", "--output", str(path),
                     "--backend", "torch", "--model", "tiny", "--device", "cpu"])
    assert code == vmc.EXIT_INVALID
    assert "already exists" in capsys.readouterr().err
    assert path.read_bytes() == before


@pytest.mark.parametrize("change, message", [
    ({"run_label": "replace_with_unique_label"}, "placeholder"),
    ({"backend": "verl"}, "needs --device cuda"),
    ({"samples_per_task": 0}, "positive integer"),
    ({"output_name": "record.txt"}, ".json"),
    ({"same_version_mean_abs_limit": float("nan")}, "finite"),
    ({"updated_lora_relative_tolerance": 0}, "positive"),
    ({"rollout_enforce_eager": "yes"}, "True or False"),
])
def test_invalid_config_is_refused_before_any_work(tmp_path, change, message):
    change = dict(change)
    config = smoke_config(tmp_path / change.pop("output_name", "x.json"), **change)
    with pytest.raises(ConfigError, match=message):
        vmc.run_experiment(config)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_failed_stage_writes_no_record_and_logs_the_error(tmp_path, monkeypatch, capsys):
    def broken(self, examples):
        raise RuntimeError("injected update failure")

    monkeypatch.setattr(torch_backend.TorchGroupSession, "supervised_update", broken)
    config = smoke_config(tmp_path / "failed.json", run_label="cpu_smoke_failed_stage")
    with pytest.raises(RuntimeError, match="injected update failure"):
        vmc.run_experiment(config, echo=lambda line: print(line, file=sys.stderr))
    assert not config.output.exists()
    log = config.log_path("release").read_text(encoding="utf-8")
    assert "FAILED" in log and "injected update failure" in log and "Traceback" in log
    assert "injected update failure" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == [config.log_path("release").name]  # no temp files left


# ---------------------------------------------------------------------------
# Preflight (loads no model)
# ---------------------------------------------------------------------------

def _preflight(tmp_path, *extra):
    return vmc.main(["--mode", "preflight", "--run-label", "cpu_smoke_preflight", "--output",
                     str(tmp_path / "pf.json"), *extra])


def test_preflight_ready_for_the_tiny_cpu_run(tmp_path, capsys):
    assert _preflight(tmp_path, "--backend", "torch", "--model", "tiny", "--device", "cpu") == 0
    assert "READY" in capsys.readouterr().out


def test_preflight_exit_4_when_only_the_model_cache_is_missing(tmp_path, capsys):
    empty_cache = tmp_path / "empty_cache"
    empty_cache.mkdir()
    code = _preflight(tmp_path, "--backend", "torch", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--device", "cpu",
                      "--model-cache", str(empty_cache))
    assert code == 4
    assert "hf download Qwen/Qwen2.5-0.5B-Instruct" in capsys.readouterr().out


def test_preflight_exit_3_when_blocked(tmp_path, capsys):
    (tmp_path / "pf.json").write_text("{}", encoding="utf-8")
    assert _preflight(tmp_path, "--backend", "torch", "--model", "tiny", "--device", "cpu") == 3
    assert "already exists" in capsys.readouterr().out


def test_preflight_of_the_verl_backend_names_what_is_missing(tmp_path, capsys):
    report = vmc.preflight(vmc.ClosureConfig(run_label="verl_preflight_probe", output=tmp_path / "v.json"))
    failing = {check["name"] for check in report["checks"] if not check["ok"] and check["severity"] == "blocked"}
    if not failing:
        pytest.skip("this machine has the full PT-VERL-CUDA profile and a GPU")
    assert preflight_exit_code(report) == 3
    assert report["next_actions"]


def test_preflight_of_the_verl_backend_checks_tokenizer_and_vocabulary(tmp_path):
    """verl's vLLM masks logits at or above len(tokenizer): the preflight refuses a model whose tokenizer
    does not cover its vocabulary (the tiny model) and accepts the padded random_init build."""
    def vocabulary(**change):
        config = vmc.ClosureConfig(run_label="verl_vocab_probe", output=tmp_path / "v.json", **change)
        return next(c for c in vmc.preflight(config)["checks"] if c["name"].startswith("vocabulary:"))

    tiny = vocabulary(model="tiny")
    assert tiny["ok"] is False and tiny["severity"] == "blocked"
    planned = vocabulary(model_source="random_init", model_cache=tmp_path / "empty_cache")
    assert planned["ok"] is True and "pads its tokenizer" in planned["detail"]
    assert not [c for c in vmc.preflight(smoke_config(tmp_path / "t.json"))["checks"]
                if c["name"].startswith("vocabulary:")]  # HF generate masks nothing: the torch backend needs no check


# ---------------------------------------------------------------------------
# Memory between groups, and the command line a device script calls
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_a_group_that_starts_before_device_memory_settled_is_recorded_as_such(tmp_path):
    readings = itertools.chain([2048.0], itertools.repeat(9000.0))  # the baseline, then memory that never comes back
    config = smoke_config(tmp_path / "unsettled.json", run_label="cpu_smoke_unsettled", memory_settle_timeout_s=0.01)
    sampler = ResourceSampler(lambda: (None, FAKE_HOST_MB), interval_s=3600.0, description={"gpu_source": "fake"})
    result = vmc.run_experiment(config, sampler=sampler, gpu_reader=lambda: next(readings), sleep=lambda s: None)
    record = json.loads(Path(result["path"]).read_text(encoding="utf-8"))
    settling = record["memory_settling"]
    assert settling["measured"] is True and settling["baseline_mb"] == 2048.0
    assert settling["before_group"]["retain"]["settled"] is False
    assert settling["before_group"]["retain"]["last_mb"] == 9000.0
    assert record["system_decision"]["failed_checks"] == ["device_memory_settled_between_groups"]
    assert record["system_decision"]["status"] == "checks_failed"


@pytest.mark.integration
def test_the_device_script_command_runs_on_cpu_with_the_tiny_model(tmp_path):
    """What a GPU device script calls (with --device cuda and the real model there), on CPU here."""
    import subprocess

    from chapter_factory import REPO_ROOT

    output = tmp_path / "device" / "cpu_smoke_device_cli.json"
    command = [sys.executable, "-m", "tools.verl_mechanism_closure", "--mode", "run", "--backend", "torch",
               "--device", "cpu", "--model", "tiny", "--model-source", "random_init",
               "--run-label", "cpu_smoke_device_cli", "--output", str(output)]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    summary = json.loads(completed.stdout)
    assert summary["status"] == "pass" and summary["record"] == str(output)
    assert "Loading weights" not in completed.stderr  # progress bars are off unless --progress
    assert sorted(p.name for p in output.parent.iterdir()) == [
        "cpu_smoke_device_cli.json", "cpu_smoke_device_cli_release.log", "cpu_smoke_device_cli_retain.log"]
    again = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == vmc.EXIT_INVALID and "already exists" in again.stderr
    help_text = subprocess.run([sys.executable, "-m", "tools.experiments.verl_closure", "--help"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=600, check=False)  # hang guards
    assert help_text.returncode == 0 and "--model-source" in help_text.stdout


@pytest.mark.slow
def test_the_record_names_its_numbers_as_the_reported_figures_do(record):
    """The registry divides a real_gpu record's `comparable` numbers by the reported figures of the same name."""
    from tools.core.reported import reported_for

    comparable = record["comparable"]
    reported = {figure.quantity for figure in reported_for("PT-RL-SYSTEM") if figure.numeric}
    assert set(comparable) <= reported
    assert comparable["changed_parameter_tensors_per_group"] == record["groups"]["release"]["changed_tensor_count"]
    assert comparable["update_phase_seconds.retain"] == \
        record["system_decision"]["measurements"]["retain"]["phases"]["update"]["duration_s"]
    assert "update_phase_sampled_peak_mib.release" not in comparable  # no GPU sample on CPU: left out, never 0
