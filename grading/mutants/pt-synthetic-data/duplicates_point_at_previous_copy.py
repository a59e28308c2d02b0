# mutant: duplicates_point_at_previous_copy
# exercise: screen_overlap
# mistake: remembers the most recent sample of each key, so the third copy of a prompt points at the second copy (itself a duplicate) instead of the first kept one.
import collections


def _fold(value):
    if type(value) is not str or not value.split():
        raise ValueError("prompts must be non-blank strings")
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())


def _checked_inputs(samples, eval_prompts):
    if type(samples) is not list or type(eval_prompts) is not list:
        raise ValueError("samples and eval_prompts must be lists")
    evaluation = collections.defaultdict(list)
    for position, text in enumerate(eval_prompts):
        evaluation[_fold(text)].append(position)
    ids = [sample.get("sample_id") if type(sample) is dict else None for sample in samples]
    if not all(isinstance(i, str) and i for i in ids) or len(set(ids)) != len(ids):
        raise ValueError("every sample needs its own non-empty string id")
    return evaluation, ids, [_fold(sample.get("prompt")) for sample in samples]


def screen_overlap(samples, eval_prompts):
    evaluation, ids, keys = _checked_inputs(samples, eval_prompts)
    status, latest, hits = {}, {}, set()
    for sample_id, key in zip(ids, keys):
        if key in evaluation:
            status[sample_id] = "contaminated"
            hits |= set(evaluation[key])
            continue
        status[sample_id] = latest.get(key, "kept")
        latest[key] = sample_id
    by_status = collections.defaultdict(list)
    for sample_id in ids:
        by_status[status[sample_id] if status[sample_id] in ("kept", "contaminated") else "duplicate"].append(sample_id)
    duplicates = {i: status[i] for i in by_status["duplicate"]}
    return {"kept": by_status["kept"], "duplicates": duplicates, "contaminated": by_status["contaminated"],
            "eval_hits": sorted(hits),
            "counts": {"input": len(ids), **{name: len(by_status[name]) for name in ("kept", "duplicate", "contaminated")}}}
