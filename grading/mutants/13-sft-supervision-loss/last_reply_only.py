# mutant: last_reply_only
# exercise: build_sft_example
# mistake: supervises only the final assistant message, dropping the earlier replies of a multi-turn dialogue.
def build_sft_example(messages, tokenizer, max_length=None):
    def ids(text):
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    roles = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant") \
                or not isinstance(message.get("content"), str):
            raise ValueError("bad message")
        if message["role"] == "system" and index:
            raise ValueError("system must come first")
        roles.append(message["role"])
    turns = roles[1:] if roles[0] == "system" else roles
    if not turns or turns[0] != "user" or "assistant" not in roles:
        raise ValueError("need a user turn first and an assistant reply")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ValueError("bad max_length")
    input_ids = ids(tokenizer.apply_chat_template(messages, tokenize=False))
    labels = [-100] * len(input_ids)
    spans = []
    eos = tokenizer.eos_token_id
    index = len(roles) - 1 - roles[::-1].index("assistant")
    start = len(ids(tokenizer.apply_chat_template(messages[:index], tokenize=False, add_generation_prompt=True)))
    end = input_ids.index(eos, start) + 1
    labels[start:end] = input_ids[start:end]
    spans.append([start, end])
    before = sum(label != -100 for label in labels)
    if max_length is not None:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    after = sum(label != -100 for label in labels)
    return {"input_ids": input_ids, "labels": labels, "assistant_spans": spans,
            "supervised_tokens": after, "truncated_supervised_tokens": before - after}
