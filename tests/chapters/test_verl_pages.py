"""Step 5 of the two verl chapters (`tools.chapters.verl_pages`, shared, with `pt_rollout_lifecycle` and
`pt_rl_system`, one per page): the plan, running or reading the shared record, the sentences built from its fields, the recomputation with the chapter's functions, the figures,
and the learner's own run beside the reported figures. One cpu_smoke record is made for the module."""

from __future__ import annotations

import copy
import json

import matplotlib
import pytest

from chapter_factory import REPO_ROOT
from tools.chapters import pt_rl_system, pt_rollout_lifecycle, verl_pages
from tools.errors import ConfigError, StageFailedError, UpstreamRecordError
from tools.experiments.verl_closure.config import ClosureConfig
from tools.experiments.verl_closure.record import SCHEMA
from tools.experiments.verl_closure.runner import run_experiment
from tools.measure.sampler import ResourceSampler

matplotlib.use("Agg")
LABEL = "pytest_verl_pages"


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="module")
def shared_path(results):
    """A real cpu_smoke shared record, at the path the pages derive."""
    path = verl_pages.closure_record_path("cpu_smoke", LABEL, results)
    config = ClosureConfig(run_label=LABEL, output=path, backend="torch", model="tiny", device="cpu")
    sampler = ResourceSampler(lambda: (None, 1000.0), interval_s=0.05, description={"gpu_source": None})
    run_experiment(config, sampler=sampler)
    return path


@pytest.fixture(scope="module")
def summaries(shared_path):
    return verl_pages.read_summary(shared_path, "lifecycle"), verl_pages.read_summary(shared_path, "system")


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------

def test_the_record_path_follows_results_dir_then_the_mode_default(tmp_path):
    assert verl_pages.closure_record_path("cpu_smoke", "lab_1", tmp_path) == tmp_path / "pt_verl_closure" / "lab_1.json"
    assert verl_pages.closure_record_path("real_gpu", "lab_1", None, REPO_ROOT) == \
        REPO_ROOT / "benchmarks" / "results" / "pt_verl_closure" / "lab_1.json"
    assert verl_pages.closure_record_path("cpu_smoke", "lab_1", "build/x", REPO_ROOT) == \
        REPO_ROOT / "build" / "x" / "pt_verl_closure" / "lab_1.json"
    with pytest.raises(ConfigError, match="dry_run"):
        verl_pages.closure_record_path("dry_run", "lab_1")


def test_a_plan_checks_its_parameters_and_names_the_tool_arguments(tmp_path):
    dry = verl_pages.plan_closure("dry_run", "replace_with_unique_label")
    assert dry.path is None and "none in dry_run" in dry.describe()
    plan = verl_pages.plan_closure("cpu_smoke", "lab_2", tmp_path, backend="torch", model_source="random_init",
                                   verl_root=tmp_path)
    assert plan.path == tmp_path / "pt_verl_closure" / "lab_2.json"
    assert plan.arguments("cpu_smoke") == ["--backend", "torch", "--model", "tiny", "--device", "cpu"]
    assert plan.arguments("real_gpu") == ["--backend", "torch", "--device", "cuda", "--model-source", "random_init",
                                          "--verl-root", str(tmp_path)]
    assert "apply to real_gpu only" in plan.describe()
    for change, message in (({"backend": "jax"}, "CLOSURE_BACKEND"), ({"model_source": "hub"}, "MODEL_SOURCE"),
                            ({"verl_root": tmp_path / "missing"}, "VERL_ROOT")):
        with pytest.raises(ConfigError, match=message):
            verl_pages.plan_closure("cpu_smoke", "lab_2", tmp_path, **change)
    with pytest.raises(ConfigError, match="placeholder"):
        verl_pages.plan_closure("cpu_smoke", "replace_with_unique_label", tmp_path)


# ---------------------------------------------------------------------------
# Running or reading
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_an_existing_record_is_read_and_never_run_again(shared_path, results, monkeypatch):
    monkeypatch.setattr(verl_pages, "run_closure_tool", lambda *a, **k: pytest.fail("the tool must not run"))
    lines = []
    shared = verl_pages.run_or_read(verl_pages.plan_closure("cpu_smoke", LABEL, results), echo=lines.append)
    assert shared.origin == "read" and shared.path == shared_path and shared.record["run_label"] == LABEL
    text = "\n".join(lines)
    assert "it is read, and the experiment is not run again" in text
    assert f"shared record (read): {shared_path}" in text and f"sha256 {shared.sha256}" in text


@pytest.mark.slow
def test_a_missing_record_is_made_by_running_the_tool_once(shared_path, tmp_path, monkeypatch):
    calls = []

    def fake_tool(mode, label, output, arguments, *, echo=None, root=None):
        calls.append((mode, label, arguments))
        record = json.loads(shared_path.read_text(encoding="utf-8"))
        output.parent.mkdir(parents=True)
        output.write_text(json.dumps({**record, "run_label": label}), encoding="utf-8")
        return 0

    monkeypatch.setattr(verl_pages, "run_closure_tool", fake_tool)
    shared = verl_pages.run_or_read(verl_pages.plan_closure("cpu_smoke", "pytest_ran_once", tmp_path), echo=None)
    assert shared.origin == "ran" and calls == [("run", "pytest_ran_once", ["--backend", "torch", "--model", "tiny",
                                                                            "--device", "cpu"])]


def test_a_failed_run_raises_with_the_exit_code_and_the_logs(tmp_path, monkeypatch):
    def failing_tool(mode, label, output, arguments, *, echo=None, root=None):
        output.parent.mkdir(parents=True)
        (output.parent / f"{label}_release.log").write_text("boom\n", encoding="utf-8")
        return 1

    monkeypatch.setattr(verl_pages, "run_closure_tool", failing_tool)
    with pytest.raises(StageFailedError, match="exit.*code 1") as raised:
        verl_pages.run_or_read(verl_pages.plan_closure("cpu_smoke", "pytest_fails", tmp_path))
    assert raised.value.stage == "verl_mechanism_closure" and "pytest_fails_release.log" in raised.value.fix


@pytest.mark.slow
def test_a_record_of_another_label_schema_or_evidence_level_is_refused(shared_path, tmp_path):
    record = json.loads(shared_path.read_text(encoding="utf-8"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**record, "run_label": "someone_else"}), encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="someone_else"):
        verl_pages.read_closure_record(other, LABEL, "cpu_smoke")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**record, "schema_version": "verl-mechanism-closure/v2"}), encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="schema"):
        verl_pages.read_closure_record(old, LABEL, "cpu_smoke")
    with pytest.raises(UpstreamRecordError, match="never reads it as a GPU result"):
        verl_pages.read_closure_record(shared_path, LABEL, "real_gpu")


def test_dry_run_preflights_both_plans_and_writes_nothing(tmp_path, monkeypatch):
    calls = []

    def fake_tool(mode, label, output, arguments, *, echo=None, root=None):
        calls.append((mode, label, output))
        return {"real_gpu": 3, "cpu_smoke": 0}["cpu_smoke" if "tiny" in arguments else "real_gpu"]

    monkeypatch.setattr(verl_pages, "run_closure_tool", fake_tool)
    lines = []
    plan = verl_pages.plan_closure("dry_run", "replace_with_unique_label", tmp_path)
    assert verl_pages.run_or_read(plan, echo=lines.append) is None
    text = "\n".join(lines)
    assert "preflight of the real_gpu plan" in text and "preflight of the cpu_smoke plan" in text
    assert "=> cpu_smoke: ready (exit 0)" in text and "=> real_gpu: blocked (exit 3)" in text
    assert "stand-in label" in text and [c[0] for c in calls] == ["preflight", "preflight"]
    assert {c[1] for c in calls} == {"dry_run_preview"} and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_dry_run_with_a_used_label_says_the_record_would_be_read(shared_path, results, monkeypatch):
    monkeypatch.setattr(verl_pages, "run_closure_tool", lambda mode, label, output, arguments, **k: 0)
    lines = []
    codes = verl_pages.preflight_plans(verl_pages.plan_closure("dry_run", LABEL, results), echo=lines.append)
    assert codes == {"real_gpu": None, "cpu_smoke": None}  # RESULTS_DIR names one folder for both plans
    assert "reads it and does not run the experiment again" in "\n".join(lines)


# ---------------------------------------------------------------------------
# Tables and sentences from the record's fields
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_tables_show_the_record_not_typed_numbers(summaries):
    lifecycle, system = summaries
    table = pt_rollout_lifecycle.lifecycle_table(lifecycle)
    assert lifecycle["run_label"] in table and "mean/p99/max" in table and "(tolerance 0.2)" in table
    assert f"{lifecycle['groups']['release']['admitted']} / {lifecycle['groups']['release']['rejected']}" in table
    table = pt_rl_system.system_table(system)
    assert "initialisation" in table and "engine_release" in table and "before retain: settled None" in table


def test_evidence_sentence_follows_the_evidence_level_and_the_weights():
    base = {"backend": "verl", "model_id": "Qwen/Qwen2.5-0.5B-Instruct"}
    assert "不是 GPU 结果" in verl_pages.evidence_sentence({**base, "evidence_level": "cpu_smoke", "weights": "random_init"})
    gpu = verl_pages.evidence_sentence({**base, "evidence_level": "real_gpu", "weights": "random_init"})
    assert "GPU 上完成" in gpu and "随机初始化" in gpu
    assert "随机" not in verl_pages.evidence_sentence({**base, "evidence_level": "real_gpu", "weights": "pretrained"})


@pytest.mark.slow
def test_lifecycle_sentences_carry_the_statistics_and_versions(summaries):
    lifecycle, _ = summaries
    text = "\n".join(pt_rollout_lifecycle.lifecycle_sentences(lifecycle))
    assert "cpu_smoke" in text and "14/14 项通过" in text
    mean = lifecycle["groups"]["retain"]["same_version_after_sync"]["mean_abs_error"]
    assert f"均值 {mean:.3g}" in text and "最大值" in text and "只记录不判定" in text
    assert "逐位相同" in text and "引擎自己在输出里报告的版本：生成时 [0]、同步后 [1]" in text
    failed = copy.deepcopy(lifecycle)
    failed["groups"]["retain"]["same_version_after_sync"].update(mean_abs_error=0.3)
    failed["updated_lora_comparison"].update(bit_identical=False, relative_difference=0.5)
    text = "\n".join(pt_rollout_lifecycle.lifecycle_sentences(failed))
    assert "超出上限" in text and "超出容差" in text


@pytest.mark.slow
def test_system_sentences_report_release_settling_and_null_peaks(summaries):
    _, system = summaries
    text = "\n".join(pt_rl_system.system_sentences(system))
    assert "没有 GPU 可采" in text and "no KV cache" in text and "组与组之间没有等待" in text
    measured = copy.deepcopy(system)
    measured["memory_settling"] = {"measured": True, "baseline_mb": 1500.0, "margin_mb": 1024.0,
                                   "before_group": {"retain": {"waited_s": 3.25, "last_mb": 1600.0, "settled": True}}}
    text = "\n".join(pt_rl_system.system_sentences(measured))
    assert "基线 1500 MiB" in text and "等待 3.2 s" in text and "回到基线 + 1024 MiB 以内" in text


# ---------------------------------------------------------------------------
# The recomputation with the chapter's own functions
# ---------------------------------------------------------------------------

def freshness(rollout, current_version, current_logprobs, max_version_lag, max_drift):
    pairs = [(b, c) for b, c, m in zip(rollout["behaviour_logprobs"], current_logprobs, rollout["action_mask"]) if m]
    drift = sum(abs(c - b) for b, c in pairs) / len(pairs)
    lag = current_version - rollout["policy_version"]
    reasons = (["stale"] if lag > max_version_lag else []) + (["drifted"] if drift > max_drift else [])
    return {"admitted": not reasons, "reasons": reasons, "version_lag": lag, "behaviour_drift": drift}


def advance(rollout, event):
    state = {"score": "scored", "admit": "admitted", "reject": "rejected"}[event["type"]]
    return {**rollout, "state": state, "history": [*rollout["history"], state]}


@pytest.mark.slow
def test_the_recheck_agrees_with_the_record_and_catches_a_disagreeing_function(summaries, shared_path):
    lifecycle, _ = summaries
    recheck = pt_rollout_lifecycle.recheck_admissions(lifecycle, freshness, advance)
    assert recheck["consistent"] is True and recheck["inputs"] == {"behaviour_drift_threshold": 0.2,
                                                                   "max_version_lag": 1}
    release = recheck["groups"]["release"]
    assert release["agreeing"] == release["total"] == 32 and release["admitted"] == release["record_admitted"]
    assert "逐条与记录一致 32/32" in pt_rollout_lifecycle.recheck_sentence(recheck)
    too_strict = pt_rollout_lifecycle.recheck_admissions(lifecycle, lambda *a, **k: {**freshness(*a, **k), "admitted": False,
                                                                         "reasons": ["x"]}, advance)
    assert too_strict["consistent"] is (lifecycle["groups"]["release"]["admitted"] == 0)
    shared = verl_pages.SharedRecord(shared_path, "read", "0" * 64, json.loads(shared_path.read_text(encoding="utf-8")))
    body = pt_rollout_lifecycle.recheck_record_body(shared, recheck)
    assert body["inputs"]["shared_record"]["path"] == f"pt_verl_closure/{LABEL}.json"  # relative to the results root
    assert body["consistent_with_shared_record"] is True and body["results"]["retain"]["total"] == 32


# ---------------------------------------------------------------------------
# Figures and the reported figures
# ---------------------------------------------------------------------------

@pytest.mark.slow
def test_the_figures_draw_both_groups(summaries):
    lifecycle, system = summaries
    drift = pt_rollout_lifecycle.draw_drift(lifecycle)
    assert len(drift.axes) == 2 and "cpu_smoke: not a GPU measurement" in drift._suptitle.get_text()
    timeline = pt_rl_system.draw_timeline(system)
    stage_axis, memory_axis = timeline.axes
    assert [t.get_text().split("\n")[0] for t in stage_axis.get_yticklabels()] == ["release", "retain"]
    assert any("GPU memory used: not sampled" in t.get_text() for t in memory_axis.get_legend().get_texts())


@pytest.mark.slow
def test_the_own_run_stands_beside_the_reported_figures(shared_path):
    shared = verl_pages.SharedRecord(shared_path, "ran", "0" * 64, {})
    text = verl_pages.evidence_beside_reported("PT-RL-SYSTEM", shared)
    assert text.index("your run (cpu_smoke: code path on this machine") < text.index("reported by the original course")
    assert "update-phase sampled peak MiB (host (no GPU sampled))" in text and "6392 MiB" in text
    assert 'produce your own: set RUN_MODE = "cpu_smoke"' in text


@pytest.mark.slow
def test_in_dry_run_the_newest_cpu_smoke_record_is_shown_or_its_absence(shared_path, tmp_path, monkeypatch):
    monkeypatch.setattr(verl_pages, "default_results_dir", lambda mode, root=None: tmp_path / mode)
    assert verl_pages.latest_shared_record("cpu_smoke", tmp_path) is None
    text = verl_pages.evidence_beside_reported("PT-ROLLOUT-LIFECYCLE", None, root=REPO_ROOT)
    assert "no cpu_smoke record of the shared experiment yet" in text
    folder = tmp_path / "cpu_smoke" / "pt_verl_closure"
    folder.mkdir(parents=True)
    record = json.loads(shared_path.read_text(encoding="utf-8"))
    for name, created in (("older", "2020-01-01T00:00:00+00:00"), ("newer", "2030-01-01T00:00:00+00:00")):
        (folder / f"{name}.json").write_text(json.dumps({**record, "created_utc": created, "run_label": name}),
                                             encoding="utf-8")
    (folder / "broken.json").write_text("{", encoding="utf-8")
    assert verl_pages.latest_shared_record("cpu_smoke", tmp_path) == folder / "newer.json"
    assert record["schema_version"] == SCHEMA
