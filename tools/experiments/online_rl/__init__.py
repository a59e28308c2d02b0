"""The online RL experiment that chapters 18 (GRPO with verifiable rewards), PT-RLOO and PT-AGENTIC-RL share, and
project 85's stage (`project_stage`, `project_policy`, `project_gates`: GRPO from 62's delivered adapter).

`verifier` (integer-answer-v1: truncated, format error, wrong and correct apart), `advantages`
(group-normalised and leave-one-out advantages, scoreable groups), `losses` (the clipped token-level
GRPO loss with an explicit token aggregation, the sequence-level clipped RLOO loss), `batch`
(prompt and response tensors, per-token log-probabilities), `models` (quiet loading), `trl_reference`
(TRL's GRPO and RLOO trainers driven on the same batch, for the chapters' framework checks).

The chapters teach these mechanisms in their notebooks; the functions here are the implementations
a stage runs headless (a GPU machine has no notebook), and tests tie each one to the notebook's
reference on generated inputs.
"""
