"""Sampling from a model, the log-probs of given replies, and exact-match on a lab task.

What preference, reward, online-RL and distillation chapters build on:

- `sample(model, tokenizer, prompts, n=..., temperature=..., max_new_tokens=..., seed=...)`: batched
  generation through `model.generate` (left-padded chat prompts); per sample the prompt and
  response token ids, the text, each response token's log-prob under the sampling policy
  (log_softmax(logits / temperature), no top-k / top-p) and the finish reason (`stop` when an
  end-of-turn token was generated, `length` otherwise). Temperature 0 is greedy decoding, and its
  log-probs are the model's own (temperature 1).
- `response_logprobs(model, prompt_ids, response_ids, temperature=1.0)`: the same log-probs
  recomputed by one teacher-forced forward pass (the actor's side of an RL step, a DPO term).
- `score_samples(problems, samples)`, `exact_match(model, tokenizer, task, split)`: the lab task's
  verifier (`tools.data.lab_tasks.verify`) on replies, and greedy exact-match on a split.

Everything returned is plain data (ints, floats, strings, lists, dicts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tools.data import lab_tasks
from tools.errors import ConfigError

FINISH_REASONS = ("stop", "length")


def _check_prompts(prompts) -> list:
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        raise ConfigError("prompts must be a non-empty list (of strings or of message lists)")
    return list(prompts)


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _stop_ids(model, tokenizer) -> set[int]:
    eos = model.generation_config.eos_token_id
    ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    return ids | {tokenizer.eos_token_id}


def _left_padded(rows: list[list[int]], pad_id: int, device):
    import torch

    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        input_ids[index, width - len(row):] = torch.tensor(row)
        mask[index, width - len(row):] = 1
    return input_ids.to(device), mask.to(device)


def sample(model, tokenizer, prompts: Sequence, *, n: int = 1, temperature: float = 1.0,
           max_new_tokens: int = 8, seed: int = 0, batch_size: int = 256) -> list[dict]:
    """`n` replies to each prompt, in prompt order. A prompt is a string (the user turn) or a list of
    chat messages (`LabProblem.messages()`); it is rendered with the model's chat template.

    Returns one dict per sample: `prompt_index`, `sample_index`, `prompt`, `prompt_ids`,
    `response_ids` (up to and including the end-of-turn token when there is one), `text` (decoded
    without special tokens), `logprobs` (one per response token, under the sampling policy) and
    `finish_reason` ("stop" or "length"). The same call with the same seed gives the same samples;
    the global RNG is left as it was. The model's train/eval mode is left as it was.
    """
    import torch

    from tools.models.lab_chat import prompt_ids as render_prompt
    from tools.models.generation import sampling_generation_kwargs

    prompts = _check_prompts(prompts)
    _positive("n", n)
    _positive("batch_size", batch_size)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ConfigError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if temperature == 0:
        _positive("max_new_tokens", max_new_tokens)
        options = {"do_sample": False, "num_beams": 1, "max_new_tokens": max_new_tokens}
    else:
        options = sampling_generation_kwargs(temperature, max_new_tokens)
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = _stop_ids(model, tokenizer)
    rendered = [render_prompt(tokenizer, prompt) for prompt in prompts]
    rows = [(index, draw) for index in range(len(prompts)) for draw in range(n)]
    results = []
    was_training = model.training
    model.eval()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                input_ids, mask = _left_padded([rendered[index] for index, _ in chunk], pad_id, device)
                output = model.generate(input_ids=input_ids, attention_mask=mask, pad_token_id=pad_id,
                                        eos_token_id=sorted(stops), output_scores=True,
                                        return_dict_in_generate=True, **options)
                new_tokens = output.sequences[:, input_ids.shape[1]:]
                logprobs = torch.stack([torch.log_softmax(score.float(), dim=-1) for score in output.scores], dim=1)
                chosen = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
                for row, (index, draw) in enumerate(chunk):
                    tokens = new_tokens[row].tolist()
                    end = next((position for position, token in enumerate(tokens) if token in stops), None)
                    length = len(tokens) if end is None else end + 1
                    response = tokens[:length]
                    results.append({
                        "prompt_index": index, "sample_index": draw, "prompt": prompts[index],
                        "prompt_ids": list(rendered[index]), "response_ids": response,
                        "text": tokenizer.decode(response, skip_special_tokens=True),
                        "logprobs": [float(value) for value in chosen[row, :length]],
                        "finish_reason": "length" if end is None else "stop",
                    })
    finally:
        model.train(was_training)
    return results


def response_logprobs(model, prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], *,
                      temperature: float = 1.0, batch_size: int = 256) -> list[list[float]]:
    """Each response token's log-prob given its prompt and the response before it, from a teacher-
    forced forward pass: log_softmax(logits / temperature). Gradients are not kept (no_grad)."""
    import torch

    if len(prompt_ids) != len(response_ids) or not prompt_ids:
        raise ConfigError("prompt_ids and response_ids must be non-empty lists of the same length")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature <= 0:
        raise ConfigError(f"temperature must be a finite number > 0, got {temperature!r}")
    device = next(model.parameters()).device
    results = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(prompt_ids), batch_size):
                prompts = [list(ids) for ids in prompt_ids[start:start + batch_size]]
                responses = [list(ids) for ids in response_ids[start:start + batch_size]]
                if any(not prompt for prompt in prompts):
                    raise ConfigError("every prompt needs at least one token")
                rows = [prompt + response for prompt, response in zip(prompts, responses)]
                width = max(len(row) for row in rows)
                input_ids = torch.zeros((len(rows), width), dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for index, row in enumerate(rows):
                    input_ids[index, :len(row)] = torch.tensor(row)
                    mask[index, :len(row)] = 1
                logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.float()
                logprobs = torch.log_softmax(logits / temperature, dim=-1)
                for index, (prompt, response) in enumerate(zip(prompts, responses)):
                    positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(response))
                    targets = torch.tensor(response, dtype=torch.long, device=logprobs.device)
                    values = logprobs[index, positions.to(logprobs.device), targets] if response else []
                    results.append([float(value) for value in values])
    finally:
        model.train(was_training)
    return results


def score_samples(problems: Sequence[lab_tasks.LabProblem], samples: Sequence[dict]) -> list[dict]:
    """The verifier on each sample (`samples[i]["prompt_index"]` names its problem): the sample's
    `prompt_index`, `sample_index`, `text`, and `parsed`, `correct`, `format_ok`, `reward` (1.0 or 0.0)."""
    scored = []
    for item in samples:
        index = item["prompt_index"]
        if not 0 <= index < len(problems):
            raise ConfigError(f"sample refers to prompt {index}, but {len(problems)} problems were given")
        verdict = lab_tasks.verify(problems[index], item["text"])
        scored.append({"prompt_index": index, "sample_index": item["sample_index"], "text": item["text"], **verdict,
                       "reward": 1.0 if verdict["correct"] else 0.0})
    return scored


def exact_match(model, tokenizer, task: str = lab_tasks.PRETRAINING_TASK, split: str = "heldout", *,
                problems: Sequence[lab_tasks.LabProblem] | None = None, batch_size: int = 256,
                per_problem: bool = False) -> dict:
    """Greedy exact-match of `model` on a split of a lab task (or on the given `problems`).

    Returns `{task, split, total, correct, accuracy, format_ok, content_sha256}`; `content_sha256`
    names the problems scored (sorted content hashes), so two figures are comparable only when equal.
    With `per_problem`, also `correct_by_problem`: one bool per problem, in the split's order."""
    import hashlib

    chosen = list(problems) if problems is not None else lab_tasks.problems(task, split)
    if not chosen:
        raise ConfigError("no problems to score")
    longest = max(len(tokenizer.encode(problem.target, add_special_tokens=False)) for problem in chosen)
    samples = sample(model, tokenizer, [problem.messages() for problem in chosen], temperature=0.0,
                     max_new_tokens=longest + 2, batch_size=batch_size)
    scored = score_samples(chosen, samples)
    correct = sum(item["correct"] for item in scored)
    digest = hashlib.sha256("".join(sorted(problem.content_sha256 for problem in chosen)).encode()).hexdigest()
    result = {"task": task if problems is None else chosen[0].task, "split": split if problems is None else "given",
              "total": len(chosen), "correct": correct, "accuracy": correct / len(chosen),
              "format_ok": sum(item["format_ok"] for item in scored) / len(chosen), "content_sha256": digest}
    return {**result, "correct_by_problem": [bool(item["correct"]) for item in scored]} if per_problem else result
