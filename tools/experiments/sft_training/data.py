"""Fixed SFT data: a training split and a held-apart evaluation split.

By default the course's arithmetic tasks: each example is a chat (user: the task's prompt,
assistant: the integer answer) tokenised with the model's chat template; only the assistant reply
and its end-of-turn token are supervised (labels -100 elsewhere). The evaluation split comes from
its own seed, and any evaluation example whose content also stands in the training split is
dropped, so no validation sample is ever trained on.

A stage whose `lab_task` is set trains on a lab task instead (tools.data.lab_tasks, e.g.
`add_plus_one`, which the lab student does not know yet): training problems drawn from the task's
`train` split, evaluation problems from its `heldout` split (never in pretraining, never trained on),
so the held-apart loss moves for a reason the chapter names.
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
    source: str = "tools.data.arithmetic"

    def manifest(self) -> dict:
        """What the record says about the data: counts and content hashes, never the examples."""
        def digest(examples):
            return hashlib.sha256("".join(sorted(e.content_sha256 for e in examples)).encode()).hexdigest()
        return {"source": self.source, "train_examples": len(self.train),
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


def lab_examples(tokenizer, problems, max_length: int) -> list[Example]:
    """Lab problems as supervised chats (the lab models' own rendering: the reply and its end-of-turn
    token supervised), identified by the problem's content hash."""
    from tools.models.lab import chat_ids

    examples = []
    for problem in problems:
        ids, start = chat_ids(tokenizer, problem.messages(), problem.target)
        if len(ids) > max_length:
            raise ConfigError(f"an example has {len(ids)} tokens, more than max_length {max_length}")
        examples.append(Example(tuple(ids), (IGNORE_INDEX,) * start + tuple(ids[start:]), problem.content_sha256))
    return examples


def lab_split(tokenizer, task_name: str, train_problems: int, eval_problems: int, train_seed: int, eval_seed: int,
              max_length: int) -> Split:
    """`train_problems` of the task's train split (drawn with `train_seed`) and `eval_problems` of its
    held-out split (drawn with `eval_seed`); the splits are disjoint by construction (content hash)."""
    from tools.data import lab_tasks

    train = lab_examples(tokenizer, lab_tasks.sample_problems(task_name, "train", train_problems, train_seed),
                         max_length)
    evaluation = lab_examples(tokenizer, lab_tasks.sample_problems(task_name, "heldout", eval_problems, eval_seed),
                              max_length)
    return Split(train, evaluation, 0, f"tools.data.lab_tasks:{task_name}")


def stage_split(tokenizer, config, max_length: int) -> Split:
    """The split a stage config asks for: its lab task, else the arithmetic chats of its seeds."""
    if config.lab_task is not None:
        return lab_split(tokenizer, config.lab_task, config.lab_train_problems, config.lab_eval_problems,
                         config.train_task_seeds[0], config.eval_task_seed, max_length)
    return build_split(tokenizer, config.train_task_seeds, config.eval_task_seed, config.tasks_per_operation,
                       max_length)


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
