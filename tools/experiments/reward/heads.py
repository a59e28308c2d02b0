"""A scalar reward head on a causal LM's backbone: transformers' own sequence-classification model.

`load_reward_model(folder)` loads the model in `folder` as `AutoModelForSequenceClassification` with
one output (its `score` head initialised from a seed), float32, with the tokenizer's pad token on the
config. `token_scores` applies the head at every position. transformers' own forward reads a
sequence's score at the rightmost token whose id is not the pad id; `readout_mask` marks exactly those
tokens, so the last 1 of its row is that token. It equals the attention mask's last 1 unless the pad
token is the end-of-sequence token (what `load_reward_model` sets when a tokenizer has no pad token)
and a sequence ends with it: then transformers reads the token before the trailing end-of-sequence
tokens, and so must a stage that trains the head for transformers' forward to serve.
"""

from __future__ import annotations

import contextlib
from typing import Sequence

import torch


@contextlib.contextmanager
def quiet_transformers():
    """transformers' load report (the new head's weights) and its loading bar stay out of the notebook."""
    from transformers.utils import logging as transformers_logging

    level = transformers_logging.get_verbosity()
    loading_bar = transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(level)
        if loading_bar:
            transformers_logging.enable_progress_bar()


def load_reward_model(folder, seed: int = 0, device: str = "cpu"):
    """`(model, tokenizer)`: the causal LM in `folder` with a one-output sequence-classification head
    (initialised from `seed`), float32, eval mode, the pad token set on the config."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        torch.manual_seed(seed)
        model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=torch.float32)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(device).eval(), tokenizer


def token_scores(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The head's score at every position: `model.score` on the backbone's last hidden states."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return model.score(hidden).squeeze(-1)


def readout_mask(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """1 where the token is not the pad id, else 0 (long): the last 1 of a row is the token transformers'
    sequence-classification forward reads."""
    return (input_ids != pad_token_id).long()


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int, side: str) -> tuple[torch.Tensor, torch.Tensor]:
    """`(input_ids, attention_mask)` of token rows padded on `side` ("right" or "left")."""
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        span = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
        ids[index, span] = torch.tensor(row)
        mask[index, span] = 1
    return ids, mask


def conversation_ids(tokenizer, prompt: str, answer: str) -> list[int]:
    """The chat-formatted token ids of one user prompt and one assistant answer."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]
