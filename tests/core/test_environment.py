"""What a record's runtime snapshot states about the machine that wrote it."""

from __future__ import annotations

from tools.core.environment import installed_version, runtime_snapshot


def test_the_runtime_snapshot_states_the_versions_the_gpu_image_may_differ_in():
    snapshot = runtime_snapshot()
    for package in ("transformers", "peft", "tokenizers", "accelerate", "bitsandbytes"):
        assert snapshot[package] == installed_version(package), package
    assert snapshot["tokenizers"] is not None
