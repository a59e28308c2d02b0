"""The shared single-GPU verl experiment of PT-ROLLOUT-LIFECYCLE and PT-RL-SYSTEM.

Two groups that differ only in `free_cache_engine` run one controlled step on the fixed arithmetic
tasks; the record is written once and read by both chapters. One job per module:

    config        ClosureConfig, its validation, each group's effective settings, the judged limits
    overrides     verl 0.9.1's Hydra overrides of one group, and composing them with verl's YAML
    protocol      the group protocol (phases, requests, rollouts, admission) every backend runs
    comparisons   log-prob agreement statistics and the LoRA update comparison across groups
    checks        the boolean checks of a run and the decision derived from them
    record        the record (schema SCHEMA) and `read_summary`, what the chapters read
    preflight     what a run needs, checked without loading a model
    runner        `run_experiment`: both groups, the sampler, the memory wait, the write-once record
    cli           the command line (`python -m tools.experiments.verl_closure`); the only module that prints
    experiment    the registry entry `verl_closure` (`python -m tools.experiments run verl_closure`)
    backends/     the `torch` and `verl` backends behind one small interface (`get_backend`)

`tools.verl_mechanism_closure` is the product name of this experiment: a facade that re-exports it.
"""
