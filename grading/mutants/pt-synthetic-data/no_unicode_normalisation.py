# mutant: no_unicode_normalisation
# exercise: screen_overlap
# mistake: lower-cases and folds whitespace but skips NFKC, so full-width digits and punctuation slip past both checks.
def screen_overlap(samples, eval_prompts):
    def key(text):
        if not isinstance(text, str):
            raise ValueError("prompt must be a string")
        folded = " ".join(text.casefold().split())
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
    kept, duplicates, contaminated, hits, first = [], {}, [], set(), {}
    for sample, k in zip(samples, keys):
        if k in eval_index:
            contaminated.append(sample["sample_id"])
            hits.update(eval_index[k])
        elif k in first:
            duplicates[sample["sample_id"]] = first[k]
        else:
            first[k] = sample["sample_id"]
            kept.append(sample["sample_id"])
    return {"kept": kept, "duplicates": duplicates, "contaminated": contaminated, "eval_hits": sorted(hits),
            "counts": {"input": len(keys), "kept": len(kept), "duplicate": len(duplicates),
                       "contaminated": len(contaminated)}}
