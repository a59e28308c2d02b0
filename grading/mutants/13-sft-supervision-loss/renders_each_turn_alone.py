# mutant: renders_each_turn_alone
# exercise: build_sft_example
# mistake: renders and tokenises every message on its own and concatenates the pieces, so the default system turn the template adds is missing and input_ids are not the rendered conversation.
def _check_conversation(messages, tokenizer, max_length):
    if type(messages) is not list or len(messages) == 0:
        raise ValueError("messages must be a non-empty list")
    for position, message in enumerate(messages):
        if type(message) is not dict or not {"role", "content"} <= set(message):
            raise ValueError("every message needs role and content")
        if message["role"] not in ("system", "user", "assistant") or type(message["content"]) is not str:
            raise ValueError("bad role or content")
        if message["role"] == "system" and position > 0:
            raise ValueError("system only first")
    order = [message["role"] for message in messages if message["role"] != "system"]
    if not order or order[0] != "user" or "assistant" not in order:
        raise ValueError("a user turn first and an assistant reply are needed")
    if max_length is not None and (type(max_length) is not int or max_length <= 0):
        raise ValueError("max_length must be a positive int")
    if tokenizer.eos_token_id is None:
        raise ValueError("no eos token")


def build_sft_example(messages, tokenizer, max_length=None):
    _check_conversation(messages, tokenizer, max_length)
    pieces = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]
    input_ids, labels, spans = [], [], []
    for message in messages:
        header, body, newline = pieces(f"<|im_start|>{message['role']}\n"), pieces(message["content"] + "<|im_end|>"), pieces("\n")
        if message["role"] == "assistant":
            spans.append([len(input_ids) + len(header), len(input_ids) + len(header) + len(body)])
            labels.extend([-100] * len(header) + body + [-100] * len(newline))
        else:
            labels.extend([-100] * (len(header) + len(body) + len(newline)))
        input_ids.extend(header + body + newline)
    full = len(labels) - labels.count(-100)
    input_ids, labels = (input_ids, labels) if max_length is None else (input_ids[:max_length], labels[:max_length])
    kept = len(labels) - labels.count(-100)
    return dict(input_ids=input_ids, labels=labels, assistant_spans=spans, supervised_tokens=kept,
                truncated_supervised_tokens=full - kept)
