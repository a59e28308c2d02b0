"""Fixed SFT data from the course's arithmetic tasks: a training split and a held-apart evaluation split.

Each example is a chat (user: the task's prompt, assistant: the integer answer) tokenised with the
model's chat template; only the assistant reply and its end-of-turn token are supervised (labels
-100 elsewhere). The evaluation split comes from its own seed, and any evaluation example whose
content also stands in the training split is dropped, so no validation sample is ever trained on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tools.data.arithmetic import generate_tasks
from tools.errors import ConfigError

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Example:
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    content_sha256: str

    @property
    def supervised_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE_INDEX)


def chat_example(tokenizer, prompt: str, answer: str, max_length: int) -> Example:
    """One supervised chat: the prompt part masked, the reply and its end-of-turn token supervised."""
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]
    prompt_ids = tokenizer.apply_chat_template(messages[:1], add_generation_prompt=True, tokenize=True)
    full_ids = tokenizer.apply_chat_template(messages, tokenize=True)
    prompt_ids = list(getattr(prompt_ids, "input_ids", prompt_ids))
    full_ids = list(getattr(full_ids, "input_ids", full_ids))
    if full_ids[:len(prompt_ids)] != prompt_ids:
        raise ConfigError("the chat template does not extend the prompt with the reply; cannot mask the prompt")
    newline = tokenizer.encode("\n", add_special_tokens=False)
    if newline and full_ids[-len(newline):] == newline:  # the separator after <|im_end|> is not predicted
        full_ids = full_ids[:-len(newline)]
    if len(full_ids) > max_length:
        raise ConfigError(f"an example has {len(full_ids)} tokens, more than max_length {max_length}")
    labels = [IGNORE_INDEX] * len(prompt_ids) + full_ids[len(prompt_ids):]
    digest = hashlib.sha256(f"{prompt}\x00{answer}".encode("utf-8")).hexdigest()
    return Example(tuple(full_ids), tuple(labels), digest)


def task_examples(tokenizer, seeds, per_operation: int, max_length: int) -> list[Example]:
    return [chat_example(tokenizer, task.prompt, str(task.label), max_length)
            for seed in seeds for task in generate_tasks(seed, per_operation)]


@dataclass(frozen=True)
class Split:
    train: list[Example]
    evaluation: list[Example]
    dropped_from_evaluation: int

    def manifest(self) -> dict:
        """What the record says about the data: counts and content hashes, never the examples."""
        def digest(examples):
            return hashlib.sha256("".join(sorted(e.content_sha256 for e in examples)).encode()).hexdigest()
        return {"source": "tools.data.arithmetic", "train_examples": len(self.train),
                "evaluation_examples": len(self.evaluation), "dropped_from_evaluation": self.dropped_from_evaluation,
                "train_content_sha256": digest(self.train), "evaluation_content_sha256": digest(self.evaluation),
                "overlap": len({e.content_sha256 for e in self.train} & {e.content_sha256 for e in self.evaluation}),
                "train_supervised_tokens": sum(e.supervised_tokens for e in self.train)}


def build_split(tokenizer, train_seeds, eval_seed: int, per_operation: int, max_length: int) -> Split:
    """The training examples and the held-apart evaluation examples (content overlap removed)."""
    train = task_examples(tokenizer, train_seeds, per_operation, max_length)
    seen = {example.content_sha256 for example in train}
    candidates = task_examples(tokenizer, [eval_seed], per_operation, max_length)
    evaluation = [example for example in candidates if example.content_sha256 not in seen]
    if not evaluation:
        raise ConfigError("every evaluation example also stands in the training split; choose another eval seed")
    return Split(train, evaluation, len(candidates) - len(evaluation))


def pad_batch(examples: list[Example], pad_id: int):
    """Right-padded tensors `input_ids`, `attention_mask`, `labels` (padding never supervised)."""
    import torch

    width = max(len(example.input_ids) for example in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        length = len(example.input_ids)
        ids[row, :length] = torch.tensor(example.input_ids)
        labels[row, :length] = torch.tensor(example.labels)
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def batches(examples: list[Example], batch_size: int, steps: int, grad_accumulation: int) -> list[list[list[Example]]]:
    """For each optimiser step, its micro-batches, cycling through the examples in a fixed order."""
    plan, cursor = [], 0
    for _ in range(steps):
        micro = []
        for _ in range(grad_accumulation):
            chunk = [examples[(cursor + i) % len(examples)] for i in range(batch_size)]
            cursor = (cursor + batch_size) % len(examples)
            micro.append(chunk)
        plan.append(micro)
    return plan
