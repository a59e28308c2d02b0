"""The course pins one CPU arithmetic (tools.core.numerics): importing tools selects torch's AVX2 kernels
unless the environment chose otherwise, and lab models built here are cached per numerics profile."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from tools.core.numerics import PINNED_CPU_NUMERICS, pin_cpu_numerics
from tools.models import lab

HAS_AVX2 = platform.machine() in ("x86_64", "AMD64") and " avx2" in (
    Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else "")


def capability_after_import(**overrides: str) -> str:
    """torch's CPU kernel path in a fresh interpreter that imports torch, then tools, then multiplies."""
    environ = {name: value for name, value in os.environ.items() if name not in PINNED_CPU_NUMERICS}
    environ.update(overrides)
    code = ("import torch, tools; torch.ones(8, 8) @ torch.ones(8, 8); "
            "print(torch.backends.cpu.get_cpu_capability())")
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_pinning_fills_only_what_the_environment_leaves_unset():
    environ = {"MKL_CBWR": "COMPATIBLE"}
    pin_cpu_numerics(environ)
    assert environ == {**PINNED_CPU_NUMERICS, "MKL_CBWR": "COMPATIBLE"}


@pytest.mark.skipif(not HAS_AVX2, reason="the pinned path is x86-64 AVX2; this processor has none")
def test_importing_tools_selects_the_avx2_kernels_and_an_explicit_choice_wins():
    assert capability_after_import() == "AVX2"
    assert capability_after_import(ATEN_CPU_CAPABILITY="default") == "DEFAULT"


def test_a_lab_model_built_under_another_numerics_profile_gets_its_own_folder(monkeypatch):
    monkeypatch.setenv(lab.LAB_SOURCE_ENV, "build")
    recipe = lab.recipe_for("lab")
    here = lab.lab_model_folder(recipe)
    monkeypatch.setattr(lab, "numerics_profile", lambda: {"machine": "arm64", "torch_cpu_capability": "DEFAULT",
                                                          "mkl_cbwr": None})
    assert lab.lab_model_folder(recipe) != here


def test_the_committed_lab_weights_do_not_depend_on_the_numerics_profile(monkeypatch):
    recipe = lab.recipe_for("lab")
    committed = lab.lab_model_folder(recipe)
    monkeypatch.setattr(lab, "numerics_profile", lambda: {"machine": "arm64", "torch_cpu_capability": "DEFAULT",
                                                          "mkl_cbwr": None})
    assert lab.lab_model_folder(recipe) == committed == lab.committed_lab_folder("lab")
