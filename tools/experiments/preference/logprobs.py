"""Sequence log-probabilities of responses given their prompts, for a policy and a frozen reference.

Prompts and responses are token-id lists; `pack` joins each prompt with its response, pads the rows
on the right and marks the response tokens. `response_logprobs` sums, per row, the log-probability
the model gives each response token (position t - 1 scores token t); prompt and padding are left
out. The sum itself is `sequence_logprobs(logits, input_ids, response_mask)`, the package's copy of
chapter 17's TODO 1; a stage that runs a learner's version passes it instead. `token_logprobs`
returns the same per token, for drift estimates. The frozen reference is called under
`torch.no_grad()`; the policy keeps its graph.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.errors import ConfigError


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> dict:
    """Right-padded `input_ids`, `attention_mask` and `response_mask` (int64 tensors) of prompt + response rows."""
    import torch

    if len(prompts) != len(responses) or not prompts:
        raise ConfigError(f"need one response per prompt and at least one row, got {len(prompts)} and {len(responses)}")
    rows = []
    for prompt, response in zip(prompts, responses):
        if not prompt or not response:
            raise ConfigError("every row needs a non-empty prompt and a non-empty response")
        rows.append((list(prompt), list(response)))
    width = max(len(prompt) + len(response) for prompt, response in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    response_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (prompt, response) in enumerate(rows):
        length = len(prompt) + len(response)
        input_ids[row, :length] = torch.tensor(prompt + response)
        attention[row, :length] = 1
        response_mask[row, len(prompt):length] = 1
    return {"input_ids": input_ids, "attention_mask": attention, "response_mask": response_mask}


def sequence_logprobs(logits, input_ids, response_mask):
    """Per row, the summed log-probability of the tokens where `response_mask` is 1, position t - 1 of
    `logits` scoring token t (the package's copy of chapter 17's exercise; no input checks)."""
    import torch

    picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.where(response_mask[:, 1:].bool(), picked, torch.zeros_like(picked)).sum(dim=1)


def _logits(model, batch: dict, *, frozen: bool):
    import torch

    device = next(model.parameters()).device
    ids = batch["input_ids"].to(device)
    context = torch.no_grad() if frozen else torch.enable_grad()
    with context:
        logits = model(input_ids=ids, attention_mask=batch["attention_mask"].to(device)).logits.float()
    return logits, ids, batch["response_mask"].to(device)


def _token_table(model, batch: dict, *, frozen: bool):
    import torch

    logits, ids, response_mask = _logits(model, batch, frozen=frozen)
    with torch.no_grad() if frozen else torch.enable_grad():
        picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return picked, response_mask[:, 1:].bool()


def response_logprobs(model, batch: dict, *, frozen: bool = False, summed=None):
    """Per row, the summed log-probability of the response tokens (float32 tensor [rows]); `frozen=True`
    computes it without a graph (the reference). `summed` is the function that sums them
    (`sequence_logprobs(logits, input_ids, response_mask)`; default the package's copy)."""
    import torch

    logits, ids, response_mask = _logits(model, batch, frozen=frozen)
    with torch.no_grad() if frozen else torch.enable_grad():
        return (summed or sequence_logprobs)(logits, ids, response_mask)


def token_logprobs(model, batch: dict) -> list[list[float]]:
    """Per row, the log-probability of each response token (no graph), as lists of floats."""
    picked, mask = _token_table(model, batch, frozen=True)
    return [[float(value) for value in row[keep]] for row, keep in zip(picked.cpu(), mask.cpu())]
