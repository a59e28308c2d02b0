"""Rollouts of a causal LM on arithmetic tasks: sampling, the verifier's scores, per-token log-probs.

A rollout batch holds each sampled sequence as one row: the chat-formatted prompt padded on the left
and the response padded on the right, so every response starts at the same column. The response
mask marks the tokens the policy produced, up to and including the first end-of-turn token; what
generation appended after it is padding. Scores come from the course's strict verifier (the whole
response must be one integer equal to the label). Log-probabilities and values are read at the
positions that predict each response token, with position ids derived from the attention mask, so a
left-padded row is computed as it was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tools.data.arithmetic import ArithmeticTask, score_response
from tools.models.loading import sampling_generation_kwargs


@dataclass
class Rollouts:
    """Sampled sequences and what the verifier said about them."""

    tasks: list[ArithmeticTask]
    sequences: torch.Tensor
    attention_mask: torch.Tensor
    prompt_width: int
    response_mask: torch.Tensor
    texts: list[str]
    correct: list[bool]
    parsed: list[int | None]

    @property
    def scores(self) -> torch.Tensor:
        """1.0 for a correct, complete integer answer, else 0.0 (float32, one per row)."""
        return torch.tensor([1.0 if right else 0.0 for right in self.correct])

    @property
    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.cumsum(dim=1) - 1).clamp(min=0)

    def rows(self, index) -> "Rollouts":
        """The rollouts of the rows `index` (a list of ints)."""
        picked = torch.as_tensor(index)
        return Rollouts([self.tasks[i] for i in index], self.sequences[picked], self.attention_mask[picked],
                        self.prompt_width, self.response_mask[picked], [self.texts[i] for i in index],
                        [self.correct[i] for i in index], [self.parsed[i] for i in index])


def prompt_ids(tokenizer, task: ArithmeticTask) -> list[int]:
    """The chat-formatted prompt of `task`, ending where the assistant's answer begins."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": task.prompt}], tokenize=False,
                                         add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _left_padded(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row):] = torch.tensor(row)
        mask[index, width - len(row):] = 1
    return ids, mask


def _end_ids(tokenizer) -> set[int]:
    ends = {tokenizer.eos_token_id}
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(end_of_turn, int) and end_of_turn != tokenizer.unk_token_id:
        ends.add(end_of_turn)
    return {token for token in ends if token is not None}


def generate(model, tokenizer, tasks: list[ArithmeticTask], *, max_new_tokens: int, temperature: float | None,
             seed: int) -> Rollouts:
    """One response per task (repeat a task in `tasks` to sample it several times): sampled from
    softmax(logits / temperature) without top-k or top-p, or greedy when temperature is None."""
    device = next(model.parameters()).device
    ids, mask = _left_padded([prompt_ids(tokenizer, task) for task in tasks], tokenizer.pad_token_id)
    ends = _end_ids(tokenizer)
    options = ({"do_sample": False, "num_beams": 1, "max_new_tokens": max_new_tokens} if temperature is None
               else sampling_generation_kwargs(temperature, max_new_tokens))
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=sorted(ends), **options).cpu()
    model.train(was_training)
    response = out[:, ids.shape[1]:]
    response_mask = torch.zeros_like(response)
    texts, correct, parsed = [], [], []
    for row, task in enumerate(tasks):
        tokens = response[row].tolist()
        stop = next((index for index, token in enumerate(tokens) if token in ends), None)
        length = len(tokens) if stop is None else stop + 1
        response_mask[row, :length] = 1
        text = tokenizer.decode(tokens[:length if stop is None else stop], skip_special_tokens=True)
        verdict = score_response(task, text if stop is not None else None)  # a truncated answer earns nothing
        texts.append(text)
        correct.append(bool(verdict["correct"]))
        parsed.append(verdict["parsed"])
    attention = torch.cat([mask, response_mask], dim=1)
    return Rollouts(list(tasks), out, attention, ids.shape[1], response_mask, texts, correct, parsed)


def exact_match(model, tokenizer, tasks: list[ArithmeticTask], *, max_new_tokens: int) -> dict:
    """Greedy answers to `tasks`: the share the verifier accepts and which ones."""
    rollouts = generate(model, tokenizer, tasks, max_new_tokens=max_new_tokens, temperature=None, seed=0)
    return {"exact_match": sum(rollouts.correct) / len(tasks), "correct": rollouts.correct, "answers": rollouts.texts}


def _predicting_positions(rollouts: Rollouts) -> slice:
    """The columns whose outputs predict the response tokens (position t predicts token t + 1)."""
    start = rollouts.prompt_width - 1
    return slice(start, start + rollouts.response_mask.shape[1])


def response_log_probs(model, rollouts: Rollouts) -> torch.Tensor:
    """log pi(token) of every response token under `model` ([batch, response], 0 where masked);
    keeps the graph when called with gradients enabled."""
    device = next(model.parameters()).device
    logits = model(input_ids=rollouts.sequences.to(device), attention_mask=rollouts.attention_mask.to(device),
                   position_ids=rollouts.position_ids.to(device)).logits[:, _predicting_positions(rollouts)]
    targets = rollouts.sequences[:, rollouts.prompt_width:].to(device)
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked * rollouts.response_mask.to(device)


def response_values(value_model, rollouts: Rollouts) -> torch.Tensor:
    """V(s_t) for every response token: the value head on the state that precedes the token."""
    device = next(value_model.parameters()).device
    values = value_model(input_ids=rollouts.sequences.to(device), attention_mask=rollouts.attention_mask.to(device),
                         position_ids=rollouts.position_ids.to(device))
    return values[:, _predicting_positions(rollouts)] * rollouts.response_mask.to(device)
