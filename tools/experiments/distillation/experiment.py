"""The distillation experiment in the experiment registry (see tools.experiments.registry)."""

from __future__ import annotations

from tools.experiments.registry import Experiment

EXPERIMENTS = (
    Experiment(
        name="opd_distill",
        title="The lab teacher distilled into the lab student: on-policy vs fixed trajectories",
        chapters=("DISTILL-OPD",),
        runner="tools.experiments.distillation.stage:run",
        variants=("on_policy", "fixed"),
        run_modes=("dry_run", "cpu_smoke"),
    ),
)
