"""`tools.training_memory_runtime`: the product name of the training measurement helpers. A facade
only: the code lives in `tools.measure.training`; nothing inside `tools` imports this module."""

from tools.measure.training import (  # noqa: F401
    AGGREGATE_STATUSES,
    MEAN_KEYS,
    MIB,
    RUN_STATUSES,
    aggregate_runs,
    device_memory_mb,
    free_device_memory,
    measure_training_run,
    out_of_memory_error,
    run_repeated,
    run_with_oom_guard,
)
