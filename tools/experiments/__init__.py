"""Layer 3: one subpackage per GPU experiment. Each imports only the layers below it (core, models,
data, measure) and its own modules; experiments never import each other.

    verl_closure      the shared single-GPU verl experiment of PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM
    memory_strategy   activation checkpoint / offload strategies (the 73 baseline, the 76 stages)
    sft_training      the training stage the SFT and LoRA chapters share
    online_rl         verifier, advantages, clipped losses and update loops of chapters 18, PT-RLOO, PT-AGENTIC-RL
"""
