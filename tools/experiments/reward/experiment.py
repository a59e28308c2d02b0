"""The reward branch's experiments in the registry (see tools.experiments.registry)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment


def add_ppo_arguments(parser) -> None:
    parser.add_argument("--iterations", type=int, help="PPO iterations (default 8)")
    parser.add_argument("--tasks-per-iteration", dest="tasks_per_iteration", type=int, help="prompts per iteration")
    parser.add_argument("--samples-per-task", dest="samples_per_task", type=int, help="responses per prompt")


def add_reward_model_arguments(parser) -> None:
    parser.add_argument("--train-pairs", dest="train_pairs", type=int, help="training pairs (default 16)")
    parser.add_argument("--calibration-pairs", dest="calibration_pairs", type=int, help="calibration pairs (default 16)")
    parser.add_argument("--hidden-pairs", dest="hidden_pairs", type=int, help="hidden pairs (default 64)")


EXPERIMENTS = (
    Experiment(
        name="reward_model",
        title="A Bradley-Terry reward model on correct labels vs a 50% mislabelled control, calibrated and gated",
        chapters=("PT-REWARD-MODEL",),
        runner="tools.experiments.reward.reward_model_stage:run",
        stages=("train_and_gate",),
        default_stage="train_and_gate",
        arguments="tools.experiments.reward.experiment:add_reward_model_arguments",
        mechanism=("pairwise_reward_loss", "calibrate_temperature", "reward_model_gate"),
        device_steps=(DeviceStep("reward_model", "reward_model", order=55, stage="train_and_gate", max_s=240),),
    ),
    Experiment(
        name="reward_signal",
        title="Seven reward-signal settings (KL strength, terminal reward, return) on real rollouts, with the gate",
        chapters=("PT-REWARD-SIGNAL",),
        runner="tools.experiments.reward.signal_stage:run",
        stages=("signal_matrix",),
        default_stage="signal_matrix",
        mechanism=("token_level_rewards", "gae_advantages", "whiten_and_gate"),
        device_steps=(DeviceStep("reward_signal", "reward_signal", order=56, stage="signal_matrix", max_s=240),),
    ),
    Experiment(
        name="ppo",
        title="PPO with a value model on the lab task, rewarded by the strict verifier, against a shuffled reward",
        chapters=("16",),
        runner="tools.experiments.reward.ppo_stage:run",
        stages=("ppo",),
        default_stage="ppo",
        arguments="tools.experiments.reward.experiment:add_ppo_arguments",
        mechanism=("ppo_policy_loss", "ppo_value_loss", "ppo_resident_memory"),
        device_steps=(DeviceStep("ppo_16", "ppo", order=57, stage="ppo", max_s=300),),
    ),
)
