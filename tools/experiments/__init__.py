"""Layer 3: the GPU experiments, over one shared base.

The base (every experiment may import it; it imports no experiment):

    contract          Plan, Limits, RecordSink, RecordRef, run(plan, sink) -> records
    registry          Experiment, DeviceStep; finds each package's `experiment.py` (EXPERIMENTS)
    cli               the common flags declared once; `python -m tools.experiments list|steps|run|batch|...`
    device_batch      the GPU batch: environment check, models once, the registry's steps under one budget

One subpackage per experiment; each imports only the layers below it (core, models, data,
measure), the base and its own modules; experiments never import each other.

    verl_closure      the shared single-GPU verl experiment of PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM
    memory_strategy   activation checkpoint / offload strategies (the 73 baseline, the 76 stages)
    sft_training      the training stage the SFT and LoRA chapters share
    preference        what the preference chapters (50, 17, PT-KTO, 51) share: judges, pairs, update loops
    online_rl         verifier, advantages, clipped losses, the tool environment and update loops (18, PT-RLOO, PT-AGENTIC-RL)
    distillation      reverse KL, generalised JSD and the mixed loss of on-policy distillation (DISTILL-OPD)
"""
