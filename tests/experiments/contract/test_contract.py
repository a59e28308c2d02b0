"""The experiment contract's parts: the Plan's defaults and refusals, the RecordSink's write-once records
with header, runtime and lineage, and the CLI builder's common flags."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from tools.core.records import sha256_file
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError
from tools.experiments.cli import COMMON_FLAGS, add_common_arguments, plan_from_args
from tools.experiments.contract import (
    Limits,
    Plan,
    RecordSink,
    failed_records,
    load_runner,
)


def _plan(**changes) -> Plan:
    return Plan(**{"experiment": "any", "chapter": "76", "run_mode": "cpu_smoke", "label": "plan_v1", **changes})


def test_the_model_and_device_follow_from_the_run_mode():
    smoke, gpu, dry = _plan(), _plan(run_mode="real_gpu"), _plan(run_mode="dry_run", label="whatever")
    assert (smoke.model, smoke.device, smoke.evidence_level, smoke.writes) == ("tiny", "cpu", "cpu_smoke", True)
    assert (gpu.model, gpu.device, gpu.evidence_level) == ("Qwen/Qwen2.5-0.5B-Instruct", "cuda", "real_gpu")
    assert (dry.model, dry.writes, dry.results_root) == ("Qwen/Qwen2.5-0.5B-Instruct", False, None)
    assert _plan(model="Qwen/Qwen2.5-0.5B-Instruct", model_source="random_init").model_source == "random_init"


def test_the_results_root_is_the_given_folder_or_the_run_modes_default(tmp_path):
    assert _plan(results_dir=str(tmp_path)).results_root == tmp_path
    assert _plan().results_root.parts[-2:] == ("build", "results")
    assert _plan(run_mode="real_gpu").results_root.parts[-2:] == ("benchmarks", "results")


@pytest.mark.parametrize("changes, message", [
    ({"run_mode": "gpu"}, "unknown RUN_MODE"),
    ({"label": "replace_with_unique_label"}, "placeholder"),
    ({"label": "a b"}, "invalid RUN_LABEL"),
    ({"model_source": "hub"}, "unknown model source"),
    ({"device": "tpu"}, "unknown device"),
    ({"device": "cuda"}, "cpu_smoke runs on the CPU"),
    ({"variants": "small"}, "variants must be a list"),
    ({"variants": ("a", "a")}, "must not repeat"),
    ({"seeds": (1, True)}, "seeds must be a list of int"),
    ({"chapter": ""}, "chapter must be a non-empty string"),
    ({"stage": ""}, "stage must be"),
    ({"limits": {"time_s": 3}}, "limits must be a Limits"),
])
def test_a_bad_plan_is_refused_when_it_is_made(changes, message):
    with pytest.raises(ConfigError, match=message):
        _plan(**changes)


@pytest.mark.parametrize("kwargs, message", [
    ({"time_s": 0}, "must be positive"), ({"time_s": float("nan")}, "finite"), ({"cpu_threads": 0}, "positive integer"),
])
def test_bad_limits_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Limits(**kwargs)


def test_a_plan_is_frozen_and_replace_checks_again():
    plan = _plan(variants=["a", "b"], seeds=[1])
    assert plan.variants == ("a", "b") and plan.seeds == (1,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.label = "other_v1"  # type: ignore[misc]
    assert plan.replace(stage="g0").stage == "g0"
    with pytest.raises(ConfigError):
        plan.replace(label="todo")


def test_the_public_view_has_no_machine_path(tmp_path):
    public = _plan(results_dir=tmp_path, model_cache=tmp_path / "models", options={"where": tmp_path}).public()
    assert "results_dir" not in public and public["model_cache"] == "models"
    assert json.loads(json.dumps(public))["limits"] == {"time_s": None, "cpu_threads": None}


def _sink(tmp_path, **changes) -> RecordSink:
    fields = {"run_mode": "cpu_smoke", "run_label": "sink_v1", "results_root": tmp_path, "chapter_id": "76",
              "slug": "76-activation-memory-strategies", "runtime": lambda: {"python": "3.x"}, **changes}
    return RecordSink(**fields)


def test_the_sink_names_and_writes_a_record_once_with_header_and_runtime(tmp_path):
    sink = _sink(tmp_path)
    path, digest = sink.save_record("g0", {"status": "ok", "value": 1}, schema_version="x/v1")
    assert path == tmp_path / "76-activation-memory-strategies" / "76-activation-memory-strategies_g0_sink_v1.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    assert list(record)[:7] == ["schema_version", "chapter", "stage", "run_label", "run_mode", "evidence_level",
                                "created_utc"]
    assert record["runtime"] == {"python": "3.x"} and record["value"] == 1 and record["chapter"] == "76"
    assert digest == sha256_file(path)
    assert [(ref.stage, ref.action, ref.status, ref.sha256) for ref in sink.records] == [
        ("g0", "written", "ok", digest)]
    with pytest.raises(RecordExistsError):
        sink.save_record("g0", {"status": "ok", "value": 2}, schema_version="x/v1")
    assert json.loads(path.read_text(encoding="utf-8"))["value"] == 1 and len(sink.records) == 1


def test_the_sink_reads_ties_and_adopts_records(tmp_path):
    sink = _sink(tmp_path)
    upstream, _ = sink.save_record("g0", {"status": "ok"}, schema_version="x/v1")
    assert sink.read("g0", schema_version="x/v1", keep=True)["status"] == "ok"
    assert sink.records[-1].action == "existing"
    assert sink.lineage(upstream) == {"path": f"76-activation-memory-strategies/{upstream.name}",
                                      "sha256": sha256_file(upstream)}
    with pytest.raises(UpstreamRecordError, match="schema"):
        sink.read("g0", schema_version="y/v1")
    other = tmp_path / "73-training-performance" / "b.json"
    other.parent.mkdir()
    other.write_text(json.dumps({"status": "oom"}), encoding="utf-8")
    ref = sink.adopt(other, stage="training_baseline")
    assert (ref.status, ref.sha256) == ("oom", sha256_file(other)) and failed_records(sink.records) == [ref]
    closure = tmp_path / "pt_verl_closure" / "sink_v1.json"
    closure.parent.mkdir()
    closure.write_text(json.dumps({"system_decision": {"status": "failed"}}), encoding="utf-8")
    assert sink.adopt(closure, stage="verl_mechanism_closure").status == "failed"


def test_the_sink_keeps_every_record_under_its_results_root(tmp_path):
    sink = _sink(tmp_path / "results")
    with pytest.raises(ConfigError, match="outside the results root"):
        sink.save(tmp_path / "elsewhere.json", {"status": "ok"})
    assert not (tmp_path / "elsewhere.json").exists()


def test_the_sink_refuses_a_used_label_before_any_work(tmp_path):
    sink = _sink(tmp_path)
    sink.require_new(["g0", "g1"])
    sink.save_record("g1", {}, schema_version="x/v1")
    with pytest.raises(RecordExistsError, match="was used before"):
        sink.require_new(["g0", "g1"])


def test_a_dry_run_sink_names_nothing_and_writes_nothing(tmp_path):
    sink = _sink(None, run_mode="dry_run", run_label="anything")
    assert sink.record_path("g0") is None and not sink.writes_records
    with pytest.raises(RecordExistsError, match="dry_run"):
        sink.save_record("g0", {})


def test_the_sink_has_the_members_of_a_chapter_context(tmp_path):
    from tools.chapters.context import ChapterContext

    context = ChapterContext("76", "cpu_smoke", "ctx_v1", "76-activation-memory-strategies", tmp_path, tmp_path)
    sink = RecordSink.from_context(context)
    assert sink.record_path("g0") == context.record_path("g0")
    for member in ("run_mode", "run_label", "results_root", "chapter_id", "slug", "writes_records", "record_path",
                   "save_record"):
        assert hasattr(sink, member) and hasattr(context, member)


def test_load_runner_names_a_function():
    assert load_runner("tools.experiments.contract:load_runner") is load_runner
    with pytest.raises(ConfigError, match="module:function"):
        load_runner("tools.experiments.contract")


def test_the_common_flags_are_declared_once_and_keep_each_commands_spelling(tmp_path):
    parser = add_common_arguments(argparse.ArgumentParser(), ("label", "run_mode", "model_source", "variants", "seeds",
                                                              "time_limit_s", "results_dir"),
                                  label={"flags": ("--run-label", "--label")},
                                  model_source={"flags": ("--model-source", "--weights")})
    args = parser.parse_args(["--run-label", "flags_v1", "--run-mode", "real_gpu", "--weights", "random_init",
                              "--variant", "a", "--variant", "b", "--seed", "3", "--time-limit-s", "90",
                              "--results-dir", str(tmp_path)])
    plan = plan_from_args("any", args, chapter="76")
    assert (plan.label, plan.model_source, plan.variants, plan.seeds, plan.limits.time_s, plan.results_root) == (
        "flags_v1", "random_init", ("a", "b"), (3,), 90.0, tmp_path)
    assert len(COMMON_FLAGS) >= 12


def test_every_experiment_command_builds_its_parser_from_the_common_flags():
    """No experiment declares a common flag by hand (the 19 copies the issue counted)."""
    repeated = []
    for path in sorted((Path(__file__).resolve().parents[3] / "tools" / "experiments").rglob("*.py")):
        if path.name == "cli.py" and path.parent.name == "experiments":
            continue
        text = path.read_text(encoding="utf-8")
        for spellings, _ in COMMON_FLAGS.values():
            repeated += [f"{path.name}: {flag}" for flag in spellings if f'add_argument("{flag}"' in text]
    assert repeated == []
