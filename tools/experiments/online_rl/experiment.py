"""The online RL experiments in the experiment registry (see tools.experiments.registry)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment

EXPERIMENTS = (
    Experiment(
        name="grpo_rlvr",
        title="GRPO with the verifier integer-answer-v1: a minimal vs an extended candidate group at the same rollout budget",
        chapters=("18",),
        runner="tools.experiments.online_rl.grpo_stage:run",
        variants=("minimal", "extended"),
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        mechanism=("verify_integer_answer", "group_advantages", "clipped_grpo_loss"),
        device_steps=(DeviceStep("grpo_18", "grpo_rlvr", order=60, chapter="18", max_s=240),),
    ),
    Experiment(
        name="tool_use_rl",
        title="The lab model learns to call the calculator tool (REINFORCE over candidate actions) vs shuffled rewards",
        chapters=("PT-AGENTIC-RL",),
        runner="tools.experiments.online_rl.tool_stage:run",
        variants=("task_reward", "shuffled_reward"),
        run_modes=("dry_run", "cpu_smoke"),
        mechanism=("env_step", "assemble_trajectory", "attribute_reward"),
    ),
    Experiment(
        name="rloo_baseline_variance",
        title="Gradient variance of the leave-one-out baseline vs no baseline and the self-inclusive group mean",
        chapters=("PT-RLOO",),
        runner="tools.experiments.online_rl.variance_stage:run",
        run_modes=("dry_run", "cpu_smoke"),
        mechanism=("leave_one_out_advantages",),
    ),
)
