"""Prompt and response token ids packed into the tensors a policy-gradient step reads.

Prompts are rendered with the chat template (generation prompt added) and left-padded; responses
are right-padded. `completion_mask` is 1 on response tokens, 0 on padding. This is the layout TRL's
trainers use, so the same tensors go to TRL in the framework checks.
"""

from __future__ import annotations

from typing import Sequence

from tools.errors import ConfigError


def prompt_token_ids(tokenizer, prompt: str) -> list[int]:
    """The chat-template tokens of a one-turn user prompt, ending with the assistant header."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def reply_token_ids(tokenizer, reply: str, finished: bool = True) -> list[int]:
    """A reply's tokens; a finished reply ends with the eos token that closes the turn."""
    ids = list(tokenizer(reply, add_special_tokens=False)["input_ids"])
    return ids + [tokenizer.eos_token_id] if finished else ids


def pack(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> dict:
    """Left-padded prompts and right-padded responses as long tensors with their masks."""
    import torch

    if len(prompts) != len(responses) or not prompts:
        raise ConfigError("need one response per prompt, and at least one pair")
    if any(len(response) == 0 for response in responses):
        raise ConfigError("every response needs at least one token")
    prompt_width = max(len(prompt) for prompt in prompts)
    response_width = max(len(response) for response in responses)
    prompt_ids = torch.full((len(prompts), prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), prompt_width), dtype=torch.long)
    completion_ids = torch.full((len(prompts), response_width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(prompts), response_width), dtype=torch.long)
    for row, (prompt, response) in enumerate(zip(prompts, responses)):
        if prompt:
            prompt_ids[row, prompt_width - len(prompt):] = torch.tensor(list(prompt))
            prompt_mask[row, prompt_width - len(prompt):] = 1
        completion_ids[row, :len(response)] = torch.tensor(list(response))
        completion_mask[row, :len(response)] = 1
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask}


def response_logprobs(model, batch: dict):
    """Per-token log-probs [batch, response] of the packed responses under `model` (float32, with grad)."""
    import torch

    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    width = batch["completion_ids"].shape[1]
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -width - 1:-1]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
