"""The Ray executor of the batch runner (tools.course.runs.ray_executor), on a local 2-CPU Ray cluster.

The same chapters through `--executor ray` and `--executor local` give the same records (apart from the
label, timestamps and the host's runtime snapshot); a node without a required package is reported by name
before any work; a task whose worker dies is retried once, then reported, and the rest of the batch goes on;
an address no cluster answers on fails before any work, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chapter_factory import REPO_ROOT, code, make_toy_project, toy_cells, toy_notebook
from tools.core.catalog import load_catalog, select_chapters
from tools.course.ray_cluster import connect
from tools.course.runs import ray_executor
from tools.course.runs.runner import format_summary, run_chapters
from tools.errors import ConfigError

pytestmark = pytest.mark.xdist_group("ray")  # one local Ray cluster at a time on the test machine

VOLATILE = ("created_utc", "run_label", "runtime")
"""Record fields that name the run or the machine, not the result."""

RECORD_CELL = '''
import json, pathlib
if RUN_MODE != "dry_run":
    out = pathlib.Path(RESULTS_DIR) / "toy" / f"toy_result_{RUN_LABEL}.json"
    assert not out.exists(), "reused label"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"chapter": "TOY", "mode": RUN_MODE, "sum": 1 + 2}), encoding="utf-8")
'''


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for the module (shut down afterwards)."""
    ray = connect(None, num_cpus=2)
    yield ray
    ray.shutdown()


def comparable(results: Path) -> dict:
    """Every record under `results`, keyed by its path with the label removed, volatile fields dropped."""
    found = {}
    for path in sorted(results.rglob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        label = record.get("run_label") or path.stem.rsplit("_", 1)[-1]
        key = str(path.relative_to(results)).replace(label, "<label>")
        found[key] = {name: value for name, value in record.items() if name not in VOLATILE}
    return found


def test_an_unreachable_address_fails_before_any_work_naming_it(tmp_path):
    root = make_toy_project(tmp_path, toy_notebook(toy_cells() + [code(RECORD_CELL)]))
    with pytest.raises(ConfigError, match="127.0.0.1:9"):
        run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label="ray_bad_address",
                     results_dir=str(tmp_path / "res"), show_progress=False, executor="ray", address="127.0.0.1:9")
    with pytest.raises(ConfigError, match="HOST:PORT"):
        run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label="ray_bad_address", show_progress=False,
                     executor="ray", address="headnode")
    with pytest.raises(ConfigError, match="--executor ray"):
        run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label="ray_bad_address", show_progress=False,
                     address="127.0.0.1:6379")
    assert not (tmp_path / "res").exists() and not (root / "build" / "runs").exists()


@pytest.mark.integration
def test_the_toy_chapter_gives_the_same_records_on_ray_and_locally(tmp_path, ray_cluster):
    root = make_toy_project(tmp_path / "course", toy_notebook(toy_cells() + [code(RECORD_CELL)]))
    outcomes = {}
    for executor in ("local", "ray"):
        _, outcomes[executor] = run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label=f"toy_{executor}",
                                             results_dir=str(tmp_path / executor), show_progress=False,
                                             executor=executor)
    assert [o.status for o in outcomes["ray"]] == [o.status for o in outcomes["local"]] == ["passed"]
    assert comparable(tmp_path / "ray") == comparable(tmp_path / "local") != {}
    assert outcomes["ray"][0].records_written == [str(tmp_path / "ray" / "toy" / "toy_result_toy_ray.json")]
    summary = json.loads((root / "build/runs/toy_ray/summary.json").read_text(encoding="utf-8"))
    assert summary["executor"] == "ray" and summary["cluster"]["cpus"] == 2.0
    assert (root / "build/runs/toy_ray/toy.ipynb").is_file()


@pytest.mark.integration
@pytest.mark.slow
def test_two_real_chapters_give_the_same_records_on_ray_and_locally(tmp_path, ray_cluster):
    chapters = select_chapters(["33", "32"], REPO_ROOT)
    outcomes = {}
    for executor in ("local", "ray"):
        _, outcomes[executor] = run_chapters(REPO_ROOT, chapters, run_mode="cpu_smoke",
                                             label=f"pytest_ray_eq_{executor}_{tmp_path.name[-6:]}",
                                             results_dir=str(tmp_path / executor), show_progress=False,
                                             executor=executor)
    assert [o.status for o in outcomes["ray"]] == [o.status for o in outcomes["local"]] == ["passed", "passed"]
    local, remote = comparable(tmp_path / "local"), comparable(tmp_path / "ray")
    assert len(local) == 2 and local == remote
    assert [len(o.records_written) for o in outcomes["ray"]] == [1, 1]  # each chapter lists its own record only


@pytest.mark.integration
def test_a_node_without_a_required_package_is_named_before_any_work(tmp_path, ray_cluster):
    with pytest.raises(ConfigError, match=r"node .* lacks the course's packages no_such_course_package"):
        ray_executor.check_nodes(ray_cluster, REPO_ROOT, tmp_path / "res",
                                 required=(*ray_executor.REQUIRED_PACKAGES, "no_such_course_package"))
    reports = ray_executor.check_nodes(ray_cluster, REPO_ROOT, tmp_path / "res")
    assert len(reports) == 1 and reports[0]["sees_results"] is True and reports[0]["missing_packages"] == []
    assert list((tmp_path / "res").iterdir()) == []  # the probe file is gone


KILL_WORKER_CELL = '''
import os, signal
if RUN_MODE != "dry_run":
    os.kill(os.getppid(), signal.SIGKILL)  # the kernel's parent is the Ray worker that runs this chapter
'''


@pytest.mark.integration
def test_a_task_whose_worker_dies_is_retried_then_reported_and_the_batch_goes_on(tmp_path, ray_cluster):
    root = make_toy_project(tmp_path / "course", toy_notebook(toy_cells() + [code(KILL_WORKER_CELL)]))
    _, outcomes = run_chapters(root, load_catalog(root), run_mode="cpu_smoke", label="toy_killed",
                               results_dir=str(tmp_path / "res"), show_progress=False, executor="ray")
    assert outcomes[0].status == "failed"
    assert "worker running it died" in outcomes[0].error and "second try" in outcomes[0].error
    assert "FAILED TOY" in format_summary(outcomes)
    assert not list((tmp_path / "res").rglob("*.json"))  # nothing half-written, nothing written twice


SLOW_RECORD_CELL = RECORD_CELL + '''
import time
if RUN_MODE != "dry_run":
    time.sleep(600)  # interrupted long before this ends
'''


@pytest.mark.integration
def test_an_interrupted_driver_keeps_the_record_writes_the_summary_and_a_rerun_refuses_the_label(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    root = make_toy_project(tmp_path / "course", toy_notebook(toy_cells() + [code(SLOW_RECORD_CELL)]))
    results = tmp_path / "res"
    record = results / "toy" / "toy_result_toy_interrupted.json"
    command = [sys.executable, "-m", "tools.course", "run", "--run-mode", "cpu_smoke", "--label", "toy_interrupted",
               "--results-dir", str(results), "--executor", "ray", "--ray-cpus", "2", "--no-progress"]
    # The driver starts as from a user's shell: without what an earlier in-process ray.init left in this worker's
    # environment (RAY_AUTH_MODE, RAY_CLIENT_MODE, PYTHONBREAKPOINT pointing into Ray). Both hangs seen had an
    # empty log, which only such an environment gives (Ray's token-auth line is missing).
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("RAY_") and not (key == "PYTHONBREAKPOINT" and value.startswith("ray."))}
    environment["COURSE_PROJECT_ROOT"] = str(root)
    log = tmp_path / "driver.log"
    # The driver's output goes to a file, not a pipe: a process the cluster left behind could hold a pipe open
    # long after the driver exited. Its own session, so that a hang leaves nothing of the cluster behind.
    # No stdin: a pytest-xdist worker's stdin is its channel to the controller, never a child's to read.
    with open(log, "w", encoding="utf-8") as sink:
        driver = subprocess.Popen(command, cwd=REPO_ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=sink,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # a hang guard only
        while not record.is_file() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert record.is_file(), log.read_text(encoding="utf-8") if driver.poll() is not None else "no record in time"
        written = record.read_bytes()
        driver.send_signal(signal.SIGINT)
        try:
            # a hang guard only: the driver bounds its cancellations (30 s) and Ray's shutdown (60 s)
            driver.wait(timeout=150)
        except subprocess.TimeoutExpired:
            driver.send_signal(signal.SIGUSR1)  # the driver writes every thread's stack to its log
            time.sleep(3)
            pytest.fail("the interrupted driver did not exit; its log and stacks:\n"
                        + log.read_text(encoding="utf-8")[-12000:])
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    output = log.read_text(encoding="utf-8")
    assert driver.returncode == 130, output
    assert "every finished record is kept" in output
    summary = json.loads((root / "build/runs/toy_interrupted/summary.json").read_text(encoding="utf-8"))
    assert [item["status"] for item in summary["chapters"]] == ["interrupted"]
    assert record.read_bytes() == written
    again = subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert again.returncode != 0 and record.read_bytes() == written
    assert "toy_interrupted" in again.stdout + again.stderr


SLOW_RAY_SCRIPT = """
import atexit, sys, time
from tools.course.ray_cluster import disconnect

class SlowRay:
    def shutdown(self):
        time.sleep(600)

ray = SlowRay()
atexit.register(ray.shutdown)  # as ray.init does
print("finished" if disconnect(ray, limit_s=0.5) else "gave up", flush=True)
"""


def test_disconnect_gives_up_on_a_shutdown_that_hangs_and_the_process_still_exits():
    """An interrupted driver must exit even when Ray is slow to stop: `disconnect` waits at most its limit and
    removes Ray's exit hook, so the interpreter does not wait on it either (the timeout is a hang guard)."""
    import subprocess
    import sys

    from tools.course.ray_cluster import disconnect

    done = subprocess.run([sys.executable, "-c", SLOW_RAY_SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "gave up", done.stdout + done.stderr

    class QuickRay:
        def shutdown(self):
            pass

    assert disconnect(QuickRay(), limit_s=5) is True


def test_cancel_gives_up_on_cancellations_that_hang_and_cancels_every_task_that_answers():
    """An interrupted driver asks Ray to cancel its running tasks within a limit: a cluster that does not take
    a cancellation does not keep the driver from writing its summary and shutting down."""
    import threading
    import time

    from tools.course.ray_cluster import cancel

    release = threading.Event()

    class StuckRay:
        def cancel(self, ref, force):
            release.wait(60)

    class QuickRay:
        def __init__(self):
            self.cancelled = []

        def cancel(self, ref, force):
            self.cancelled.append((ref, force))

    started = time.monotonic()
    try:
        assert cancel(StuckRay(), ["a"], limit_s=0.5) is False
    finally:
        release.set()
    assert time.monotonic() - started < 30  # a hang guard only
    quick = QuickRay()
    assert cancel(quick, ["a", "b"], limit_s=30) is True and quick.cancelled == [("a", True), ("b", True)]
