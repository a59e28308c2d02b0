"""What a run needs, checked without loading a model or importing a backend's stack.

`preflight(config)` returns a `tools.core.preflight` report: exit 0 ready, 4 when only the model cache
is missing, 3 blocked. For the verl backend it also checks, from files only, that the model's
tokenizer and vocabulary agree (see `tools.models.vocabulary`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.core.environment import installed_version
from tools.core.preflight import preflight_report
from tools.errors import ConfigError
from tools.experiments.verl_closure.config import VERL_VERSION, ClosureConfig, validate_config
from tools.experiments.verl_closure.overrides import verl_config_dir
from tools.models.cache import model_cache_check
from tools.models.vocabulary import vocabulary_check

VERL_PACKAGES = ("verl", "ray", "vllm", "torch", "transformers", "peft", "flash_attn", "tensordict", "hydra-core")

_VERL_PROBE = (
    "import importlib.metadata as m, json\n"
    "def v(n):\n"
    "    try: return m.version(n)\n"
    "    except m.PackageNotFoundError: return None\n"
    f"print(json.dumps({{n: v(n) for n in {VERL_PACKAGES!r}}}))\n"
)


def _check(name: str, ok: bool, severity: str, detail: str, fix: str | None = None) -> dict:
    return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "fix": None if ok else fix}


def verl_python(verl_root: str | os.PathLike | None) -> Path | None:
    """The interpreter of a PT-VERL-CUDA checkout (`<root>/.venv/bin/python`), when there is one."""
    if verl_root is None:
        return None
    candidate = Path(verl_root).expanduser() / ".venv" / "bin" / "python"
    return candidate if candidate.is_file() else None


def verl_environment(config: ClosureConfig) -> tuple[dict, str]:
    """Versions of the verl runtime packages, from this interpreter or the checkout's, and which one."""
    local = {name: installed_version(name) for name in VERL_PACKAGES}
    if local["ray"] and local["vllm"]:
        return local, sys.executable
    interpreter = verl_python(config.verl_root)
    if interpreter is None:
        return local, sys.executable
    completed = subprocess.run([str(interpreter), "-c", _VERL_PROBE], capture_output=True, text=True,
                               timeout=120, check=False)
    if completed.returncode != 0:
        return {**local, "probe_error": completed.stderr.strip()[-500:]}, str(interpreter)
    return json.loads(completed.stdout.strip().splitlines()[-1]), str(interpreter)


def _torch_checks() -> list[dict]:
    checks = []
    for package in ("torch", "transformers", "peft"):
        version = installed_version(package)
        checks.append(_check(f"package:{package}", version is not None, "blocked",
                             f"{package} {version}" if version else f"{package} is not installed",
                             "pip install -r requirements-cpu.txt"))
    return checks


def _verl_checks(config: ClosureConfig) -> list[dict]:
    versions, interpreter = verl_environment(config)
    fix_env = ("install the PT-VERL-CUDA profile (requirements-verl.txt) or pass --verl-root to a verl "
               f"{VERL_VERSION} checkout with its .venv; on a machine without it use --backend torch")
    checks = [_check("verl_version", versions.get("verl") == VERL_VERSION, "blocked",
                     f"verl {versions.get('verl')} in {interpreter} (need {VERL_VERSION})", fix_env)]
    for package in ("ray", "vllm", "tensordict"):
        checks.append(_check(f"package:{package}", versions.get(package) is not None, "blocked",
                             f"{package} {versions.get(package)} in {interpreter}", fix_env))
    if config.attn_implementation == "flash_attention_2":
        checks.append(_check("package:flash_attn", versions.get("flash_attn") is not None, "blocked",
                             f"flash_attn {versions.get('flash_attn')} (needed by --attn-implementation "
                             "flash_attention_2)", "install flash-attn or use --attn-implementation sdpa"))
    try:
        config_dir = verl_config_dir(config.verl_root)
        checks.append(_check("verl_config", (config_dir / "ppo_trainer.yaml").is_file(), "blocked",
                             f"verl config folder {config_dir}", fix_env))
    except ConfigError as error:
        checks.append(_check("verl_config", False, "blocked", str(error), fix_env))
    checks.append(vocabulary_check(config.model, config.model_cache, source=config.model_source))
    return checks


def preflight(config: ClosureConfig) -> dict:
    """Check (never load or install) what a run needs; returns a preflight report with `run_mode`."""
    validate_config(config)
    checks = _torch_checks() if config.backend == "torch" else _verl_checks(config)
    checks.append(model_cache_check(config.model, config.model_cache, source=config.model_source))
    report = preflight_report(require_cuda=config.device == "cuda", output_paths=[Path(config.output)],
                              extra_checks=checks)
    report["run_mode"] = config.run_mode
    return report
