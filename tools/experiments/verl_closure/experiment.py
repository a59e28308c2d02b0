"""The shared verl experiment in the experiment registry: one record that PT-ROLLOUT-LIFECYCLE runs
and PT-RL-SYSTEM reads, `<results root>/pt_verl_closure/<label>.json`."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment

EXPERIMENTS = (
    Experiment(
        name="verl_closure",
        title="Release vs retain of the rollout engine around one controlled LoRA update (the shared verl record)",
        chapters=("PT-ROLLOUT-LIFECYCLE", "PT-RL-SYSTEM"),
        runner="tools.experiments.verl_closure.runner:run",
        arguments="tools.experiments.verl_closure.cli:add_closure_arguments",
        run_modes=("cpu_smoke", "real_gpu"),
        record_folder="pt_verl_closure",
        shared_by="PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM read one shared record of the controlled update (release "
                  "vs retain of the rollout engine). The lifecycle page runs it; the system page only reads it.",
        device_steps=(DeviceStep("verl_closure_torch", "verl_closure", order=10, arguments=("--backend", "torch")),),
    ),
)
