"""`tools.memory_strategy_runtime`: the product name of chapter 76's memory-strategy experiment. A
facade only: the code lives in `tools.experiments.memory_strategy`; nothing inside `tools` imports
this module."""

from tools.experiments.memory_strategy.estimate import (  # noqa: F401
    ACTIVATION_ASSUMPTIONS,
    ACTIVATION_FORMULA,
    ARCH_KEYS,
    GQA_NOTE,
    activation_groups,
    arch_from_config,
    compare_with_estimate,
    estimate_activation_bytes,
)
from tools.experiments.memory_strategy.evidence import observed_evidence, verify_execution_path  # noqa: F401
from tools.experiments.memory_strategy.hooks import (  # noqa: F401
    HostCopier,
    StrategyObserver,
    memory_strategy,
    observe_strategy,
    offload_copy_method,
)
from tools.experiments.memory_strategy.judge import (  # noqa: F401
    CANDIDATE_VERDICTS,
    DEFAULT_CUDA_CONTEXT_MARGIN_MB,
    DEFAULT_MIN_BOUNDARY_LENGTHS,
    MEMORY_CAP_RULE,
    admit_next_length,
    decide_memory_boundary,
    decide_memory_strategy_project,
    handoff_gate,
    safety_margin_mb,
    summarize_memory_boundary,
    summarize_memory_strategy_candidates,
)
from tools.experiments.memory_strategy.runner import (  # noqa: F401
    DEFAULT_LEARNING_RATES,
    OPTIMIZER_NAMES,
    OPTIMIZERS,
    TrainingWorkload,
    compare_strategy_gradients,
    make_token_batches,
    run_memory_strategy,
)
from tools.experiments.memory_strategy.strategies import (  # noqa: F401
    CHECKPOINT_API,
    CHECKPOINT_KWARGS,
    STRATEGIES,
    STRATEGY_PATHS,
    validate_strategy,
)
