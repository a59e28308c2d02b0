"""Project 85 in the experiment registry: online reward optimisation (GRPO / RLVR) from 62's delivered
SFT adapter, handing a sealed candidate manifest to 86. Its stage takes the project's three gate
functions from the plan's mechanism (the notebook passes the learner's)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment

EXPERIMENTS = (
    Experiment(
        name="online_reward",
        title="85 online reward optimisation: GRPO from 62's delivered SFT adapter on arithmetic built in code, every "
              "sampled batch behind a coverage gate (scoreable groups, truncation, parse failures), effective update "
              "throughput, a shuffled-reward control at the same budget, held-out task and base skill opened once, "
              "paired over 5 seeds against 62's adapter: accept / tune / reject, with a sealed candidate manifest",
        chapters=("85",),
        runner="tools.experiments.reward_chain.optimisation:run",
        stages=("optimisation",),
        default_stage="optimisation",
        arguments="tools.experiments.sft_chain.experiment:add_upstream_arguments",
        mechanism=("rollout_coverage", "update_throughput", "adoption_decision"),
        device_steps=(DeviceStep("chain_85_online_reward", "online_reward", order=79, stage="optimisation",
                                 max_s=300, upstreams=("62",)),),
    ),
)
