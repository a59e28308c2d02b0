"""`tools.verl_mechanism_closure`: the product name of the shared verl experiment of
PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM. A facade only: the code lives in `tools.experiments.verl_closure`
(config, overrides, protocol, comparisons, checks, record, preflight, runner, cli, backends); nothing
inside `tools` imports this module.

    python -m tools.verl_mechanism_closure --mode preflight|run --run-label L --output PATH
        [--backend verl|torch] [--model ID|tiny] [--model-source local|random_init] [--device cpu|cuda] ...
"""

import sys

from tools.core.preflight import preflight_exit_code  # noqa: F401
from tools.experiments.verl_closure.checks import decide, system_checks  # noqa: F401
from tools.experiments.verl_closure.cli import EXIT_INVALID, EXIT_OK, EXIT_STAGE_FAILED, main  # noqa: F401
from tools.experiments.verl_closure.comparisons import compare_lora_updates, logprob_agreement  # noqa: F401
from tools.experiments.verl_closure.config import (  # noqa: F401
    BACKENDS,
    DEFAULT_MODEL,
    VERL_VERSION,
    ClosureConfig,
    group_settings,
    validate_config,
)
from tools.experiments.verl_closure.overrides import (  # noqa: F401
    compose_verl_config,
    overrides_for_config,
    verl_config_dir,
    verl_group_overrides,
)
from tools.experiments.verl_closure.preflight import preflight  # noqa: F401
from tools.experiments.verl_closure.protocol import (  # noqa: F401
    FREE_CACHE_ENGINE,
    GROUPS,
    PHASES,
    RELEASE_ONLY_PHASES,
    GroupSession,
    Request,
    SupervisedExample,
    admission,
    expected_phases,
    rollouts_sha256,
    run_group,
)
from tools.experiments.verl_closure.record import SCHEMA, SUMMARY_PAGES, build_record, read_summary  # noqa: F401
from tools.experiments.verl_closure.runner import run_experiment  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
