"""`python -m tools.experiments.verl_closure`: the experiment's command line."""

import sys

from tools.experiments.verl_closure.cli import main

sys.exit(main())
