"""Test shim (on PYTHONPATH only in the GPU-image rehearsal): an NVML that sees one H200, so the batch's
environment check runs its real_gpu path on a CPU machine. Only the calls the course makes exist."""

from types import SimpleNamespace

UUID = "GPU-00000000-0000-0000-0000-0000000000aa"
TOTAL = 143771 * 2**20


class NVMLError(Exception):
    pass


def nvmlInit():
    return None


def nvmlShutdown():
    return None


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(index):
    if index != 0:
        raise NVMLError("invalid index")
    return "handle-0"


def nvmlDeviceGetHandleByUUID(uuid):
    if uuid != UUID:
        raise NVMLError("not found")
    return "handle-0"


def nvmlDeviceGetUUID(handle):
    return UUID


def nvmlDeviceGetName(handle):
    return "NVIDIA H200 (fake NVML)"


def nvmlDeviceGetMemoryInfo(handle):
    return SimpleNamespace(total=TOTAL, used=600 * 2**20, free=TOTAL - 600 * 2**20)
