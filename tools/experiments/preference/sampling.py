"""Replies of a chat model to arithmetic prompts: sampled (for pairs, labels and drift) or greedy (for
exact match), and the verifier's verdict on them.

Generation is `tools.models.lab_sampling.sample` (batched, left-padded chat prompts, cut at the
end-of-turn token); a prompt is the user turn. Sampling is seeded per call and leaves the global RNG
as it was, so a run is repeatable on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.data.arithmetic import ArithmeticTask, score_response
from tools.models import lab_sampling


def _grouped(samples: list[dict], count: int) -> list[list[str]]:
    groups: list[list[str]] = [[] for _ in range(count)]
    for item in samples:
        groups[item["prompt_index"]].append(item["text"])
    return groups


def sample_replies(model, tokenizer, prompts: Sequence[str], *, samples: int, temperature: float = 1.0,
                   max_new_tokens: int = 8, seed: int = 0) -> list[list[str]]:
    """`samples` sampled replies per prompt (text, without the end-of-turn token)."""
    drawn = lab_sampling.sample(model, tokenizer, list(prompts), n=samples, temperature=temperature,
                                max_new_tokens=max_new_tokens, seed=seed)
    return _grouped(drawn, len(prompts))


def greedy_replies(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int = 8) -> list[str]:
    """One greedy reply per prompt."""
    drawn = lab_sampling.sample(model, tokenizer, list(prompts), n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    return [group[0] for group in _grouped(drawn, len(prompts))]


def exact_match(model, tokenizer, tasks: Sequence[ArithmeticTask], *, max_new_tokens: int = 8) -> float:
    """Share of tasks whose greedy reply is exactly the right integer (the arithmetic verifier)."""
    replies = greedy_replies(model, tokenizer, [task.prompt for task in tasks], max_new_tokens=max_new_tokens)
    return sum(score_response(task, reply)["correct"] for task, reply in zip(tasks, replies)) / len(tasks)
