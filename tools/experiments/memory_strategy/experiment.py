"""The training-performance chain in the experiment registry: chapter 73's measurement (its audit and its
real step) and its training baseline (which also writes 76's input manifest), chapter 76's stages
prepare -> g0 -> g1 -> close, and chapter 75's budget sensitivity of 76's decision.

In the GPU batch, G1 (the length ladder, the longest stage) and close run after every other step,
so a G1 cut short by the batch's time leaves every other record in place; G1 also sizes its ladder
to the time it is given (see stages.run_g1). 75 reads 76's decision right after close; 73's own
measurement feeds nothing downstream and runs last."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment

STAGES = ("auto", "all", "prepare", "g0", "g1", "close")

EXPERIMENTS = (
    Experiment(
        name="training_performance",
        title="Chapter 73: the timing procedure audited on simulated asynchronous devices, then a real training "
              "step measured (median and spread, real-token throughput, peak memory per phase)",
        chapters=("73",),
        runner="tools.experiments.memory_strategy.performance:run",
        stages=("all", "audit", "measurement"),
        default_stage="all",
        mechanism=("time_steps", "step_time_report", "phase_peaks"),
        device_steps=(DeviceStep("performance_73", "training_performance", order=93, max_s=120.0),),
    ),
    Experiment(
        name="training_baseline",
        title="Chapter 73's training baseline (batch 1, AdamW, float32), measured with its protocol, and 76's "
              "input manifest",
        chapters=("73",),
        runner="tools.experiments.memory_strategy.baseline:run",
        mechanism=("time_steps", "step_time_report"),
        device_steps=(DeviceStep("baseline_73", "training_baseline", order=20),),
    ),
    Experiment(
        name="memory_strategy",
        title="Chapter 76: baseline, checkpoint, offload and hybrid on one workload (G0), a length ladder (G1), "
              "the scoped decision (close)",
        chapters=("76",),
        runner="tools.experiments.memory_strategy.stages:run",
        stages=STAGES,
        default_stage="auto",
        variants=("baseline", "checkpoint", "offload", "hybrid"),
        device_steps=(
            DeviceStep("memory_76_prepare", "memory_strategy", order=21, stage="prepare"),
            DeviceStep("memory_76_g0", "memory_strategy", order=22, stage="g0"),
            DeviceStep("memory_76_g1", "memory_strategy", order=90, stage="g1", max_s=300.0),
            DeviceStep("memory_76_close", "memory_strategy", order=91, stage="close", max_s=60.0),
        ),
    ),
    Experiment(
        name="memory_budget",
        title="Chapter 75: which of 76's strategies fits which memory budget at which throughput cost, where the "
              "choice flips, and the final choice at the target budget (reads 76's decision; loads no model)",
        chapters=("75",),
        runner="tools.experiments.memory_strategy.budget:run",
        arguments="tools.experiments.memory_strategy.budget:add_arguments",
        mechanism=("choose_under_budget", "budget_sweep", "final_strategy_choice"),
        device_steps=(DeviceStep("budget_75", "memory_budget", order=92, max_s=60.0),),
    ),
)
