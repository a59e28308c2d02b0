"""The one script a lent GPU machine runs, rehearsed on this CPU: the same steps, cpu_smoke, tiny model.

A typo in the script or a changed command line is found here, not in the first (short) GPU window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "benchmarks" / "gpu" / "run_device_batch.sh"
SFT_PLANS = sorted(p.stem[3:].upper().replace("_", "-") for p in (REPO_ROOT / "tools/experiments/sft_training/plans").glob("ch_*.py"))


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("device") / "out"
    env = {**os.environ, "PYTHON": sys.executable, "COURSE_MODEL_CACHE": str(out.parent / "models")}
    completed = subprocess.run(["bash", str(SCRIPT), "--label", "pytest_device", "--out", str(out), "--rehearse"],
                               capture_output=True, text=True, env=env, timeout=900, cwd="/")
    return completed, out


def test_every_step_of_the_device_batch_passes_in_rehearsal(rehearsal):
    completed, out = rehearsal
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert completed.returncode == 0, (out / "log.txt").read_text(encoding="utf-8")[-3000:]
    steps = [step["step"] for step in summary["steps"]]
    assert steps[:3] == ["environment", "verl_closure_torch", "baseline_73"]
    assert [f"memory_76_{stage}" for stage in ("prepare", "g0", "g1", "close")] == steps[3:7]
    assert steps[7:] == [f"sft_{chapter}" for chapter in SFT_PLANS] and len(SFT_PLANS) >= 5
    assert summary["failed_steps"] == [] and summary["run_mode"] == "cpu_smoke"


def test_the_records_come_back_in_one_archive_as_cpu_smoke_evidence(rehearsal):
    _, out = rehearsal
    with tarfile.open(out / "records.tar.gz") as archive:
        names = [name for name in archive.getnames() if name.endswith(".json")]
        records = [json.load(archive.extractfile(name)) for name in names]
    folders = {Path(name).parts[0] for name in names}
    assert {"pt_verl_closure", "73-training-performance", "76-activation-memory-strategies"} <= folders
    assert len(folders) >= 3 + len(SFT_PLANS)
    for name, record in zip(names, records):
        assert record.get("evidence_level") in ("cpu_smoke", None), name
        assert record.get("run_label") in ("pytest_device", None), name


def test_bad_arguments_stop_the_script_before_any_step(tmp_path):
    completed = subprocess.run(["bash", str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True)
    assert completed.returncode == 2 and "usage" in completed.stderr
    assert not (tmp_path / "summary.json").exists()
