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
    Experiment(
        name="distill_delivery",
        title="88 distilled student delivery: a frozen teacher and a common student start; G0 baseline, G1 route "
              "(anchored teacher trajectories, then on-policy distillation) on 3 seeds, G2 candidates with G0's "
              "decoding; identity and comparability, quality-retention and deployment gates passed together, and a "
              "terminal decision: only accept opens the final held-out set and writes the deployment handoff",
        chapters=("88",),
        runner="tools.experiments.distillation.delivery:run",
        stages=("delivery",),
        default_stage="delivery",
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        mechanism=("comparability", "deployment_gates", "terminal_decision"),
    ),
)
