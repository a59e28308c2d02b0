"""Project root, run modes and labels, preflight reports, runtime snapshots and write-once records.

Every notebook and command of the course starts here: it finds the repository, checks the
run parameters before any work is done, and writes its evidence with `save_json_record_once`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError

PROJECT_ROOT_ENV = "COURSE_PROJECT_ROOT"
"""Environment variable that overrides project-root discovery (e.g. on a cloud checkout)."""

ROOT_MARKERS = ("tools/project_runtime.py", "notebooks")

RUN_MODES = ("dry_run", "cpu_smoke", "real_gpu")
EVIDENCE_LEVELS = {"dry_run": None, "cpu_smoke": "cpu_smoke", "real_gpu": "real_gpu"}
DEFAULT_RESULTS_DIRS = {"cpu_smoke": Path("build/results"), "real_gpu": Path("benchmarks/results")}

PLACEHOLDER_LABEL = "replace_with_unique_label"
_PLACEHOLDER_WORDS = ("replace", "placeholder", "changeme", "change_me", "todo", "xxx", "your_label")
_LABEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,95}$")

PREFLIGHT_STATUSES = ("ready", "warning", "blocked")


# ---------------------------------------------------------------------------
# Project root
# ---------------------------------------------------------------------------

def _is_project_root(path: Path) -> bool:
    return all((path / marker).exists() for marker in ROOT_MARKERS)


def _package_checkout_root() -> Path | None:
    """The checkout this `tools` package was imported from (editable install), if it is one."""
    candidate = Path(__file__).resolve().parents[1]
    return candidate if _is_project_root(candidate) else None


def resolve_project_root(start: str | os.PathLike | None = None) -> Path:
    """Return the repository root.

    Order: the `COURSE_PROJECT_ROOT` environment variable, then `start` (default: the current
    directory, which is the notebook's folder under JupyterLab and papermill) and its parents,
    then the checkout the `tools` package was imported from (so a kernel started in a temporary
    folder, e.g. by nbgrader's autograde, still finds the course).
    """
    configured = os.environ.get(PROJECT_ROOT_ENV)
    if configured:
        root = Path(configured).expanduser().resolve()
        if not _is_project_root(root):
            raise ConfigError(
                f"{PROJECT_ROOT_ENV}={configured!r} is not the course repository "
                f"(expected {', '.join(ROOT_MARKERS)} inside it); fix or unset the variable."
            )
        return root
    here = Path(start if start is not None else Path.cwd()).expanduser().resolve()
    for candidate in (here, *here.parents):
        if _is_project_root(candidate):
            return candidate
    package_root = _package_checkout_root()
    if package_root is not None:
        return package_root
    raise ConfigError(
        f"cannot find the course repository above {here}; open the notebook from the repository "
        f"or set {PROJECT_ROOT_ENV}=/path/to/the/repository."
    )


# ---------------------------------------------------------------------------
# Run parameters
# ---------------------------------------------------------------------------

def validate_run_mode(run_mode: str) -> str:
    """Return `run_mode` if it is one of RUN_MODES, else raise ConfigError."""
    if run_mode not in RUN_MODES:
        raise ConfigError(f"unknown RUN_MODE {run_mode!r}; choose one of {', '.join(RUN_MODES)}.")
    return run_mode


def is_placeholder_label(label: str) -> bool:
    """True when `label` is the template placeholder or looks like one."""
    lowered = str(label).lower()
    return lowered == PLACEHOLDER_LABEL or any(word in lowered for word in _PLACEHOLDER_WORDS)


def validate_run_label(label: str) -> str:
    """Return `label` if it can name records: 3-96 characters of [A-Za-z0-9_.-], not a placeholder."""
    if not isinstance(label, str) or not _LABEL_PATTERN.match(label):
        raise ConfigError(
            f"invalid RUN_LABEL {label!r}: use 3-96 characters of letters, digits, '_', '.', '-', "
            "starting with a letter or digit (e.g. 'h200_rl_system_v1')."
        )
    if is_placeholder_label(label):
        raise ConfigError(f"RUN_LABEL {label!r} is a placeholder; set a unique label for this run.")
    return label


def evidence_level(run_mode: str) -> str | None:
    """The evidence level a record written in `run_mode` carries (None for dry_run)."""
    return EVIDENCE_LEVELS[validate_run_mode(run_mode)]


def default_results_dir(run_mode: str, root: Path | None = None) -> Path | None:
    """Where records of `run_mode` go: build/results (cpu_smoke), benchmarks/results (real_gpu)."""
    relative = DEFAULT_RESULTS_DIRS.get(validate_run_mode(run_mode))
    if relative is None:
        return None
    return (root or resolve_project_root()) / relative


def require_finite(name: str, value: Any, *, minimum: float | None = None, positive: bool = False) -> float:
    """Return `value` as a float, raising ConfigError if it is not finite or out of range."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if positive and number <= 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value!r}")
    return number


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------

def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"record value of type {type(value).__name__} is not JSON serialisable: {value!r}")


def encode_record(record: Mapping[str, Any]) -> bytes:
    """Canonical UTF-8 JSON bytes of a record (NaN and infinity are refused: use null)."""
    text = json.dumps(record, ensure_ascii=False, indent=2, sort_keys=False,
                      allow_nan=False, default=_json_default)
    return (text + "\n").encode("utf-8")


def save_json_record_once(path: str | os.PathLike, record: Mapping[str, Any]) -> str:
    """Write `record` to `path` atomically and exactly once; return the file's sha256.

    The JSON goes to a temporary file in the same folder and is then hard-linked into place,
    which fails if `path` exists, so a record is never overwritten, even by a concurrent writer.
    A record that cannot be encoded leaves nothing behind.
    """
    target = Path(path)
    if target.exists():
        raise RecordExistsError(f"record {target} already exists; records are write-once, use a new RUN_LABEL.")
    payload = encode_record(record)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, 0o644)  # mkstemp creates 0600; records are meant to be shared
        try:
            os.link(temp_name, target)
        except FileExistsError:
            raise RecordExistsError(
                f"record {target} already exists; records are write-once, use a new RUN_LABEL."
            ) from None
    finally:
        os.unlink(temp_name)
    return hashlib.sha256(payload).hexdigest()


def load_record(path: str | os.PathLike, *, schema_version: str | None = None,
                expected_sha256: str | None = None) -> dict:
    """Read a record, checking its schema and (optionally) its sha256 before returning it."""
    source = Path(path)
    if not source.is_file():
        raise UpstreamRecordError(f"required record {source} does not exist; run the stage that writes it first.")
    if expected_sha256 is not None:
        actual = sha256_file(source)
        if actual != expected_sha256:
            raise UpstreamRecordError(
                f"sha256 of {source} is {actual}, expected {expected_sha256}; the record changed since it was referenced."
            )
    try:
        record = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UpstreamRecordError(f"record {source} is not valid JSON: {error}") from None
    if schema_version is not None and record.get("schema_version") != schema_version:
        raise UpstreamRecordError(
            f"record {source} has schema {record.get('schema_version')!r}, expected {schema_version!r}."
        )
    return record


def lineage_entry(path: str | os.PathLike, results_root: str | os.PathLike) -> dict:
    """The `{path, sha256}` a downstream record stores for an upstream file.

    `path` is relative to the results root (POSIX form), never a machine path: a record written on
    a cloud GPU and committed stays valid in every checkout. An upstream file outside the results
    root is refused (ConfigError).
    """
    source, root = Path(path).resolve(), Path(results_root).resolve()
    try:
        shown = source.relative_to(root)
    except ValueError:
        raise ConfigError(f"upstream record {source} lies outside the results root {root}; "
                          "keep every record of a run under one results folder.") from None
    return {"path": shown.as_posix(), "sha256": sha256_file(source)}


def resolve_lineage(entry: Mapping, results_root: str | os.PathLike, *, schema_version: str | None = None) -> dict:
    """Read the upstream record a lineage entry names, relative to `results_root`, checking its sha256."""
    if not isinstance(entry, Mapping) or not entry.get("path") or not entry.get("sha256"):
        raise UpstreamRecordError(f"lineage entry {entry!r} needs a path and a sha256.")
    relative = Path(entry["path"])
    if relative.is_absolute() or ".." in relative.parts:
        raise UpstreamRecordError(f"lineage path {entry['path']!r} must be relative to the results root.")
    return load_record(Path(results_root) / relative, schema_version=schema_version, expected_sha256=entry["sha256"])


def utc_timestamp() -> str:
    """Current UTC time in ISO 8601, second precision."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def record_header(*, schema_version: str, chapter: str, stage: str, run_mode: str, run_label: str) -> dict:
    """The fields every record starts with (COURSE_DESIGN §5)."""
    return {
        "schema_version": schema_version,
        "chapter": chapter,
        "stage": stage,
        "run_label": validate_run_label(run_label),
        "run_mode": validate_run_mode(run_mode),
        "evidence_level": evidence_level(run_mode),
        "created_utc": utc_timestamp(),
    }


# ---------------------------------------------------------------------------
# Runtime snapshot
# ---------------------------------------------------------------------------

def _git(root: Path, *args: str) -> str | None:
    try:
        completed = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def git_state(root: Path | None = None) -> dict:
    """Commit and dirty flag of the checkout; both None outside a git checkout."""
    root = root or resolve_project_root()
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def runtime_snapshot(root: Path | None = None) -> dict:
    """Python, platform, torch, CUDA, device and git facts of the running process."""
    snapshot: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "executable": Path(sys.executable).name,  # not the machine path: records are committed
        "virtualenv": sys.prefix != sys.base_prefix,
        "torch": None,
        "cuda_build": None,
        "cuda_available": False,
        "device": "cpu",
        "device_name": platform.processor() or platform.machine(),
    }
    if importlib.util.find_spec("torch") is not None:
        import torch

        snapshot["torch"] = torch.__version__
        snapshot["cuda_build"] = torch.version.cuda
        snapshot["cuda_available"] = bool(torch.cuda.is_available())
        if snapshot["cuda_available"]:
            snapshot["device"] = "cuda"
            snapshot["device_name"] = torch.cuda.get_device_name(0)
    for package in ("transformers", "peft"):
        snapshot[package] = installed_version(package)
    snapshot.update(git_state(root))
    return snapshot


# ---------------------------------------------------------------------------
# Preflight
# ---------------------------------------------------------------------------

def installed_version(distribution: str) -> str | None:
    """Installed version of a distribution, or None when it is absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def read_pins(requirements_file: str | os.PathLike) -> dict[str, str]:
    """`name -> version` of the `name==version` lines of a requirements file, following `-r` includes."""
    path = Path(requirements_file)
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            pins.update(read_pins(path.parent / line.split(None, 1)[1]))
            continue
        match = re.match(r"^([A-Za-z0-9_.\-\[\],]+)\s*==\s*([^\s;]+)", line)
        if match:
            pins[re.sub(r"\[.*\]", "", match.group(1)).lower()] = match.group(2)
    return pins


def _check(name: str, ok: bool, severity: str, detail: str, fix: str | None = None) -> dict:
    return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "fix": None if ok else fix}


def preflight_report(
    *,
    requirements_file: str | os.PathLike | None = None,
    require_cuda: bool = False,
    min_gpu_memory_gib: float | None = None,
    model_paths: Iterable[tuple[str, Path, str]] = (),
    output_paths: Iterable[Path] = (),
    extra_checks: Iterable[dict] = (),
) -> dict:
    """Check (never install) what a stage needs; return a report with status, reasons and next actions.

    `model_paths` holds `(model_id, expected_path, download_command)`: a missing model cache is a
    `model_cache` reason and is kept apart from other blockers so callers can exit with code 4.
    `output_paths` must not exist yet (records are write-once).
    """
    checks: list[dict] = []
    if requirements_file is not None:
        pins = read_pins(requirements_file)
        for name, wanted in pins.items():
            have = installed_version(name)
            if have is None:
                checks.append(_check(f"package:{name}", False, "blocked", f"{name} is not installed (want {wanted})",
                                     f"pip install -r {Path(requirements_file).name}"))
            elif have.split("+")[0] != wanted.split("+")[0]:
                checks.append(_check(f"package:{name}", False, "warning", f"{name} {have} installed, {wanted} pinned",
                                     f"pip install '{name}=={wanted}'"))
            else:
                checks.append(_check(f"package:{name}", True, "blocked", f"{name} {have}"))
    if require_cuda:
        cuda_ok, detail, memory_ok, memory_detail = False, "torch is not installed", False, "no CUDA device"
        if importlib.util.find_spec("torch") is not None:
            import torch

            cuda_ok = bool(torch.cuda.is_available())
            detail = (f"CUDA device {torch.cuda.get_device_name(0)}" if cuda_ok
                      else f"torch {torch.__version__} sees no CUDA device (cuda build: {torch.version.cuda})")
            if cuda_ok:
                total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
                memory_ok = min_gpu_memory_gib is None or total_gib >= min_gpu_memory_gib
                memory_detail = f"{total_gib:.1f} GiB on device 0 (need {min_gpu_memory_gib} GiB)"
        checks.append(_check("cuda", cuda_ok, "blocked", detail,
                             "run on a machine with an NVIDIA GPU and a CUDA build of torch (see README, GPU runbook)"))
        if min_gpu_memory_gib is not None:
            checks.append(_check("gpu_memory", memory_ok, "blocked", memory_detail,
                                 f"use a GPU with at least {min_gpu_memory_gib} GiB"))
    for model_id, path, download in model_paths:
        present = Path(path).exists()
        checks.append(_check(f"model_cache:{model_id}", present, "model_cache",
                             f"{model_id} {'found at' if present else 'missing at'} {path}", download))
    for path in output_paths:
        free = not Path(path).exists()
        checks.append(_check(f"output:{Path(path).name}", free, "blocked",
                             f"{path} {'is free' if free else 'already exists'}",
                             "choose a new RUN_LABEL; records are never overwritten"))
    checks.extend(extra_checks)
    return summarize_preflight(checks)


def summarize_preflight(checks: list[dict]) -> dict:
    """Fold checks into `{status, reasons, next_actions, only_model_cache_missing, checks}`."""
    failed = [check for check in checks if not check["ok"]]
    blocking = [check for check in failed if check["severity"] in ("blocked", "model_cache")]
    if blocking:
        status = "blocked"
    elif failed:
        status = "warning"
    else:
        status = "ready"
    next_actions = []
    for check in failed:
        if check.get("fix") and check["fix"] not in next_actions:
            next_actions.append(check["fix"])
    return {
        "status": status,
        "ready": status != "blocked",
        "only_model_cache_missing": bool(blocking) and all(c["severity"] == "model_cache" for c in blocking),
        "reasons": [f"{check['name']}: {check['detail']}" for check in failed],
        "next_actions": next_actions,
        "checks": checks,
    }


PREFLIGHT_EXIT_READY = 0
PREFLIGHT_EXIT_BLOCKED = 3
PREFLIGHT_EXIT_MODEL_CACHE = 4


def preflight_exit_code(report: Mapping[str, Any]) -> int:
    """0 ready or warning, 4 when only the model cache is missing, 3 otherwise."""
    if report["status"] != "blocked":
        return PREFLIGHT_EXIT_READY
    return PREFLIGHT_EXIT_MODEL_CACHE if report["only_model_cache_missing"] else PREFLIGHT_EXIT_BLOCKED


def format_preflight(report: Mapping[str, Any], title: str = "preflight") -> str:
    """Human-readable preflight report: status, each failing check, and what to run next."""
    lines = [f"{title}: {report['status'].upper()}"]
    for check in report["checks"]:
        mark = "ok " if check["ok"] else ("!! " if check["severity"] != "warning" else "~  ")
        lines.append(f"  {mark}{check['name']}: {check['detail']}")
    if report["next_actions"]:
        lines.append("next actions:")
        lines.extend(f"  - {action}" for action in report["next_actions"])
    return "\n".join(lines)
