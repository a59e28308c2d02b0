"""The memory-strategy experiments in the experiment registry: chapter 73's training baseline (a
stand-in that also writes 76's input manifest) and chapter 76's stages prepare -> g0 -> g1 -> close.

In the GPU batch, G1 (the length ladder, the longest stage) and close run after every other step,
so a G1 cut short by the batch's time leaves every other record in place; G1 also sizes its ladder
to the time it is given (see stages.run_g1)."""

from __future__ import annotations

from tools.experiments.registry import DeviceStep, Experiment

STAGES = ("auto", "all", "prepare", "g0", "g1", "close")

EXPERIMENTS = (
    Experiment(
        name="training_baseline",
        title="Chapter 73's training baseline (batch 1, AdamW, float32) and 76's input manifest",
        chapters=("73",),
        runner="tools.experiments.memory_strategy.baseline:run",
        run_modes=("cpu_smoke", "real_gpu"),
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
)
