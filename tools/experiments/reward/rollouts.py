"""Rollouts of a causal LM on lab problems, as the tensors a PPO step trains on.

Sampling, the verifier and exact-match are the lab's own (`tools.models.lab_sampling`); this module
lays the samples out for training. A rollout batch holds each sampled sequence as one row: the
chat-formatted prompt padded on the left and the response padded on the right, so every response
starts at the same column. The response mask marks the tokens the policy produced, up to and
including its end-of-turn token. A response is scored 1 only when the verifier accepts it and it
finished (a truncated answer earns nothing). Log-probabilities and values are read at the positions
that predict each response token, with position ids derived from the attention mask, so a
left-padded row is computed as it was sampled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tools.data.lab_tasks import LabProblem
from tools.models import lab_sampling


@dataclass
class Rollouts:
    """Sampled sequences and what the verifier said about them."""

    problems: list[LabProblem]
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
        return Rollouts([self.problems[i] for i in index], self.sequences[picked], self.attention_mask[picked],
                        self.prompt_width, self.response_mask[picked], [self.texts[i] for i in index],
                        [self.correct[i] for i in index], [self.parsed[i] for i in index])


def generate(model, tokenizer, problems: list[LabProblem], *, max_new_tokens: int, temperature: float,
             seed: int) -> Rollouts:
    """One response per problem (repeat a problem to sample it several times), sampled by
    `lab_sampling.sample` from softmax(logits / temperature); temperature 0 is greedy."""
    samples = lab_sampling.sample(model, tokenizer, [problem.messages() for problem in problems], n=1,
                                  temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    verdicts = lab_sampling.score_samples(problems, samples)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompt_width = max(len(item["prompt_ids"]) for item in samples)
    response_width = max(1, max(len(item["response_ids"]) for item in samples))
    sequences = torch.full((len(samples), prompt_width + response_width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(sequences)
    for row, item in enumerate(samples):
        prompt, response = item["prompt_ids"], item["response_ids"]
        sequences[row, prompt_width - len(prompt):prompt_width] = torch.tensor(prompt)
        sequences[row, prompt_width:prompt_width + len(response)] = torch.tensor(response, dtype=torch.long)
        attention[row, prompt_width - len(prompt):prompt_width + len(response)] = 1
    correct = [bool(verdict["correct"]) and item["finish_reason"] == "stop" for item, verdict in zip(samples, verdicts)]
    return Rollouts(list(problems), sequences, attention, prompt_width, attention[:, prompt_width:].clone(),
                    [item["text"] for item in samples], correct, [verdict["parsed"] for verdict in verdicts])


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


def pool_sha256(problems: list[LabProblem]) -> str:
    """The identity of a set of problems (sorted content hashes), as `lab_sampling.exact_match` names it."""
    import hashlib

    return hashlib.sha256("".join(sorted(problem.content_sha256 for problem in problems)).encode()).hexdigest()
