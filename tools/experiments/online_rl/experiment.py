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
        name="grpo_family",
        title="The GRPO family's loss aggregations and the DAPO recipe at one rollout budget; sampler/trainer mismatch",
        chapters=("PT-GRPO-FAMILY",),
        runner="tools.experiments.online_rl.family_stage:run",
        stages=("compare", "mismatch"),
        default_stage="compare",
        variants="tools.experiments.online_rl.family_stage:variant_names",
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        mechanism=("aggregate_loss", "clipped_token_losses", "fill_batch", "importance_sampling_weights"),
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
    Experiment(
        name="online_reward",
        title="85 online reward optimisation: GRPO from 62's delivered SFT adapter on arithmetic built in code, every "
              "sampled batch behind a coverage gate (scoreable groups, truncation, parse failures), effective update "
              "throughput, a shuffled-reward control at the same budget, held-out task and base skill opened once, "
              "paired over 5 seeds against 62's adapter: accept / tune / reject, with a sealed candidate manifest",
        chapters=("85",),
        runner="tools.experiments.online_rl.project_stage:run",
        stages=("optimisation",),
        default_stage="optimisation",
        arguments="tools.experiments.sft_chain.experiment:add_upstream_arguments",
        run_modes=("dry_run", "cpu_smoke", "real_gpu"),
        mechanism=("rollout_coverage", "update_throughput", "adoption_decision"),
        device_steps=(DeviceStep("chain_85_online_reward", "online_reward", order=79, stage="optimisation",
                                 max_s=600, upstreams=("62",)),),
    ),
)
