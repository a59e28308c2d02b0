"""A tool-use episode as token segments: the prompt, the model's turns and the tool's observations.

The segments are cut from the chat template's own rendering, the way TRL's GRPOTrainer finds the tokens
of a tool result (the difference between the conversation rendered with and without the tool message):

- `prompt`: the conversation before the first model turn, through the opening of the assistant turn;
- `model`: one action and the end-of-turn token that closes it (the model wrote both);
- `env`: what follows until the next assistant turn opens: the newline, the tool message (role `tool`,
  rendered by the template: the lab model's template gives it its own `<|im_start|>tool` header;
  Qwen2.5's wraps it in a user turn between `<tool_response>` tags) and the next assistant header.

Concatenated, the segments are exactly the template's tokens of the whole conversation; a template that
does not extend one rendering by the next is refused.
"""

from __future__ import annotations

from tools.errors import ConfigError

END_OF_TURN = "<|im_end|>"


def _render(tokenizer, messages: list[dict], *, open_assistant: bool) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=open_assistant)
    return list(getattr(encoded, "input_ids", encoded))


def _extension(longer: list[int], shorter: list[int]) -> list[int]:
    if longer[:len(shorter)] != shorter:
        raise ConfigError("the chat template does not extend the conversation token by token")
    return longer[len(shorter):]


def prompt_segment(tokenizer, messages: list[dict]) -> dict:
    """The conversation before the first action, through the assistant header."""
    return {"source": "prompt", "token_ids": _render(tokenizer, messages, open_assistant=True)}


def model_segment(tokenizer, messages: list[dict], action: str) -> dict:
    """The tokens of `action` as the next assistant turn, through its end-of-turn token."""
    head = _render(tokenizer, messages, open_assistant=True)
    full = _render(tokenizer, messages + [{"role": "assistant", "content": action}], open_assistant=False)
    tail = _extension(full, head)
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if end not in tail:
        raise ConfigError("the chat template does not close the assistant turn with <|im_end|>")
    return {"source": "model", "token_ids": tail[:tail.index(end) + 1]}


def tool_segment(tokenizer, messages: list[dict], action: str, observation: str) -> dict:
    """What the environment inserts after `action`: the rest of the turn, the tool message, the next header."""
    before = _render(tokenizer, messages, open_assistant=True) + model_segment(tokenizer, messages, action)["token_ids"]
    after = _render(tokenizer, messages + [{"role": "assistant", "content": action},
                                           {"role": "tool", "content": observation}], open_assistant=True)
    return {"source": "env", "token_ids": _extension(after, before)}
