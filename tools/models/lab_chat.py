"""Chats of the lab task rendered through the tiny model's chat template, as token ids."""

from __future__ import annotations

from tools.errors import ConfigError


def _ids(encoded) -> list[int]:
    return list(getattr(encoded, "input_ids", encoded))


def as_messages(prompt) -> list[dict]:
    """A prompt as chat messages: a string is one user turn; a list of `{role, content}` dicts is kept
    (a system turn first replaces the template's default system prompt)."""
    if isinstance(prompt, str) and prompt:
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, (list, tuple)) and prompt and all(
            isinstance(m, dict) and m.get("role") in ("system", "user", "assistant") and isinstance(m.get("content"), str)
            for m in prompt) and prompt[-1]["role"] == "user":
        return [dict(message) for message in prompt]
    raise ConfigError("a prompt is a non-empty string (the user turn) or a list of {role, content} messages "
                      f"ending with a user turn, got {prompt!r}")


def prompt_ids(tokenizer, prompt) -> list[int]:
    """The chat-template tokens of a prompt (see `as_messages`) and the opening of the assistant turn."""
    return _ids(tokenizer.apply_chat_template(as_messages(prompt), add_generation_prompt=True, tokenize=True))


def chat_ids(tokenizer, prompt, reply: str) -> tuple[list[int], int]:
    """`(ids, prompt_length)` of a prompt and the assistant's reply, ending with <|im_end|>."""
    messages = as_messages(prompt)
    head = prompt_ids(tokenizer, messages)
    full = _ids(tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": reply}], tokenize=True))
    if full[:len(head)] != head:
        raise ConfigError("the chat template does not extend the prompt with the reply")
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return full[:full.index(end, len(head)) + 1], len(head)
