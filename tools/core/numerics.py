"""One CPU arithmetic for every course process, so that a CPU result is the same on every x86-64 machine.

PyTorch's CPU kernels (ATen), MKL and oneDNN each choose code for the processor they run on, and the
AVX-512 and AVX2 paths add in different orders. Pretraining the lab models on two machines therefore gave
two sets of weights, and the effects the chapters measure on them moved with the machine. The course pins
all three libraries to their AVX2 path, which every x86-64 machine of the last decade has.

The variables take effect only if they are set before the process runs its first tensor operation:
importing `tools` sets them (a value already in the environment wins), and the Makefile exports them to
every target and to the notebook kernels papermill starts. On other processors (an arm64 laptop) they do
nothing and the numbers differ; `cpu_numerics()` says what was in force, and the lab models are cached
per numerics profile.
"""

from __future__ import annotations

import os
import platform
from typing import MutableMapping

PINNED_CPU_NUMERICS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
"""The environment that selects the AVX2 code path of ATen, MKL (conditional numerical reproducibility) and oneDNN."""


def pin_cpu_numerics(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set every variable of PINNED_CPU_NUMERICS that the environment does not set already."""
    for name, value in PINNED_CPU_NUMERICS.items():
        environ.setdefault(name, value)


def cpu_numerics() -> dict:
    """The processor architecture, the kernel path torch uses, and the pinning variables in force."""
    import torch

    return {"machine": platform.machine(), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **{name.lower(): os.environ.get(name) for name in PINNED_CPU_NUMERICS}}
