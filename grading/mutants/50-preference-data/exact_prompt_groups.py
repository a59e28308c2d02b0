# mutant: exact_prompt_groups
# exercise: split_by_prompt
# mistake: a learner's split that groups only prompts equal after normalisation, so paraphrases and reformatted prompts land on both sides.
import hashlib
import math
import unicodedata


def _canonical_prompts(pairs, eval_fraction, near_duplicate):
    for value, upper_ok in ((eval_fraction, False), (near_duplicate, True)):
        if type(value) not in (int, float) or math.isnan(value) or value <= 0 or value > 1 or (value == 1 and not upper_ok):
            raise ValueError("parameter out of range")
    if not isinstance(pairs, (list, tuple)):
        raise ValueError("need a list")
    texts, used = [], set()
    for item in pairs:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"].strip() \
                or item["id"] in used or not isinstance(item.get("prompt"), str):
            raise ValueError("bad pair")
        text = " ".join(unicodedata.normalize("NFKC", item["prompt"]).casefold().split())
        if not any(ch.isalnum() or ch == "_" for ch in text):
            raise ValueError("prompt without a word")
        used.add(item["id"])
        texts.append(text)
    return texts


def _side(text, eval_fraction):
    return "eval" if int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) < eval_fraction * 2 ** 32 else "train"


def split_by_prompt(pairs, eval_fraction=0.25, near_duplicate=0.85, ledger=None):
    texts = _canonical_prompts(pairs, eval_fraction, near_duplicate)
    if ledger is not None and (not isinstance(ledger, dict)
                               or any(type(k) is not str or v not in ("train", "eval") for k, v in ledger.items())):
        raise ValueError("bad ledger")
    known = dict(ledger or {})
    side = {text: known.get(text) or _side(text, eval_fraction) for text in dict.fromkeys(texts)}
    groups = [{"ids": [p["id"] for p, t in zip(pairs, texts) if t == text], "key": text, "split": side[text]}
              for text in side]
    return {"groups": groups, "held": [], "ledger": {**known, **side},
            "train": [p["id"] for p, t in zip(pairs, texts) if side[t] == "train"],
            "eval": [p["id"] for p, t in zip(pairs, texts) if side[t] == "eval"]}
