"""Replies of a chat model to arithmetic prompts: sampled (for pairs, labels and drift) or greedy (for
exact match), and the verifier's verdict on them.

A prompt is rendered with the model's chat template up to the assistant's turn; a reply is what the
model writes after it, cut at its end-of-turn token. Sampling is seeded (one torch generator state per
call), so a run is repeatable on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.data.arithmetic import ArithmeticTask, score_response
from tools.experiments.preference.training import chat_prompt_ids


def _generate(model, tokenizer, prompts: Sequence[str], *, samples: int, temperature: float | None,
              max_new_tokens: int) -> list[list[tuple[int, ...]]]:
    import torch

    device = next(model.parameters()).device
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stop = [end] if tokenizer.eos_token_id in (None, end) else [end, tokenizer.eos_token_id]
    replies = []
    model.eval()
    for prompt in prompts:
        ids = torch.tensor([chat_prompt_ids(tokenizer, prompt)], device=device)
        settings = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else \
            {"do_sample": False}
        with torch.no_grad():
            output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                    num_return_sequences=samples, eos_token_id=stop,
                                    pad_token_id=tokenizer.pad_token_id, **settings)
        group = []
        for row in output[:, ids.shape[1]:].tolist():
            cut = next((index for index, token in enumerate(row) if token in stop), None)
            group.append(tuple(row if cut is None else row[:cut]))
        replies.append(group)
    return replies


def sample_replies(model, tokenizer, prompts: Sequence[str], *, samples: int, temperature: float = 1.0,
                   max_new_tokens: int = 8, seed: int = 0) -> list[list[str]]:
    """`samples` sampled replies per prompt (text, without the end-of-turn token)."""
    import torch

    torch.manual_seed(seed)
    return [[tokenizer.decode(list(reply), skip_special_tokens=True) for reply in group]
            for group in _generate(model, tokenizer, prompts, samples=samples, temperature=temperature,
                                   max_new_tokens=max_new_tokens)]


def greedy_replies(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int = 8) -> list[str]:
    """One greedy reply per prompt."""
    return [tokenizer.decode(list(group[0]), skip_special_tokens=True)
            for group in _generate(model, tokenizer, prompts, samples=1, temperature=None,
                                   max_new_tokens=max_new_tokens)]


def exact_match(model, tokenizer, tasks: Sequence[ArithmeticTask], *, max_new_tokens: int = 8) -> float:
    """Share of tasks whose greedy reply is exactly the right integer (the arithmetic verifier)."""
    replies = greedy_replies(model, tokenizer, [task.prompt for task in tasks], max_new_tokens=max_new_tokens)
    return sum(score_response(task, reply)["correct"] for task, reply in zip(tasks, replies)) / len(tasks)
