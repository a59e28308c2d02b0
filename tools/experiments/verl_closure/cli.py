"""The command line of the shared verl experiment; the only module of the experiment that prints.

    python -m tools.verl_mechanism_closure --mode preflight|run --run-label L --output PATH
        [--backend verl|torch] [--model ID|tiny] [--model-source local|random_init] [--device cpu|cuda]
        [--verl-root DIR] [--model-cache DIR] [--response-token-cap N] [--attn-implementation A]
        [--gpu-memory-utilization F] [--progress]

(`python -m tools.experiments.verl_closure` is the same command.) Preflight loads no model: exit 0
ready, 4 when only the model cache is missing, 3 blocked. A run exits 0 when the record was written,
2 on invalid input (nothing done), 3/4 when the preflight blocks, 1 when a stage failed (no record;
see stderr and `<label>_<group>.log`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from tools.core.environment import installed_version
from tools.core.paths import resolve_project_root
from tools.core.preflight import PREFLIGHT_EXIT_MODEL_CACHE, format_preflight, preflight_exit_code
from tools.errors import ConfigError, ModelCacheMissingError, RecordExistsError
from tools.experiments.cli import add_common_arguments
from tools.experiments.verl_closure.config import (ATTN_IMPLEMENTATIONS, BACKENDS, DEFAULT_MODEL, TINY, ClosureConfig,
                                                   validate_config)
from tools.experiments.verl_closure.preflight import preflight, verl_python
from tools.experiments.verl_closure.runner import run_experiment

PROGRAM = "python -m tools.verl_mechanism_closure"
MODULE = "tools.experiments.verl_closure"

EXIT_OK = 0
EXIT_STAGE_FAILED = 1
EXIT_INVALID = 2


def add_closure_arguments(parser: argparse.ArgumentParser, *, backend_default: str | None = None) -> None:
    """The experiment's own flags (the common ones come from tools.experiments.cli). Backend None:
    torch on the CPU, verl on CUDA."""
    parser.add_argument("--backend", choices=BACKENDS, default=backend_default)
    parser.add_argument("--verl-root", type=Path, default=None)
    parser.add_argument("--response-token-cap", type=int, default=128)
    parser.add_argument("--attn-implementation", default="sdpa", choices=ATTN_IMPLEMENTATIONS,
                        help="actor attention in the verl backend (flash_attention_2 needs flash-attn)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(prog=PROGRAM, description="The shared single-GPU verl experiment of "
                                     "PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM (release vs retain of the rollout engine).")
    result.add_argument("--mode", choices=("preflight", "run"), required=True)
    add_common_arguments(result, ("label",), label={"flags": ("--run-label", "--label")})
    result.add_argument("--output", required=True, type=Path)
    add_closure_arguments(result, backend_default="verl")
    add_common_arguments(result, ("model", "model_source", "device", "model_cache", "progress"),
                         model={"default": DEFAULT_MODEL, "help": f"a model id, or '{TINY}'"},
                         device={"default": "cuda", "help": None})
    return result


def config_from_args(args: argparse.Namespace) -> ClosureConfig:
    return ClosureConfig(run_label=args.label, output=args.output, backend=args.backend, model=args.model,
                         model_source=args.model_source, device=args.device, verl_root=args.verl_root,
                         model_cache=args.model_cache, response_token_cap=args.response_token_cap,
                         attn_implementation=args.attn_implementation,
                         gpu_memory_utilization=args.gpu_memory_utilization, progress=args.progress)


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _reexec_in_verl_env(config: ClosureConfig, argv: Sequence[str]) -> int | None:
    """Run this command again with the verl checkout's interpreter when this one lacks verl's runtime."""
    if config.backend != "verl" or (installed_version("ray") and installed_version("vllm")):
        return None
    interpreter = verl_python(config.verl_root)
    if interpreter is None or Path(sys.executable).resolve() == interpreter.resolve():
        return None
    root = resolve_project_root()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    _to_stderr(f"running in the verl environment: {interpreter} -m {MODULE} {shlex.join(argv)}")
    return subprocess.run([str(interpreter), "-m", MODULE, *argv], cwd=root, env=env, check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    try:
        config = validate_config(config_from_args(args))
    except ConfigError as error:
        _error(str(error))
        return EXIT_INVALID
    if args.mode == "preflight":
        report = preflight(config)
        print(format_preflight(report, title=f"verl_mechanism_closure preflight ({config.backend}, {config.run_mode})"))
        return preflight_exit_code(report)
    delegated = _reexec_in_verl_env(config, argv)
    if delegated is not None:
        return delegated
    if Path(config.output).exists():
        _error(f"record {config.output} already exists; records are write-once, use a new run label.")
        return EXIT_INVALID
    report = preflight(config)
    if report["status"] == "blocked":
        print(format_preflight(report, title="verl_mechanism_closure preflight"), file=sys.stderr)
        return preflight_exit_code(report)
    try:
        result = run_experiment(config, echo=_to_stderr)
    except (ConfigError, RecordExistsError) as error:
        _error(str(error))
        return EXIT_INVALID
    except ModelCacheMissingError as error:
        _error(str(error))
        return PREFLIGHT_EXIT_MODEL_CACHE
    except Exception as error:  # noqa: BLE001 - reported with its traceback in the group log
        _error(f"a stage failed ({type(error).__name__}: {error}); no record was written. "
               f"Details: {config.log_path('release')} / {config.log_path('retain')}")
        return EXIT_STAGE_FAILED
    decision = result["record"]["system_decision"]
    print(json.dumps({"record": str(result["path"]), "sha256": result["sha256"], "status": decision["status"],
                      "checks": decision["checks"]}, indent=2))
    return EXIT_OK
