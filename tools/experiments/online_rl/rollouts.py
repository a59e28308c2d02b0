"""Sampling groups of answers from a causal LM, and greedy exact-match on held-out tasks.

Sampling uses `tools.models.loading.sampling_generation_kwargs` (the plain softmax of logits /
temperature, no top-k, top-p or repetition penalty), so the log-probabilities of a later forward
pass are those of the policy that sampled. A reply is *finished* when the model wrote its eos token
within the token limit; its tokens are kept up to and including that eos.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tools.experiments.online_rl.batch import prompt_token_ids
from tools.models.loading import sampling_generation_kwargs


def _cut(generated: Sequence[int], eos: int, pad: int) -> tuple[list[int], bool]:
    """The reply's tokens through its first eos (finished), or all non-padding tokens (truncated)."""
    tokens = list(generated)
    if eos in tokens:
        return tokens[:tokens.index(eos) + 1], True
    while tokens and tokens[-1] == pad and pad != eos:
        tokens.pop()
    return tokens, False


def sample_replies(model, tokenizer, prompts: Sequence[str], group_size: int, *, max_new_tokens: int,
                   temperature: float = 1.0, seed: int = 0) -> list[list[dict]]:
    """`group_size` sampled replies per prompt: `{"prompt_ids", "reply_ids", "text", "finished"}`."""
    import torch

    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    kwargs = sampling_generation_kwargs(temperature, max_new_tokens)
    groups = []
    was_training = model.training
    model.eval()
    try:
        for index, prompt in enumerate(prompts):
            ids = prompt_token_ids(tokenizer, prompt)
            torch.manual_seed(seed * 100_003 + index)
            with torch.no_grad():
                output = model.generate(input_ids=torch.tensor([ids], device=device),
                                        attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                                        num_return_sequences=group_size, pad_token_id=pad, eos_token_id=eos, **kwargs)
            group = []
            for row in output[:, len(ids):].tolist():
                reply, finished = _cut(row, eos, pad)
                group.append({"prompt_ids": ids, "reply_ids": reply, "finished": finished,
                              "text": tokenizer.decode(reply, skip_special_tokens=True)})
            groups.append(group)
    finally:
        model.train(was_training)
    return groups


def greedy_exact_match(model, tokenizer, tasks: Sequence, verify: Callable, *, max_new_tokens: int) -> dict:
    """Greedy replies to `tasks` scored by `verify(text, label, finished)`: the share correct and the outcomes."""
    import torch

    device = next(model.parameters()).device
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    outcomes = []
    was_training = model.training
    model.eval()
    try:
        for task in tasks:
            ids = prompt_token_ids(tokenizer, task.prompt)
            with torch.no_grad():
                output = model.generate(input_ids=torch.tensor([ids], device=device),
                                        attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=device),
                                        do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                                        pad_token_id=pad, eos_token_id=eos)
            reply, finished = _cut(output[0, len(ids):].tolist(), eos, pad)
            outcomes.append(verify(tokenizer.decode(reply, skip_special_tokens=True), task.label, finished)["outcome"])
    finally:
        model.train(was_training)
    counts = {name: outcomes.count(name) for name in ("correct", "wrong", "format_error", "truncated")}
    return {"exact_match": counts["correct"] / len(outcomes) if outcomes else None, "outcomes": counts,
            "tasks": len(outcomes)}
