"""The GPU batch's budget, per-step limits and incremental summary, shown on the toy experiment (no torch):
the steps come from the registry, a step that runs over its limit is killed with its process group and
leaves every earlier record in the archive, a step the budget cannot fit is skipped and says so, and the
summary and archive are rewritten after every step, so a batch killed from outside still brings back
what it finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from chapter_factory import REPO_ROOT

from tools.experiments import device_batch, registry

HERE = Path(__file__).resolve().parent
TOY_STEPS = ("toy_measure", "toy_sleep", "toy_summarise")


def _env() -> dict:
    return {**os.environ, registry.EXTRA_PACKAGES_ENV: "toy_experiment",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(HERE)])}


def _batch_command(out: Path, *args: str) -> list[str]:
    steps = [item for name in TOY_STEPS for item in ("--step", name)]
    return [sys.executable, "-m", "tools.experiments", "batch", "--label", "toy_batch_v1", "--out", str(out),
            "--rehearse", *steps, *args]


def _archive(out: Path) -> list[str]:
    with tarfile.open(out / "records.tar.gz") as archive:
        return sorted(name for name in archive.getnames() if name.endswith(".json"))


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


MEASURED = ["toy_experiment/toy_experiment_measure_large_toy_batch_v1.json",
            "toy_experiment/toy_experiment_measure_small_toy_batch_v1.json"]


def test_the_steps_are_the_registrys_after_the_environment_check_and_the_models(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(registry.EXTRA_PACKAGES_ENV, "toy_experiment")
    steps = device_batch.batch_steps(run_mode="real_gpu", label="l_v1", results_dir=tmp_path / "results",
                                     model_source="random_init", max_step_s=100.0)
    names = [step.name for step in steps]
    assert names == ["environment", "models", *[step.name for step in registry.device_steps()]]
    assert steps[0].gate and not any(step.gate for step in steps[1:])
    assert all(step.max_s <= 100.0 for step in steps)
    toy = next(step for step in steps if step.name == "toy_sleep")
    assert toy.argv[:3] == ("-m", "tools.experiments", "run") and "--stage" in toy.argv
    assert toy.argv[toy.argv.index("--model-source") + 1] == "random_init"


def test_a_chain_step_is_promised_the_sha256_of_every_upstream_manifest_the_batch_wrote(tmp_path):
    """The SFT chain in real_gpu needs a promised sha256 for each upstream manifest: the batch adds
    `--upstream-sha256 ID=SHA` for every one it finds under the label, just before the step runs."""
    from tools.core.handoff import manifest_path
    from tools.core.records import sha256_file
    from tools.experiments.sft_chain.experiment import add_upstream_arguments
    import argparse

    steps = {step.name: step for step in device_batch.batch_steps(run_mode="real_gpu", label="l_v1",
                                                                   results_dir=tmp_path, model_source="random_init")}
    delivery = steps["chain_62_delivery"]
    assert delivery.upstreams == ("63", "65") and steps["chain_63_selection"].upstreams == ("64",)
    assert device_batch.promised(delivery, tmp_path, "l_v1").argv == delivery.argv  # nothing written: nothing promised
    path = manifest_path(tmp_path, "63-lora-variant-selection", "l_v1")
    path.parent.mkdir(parents=True)
    path.write_text("{}", encoding="utf-8")
    argv = device_batch.promised(delivery, tmp_path, "l_v1").argv
    assert argv[-2:] == ("--upstream-sha256", f"63={sha256_file(path)}")
    parser = argparse.ArgumentParser()
    add_upstream_arguments(parser)
    options = parser.parse_args(["--upstream-sha256", f"63={sha256_file(path)}", "--upstream-sha256", "65=" + "a" * 64])
    from tools.experiments.sft_chain.manifests import promised_sha256

    assert promised_sha256(vars(options), "63") == sha256_file(path) and promised_sha256(vars(options), "65") == "a" * 64
    with pytest.raises(SystemExit):
        parser.parse_args(["--upstream-sha256", "63"])


@pytest.mark.integration
def test_a_step_killed_by_its_limit_leaves_every_earlier_record_in_the_archive(tmp_path):
    out = tmp_path / "out"
    completed = subprocess.run(_batch_command(out, "--budget-s", "600"), env=_env(),
                               capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 1, completed.stderr
    summary = _summary(out)
    steps = {entry["step"]: entry for entry in summary["steps"]}
    assert steps["toy_measure"]["status"] == "ok"
    assert steps["toy_sleep"]["status"] == "timed_out" and steps["toy_sleep"]["exit_code"] == 124
    assert steps["toy_sleep"]["timed_out"] is True and steps["toy_summarise"]["status"] == "ok"
    assert summary["failed_steps"] == ["toy_sleep"] and summary["complete"] is True
    assert _archive(out) == sorted(MEASURED + ["toy_experiment/toy_experiment_summary_toy_batch_v1.json"])
    with tarfile.open(out / "records.tar.gz") as archive:
        measured = json.load(archive.extractfile(MEASURED[0]))
    assert measured["limits"]["time_s"] == steps["toy_measure"]["limit_s"]  # each step is told its time
    assert steps["toy_measure"]["command"][-2:] == ["--time-limit-s", f"{steps['toy_measure']['limit_s']:.0f}"]
    assert "=== toy_sleep (limit 5 s)" in (out / "log.txt").read_text(encoding="utf-8")  # its own max_s


@pytest.mark.integration
def test_a_step_the_budget_cannot_fit_is_skipped_and_says_so(tmp_path, monkeypatch):
    """A fake clock jumps 105 s when the first step ends: 15 s of the 120 s budget are left, less than a
    step needs, so the next step is skipped (and the summary says why) while the first one's records stay."""
    monkeypatch.syspath_prepend(str(HERE))
    monkeypatch.setenv(registry.EXTRA_PACKAGES_ENV, "toy_experiment")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), str(HERE)]))
    now = {"t": 0.0}

    def step_done(line: str) -> None:
        now["t"] += 105.0

    out = tmp_path / "out"
    summary = device_batch.run_batch(label="toy_batch_v1", out=out, rehearse=True, budget_s=120.0,
                                     only=("toy_measure", "toy_summarise"), clock=lambda: now["t"], echo=step_done)
    steps = {entry["step"]: entry for entry in summary["steps"]}
    assert steps["toy_measure"]["status"] == "ok" and steps["toy_measure"]["limit_s"] == 120.0
    assert steps["toy_summarise"]["status"] == "skipped"
    assert "15 s of the budget left" in steps["toy_summarise"]["reason"]
    assert steps["toy_summarise"]["exit_code"] is None and steps["toy_summarise"]["seconds"] is None
    assert summary["failed_steps"] == ["toy_summarise"] and _summary(out) == summary
    assert _archive(out) == MEASURED


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.integration
def test_a_batch_stopped_from_outside_still_brought_back_every_finished_step(tmp_path):
    """The GPU session ends the command (its 10-minute limit): what finished before is already saved, and
    the step that was running goes with the batch (its own process group is killed too)."""
    out = tmp_path / "out"
    process = subprocess.Popen(_batch_command(out, "--budget-s", "600"), env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, far above any plausible run
        while time.monotonic() < deadline:
            log = (out / "log.txt").read_text(encoding="utf-8") if (out / "log.txt").is_file() else ""
            if "process group" in log.partition("=== toy_sleep")[2]:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the batch never started its second step")
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    last_group = int((out / "log.txt").read_text(encoding="utf-8").rsplit("process group ", 1)[1].split()[0])
    assert not _group_alive(last_group)  # the step that was running went with the batch
    summary = _summary(out)
    assert summary["complete"] is False and summary["planned_steps"] == list(TOY_STEPS)
    assert summary["steps"][0]["step"] == "toy_measure" and summary["steps"][0]["status"] == "ok"
    assert set(MEASURED) <= set(_archive(out))


@pytest.mark.parametrize("args, message", [
    (["--step", "no_such_step"], "unknown step"),
    (["--label", "replace_with_unique_label"], "placeholder"),
    (["--budget-s", "0"], "must be positive"),
])
def test_bad_arguments_stop_the_batch_before_any_step(tmp_path, args, message):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "tools.experiments", "batch", "--label", "toy_batch_v1", "--out", str(out),
               "--rehearse", *args]
    completed = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 2 and message in completed.stderr
    assert not out.exists()
