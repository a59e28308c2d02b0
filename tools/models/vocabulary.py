"""Whether a model's tokenizer and its vocabulary (the embedding rows) agree.

verl's vLLM rollout masks every logit at or above `len(tokenizer)` (the vocab-size mask of
`verl/workers/rollout/vllm_rollout/utils.py`), while its actor normalises over the whole vocabulary.
Where the two sizes differ, the engine's log-probs and the actor's differ by the mass of the masked
rows: nothing for trained weights (rows no tokenizer id reaches are padding a trained model gives no
mass), ln(V_model / V_tokenizer) on every token for random weights. So a random-weight model must
have exactly as many tokenizer ids as rows; the random-init builder pads its tokenizer to the
vocabulary for this reason. Checks here read files only (tokenizer.json, config.json); no model loads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tokenizers import Tokenizer

from tools.errors import ConfigError

from tools.models.architectures import IDENTITY_FILE, LAB_MODEL_IDS, RANDOM_INIT_ARCHITECTURES, TINY_FOLDER, TINY_MODEL_ID
from tools.models.cache import _cache_root, _check_model_id, _check_source, find_local_model, random_init_folder


def tokenizer_length(folder: str | os.PathLike) -> int:
    """`len(tokenizer)` of a model folder: its tokenizer.json's ids, added tokens included."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"{folder} has no tokenizer.json; its tokenizer size cannot be read without loading it")
    return Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)


def vocabulary_alignment(folder: str | os.PathLike) -> dict:
    """`{tokenizer_length, vocab_size, weights, aligned, detail}` of a model folder.

    Aligned: the tokenizer has exactly `vocab_size` ids, or the weights are pretrained and the
    tokenizer has no more ids than rows (the extra rows are untrained padding).
    """
    folder = Path(folder)
    vocab_size = int(json.loads((folder / "config.json").read_text(encoding="utf-8"))["vocab_size"])
    identity = folder / IDENTITY_FILE
    weights = json.loads(identity.read_text(encoding="utf-8")).get("weights") if identity.is_file() else "pretrained"
    length = tokenizer_length(folder)
    aligned = length == vocab_size or (weights == "pretrained" and length <= vocab_size)
    if length == vocab_size:
        detail = f"tokenizer and vocabulary both have {vocab_size} ids"
    elif aligned:
        detail = (f"tokenizer {length} ids, vocabulary {vocab_size} rows: the {vocab_size - length} rows no id reaches "
                  "are padding that pretrained weights give no probability mass")
    else:
        detail = (f"tokenizer {length} ids, vocabulary {vocab_size} rows with {weights} weights: vLLM (verl) masks "
                  f"logits at or above {length}, the actor does not, so their log-probs differ by about "
                  f"ln({vocab_size}/{length}) on every token")
    return {"tokenizer_length": length, "vocab_size": vocab_size, "weights": weights, "aligned": aligned,
            "detail": detail}


def require_vocabulary_alignment(folder: str | os.PathLike) -> dict:
    """`vocabulary_alignment(folder)`, or ConfigError when the tokenizer and the vocabulary disagree."""
    result = vocabulary_alignment(folder)
    if not result["aligned"]:
        raise ConfigError(f"{Path(folder).name}: {result['detail']}. Use the random_init build (its tokenizer is "
                          "padded to the vocabulary) or a pretrained model.")
    return result


def vocabulary_check(model_id: str, cache_dir: str | os.PathLike | None = None, source: str = "local") -> dict:
    """A preflight check: do the tokenizer and the vocabulary of the model a run will use agree?

    Reads the folder when it exists. A random_init build not made yet agrees by construction; the
    tiny model does not (its vocabulary is rounded up to a multiple of 64); a local model not in the
    cache cannot be read, which the model-cache check already reports (severity model_cache, so a
    missing model alone still gives preflight exit code 4).
    """
    _check_source(source)
    cache = _cache_root(cache_dir)
    name = f"vocabulary:{_check_model_id(model_id)}"
    fix = "use MODEL_SOURCE random_init (tokenizer padded to the vocabulary) or a pretrained model"
    if model_id == TINY_MODEL_ID:
        folder = cache / TINY_FOLDER
    elif model_id in LAB_MODEL_IDS:
        from tools.models.lab import lab_model_folder, recipe_for

        folder = lab_model_folder(recipe_for(model_id))
        if not folder.exists():
            return {"name": name, "ok": True, "severity": "blocked",
                    "detail": "a lab model's vocabulary has exactly len(tokenizer) rows (built that way)", "fix": None}
    elif source == "random_init":
        folder = random_init_folder(model_id, cache)
        if not folder.exists():
            known = model_id in RANDOM_INIT_ARCHITECTURES
            return {"name": name, "ok": known, "severity": "blocked",
                    "detail": ("the random_init build pads its tokenizer to the vocabulary "
                               f"({RANDOM_INIT_ARCHITECTURES[model_id]['vocab_size']} ids)" if known
                               else f"no architecture config for {model_id}"), "fix": None if known else fix}
    else:
        folder = find_local_model(model_id, cache)
        if folder is None:
            return {"name": name, "ok": False, "severity": "model_cache",
                    "detail": f"{model_id} is not in the cache; its tokenizer is checked once it is", "fix": None}
    if not folder.exists():
        return {"name": name, "ok": False, "severity": "blocked",
                "detail": "the tiny model's vocabulary is rounded up to a multiple of 64 above its tokenizer",
                "fix": fix}
    result = vocabulary_alignment(folder)
    return {"name": name, "ok": result["aligned"], "severity": "blocked", "detail": result["detail"], "fix": fix}
