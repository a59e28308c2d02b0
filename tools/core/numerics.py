"""One CPU arithmetic for every process of a course run, so that one machine repeats its own results.

PyTorch's CPU kernels (ATen), MKL and oneDNN each choose code for the processor they run on, and their
paths (AVX-512, AVX2, generic) add in different orders. The course pins all three to their AVX2 path: then
a notebook kernel, a test worker and a rerun on the same machine compute the same bits.

What pinning does not do is make two processor families agree: MKL's conditional reproducibility and
oneDNN's ISA cap do not give an Intel and an AMD processor the same arithmetic (a lab student pretrained
under the pinned profile came out with other weights on an AMD EPYC than on the machine where the effects
were first calibrated), and on arm64 the variables do nothing. So the course does not rely on it: the lab
models' weights are committed (tools/models/lab_weights/, the same start everywhere), and `make test` runs
every effect test a second time under a generic profile with lab models pretrained under it, so an effect
that holds only on one machine's last bits fails the suite.

The variables take effect only if they are set before the process runs its first tensor operation:
importing `tools` sets them (a value already in the environment wins), and the Makefile exports them to
every target and to the notebook kernels papermill starts. `cpu_numerics()` says what was in force; every
record carries it.
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def one_thread_on_cpu(device: str):
    """torch at one thread on a CPU for the duration (the lab and tiny models' matrices are too small to
    gain from a second thread, and on a shared machine the threads only wait for each other)."""
    import torch

    before = torch.get_num_threads()
    if not str(device).startswith("cuda"):
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
