"""The shared verl experiment through the experiment contract: the plan's model, device and backend, the
record at `<results root>/pt_verl_closure/<label>.json` written once through the run's RecordSink, with
the same fields as the command line's record."""

from __future__ import annotations

import json

import pytest

from tools import verl_mechanism_closure as vmc
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.contract import Plan, run
from tools.experiments.verl_closure.runner import closure_config


def _plan(folder, **changes) -> Plan:
    return Plan(**{"experiment": "verl_closure", "chapter": "PT-ROLLOUT-LIFECYCLE", "run_mode": "cpu_smoke",
                   "label": "pytest_closure_contract", "results_dir": folder, **changes})


def test_the_plan_becomes_the_closure_config(tmp_path):
    smoke = closure_config(_plan(tmp_path), tmp_path / "x.json")
    assert (smoke.backend, smoke.model, smoke.device, smoke.run_mode) == ("torch", "tiny", "cpu", "cpu_smoke")
    gpu = closure_config(_plan(tmp_path, run_mode="real_gpu", model_source="random_init",
                               options={"backend": "torch", "response_token_cap": 64}), tmp_path / "x.json")
    assert (gpu.backend, gpu.model, gpu.device, gpu.model_source, gpu.run_mode, gpu.response_token_cap) == (
        "torch", "Qwen/Qwen2.5-0.5B-Instruct", "cuda", "random_init", "real_gpu", 64)
    assert closure_config(_plan(tmp_path, run_mode="real_gpu"), tmp_path / "x.json").backend == "verl"


@pytest.mark.slow
def test_a_run_through_the_contract_writes_the_command_lines_record(tmp_path):
    records = run(_plan(tmp_path / "contract"))
    assert [(ref.stage, ref.action, ref.status) for ref in records] == [("verl_mechanism_closure", "written", "pass")]
    assert records[0].path == tmp_path / "contract" / "pt_verl_closure" / "pytest_closure_contract.json"
    ours = records[0].load(schema_version=vmc.SCHEMA)
    legacy = tmp_path / "legacy" / "pytest_closure_contract.json"
    assert vmc.main(["--mode", "run", "--run-label", "pytest_closure_contract", "--output", str(legacy),
                     "--backend", "torch", "--model", "tiny", "--device", "cpu"]) == vmc.EXIT_OK
    theirs = json.loads(legacy.read_text(encoding="utf-8"))
    assert list(ours) == list(theirs) and ours["config"].keys() == theirs["config"].keys()
    assert ours["chapters"] == ["PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM"]
    assert vmc.read_summary(records[0].path, "system")["status"] == ours["system_decision"]["status"]
    with pytest.raises(RecordExistsError):
        run(_plan(tmp_path / "contract"))


def test_the_verl_backend_needs_cuda_and_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="needs --device cuda"):
        run(_plan(tmp_path, options={"backend": "verl"}))
    assert list(tmp_path.iterdir()) == []
