"""The SFT training stage that chapters 14, 15, 26, 30, 31 (and later the projects) share.

`config` (StageConfig, AdapterSpec), `data` (fixed arithmetic chats, a held-apart evaluation
split), `adapters` (peft adapters, tensor hashes, trainable counts), `training` (fixed steps,
token-normalised accumulation, evaluation, memory and throughput per step), `packing` (padded,
packed and padding-free rows: chapter 30), `first_update` (an adapter's first optimiser step,
measured in function space: chapter 31's rank sweep), `runner` (variants in one process, one
write-once record each, OOM as a status), `__main__` (the command line a GPU machine runs).
"""
