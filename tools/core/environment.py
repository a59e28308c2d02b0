"""What a record says about the machine that wrote it: interpreter, torch, CUDA, packages, git."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tools.core.paths import resolve_project_root


RECORDED_PACKAGES = ("transformers", "peft", "tokenizers", "accelerate", "bitsandbytes")
"""The libraries whose versions every record's runtime states (None when absent): the GPU image runs its
own transformers / tokenizers / accelerate, and the batch carries peft and bitsandbytes."""


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
        from tools.core.numerics import cpu_numerics

        snapshot["cpu_numerics"] = cpu_numerics()  # the arithmetic a CPU figure came from
    for package in RECORDED_PACKAGES:
        snapshot[package] = installed_version(package)
    snapshot.update(git_state(root))
    return snapshot


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
