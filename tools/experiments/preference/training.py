"""The preference update loops of chapters 17, PT-KTO and 51, and what they measure.

Rows are token ids: a prompt (the chat prompt up to the assistant's turn) and one or two responses
(the reply and its end-of-turn token). The policy trains; the reference is a frozen copy and is only
ever called under `torch.no_grad()`. Every loop is deterministic for a seed (CPU), takes a fixed
number of full-batch steps, and returns one dict of plain numbers per step.

Measures: the preference margin h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))
on held-out pairs and the pair accuracy (share of h > 0); the per-token log-probabilities of the
policy's own samples under the policy and the reference (the drift the chapter's k3 estimate reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tools.errors import ConfigError
from tools.experiments.preference.logprobs import (
    pack,
    response_logprobs,
    token_logprobs,
)
from tools.experiments.preference.losses import dpo_loss, kto_loss, kto_reference_point


@dataclass(frozen=True)
class PreferenceRow:
    """One preference pair as token ids."""

    prompt_ids: tuple[int, ...]
    chosen_ids: tuple[int, ...]
    rejected_ids: tuple[int, ...]


@dataclass(frozen=True)
class BinaryRow:
    """One unpaired example as token ids, with its label."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    desirable: bool


def chat_prompt_ids(tokenizer, prompt: str) -> tuple[int, ...]:
    """The user turn rendered with the model's chat template, up to the assistant's turn."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return tuple(getattr(ids, "input_ids", ids))


def reply_ids(tokenizer, text: str) -> tuple[int, ...]:
    """A reply's tokens and the end-of-turn token that closes it (what the policy is scored on)."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if end is None or end == tokenizer.unk_token_id:
        raise ConfigError("the tokenizer has no <|im_end|> token to close a reply")
    return tuple(tokenizer.encode(text, add_special_tokens=False)) + (end,)


def preference_rows(tokenizer, pairs: Sequence[dict]) -> list[PreferenceRow]:
    """`{"prompt", "chosen", "rejected"}` pairs as rows."""
    return [PreferenceRow(chat_prompt_ids(tokenizer, pair["prompt"]), reply_ids(tokenizer, pair["chosen"]),
                          reply_ids(tokenizer, pair["rejected"])) for pair in pairs]


def binary_rows(tokenizer, examples: Sequence[dict]) -> list[BinaryRow]:
    """`{"prompt", "completion", "label"}` examples as rows."""
    return [BinaryRow(chat_prompt_ids(tokenizer, example["prompt"]), reply_ids(tokenizer, example["completion"]),
                      bool(example["label"])) for example in examples]


def _pair_logps(model, rows: Sequence[PreferenceRow], pad_id: int, *, frozen: bool, summed=None):
    prompts = [row.prompt_ids for row in rows]
    batch = pack(prompts + prompts, [row.chosen_ids for row in rows] + [row.rejected_ids for row in rows], pad_id)
    logps = response_logprobs(model, batch, frozen=frozen, summed=summed)
    return logps[:len(rows)], logps[len(rows):]


def _optimizer(policy, learning_rate: float):
    import torch

    parameters = [parameter for parameter in policy.parameters() if parameter.requires_grad]
    if not parameters:
        raise ConfigError("the policy has no trainable parameter")
    return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0)


def dpo_updates(policy, reference, rows: Sequence[PreferenceRow], *, beta: float, steps: int, learning_rate: float,
                pad_id: int, loss=None, summed=None) -> list[dict]:
    """`steps` full-batch DPO updates of `policy`; per step, measured before that step's update: the loss, the
    pair accuracy (share of margins > 0; a tie counts as wrong), the mean reward margin, and the mean implicit
    reward of the chosen and of the rejected replies apart (both can fall while their margin grows).

    `loss` is the DPO loss `(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta) ->
    {"loss", "chosen_rewards", "rejected_rewards", "margins", "accuracy"}` and `summed` the per-row sum of
    response log-probabilities `(logits, input_ids, response_mask) -> [rows]` (chapter 17's exercises; default
    the package's copies)."""
    if not rows or steps < 1:
        raise ConfigError("DPO needs at least one pair and one step")
    loss = loss or dpo_loss
    optimizer = _optimizer(policy, learning_rate)
    reference_chosen, reference_rejected = _pair_logps(reference, rows, pad_id, frozen=True, summed=summed)
    history = []
    policy.train()
    for step in range(steps):
        chosen, rejected = _pair_logps(policy, rows, pad_id, frozen=False, summed=summed)
        result = loss(chosen, rejected, reference_chosen, reference_rejected, beta)
        optimizer.zero_grad(set_to_none=True)
        result["loss"].backward()
        optimizer.step()
        history.append({"step": step, "loss": float(result["loss"].detach()), "pair_accuracy": float(result["accuracy"]),
                        "reward_margin": float(result["margins"].mean()),
                        "chosen_reward": float(result["chosen_rewards"].mean()),
                        "rejected_reward": float(result["rejected_rewards"].mean())})
    policy.eval()
    optimizer.zero_grad(set_to_none=True)
    return history


def _grid_logps(model, rows: Sequence[BinaryRow], pad_id: int):
    """The [n, n] prompt x completion matrix kto_reference_point reads, without a graph: only its
    mismatched entries (i, i - 1 mod n) are computed (n forward rows instead of n * n); every other
    entry is 0, which kto_reference_point never reads."""
    import torch

    n = len(rows)
    batch = pack([rows[i].prompt_ids for i in range(n)], [rows[(i - 1) % n].completion_ids for i in range(n)], pad_id)
    grid = torch.zeros(n, n)
    grid[torch.arange(n), (torch.arange(n) - 1) % n] = response_logprobs(model, batch, frozen=True).float()
    return grid


def kto_updates(policy, reference, rows: Sequence[BinaryRow], *, beta: float, steps: int, learning_rate: float,
                desirable_weight: float, undesirable_weight: float, pad_id: int, loss=None,
                reference_point=None) -> list[dict]:
    """`steps` full-batch KTO updates; each step recomputes the reference point z0 on the rotated
    mismatched pairs of the batch. Per step: loss, z0, mean reward of each class.

    `reference_point` is `(policy_matrix, reference_matrix) -> {"z0", ...}` and `loss` the KTO loss
    `(policy_logps, reference_logps, desirable, z0, beta, desirable_weight, undesirable_weight) ->
    {"loss", "losses", "rewards"}` (chapter PT-KTO's exercises; default the package's copies)."""
    import torch

    if len(rows) < 2 or steps < 1:
        raise ConfigError("KTO needs at least two examples (for the mismatched pairs) and one step")
    loss = loss or kto_loss
    reference_point = reference_point or kto_reference_point
    optimizer = _optimizer(policy, learning_rate)
    batch = pack([row.prompt_ids for row in rows], [row.completion_ids for row in rows], pad_id)
    desirable = torch.tensor([row.desirable for row in rows], dtype=torch.bool)
    reference_logps = response_logprobs(reference, batch, frozen=True)
    reference_grid = _grid_logps(reference, rows, pad_id)
    history = []
    policy.train()
    for step in range(steps):
        z0 = reference_point(_grid_logps(policy, rows, pad_id), reference_grid)["z0"]
        result = loss(response_logprobs(policy, batch), reference_logps, desirable, z0, beta, desirable_weight,
                      undesirable_weight)
        optimizer.zero_grad(set_to_none=True)
        result["loss"].backward()
        optimizer.step()
        rewards = result["rewards"]
        history.append({"step": step, "loss": float(result["loss"].detach()), "z0": float(z0),
                        "desirable_reward": float(rewards[desirable].mean()) if bool(desirable.any()) else None,
                        "undesirable_reward": float(rewards[~desirable].mean()) if bool((~desirable).any()) else None})
    policy.eval()
    optimizer.zero_grad(set_to_none=True)
    return history


def class_rewards(policy, reference, rows: Sequence[BinaryRow], *, beta: float, pad_id: int,
                  groups: Sequence[str] | None = None) -> dict:
    """Mean implicit reward beta * (log pi - log pi_ref) of the desirable and of the undesirable examples
    (None for a class with no example), and their gap. With `groups` (one prompt id per row), also the share
    of (desirable, undesirable) pairs of the same prompt in which the desirable reply has the higher reward
    (`pair_accuracy`, a tie counts as wrong; chance is 1/2) and how many such pairs there are."""
    import torch

    batch = pack([row.prompt_ids for row in rows], [row.completion_ids for row in rows], pad_id)
    rewards = beta * (response_logprobs(policy, batch, frozen=True) - response_logprobs(reference, batch, frozen=True))
    desirable = torch.tensor([row.desirable for row in rows], dtype=torch.bool)
    good = float(rewards[desirable].mean()) if bool(desirable.any()) else None
    bad = float(rewards[~desirable].mean()) if bool((~desirable).any()) else None
    found = {"desirable": good, "undesirable": bad, "gap": None if good is None or bad is None else good - bad}
    if groups is not None:
        pairs = [(i, j) for i in range(len(rows)) for j in range(len(rows))
                 if groups[i] == groups[j] and rows[i].desirable and not rows[j].desirable]
        found["pairs"] = len(pairs)
        found["pair_accuracy"] = sum(bool(rewards[i] > rewards[j]) for i, j in pairs) / len(pairs) if pairs else None
    return found


def preference_margin(policy, reference, rows: Sequence[PreferenceRow], pad_id: int) -> dict:
    """On `rows`: the mean log-ratio margin h (not scaled by beta), the share of pairs with h > 0
    (`pair_accuracy`, a tie counts as wrong), how many pairs tie at h = 0, and the mean log-ratio
    log pi - log pi_ref of the chosen and of the rejected replies apart (likelihood displacement shows
    as both falling)."""
    chosen, rejected = _pair_logps(policy, rows, pad_id, frozen=True)
    reference_chosen, reference_rejected = _pair_logps(reference, rows, pad_id, frozen=True)
    chosen_ratio, rejected_ratio = chosen - reference_chosen, rejected - reference_rejected
    margins = chosen_ratio - rejected_ratio
    return {"margin": float(margins.mean()), "pair_accuracy": int((margins > 0).sum()) / len(rows),
            "ties": int((margins == 0).sum()), "pairs": len(rows), "chosen_logratio": float(chosen_ratio.mean()),
            "rejected_logratio": float(rejected_ratio.mean())}


def sampled_logps(policy, reference, samples: Sequence[dict], pad_id: int) -> dict:
    """Per-token log-probabilities, under the policy and the reference, of replies the policy sampled
    (`tools.models.lab_sampling.sample` items): exactly the sampled token ids, ending with the end-of-turn
    token only where the policy generated it; and how many samples stopped and how many hit the length."""
    batch = pack([item["prompt_ids"] for item in samples], [item["response_ids"] for item in samples], pad_id)
    return {"policy_logps": token_logprobs(policy, batch), "reference_logps": token_logprobs(reference, batch),
            "finish_reasons": {reason: sum(item["finish_reason"] == reason for item in samples)
                               for reason in ("stop", "length")}}
