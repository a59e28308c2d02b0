"""Sampling groups of answers from a causal LM, and greedy exact-match on held-out tasks.

Both go through `tools.models.lab_sampling.sample` (batched, left-padded chat prompts, the plain
softmax of logits / temperature with no top-k, top-p or repetition penalty), so the log-probabilities
of a later forward pass are those of the policy that sampled. A prompt is a string (one user turn)
or a list of chat messages (a lab problem's `messages()`). A reply is *finished* when the model wrote
its end-of-turn token within the token limit; its tokens are kept up to and including that token.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tools.models.lab_sampling import sample


def _cut(generated: Sequence[int], eos: int, pad: int) -> tuple[list[int], bool]:
    """The reply's tokens through its first eos (finished), or all non-padding tokens (truncated)."""
    tokens = list(generated)
    if eos in tokens:
        return tokens[:tokens.index(eos) + 1], True
    while tokens and tokens[-1] == pad and pad != eos:
        tokens.pop()
    return tokens, False


def prompt_of(task):
    """What a model is asked: a lab problem's chat messages, else the task's prompt string."""
    return task.messages() if hasattr(task, "messages") else task.prompt


def sample_replies(model, tokenizer, prompts: Sequence, group_size: int, *, max_new_tokens: int,
                   temperature: float = 1.0, seed: int = 0) -> list[list[dict]]:
    """`group_size` sampled replies per prompt: `{"prompt_ids", "reply_ids", "text", "finished", "logprobs"}`."""
    samples = sample(model, tokenizer, list(prompts), n=group_size, temperature=temperature,
                     max_new_tokens=max_new_tokens, seed=seed)
    groups = [[] for _ in prompts]
    for item in samples:
        groups[item["prompt_index"]].append({"prompt_ids": item["prompt_ids"], "reply_ids": item["response_ids"],
                                             "text": item["text"], "finished": item["finish_reason"] == "stop",
                                             "logprobs": item["logprobs"]})
    return groups


def greedy_exact_match(model, tokenizer, tasks: Sequence, verify: Callable, *, max_new_tokens: int,
                       per_problem: bool = False) -> dict:
    """Greedy replies to `tasks` scored by `verify(text, label, finished)`: the share correct and the outcomes
    (with `per_problem`, also `correct`: one bool per task, in order)."""
    replies = sample(model, tokenizer, [prompt_of(task) for task in tasks], n=1, temperature=0.0,
                     max_new_tokens=max_new_tokens)
    outcomes = [verify(reply["text"], task.label, reply["finish_reason"] == "stop")["outcome"]
                for task, reply in zip(tasks, replies)]
    counts = {name: outcomes.count(name) for name in ("correct", "wrong", "format_error", "truncated")}
    result = {"exact_match": counts["correct"] / len(outcomes) if outcomes else None, "outcomes": counts,
              "tasks": len(outcomes)}
    return {**result, "correct": [outcome == "correct" for outcome in outcomes]} if per_problem else result
