"""What a record's runtime snapshot states about the machine that wrote it."""

from __future__ import annotations

from tools.core.environment import installed_version, runtime_snapshot


def test_the_runtime_snapshot_states_the_versions_the_gpu_image_may_differ_in():
    snapshot = runtime_snapshot()
    for package in ("transformers", "peft", "tokenizers", "accelerate", "bitsandbytes"):
        assert snapshot[package] == installed_version(package), package
    assert snapshot["tokenizers"] is not None


def test_the_runtime_snapshot_names_the_cpu_arithmetic_in_force(monkeypatch):
    import os

    snapshot = runtime_snapshot()
    numerics = snapshot["cpu_numerics"]
    assert numerics["aten_cpu_capability"] == os.environ.get("ATEN_CPU_CAPABILITY")
    assert numerics["mkl_cbwr"] == os.environ.get("MKL_CBWR") and numerics["machine"]
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert runtime_snapshot()["cpu_numerics"]["mkl_cbwr"] == "COMPATIBLE"
