"""The GPU batch: every registered device step, each in its own process, under one time budget.

    python -m tools.experiments batch --label L --out DIR [--rehearse] [--budget-s 480] [--max-step-s S]
        [--model-source random_init|local] [--step NAME ...]

(`benchmarks/gpu/run_device_batch.sh` installs the carried wheels, sets the offline environment and
calls this.) The steps are `environment` (the machine's check: imports, versions, version conflicts,
CUDA through NVML; a blocked environment stops the batch), `models` (every model the steps use, built
or found once, before the steps load it), then the registry's device steps in order.

The batch has one budget: each step gets the time that remains (at most its own `max_s`) and is
killed, with its process group, when it runs over; a step with less than MIN_STEP_S left is skipped.
After every step `summary.json` and `records.tar.gz` (every record under `results/`) are rewritten,
atomically, so a batch cut short anywhere still brings back every record finished before. Exit 0 when
every step passed, 1 otherwise, 2 on invalid arguments (nothing run).

Stopping the batch (SIGTERM, Ctrl-C) kills the running step's process group too. `python -m
tools.experiments environment` and `models` are the first two steps' commands. Standard
library only until a step runs: the batch starts on a machine where the course's own imports may fail.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

SUMMARY_SCHEMA = "device-batch/v2"
BATCH_BUDGET_S = 480.0
"""About 8 minutes: one GPU command may run 10, and the session has about 15 with start-up."""
MIN_STEP_S = 20.0
KILL_GRACE_S = 10.0
TIMED_OUT_EXIT = 124
CARRIED_SITE_ENV = "COURSE_CARRIED_SITE"
"""Set by run_device_batch.sh to the folder the carried wheels were installed into."""

PACKAGES = ("torch", "transformers", "tokenizers", "accelerate", "safetensors", "huggingface_hub", "numpy", "peft",
            "bitsandbytes", "psutil", "nvidia-ml-py")
"""The packages whose versions (and origin: carried or the image's) the batch records."""
REQUIRED_IMPORTS = ("torch", "transformers", "tokenizers", "accelerate", "safetensors", "peft")
OPTIONAL_IMPORTS = {"bitsandbytes": "chapter 26's NF4 variant fails without it"}


@dataclass(frozen=True)
class BatchStep:
    """One step of the batch: its command after `python`, and the most seconds it may take."""

    name: str
    argv: tuple[str, ...]
    max_s: float
    gate: bool = False
    """A gate stops the batch when it fails (the environment check)."""
    takes_time_limit: bool = False
    """An experiment step is told its limit (`--time-limit-s`, the plan's `limits.time_s`)."""
    upstreams: tuple[str, ...] = ()
    """Projects whose manifests the step reads (see `promised`)."""

    def command(self, limit_s: float) -> tuple[str, ...]:
        return (*self.argv, "--time-limit-s", f"{limit_s:.0f}") if self.takes_time_limit else self.argv


def promised(step: BatchStep, results: Path, label: str) -> BatchStep:
    """The step with `--upstream-sha256 ID=SHA` for every upstream manifest this batch has written under
    `label` (a missing one is not promised: the step then refuses to start in real_gpu, naming it)."""
    from tools.core.catalog import find_chapter
    from tools.core.handoff import manifest_path
    from tools.core.records import sha256_file

    flags = []
    for upstream in step.upstreams:
        path = manifest_path(results, find_chapter(upstream).slug, label)
        if path.is_file():
            flags += ["--upstream-sha256", f"{upstream}={sha256_file(path)}"]
    return BatchStep(step.name, (*step.argv, *flags), step.max_s, step.gate, step.takes_time_limit, step.upstreams)


def batch_steps(*, run_mode: str, label: str, results_dir: Path, model_source: str,
                max_step_s: float | None = None) -> list[BatchStep]:
    """The environment check, the model build, then every registered device step in order."""
    from tools.experiments.registry import device_steps

    common = ("--run-mode", run_mode, "--model-source", model_source)
    steps = [BatchStep("environment", ("-m", "tools.experiments", "environment", *common,
                                       "--json", str(results_dir.parent / "environment.json")), 120.0, gate=True),
             BatchStep("models", ("-m", "tools.experiments", "models", *common), 240.0)]
    for step in device_steps():
        argv = step.argv(run_mode=run_mode, label=label, results_dir=str(results_dir), model_source=model_source)
        steps.append(BatchStep(step.name, ("-m", "tools.experiments", *argv), step.max_s, takes_time_limit=True,
                               upstreams=step.upstreams))
    if max_step_s is not None:
        steps = [BatchStep(s.name, s.argv, min(s.max_s, max_step_s), s.gate, s.takes_time_limit, s.upstreams)
                 for s in steps]
    return steps


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same folder and rename it over `path`."""
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(handle)
    try:
        write(Path(temp))
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def write_summary(out: Path, summary: dict) -> None:
    _write_atomically(out / "summary.json",
                      lambda temp: temp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8"))


def write_archive(out: Path, results: Path) -> None:
    """`records.tar.gz`: every file under `results/`, under its chapter folder (rewritten whole)."""
    def write(temp: Path) -> None:
        with tarfile.open(temp, "w:gz") as archive:
            if results.is_dir():
                for path in sorted(results.rglob("*")):
                    if path.is_file() and not path.name.startswith("."):
                        archive.add(path, arcname=path.relative_to(results).as_posix())
    _write_atomically(out / "records.tar.gz", write)


_RUNNING: dict[str, subprocess.Popen | None] = {"step": None}
"""The step process running now (its process group is the step's), for `stop_running_step`."""


def stop_running_step() -> None:
    """Kill the running step's process group (the batch itself is being stopped: SIGTERM, Ctrl-C)."""
    process = _RUNNING["step"]
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def run_step(step: BatchStep, *, python: str, limit_s: float, log_file, cwd: Path) -> tuple[int, bool]:
    """Run one step in its own process group; kill the group when it exceeds `limit_s`.
    Returns (exit code, timed out); a killed step exits TIMED_OUT_EXIT."""
    command = step.command(limit_s)
    log_file.write(f"=== {step.name} (limit {limit_s:.0f} s): {python} {' '.join(command)}\n")
    log_file.flush()
    repo = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), repo]))
    process = subprocess.Popen([python, *command], stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd,
                               env={**os.environ, "PYTHONPATH": path}, start_new_session=True)
    _RUNNING["step"] = process
    log_file.write(f"    process group {process.pid}\n")
    log_file.flush()
    try:
        return process.wait(timeout=limit_s), False
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        process.wait()
        return TIMED_OUT_EXIT, True
    finally:
        _RUNNING["step"] = None


def run_batch(*, label: str, out: Path, rehearse: bool = False, budget_s: float = BATCH_BUDGET_S,
              max_step_s: float | None = None, model_source: str | None = None, only: Sequence[str] = (),
              python: str = sys.executable, clock: Callable[[], float] = time.monotonic,
              echo: Callable[[str], None] | None = None) -> dict:
    """Run the batch; returns the summary (also in `out/summary.json`, rewritten after every step)."""
    run_mode = "cpu_smoke" if rehearse else "real_gpu"
    model_source = model_source or ("local" if rehearse else "random_init")
    results = out / "results"
    steps = batch_steps(run_mode=run_mode, label=label, results_dir=results, model_source=model_source,
                        max_step_s=max_step_s)
    if only:
        unknown = sorted(set(only) - {step.name for step in steps})
        if unknown:
            raise ValueError(f"unknown step(s) {unknown}; the batch has {[step.name for step in steps]}")
        steps = [step for step in steps if step.name in only]
    out.mkdir(parents=True, exist_ok=True)
    started = clock()
    summary = {"schema_version": SUMMARY_SCHEMA, "label": label, "run_mode": run_mode, "model_source": model_source,
               "budget_s": budget_s, "started_utc": _utc(), "elapsed_s": 0.0, "complete": False,
               "planned_steps": [step.name for step in steps], "steps": [], "failed_steps": [], "environment": None}
    write_summary(out, summary)
    stop_reason = None
    with open(out / "log.txt", "a", encoding="utf-8") as log_file:
        for step in steps:
            remaining = budget_s - (clock() - started)
            entry = {"step": step.name, "command": list(step.argv), "limit_s": None, "exit_code": None,
                     "seconds": None, "timed_out": False, "status": None}
            if stop_reason is not None or remaining < MIN_STEP_S:
                entry.update(status="skipped", reason=stop_reason or f"{remaining:.0f} s of the budget left "
                                                                     f"(a step needs {MIN_STEP_S:.0f})")
            else:
                step = promised(step, results, label)
                limit = min(step.max_s, remaining)
                step_started = clock()
                code, timed_out = run_step(step, python=python, limit_s=limit, log_file=log_file, cwd=out)
                status = "ok" if code == 0 else ("timed_out" if timed_out else "failed")
                entry.update(command=list(step.command(limit)), limit_s=round(limit, 1), exit_code=code,
                             seconds=round(clock() - step_started, 1), timed_out=timed_out, status=status)
                if step.gate and code != 0:
                    stop_reason = f"{step.name} failed (exit {code}): see log.txt"
            summary["steps"].append(entry)
            if step.name == "environment" and (out / "environment.json").is_file():
                summary["environment"] = json.loads((out / "environment.json").read_text(encoding="utf-8"))
            summary["failed_steps"] = [e["step"] for e in summary["steps"] if e["status"] != "ok"]
            summary["elapsed_s"] = round(clock() - started, 1)
            write_summary(out, summary)
            write_archive(out, results)
            if echo is not None:
                echo(f"{step.name}: {entry['status']}" + (f" (exit {entry['exit_code']}, {entry['seconds']} s)"
                                                          if entry["exit_code"] is not None else ""))
    summary["complete"] = True
    write_summary(out, summary)
    return summary


# ---------------------------------------------------------------------------
# The first two steps: the environment check and the models
# ---------------------------------------------------------------------------

def _origin(distribution: str) -> tuple[str | None, str | None]:
    """(version, "carried" | "image") of an installed distribution, or (None, None)."""
    try:
        found = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None, None
    carried = os.environ.get(CARRIED_SITE_ENV)
    location = Path(str(found.locate_file(""))).resolve()
    inside = carried is not None and Path(carried).resolve() in (location, *location.parents)
    return found.version, "carried" if inside else "image"


def requirement_conflicts(distributions: Sequence[str]) -> list[str]:
    """Each unmet `Requires-Dist` (markers evaluated, extras ignored) of the installed `distributions`."""
    from packaging.requirements import Requirement

    problems = []
    for name in distributions:
        try:
            requirements = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                have = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                problems.append(f"{name} needs {requirement}, which is not installed")
                continue
            if requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
                problems.append(f"{name} needs {requirement}, {requirement.name} {have} is installed")
    return problems


def _import_check(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any import failure is what this check reports
        return f"{type(error).__name__}: {error}"
    return None


def environment_report(run_mode: str) -> dict:
    """The machine's check before any step: versions and origins, imports of every package and of the
    runner of every experiment with a device step, version conflicts, the offline setting, and (real_gpu)
    the CUDA device through NVML without creating a CUDA context."""
    import platform

    from tools.core.preflight import cuda_device_facts, summarize_preflight
    from tools.experiments.registry import all_experiments

    def check(name, ok, severity, detail, fix=None):
        return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "fix": None if ok else fix}

    packages = {name: dict(zip(("version", "origin"), _origin(name))) for name in PACKAGES}
    checks = []
    for module in REQUIRED_IMPORTS:
        error = _import_check(module)
        checks.append(check(f"import:{module}", error is None, "blocked", error or f"{module} imports",
                            "carry the package in .whl/ (benchmarks/gpu/fetch_wheels.sh) or fix the image"))
    for module, consequence in OPTIONAL_IMPORTS.items():
        error = _import_check(module)
        checks.append(check(f"import:{module}", error is None, "warning", error or f"{module} imports",
                            f"carry {module} in .whl/: {consequence}"))
    for experiment in all_experiments().values():
        if not experiment.device_steps:
            continue  # a CPU-only experiment (e.g. PT-AGENTIC-RL's gymnasium tool stage) never runs in the batch
        module = experiment.runner.partition(":")[0]
        error = _import_check(module)
        checks.append(check(f"runner:{experiment.name}", error is None, "blocked", error or module,
                            "a package the experiment needs is missing or incompatible"))
    conflicts = requirement_conflicts([name for name in PACKAGES if packages[name]["version"]])
    checks.append(check("version_conflicts", not conflicts, "blocked", "; ".join(conflicts) or "none",
                        "carry matching versions or run on the image's (see environment/gpu-image.toml)"))
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    checks.append(check("hf_hub_offline", offline, "warning", f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')}",
                        "export HF_HUB_OFFLINE=1 (the machine has no network)"))
    if run_mode == "real_gpu":
        cuda_ok, detail, _, memory = cuda_device_facts(None)
        checks.append(check("cuda", cuda_ok, "blocked", f"{detail}; {memory}",
                            "a CUDA build of torch and an NVIDIA driver the NVML library can see"))
    report = summarize_preflight(checks)
    return {"run_mode": run_mode, "python": platform.python_version(), "packages": packages,
            "carried_site": os.environ.get(CARRIED_SITE_ENV), **report}


def build_models(run_mode: str, model_source: str) -> list[dict]:
    """Build (or find) once every model folder the steps load; returns each one's identity."""
    from tools.experiments.contract import DEFAULT_MODELS, TINY
    from tools.models.loading import model_identity, resolve_model

    wanted = {DEFAULT_MODELS[run_mode]}
    return [model_identity(resolve_model(model, "local" if model == TINY else model_source))
            for model in sorted(wanted)]
