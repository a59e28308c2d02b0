"""The distillation experiment in the experiment registry (see tools.experiments.registry)."""

from __future__ import annotations

from tools.experiments.registry import Experiment

EXPERIMENTS = (
    Experiment(
        name="opd_distill",
        title="The lab teacher distilled into the lab student: on-policy reverse KL vs fixed trajectories with the "
              "forward KL at the same budget, and a shuffled-teacher control",
        chapters=("DISTILL-OPD",),
        runner="tools.experiments.distillation.stage:run",
        variants=("on_policy", "fixed", "shuffled_teacher"),
        run_modes=("dry_run", "cpu_smoke"),
        mechanism=("token_reverse_kl", "generalized_jsd", "mixed_distillation_loss"),
    ),
)
