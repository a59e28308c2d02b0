"""The toy experiment's registration: a plan's stages, its variants, one flag and two batch steps."""

from tools.experiments.registry import DeviceStep, Experiment


def add_arguments(parser):
    parser.add_argument("--sleep-s", type=float, default=3600.0, help="how long the sleep stage sleeps")


EXPERIMENTS = (
    Experiment(
        name="toy",
        title="A toy experiment: one record per variant, then a summary that reads them by lineage",
        chapters=("TOY",),
        runner="toy_experiment.runner:run",
        stages=("measure", "summarise", "sleep"),
        default_stage="measure",
        variants=("small", "large"),
        arguments="toy_experiment.experiment:add_arguments",
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        record_folder="toy_experiment",
        device_steps=(
            DeviceStep("toy_measure", "toy", order=5, stage="measure"),
            DeviceStep("toy_summarise", "toy", order=7, stage="summarise"),
            DeviceStep("toy_sleep", "toy", order=6, stage="sleep", max_s=5.0),
        ),
    ),
)
