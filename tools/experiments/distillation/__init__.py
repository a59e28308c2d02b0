"""On-policy distillation, the experiment of chapter DISTILL-OPD (and later project 88).

`divergences` (the per-token reverse KL of the student to a frozen teacher, the generalised
Jensen-Shannon divergence of GKD with its beta interpolation and temperature, and the loss that mixes
fixed and on-policy sequences by a ratio lambda with the teacher isolated from the gradient),
`gkd_reference` (TRL's GKD `generalized_jsd_loss` on the same logits, for the framework check).

The chapter teaches these mechanisms in its notebook; the functions here are what a stage runs
headless, and tests tie each one to the notebook's reference on generated inputs.
"""
