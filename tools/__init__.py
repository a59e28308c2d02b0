"""The shared code of the post-training systems course, in layers.

    errors                         every error class the tools raise on purpose
    core                           run modes and labels, paths, catalog, write-once records, preflight
    data                           fixed inputs built in code (the arithmetic tasks)
    models | measure               the course's models (the lab models learn the data's tasks); resource sampling and timing
    experiments.<name>             one subpackage per GPU experiment (verl closure, memory strategies, ...)
    chapters | course              what notebooks call; the command line, grading and batch runs

Dependency rule (checked by tests/repo/test_layers.py): a module imports only from a lower layer or from
its own subpackage. Packages of one layer do not import each other (models and measure are
independent, and so are the experiments). Library code never prints unless a caller asks it to.

Facades keep the names the course and its seeds use (`tools.project_runtime`,
`tools.model_runtime`, `tools.training_memory_runtime`, `tools.verl_mechanism_closure`,
`tools.memory_strategy_runtime`): they only re-export, and nothing inside `tools` imports them.
ARCHITECTURE.md explains the layers and how data flows from a notebook parameter to a record.
"""

import logging as _logging

# bitsandbytes (pulled in by peft) warns on CPUs with AVX512-BF16 that an optional Hub kernel package
# is missing. In a notebook that warning is stderr output, and nbgrader scores a grade cell with any
# stderr output 0; the course never uses that CPU kernel, so only errors of bitsandbytes are shown.
_logging.getLogger("bitsandbytes").setLevel(_logging.ERROR)
