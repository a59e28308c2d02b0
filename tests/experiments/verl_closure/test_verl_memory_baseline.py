"""The memory baseline the verl closure's groups must come back to is read after this process's own CUDA
context exists: a context created after the baseline (about 0.5 GiB plus lazily loaded kernels) would
keep device memory above it, and the next group would wait its whole settle timeout."""

from __future__ import annotations

from tools.experiments.verl_closure.runner import read_memory_baseline


def test_the_context_is_created_before_the_baseline_is_read():
    calls = []
    memory = {"used": 100.0}

    def create_context():
        calls.append("context")
        memory["used"] += 600.0  # what a CUDA context costs

    def reader():
        calls.append("read")
        return memory["used"]

    assert read_memory_baseline(reader, create_context=create_context) == (700.0, True)
    assert calls == ["context", "read"]


def test_a_process_without_cuda_reads_the_baseline_as_it_is():
    assert read_memory_baseline(lambda: 42.0, create_context=None) == (42.0, False)
    created = []
    assert read_memory_baseline(None, create_context=lambda: created.append(1)) == (None, False)
    assert created == []  # no device reader, no context: nothing to settle against
