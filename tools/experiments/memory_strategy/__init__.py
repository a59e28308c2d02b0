"""The memory-strategy experiment of chapter 76: baseline, checkpoint, offload and hybrid on one workload.

    strategies  the four strategies and the transformers checkpointing switch
    hooks       our saved-tensor hooks: observe what autograd keeps, copy it to the host for offload
    evidence    verify a strategy's path from what the hooks observed, never from its name
    estimate    the analytic saved-activation bytes of a Qwen2 decoder (the chapter's formula)
    runner      one strategy on the fixed training workload -> one run record; the CPU autograd check
    judge       accept / tune / reject (G0), the length ladder and its admission (G1), the handoff to 75
    baseline    the chapter-73 training baseline and 76's input manifest (a command line)
    plan        76's StagePlan: the stage parameters checked before any work, the record sink
    candidates  a strategy set on one workload (REPEATS under the OOM guard), its saved-bytes table, quality floor
    stages      prepare -> g0 -> g1 -> close for the notebook and a shell (a command line)
    experiment  the registry entries `training_baseline` (73) and `memory_strategy` (76)
    report      figures and printed lines read from the estimate and the records

The product name `tools.memory_strategy_runtime` re-exports the public names (a facade; nothing
inside `tools` imports it).
"""
