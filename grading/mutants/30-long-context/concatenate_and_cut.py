# mutant: concatenate_and_cut
# exercise: pack_examples
# mistake: the "wrapped" packing of pretraining: concatenate every example and cut the stream into rows, splitting examples across rows.
def pack_examples(examples, row_length, pad_id):
    if not examples or row_length < 1:
        raise ValueError("nothing to pack")
    stream_ids, stream_labels, stream_positions = [], [], []
    for example in examples:
        if len(example["input_ids"]) != len(example["labels"]) or len(example["input_ids"]) > row_length:
            raise ValueError("bad example")
        stream_ids.extend(example["input_ids"])
        stream_labels.extend([-100] + list(example["labels"][1:]))
        stream_positions.extend(range(len(example["input_ids"])))
    out = {"input_ids": [], "labels": [], "position_ids": [], "attention_mask": [], "rows": []}
    for start in range(0, len(stream_ids), row_length):
        chunk = stream_ids[start:start + row_length]
        missing = row_length - len(chunk)
        out["input_ids"].append(chunk + [pad_id] * missing)
        out["labels"].append(stream_labels[start:start + row_length] + [-100] * missing)
        out["position_ids"].append(stream_positions[start:start + row_length] + list(range(missing)))
        out["attention_mask"].append([1] * len(chunk) + [0] * missing)
    total = len(stream_ids)
    owner = [index for index, example in enumerate(examples) for _ in example["input_ids"]]
    out["rows"] = [sorted(set(owner[start:start + row_length])) for start in range(0, total, row_length)]
    out["real_tokens"] = total
    out["padded_tokens"] = len(out["rows"]) * row_length - total
    return out
