"""`tools.project_runtime`: the name the course's chapters and seeds use for the core runtime.

A facade only: the code lives in `tools.core` (paths, runs, records, environment, preflight).
Nothing inside `tools` imports this module; notebooks and users may.
"""

from tools.core.environment import git_state, installed_version, read_pins, runtime_snapshot  # noqa: F401
from tools.core.paths import (  # noqa: F401
    DEFAULT_RESULTS_DIRS,
    PROJECT_ROOT_ENV,
    ROOT_MARKERS,
    default_results_dir,
    resolve_project_root,
)
from tools.core.preflight import (  # noqa: F401
    PREFLIGHT_EXIT_BLOCKED,
    PREFLIGHT_EXIT_MODEL_CACHE,
    PREFLIGHT_EXIT_READY,
    PREFLIGHT_STATUSES,
    format_preflight,
    preflight_exit_code,
    preflight_report,
    summarize_preflight,
)
from tools.core.records import (  # noqa: F401
    encode_record,
    lineage_entry,
    load_record,
    record_header,
    resolve_lineage,
    save_json_record_once,
    sha256_file,
    utc_timestamp,
)
from tools.core.runs import (  # noqa: F401
    EVIDENCE_LEVELS,
    PLACEHOLDER_LABEL,
    RUN_MODES,
    evidence_level,
    is_placeholder_label,
    require_finite,
    validate_run_label,
    validate_run_mode,
)
