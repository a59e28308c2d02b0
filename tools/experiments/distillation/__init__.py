"""On-policy distillation: the experiment of chapter DISTILL-OPD and project 88's delivery.

`divergences` (the per-token reverse KL of the student to a frozen teacher, the generalised
Jensen-Shannon divergence of GKD with its beta interpolation and temperature, and the loss that mixes
fixed and on-policy sequences by a ratio lambda with the teacher isolated from the gradient),
`gkd_reference` (TRL's GKD `generalized_jsd_loss` on the same logits, for the framework check),
`training` and `stage` (the chapter's recipes on the lab models), `delivery_gates` and `delivery`
(project 88: G0 baseline, G1 route, G2 candidates, the gates and the terminal decision).

The chapter and the project teach these mechanisms in their notebooks; the functions here are what a
stage runs headless, and tests tie each one to the notebook's reference on generated inputs.
"""
