# mutant: keeps_last_copy
# exercise: screen_overlap
# mistake: overwrites the kept copy with each later duplicate, so the last occurrence survives and duplicates point at the wrong sample.
def screen_overlap(samples, eval_prompts):
    def key(text):
        if not isinstance(text, str):
            raise ValueError("prompt must be a string")
        folded = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
        if not folded:
            raise ValueError("empty prompt")
        return folded

    eval_index = {}
    for index, prompt in enumerate(eval_prompts):
        eval_index.setdefault(key(prompt), []).append(index)
    seen, keys = set(), []
    for sample in samples:
        sample_id = sample.get("sample_id") if isinstance(sample, dict) else None
        if not isinstance(sample_id, str) or not sample_id or sample_id in seen:
            raise ValueError("bad sample_id")
        seen.add(sample_id)
        keys.append(key(sample.get("prompt")))
    contaminated, hits, latest, order = [], set(), {}, []
    duplicates = {}
    for sample, k in zip(samples, keys):
        if k in eval_index:
            contaminated.append(sample["sample_id"])
            hits.update(eval_index[k])
            continue
        if k in latest:
            duplicates[latest[k]] = sample["sample_id"]
            order.remove(latest[k])
        latest[k] = sample["sample_id"]
        order.append(sample["sample_id"])
    return {"kept": order, "duplicates": duplicates, "contaminated": contaminated, "eval_hits": sorted(hits),
            "counts": {"input": len(keys), "kept": len(order), "duplicate": len(duplicates),
                       "contaminated": len(contaminated)}}
