"""Tests of the papermill batch runner: modes, labels, locks, records, failures."""

import json
import os
import subprocess
import sys

import pytest

from chapter_factory import code, make_toy_project, toy_cells, toy_notebook
from tools.core.catalog import load_catalog
from tools.course.runs.runner import format_summary, label_lock, run_chapters
from tools.errors import LabelLockedError
from tools.errors import ConfigError

pytestmark = pytest.mark.integration

RECORD_CELL = '''
import json, pathlib
if RUN_MODE != "dry_run":
    out = pathlib.Path(RESULTS_DIR) / f"toy_{RUN_LABEL}.json"
    assert not out.exists(), "reused label"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"mode": RUN_MODE}), encoding="utf-8")
'''


def project(tmp_path, extra_cell=RECORD_CELL):
    cells = toy_cells() + [code(extra_cell)]
    return make_toy_project(tmp_path, toy_notebook(cells))


def test_cpu_smoke_run_writes_records_and_summary(tmp_path):
    root = project(tmp_path)
    label, outcomes = run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label="t_run_1",
                                   results_dir=str(tmp_path / "res"), show_progress=False)
    assert [o.status for o in outcomes] == ["passed"]
    assert outcomes[0].records_written == ["res/toy_t_run_1.json"]
    summary = json.loads((root / "build/runs/t_run_1/summary.json").read_text(encoding="utf-8"))
    assert summary["chapters"][0]["status"] == "passed"
    assert (root / "build/runs/t_run_1/toy.ipynb").is_file()
    assert not (root / "build/locks/t_run_1.lock").exists()


def test_dry_run_writes_no_record_and_gets_a_label(tmp_path):
    root = project(tmp_path)
    label, outcomes = run_chapters(root, load_catalog(root), run_mode="dry_run", show_progress=False)
    assert label.startswith("dry-run-") and outcomes[0].status == "passed" and outcomes[0].records_written == []


def test_failing_cell_is_named_and_batch_continues(tmp_path):
    root = project(tmp_path, extra_cell="raise RuntimeError('stage exploded')")
    _, outcomes = run_chapters(root, load_catalog(root), run_mode="dry_run", label="t_fail_1", show_progress=False)
    failed = outcomes[0]
    assert failed.status == "failed" and failed.failed_cell == 10 and "stage exploded" in failed.error
    assert "FAILED TOY: cell 10" in format_summary(outcomes)
    # the failure as data, as papermill reported it: cell index, cause, the cell's source and traceback
    assert failed.failure["cell"] == 10 and failed.failure["cause"] == "RuntimeError: stage exploded"
    assert failed.failure["source"] == "raise RuntimeError('stage exploded')"
    assert any("stage exploded" in line for line in failed.failure["traceback"])


@pytest.mark.parametrize("mode,label", [("gpu", "ok_label"), ("cpu_smoke", "replace_with_unique_label"),
                                        ("real_gpu", None)])
def test_bad_parameters_fail_before_any_work(tmp_path, mode, label):
    root = project(tmp_path)
    with pytest.raises(ConfigError):
        run_chapters(root, load_catalog(root), run_mode=mode, label=label, show_progress=False)
    assert not (root / "build").exists()


def test_a_held_label_is_refused(tmp_path):
    root = project(tmp_path)
    with label_lock(root, "t_lock_1"):
        with pytest.raises(LabelLockedError, match="still running"):
            run_chapters(root, load_catalog(root), run_mode="dry_run", label="t_lock_1", show_progress=False)
    assert not (root / "build/locks/t_lock_1.lock").exists()


def test_cli_exits_nonzero_naming_the_failing_chapter(tmp_path):
    root = project(tmp_path, extra_cell="1/0")
    env = {**os.environ, "COURSE_PROJECT_ROOT": str(root)}
    completed = subprocess.run([sys.executable, "-m", "tools.course", "run", "--run-mode", "dry_run",
                                "--label", "t_cli_1", "--no-progress"], cwd=root / "notebooks",
                               capture_output=True, text=True, env=env)
    assert completed.returncode == 1
    assert "FAILED TOY: cell 10: ZeroDivisionError" in completed.stdout
    bad = subprocess.run([sys.executable, "-m", "tools.course", "run", "--run-mode", "cpu_smoke",
                          "--label", "replace_with_unique_label"], cwd=root / "notebooks",
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "placeholder" in bad.stderr


def test_extra_parameters_reach_the_notebook_and_are_validated(tmp_path):
    from tools.course.runs.runner import parse_parameters

    root = project(tmp_path, extra_cell="assert MODEL_SOURCE == 'random_init', MODEL_SOURCE")
    _, outcomes = run_chapters(root, load_catalog(root), run_mode="dry_run", label="t_param_1", show_progress=False,
                               extra_parameters=parse_parameters(["MODEL_SOURCE=random_init"]))
    assert outcomes[0].status == "passed", outcomes[0].error
    for bad in (["lower=1"], ["NOVALUE"], ["RUN_MODE=real_gpu"]):
        with pytest.raises(ConfigError):
            parse_parameters(bad)
