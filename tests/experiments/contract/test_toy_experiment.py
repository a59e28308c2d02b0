"""A new experiment registers itself by adding its own files only: the toy experiment beside this test
(`toy_experiment/`: a declaration and a runner) runs through the contract's `run`, the command line
`python -m tools.experiments` and the GPU batch's step listing, without a line of the repository
naming it. It is made visible the way any out-of-tree experiment is: COURSE_EXPERIMENT_PACKAGES."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from chapter_factory import REPO_ROOT

from tools.core.records import sha256_file
from tools.errors import ConfigError, RecordExistsError
from tools.experiments import registry
from tools.experiments.contract import Limits, Plan, RecordSink, run

HERE = Path(__file__).resolve().parent
FOLDER = "toy_experiment"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(registry.EXTRA_PACKAGES_ENV, "toy_experiment")
    return registry.get_experiment("toy")


def _plan(tmp_path, **changes) -> Plan:
    fields = {"experiment": "toy", "chapter": "TOY", "run_mode": "cpu_smoke", "label": "toy_run_v1",
              "results_dir": tmp_path, "stage": "measure", **changes}
    return Plan(**fields)


def _cli(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, registry.EXTRA_PACKAGES_ENV: "toy_experiment",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(HERE)])}
    return subprocess.run([sys.executable, "-m", "tools.experiments", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_toy_is_registered_only_through_its_own_package(toy, monkeypatch):
    assert toy.chapters == ("TOY",) and toy.stages == ("measure", "summarise", "sleep")
    assert "toy" in registry.all_experiments()
    monkeypatch.delenv(registry.EXTRA_PACKAGES_ENV)
    assert "toy" not in registry.all_experiments()
    code = subprocess.run(["git", "grep", "-l", "-e", "toy_experiment", "-e", '"toy"', "--", "tools", "benchmarks",
                           "Makefile", "pyproject.toml"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert code.stdout.split() == [], "no code outside the toy's own files may name it"


def test_run_writes_one_record_per_variant_then_a_summary_tied_by_lineage(toy, tmp_path):
    measured = run(_plan(tmp_path, seeds=(3, 5)))
    assert [(ref.stage, ref.action, ref.status) for ref in measured] == [
        ("measure_small", "written", "ok"), ("measure_large", "written", "ok")]
    small = measured[0].load(schema_version="toy-experiment/v1")
    assert measured[0].path == tmp_path / FOLDER / f"{FOLDER}_measure_small_toy_run_v1.json"
    assert small["values"] == [1003, 1005] and small["chapter"] == "TOY" and small["evidence_level"] == "cpu_smoke"
    assert small["model"] == "tiny" and small["runtime"]["python"]
    summary = run(_plan(tmp_path, stage="summarise"))[0].load()
    assert summary["best"] == "large"
    assert summary["lineage"] == [
        {"path": f"{FOLDER}/{FOLDER}_measure_{name}_toy_run_v1.json",
         "sha256": sha256_file(tmp_path / FOLDER / f"{FOLDER}_measure_{name}_toy_run_v1.json")}
        for name in ("small", "large")]


def test_a_used_label_is_refused_before_any_work_and_nothing_changes(toy, tmp_path):
    run(_plan(tmp_path, variants=("small",)))
    before = {path: path.read_bytes() for path in tmp_path.rglob("*.json")}
    with pytest.raises(RecordExistsError, match="was used before"):
        run(_plan(tmp_path, variants=("large", "small")))
    assert {path: path.read_bytes() for path in tmp_path.rglob("*.json")} == before


@pytest.mark.parametrize("changes, message", [
    ({"stage": "train"}, "unknown stage 'train'"),
    ({"variants": ("huge",)}, "unknown variant"),
    ({"chapter": "76"}, "serves chapters TOY"),
    ({"experiment": "no_such_experiment"}, "unknown experiment"),
])
def test_a_plan_the_experiment_cannot_run_is_refused_before_any_work(toy, tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        run(_plan(tmp_path, **changes))
    assert list(tmp_path.iterdir()) == []


def test_dry_run_describes_the_plan_and_writes_nothing(toy, tmp_path):
    said = []
    assert run(_plan(tmp_path, run_mode="dry_run", label="anything"), log=said.append) == []
    assert said == ["toy measure (dry_run): variants ['small', 'large'], seeds [1, 2]; nothing is written"]
    assert list(tmp_path.iterdir()) == []


def test_a_notebook_passes_its_own_sink(toy, tmp_path):
    sink = RecordSink(run_mode="cpu_smoke", run_label="toy_sink_v1", results_root=tmp_path, chapter_id="TOY",
                      slug="toy_elsewhere")
    records = run(_plan(tmp_path, label="toy_sink_v1", variants=("small",)), sink)
    assert records == sink.records and records[0].path.parent.name == "toy_elsewhere"


@pytest.mark.slow
def test_the_command_line_runs_the_toy_with_its_own_flag_and_the_common_ones(tmp_path):
    completed = _cli("run", "toy", "--run-mode", "cpu_smoke", "--label", "toy_cli_v1", "--results-dir", str(tmp_path),
                     "--variant", "large", "--seed", "7", "--time-limit-s", "30")
    assert completed.returncode == 0, completed.stderr
    path = tmp_path / FOLDER / f"{FOLDER}_measure_large_toy_cli_v1.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["values"] == [2007] and record["limits"] == {"time_s": 30.0, "cpu_threads": None}
    assert f"measure_large: written, status ok  {path}" in completed.stdout
    slept = _cli("run", "toy", "--run-mode", "cpu_smoke", "--label", "toy_cli_v1", "--results-dir", str(tmp_path),
                 "--stage", "sleep", "--sleep-s", "0")
    assert slept.returncode == 0, slept.stderr


@pytest.mark.parametrize("args, message", [
    (["--stage", "train"], "invalid choice: 'train'"),
    (["--label", "replace_with_unique_label"], "placeholder"),
    (["--variant", "huge"], "unknown variant"),
])
def test_the_command_line_refuses_bad_input_with_exit_2_and_writes_nothing(tmp_path, args, message):
    base = {"--run-mode": "cpu_smoke", "--label": "toy_bad_v1", "--results-dir": str(tmp_path)}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    completed = _cli("run", "toy", *[item for pair in base.items() for item in pair])
    assert completed.returncode == 2 and message in completed.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_batch_listing_places_the_toy_steps_among_the_registered_ones():
    completed = _cli("steps", "--json")
    assert completed.returncode == 0, completed.stderr
    steps = json.loads(completed.stdout)
    names = [step["name"] for step in steps]
    assert {"toy_measure", "toy_summarise", "verl_closure_torch", "memory_76_g0"} <= set(names)
    assert names.index("toy_measure") < names.index("toy_summarise") < names.index("verl_closure_torch")
    assert [step["order"] for step in steps] == sorted(step["order"] for step in steps)
    toy = next(step for step in steps if step["name"] == "toy_summarise")
    assert toy == {"name": "toy_summarise", "experiment": "toy", "stage": "summarise", "chapter": None,
                   "order": 7, "max_s": registry.DEFAULT_STEP_MAX_S, "arguments": []}


def test_limits_reach_the_runner(toy, tmp_path):
    record = run(_plan(tmp_path, limits=Limits(time_s=12, cpu_threads=1)))[0].load()
    assert record["limits"] == {"time_s": 12.0, "cpu_threads": 1}
