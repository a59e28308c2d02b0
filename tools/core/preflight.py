"""Preflight reports: check (never install) what a stage needs, and say what to run next.

Exit codes shared by every command: 0 ready (or warnings only), 4 when only the model cache is
missing, 3 blocked.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from tools.core.environment import installed_version, read_pins
from tools.errors import EXIT_MODEL_CACHE

PREFLIGHT_STATUSES = ("ready", "warning", "blocked")


def _check(name: str, ok: bool, severity: str, detail: str, fix: str | None = None) -> dict:
    return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "fix": None if ok else fix}


def _first_visible_nvml_handle(pynvml):
    """NVML's handle of the first device CUDA will use (CUDA_VISIBLE_DEVICES by index or UUID)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(visible)
    return pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def cuda_device_facts(min_gpu_memory_gib: float | None) -> tuple[bool, str, bool, str]:
    """(cuda_ok, detail, memory_ok, memory_detail) read through NVML and torch's build info only.

    No CUDA context is created here: a preflight runs in the parent of processes that later take
    the GPU (Ray, vLLM), and CUDA initialised before they start can break them.
    """
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed", False, "no CUDA device"
    import torch

    if not torch.version.cuda:
        return False, f"torch {torch.__version__} is a CPU build (no CUDA)", False, "no CUDA device"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = _first_visible_nvml_handle(pynvml)
            name = pynvml.nvmlDeviceGetName(handle)
            total_gib = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
        finally:
            pynvml.nvmlShutdown()
    except Exception as error:  # NVML missing or no driver: reported as the reason, never hidden
        return False, f"no NVIDIA device visible to NVML ({type(error).__name__}: {error})", False, "no CUDA device"
    memory_ok = min_gpu_memory_gib is None or total_gib >= min_gpu_memory_gib
    name = name.decode() if isinstance(name, bytes) else name
    return True, f"CUDA device {name} (torch {torch.__version__}, CUDA {torch.version.cuda})", memory_ok, \
        f"{total_gib:.1f} GiB on the first visible device (need {min_gpu_memory_gib} GiB)"


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
        cuda_ok, detail, memory_ok, memory_detail = cuda_device_facts(min_gpu_memory_gib)
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

PREFLIGHT_EXIT_MODEL_CACHE = EXIT_MODEL_CACHE


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
