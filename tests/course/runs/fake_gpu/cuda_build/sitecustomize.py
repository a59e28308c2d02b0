"""Test shim (on PYTHONPATH only in the GPU-image rehearsal): this interpreter's CPU torch reports a CUDA 13
build, as the GPU image's torch does. No device is touched: the batch's environment check reads CUDA
through NVML and torch's build information only."""

import torch

torch.version.cuda = "13.0"
