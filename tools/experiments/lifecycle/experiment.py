"""Project 86's experiment in the experiment registry (see tools.experiments.registry)."""

from __future__ import annotations

from tools.experiments.registry import Experiment

EXPERIMENTS = (
    Experiment(
        name="lifecycle_recovery",
        title="86 lifecycle and recovery: 84's and 85's candidates checked for freshness against 62's serving "
              "delivery, every promised file hashed end to end, a writer SIGKILLed at each kill point of a staged "
              "publish protocol and of an in-place control, recovered, and a sealed handoff manifest (ready / blocked)",
        chapters=("86",),
        runner="tools.experiments.lifecycle.stage:run",
        stages=("lifecycle",),
        default_stage="lifecycle",
        arguments="tools.experiments.sft_chain.experiment:add_upstream_arguments",
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        mechanism=("policy_freshness", "verify_artefacts", "recovery_plan", "handoff_state"),
    ),
)
