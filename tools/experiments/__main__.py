"""`python -m tools.experiments`: list, steps, run, models, batch (see tools.experiments.cli)."""

import sys

from tools.experiments.cli import main

sys.exit(main())
