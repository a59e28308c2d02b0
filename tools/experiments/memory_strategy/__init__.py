"""The training-performance chain: chapter 73's measurement and baseline, chapter 76's memory strategies
(baseline, checkpoint, offload and hybrid on one workload), chapter 75's choice per memory budget.

    strategies  the four strategies and the transformers checkpointing switch
    hooks       our saved-tensor hooks: observe what autograd keeps, copy it to the host for offload
    evidence    verify a strategy's path from what the hooks observed, never from its name
    estimate    the analytic saved-activation bytes of a Qwen2 decoder (the chapter's formula)
    runner      one strategy on the fixed training workload -> one run record; the CPU autograd check
    judge       accept / tune / reject (G0), the length ladder and its admission (G1), the handoff to 75
    performance chapter 73's audit (simulated asynchronous devices) and measurement (a real training step)
    baseline    the chapter-73 training baseline, measured with 73's functions, and 76's input manifest (a command line)
    budget      chapter 75: 76's decision read by sha256, the candidate table, the choice per budget and the final one
    plan        76's StagePlan: the stage parameters checked before any work, the record sink
    candidates  a strategy set on one workload (REPEATS under the OOM guard), its saved-bytes table, quality floor
    stages      prepare -> g0 -> g1 -> close for the notebook and a shell (a command line)
    experiment  the registry entries `training_performance`, `training_baseline` (73), `memory_strategy` (76)
                and `memory_budget` (75)
    report      figures and printed lines read from the estimate and the records

The product name `tools.memory_strategy_runtime` re-exports the public names (a facade; nothing
inside `tools` imports it).
"""
