"""Building model folders offline: the tiny model and tokenizer, and random-init architectures.

Built folders carry a `course_model.json` identity file (recipe, seed, file hashes, fingerprint).
They are built in a temporary folder and renamed into place, so concurrent builders never leave a
half-written model behind.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from tools.core.records import sha256_file
from tools.errors import ConfigError

from tools.models.architectures import (
    BUILDER_VERSION,
    CHAT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    FILLER_TOKEN,
    IDENTITY_FILE,
    IDENTITY_SCHEMA,
    QWEN2_PRETOKENIZE_REGEX,
    QWEN25_05B_INSTRUCT,
    RANDOM_INIT_ARCHITECTURES,
    RANDOM_INIT_SEED,
    RANDOM_INIT_SPECIAL_TOKEN_IDS,
    SPECIAL_TOKENS,
    TINY_ARCHITECTURE,
    TINY_FOLDER,
    TINY_MODEL_ID,
    TINY_SEED,
    TINY_TOKENIZER_VOCAB_TARGET,
    _RANDOM_INIT_GENERATION,
)
from tools.models.cache import _cache_root, _check_model_id, random_init_folder

_BUILD_LOCK = threading.RLock()
"""Serialises builds inside one process (they seed torch's global RNG); processes rely on rename."""

_CHAT_PHRASES = (
    "Hello! How can I help you today?",
    "Hi, I have a question about arithmetic.",
    "Sure, here is the answer.",
    "Thank you very much for your help.",
    "You're welcome. Let me know if you need anything else.",
    "Please answer with a single integer.",
    "Let's think step by step.",
    "First, add the two numbers. Then check the result.",
    "The result is correct.",
    "That is not right, please try again.",
    "Can you explain how you got this number?",
    "I multiplied the numbers and wrote down the product.",
    "Integer division drops the remainder.",
    "Subtract the smaller number from the larger one.",
    "What is the sum of these numbers?",
    "Good morning. I'd like to practice some math problems.",
    "Here's another question for you.",
    "The final answer is shown below.",
    "I'm not sure, but I'll do my best.",
    "Write only the number, with no extra words.",
)

_OPERATIONS = (("+", lambda a, b: a + b), ("-", lambda a, b: a - b),
               ("*", lambda a, b: a * b), ("//", lambda a, b: a // b))

_QUESTION_FORMS = ("What is {a} {op} {b}?", "Compute {a} {op} {b}.",
                   "Calculate {a} {op} {b} and answer with an integer.", "{a} {op} {b} =")

_ANSWER_FORMS = ("{r}", "The answer is {r}.", "{a} {op} {b} = {r}")


def tiny_corpus(seed: int = TINY_SEED) -> list[str]:
    """The fixed training text of the tiny tokenizer: arithmetic Q&A, chat phrases, digits and roles."""
    rng = random.Random(seed)
    lines = list(_CHAT_PHRASES)
    for _ in range(400):
        symbol, operation = rng.choice(_OPERATIONS)
        a, b = rng.randint(0, 99), rng.randint(1, 99)
        values = {"a": a, "b": b, "op": symbol, "r": operation(a, b)}
        lines.append(rng.choice(_QUESTION_FORMS).format(**values))
        lines.append(rng.choice(_ANSWER_FORMS).format(**values))
    lines += ["0 1 2 3 4 5 6 7 8 9", "0123456789", "-0123456789", DEFAULT_SYSTEM_PROMPT]
    lines += ["system\nuser\nassistant\n"] * 4
    return lines


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical_sha256(value: Any) -> str:
    return _sha256_text(json.dumps(value, sort_keys=True, ensure_ascii=False))


def train_tiny_bpe():
    """Train the tiny byte-level BPE on `tiny_corpus()` with Qwen2's normaliser and pre-tokeniser.

    Returns a `tokenizers.Tokenizer`; special tokens take ids 0, 1, 2 (<|endoftext|>,
    <|im_start|>, <|im_end|>). Deterministic and offline (well under a second).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_TOKENIZER_VOCAB_TARGET,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(tiny_corpus(), trainer=trainer)
    return backend


def pad_vocabulary(backend, vocab_size: int, special_token_ids: dict[str, int]):
    """A copy of a trained BPE `tokenizers.Tokenizer` with exactly `vocab_size` ids.

    The special tokens move to `special_token_ids`; every id no learned token holds gets a filler
    entry (FILLER_TOKEN) that no merge produces, so encoding is unchanged except for the special ids
    and `len(tokenizer) == vocab_size`.
    """
    from tokenizers import Tokenizer

    data = json.loads(backend.to_str())
    specials = {token["content"] for token in data["added_tokens"]}
    if set(special_token_ids) != specials:
        raise ConfigError(f"special token ids must cover exactly {sorted(specials)}, got {sorted(special_token_ids)}")
    vocab = {token: index for token, index in data["model"]["vocab"].items() if token not in specials}
    vocab.update(special_token_ids)
    if len(set(vocab.values())) != len(vocab) or max(vocab.values()) >= vocab_size:
        raise ConfigError(f"the special token ids collide with learned ids or exceed {vocab_size}")
    used = set(vocab.values())
    vocab.update({FILLER_TOKEN.format(id=index): index for index in range(vocab_size) if index not in used})
    data["model"]["vocab"] = vocab
    for token in data["added_tokens"]:
        token["id"] = special_token_ids[token["content"]]
    return Tokenizer.from_str(json.dumps(data))


def build_tiny_tokenizer(model_max_length: int = TINY_ARCHITECTURE["max_position_embeddings"], *,
                         vocab_size: int | None = None, special_token_ids: dict[str, int] | None = None):
    """The tiny tokenizer wrapped for transformers, with the Qwen-style chat template.

    eos is <|im_end|>, pad is <|endoftext|>, there is no bos token, as in Qwen2.5-Instruct. With
    `vocab_size` (and `special_token_ids`), the vocabulary is padded to exactly that many ids
    (`pad_vocabulary`); without, the special tokens take ids 0, 1, 2.
    """
    from transformers import PreTrainedTokenizerFast

    backend = train_tiny_bpe()
    if vocab_size is not None:
        backend = pad_vocabulary(backend, vocab_size, special_token_ids or {})
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        extra_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _save_tokenizer(tokenizer, folder: Path) -> None:
    tokenizer.save_pretrained(folder)
    # Reload through Qwen2Tokenizer, as the real Qwen2.5 folders do.
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def _init_model(config, seed: int):
    """A float32 CPU model of `config` with weights drawn from a fixed seed (global RNG untouched)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]), torch.device("cpu"):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _file_hashes(folder: Path) -> dict[str, str]:
    return {path.name: sha256_file(path) for path in sorted(folder.iterdir())
            if path.is_file() and path.name != IDENTITY_FILE}


def _write_identity(folder: Path, identity: dict) -> dict:
    import torch
    import transformers

    files = _file_hashes(folder)
    record = {
        "schema_version": IDENTITY_SCHEMA,
        **identity,
        "builder_version": BUILDER_VERSION,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "files": files,
        "fingerprint": _canonical_sha256(files),
    }
    (folder / IDENTITY_FILE).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return record


def _tiny_recipe() -> dict:
    return {
        "builder_version": BUILDER_VERSION,
        "seed": TINY_SEED,
        "architecture": TINY_ARCHITECTURE,
        "tokenizer": {"vocab_target": TINY_TOKENIZER_VOCAB_TARGET, "special_tokens": list(SPECIAL_TOKENS),
                      "pretokenize_regex": QWEN2_PRETOKENIZE_REGEX,
                      "corpus_sha256": _sha256_text("\n".join(tiny_corpus())),
                      "chat_template_sha256": _sha256_text(CHAT_TEMPLATE)},
    }


def _random_init_recipe(model_id: str, num_hidden_layers: int | None) -> dict:
    return {
        "builder_version": BUILDER_VERSION,
        "seed": RANDOM_INIT_SEED,
        "model_id": model_id,
        "architecture": RANDOM_INIT_ARCHITECTURES[model_id],
        "overrides": {} if num_hidden_layers is None else {"num_hidden_layers": num_hidden_layers},
        "tokenizer_recipe_sha256": _canonical_sha256(_tiny_recipe()["tokenizer"]),
        "tokenizer_padding": {"vocab_size": RANDOM_INIT_ARCHITECTURES[model_id]["vocab_size"],
                              "special_token_ids": RANDOM_INIT_SPECIAL_TOKEN_IDS[model_id], "filler": FILLER_TOKEN},
    }


def _write_tiny(folder: Path) -> None:
    from transformers import GenerationConfig, Qwen2Config

    tokenizer = build_tiny_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = Qwen2Config(
        **TINY_ARCHITECTURE,
        vocab_size=_round_up(len(tokenizer), 64),
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    config.architectures = ["Qwen2ForCausalLM"]
    model = _init_model(config, TINY_SEED)
    model.generation_config = GenerationConfig(bos_token_id=ids["<|endoftext|>"],
                                               eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
                                               pad_token_id=ids["<|endoftext|>"])
    model.save_pretrained(folder)
    _save_tokenizer(tokenizer, folder)
    _write_identity(folder, {
        "model_id": TINY_MODEL_ID,
        "weights": "random_init",
        "source": "offline_builder",
        "seed": TINY_SEED,
        "recipe_sha256": _canonical_sha256(_tiny_recipe()),
        "architecture_overrides": {},
        "tokenizer": {"kind": "tiny byte-level BPE (Qwen2 pre-tokeniser)", "size": len(tokenizer),
                      "special_token_ids": ids},
    })


def _write_random_init(folder: Path, model_id: str, num_hidden_layers: int | None) -> None:
    from transformers import GenerationConfig, Qwen2Config

    architecture = dict(RANDOM_INIT_ARCHITECTURES[model_id])
    if num_hidden_layers is not None:
        architecture["num_hidden_layers"] = num_hidden_layers
    config = Qwen2Config(**architecture)
    config.architectures = ["Qwen2ForCausalLM"]
    special_ids = RANDOM_INIT_SPECIAL_TOKEN_IDS[model_id]
    tokenizer = build_tiny_tokenizer(model_max_length=architecture["max_position_embeddings"],
                                     vocab_size=architecture["vocab_size"], special_token_ids=special_ids)
    model = _init_model(config, RANDOM_INIT_SEED)
    model.generation_config = GenerationConfig(**_RANDOM_INIT_GENERATION[model_id])
    model.save_pretrained(folder)
    del model
    _save_tokenizer(tokenizer, folder)
    _write_identity(folder, {
        "model_id": model_id,
        "weights": "random_init",
        "source": "random_init",
        "seed": RANDOM_INIT_SEED,
        "recipe_sha256": _canonical_sha256(_random_init_recipe(model_id, num_hidden_layers)),
        "architecture_overrides": _random_init_recipe(model_id, num_hidden_layers)["overrides"],
        "tokenizer": {
            "kind": "tiny byte-level BPE (Qwen2 pre-tokeniser), not the real Qwen tokenizer",
            "size": len(tokenizer),
            "special_token_ids": special_ids,
            "note": (f"padded to the vocabulary: {len(tokenizer)} ids for {architecture['vocab_size']} embedding rows; "
                     "the special tokens sit at the real model's ids (config bos/eos/pad name them), every id the "
                     "tiny BPE does not use is a filler entry no text encodes to; "
                     "text from this model is meaningless, use it for memory and speed, not for quality"),
        },
    })


def _verify_built(folder: Path, recipe_sha256: str) -> dict:
    """Check that a built folder matches the current recipe and is unaltered; return its identity."""
    identity_path = folder / IDENTITY_FILE
    if not identity_path.is_file():
        raise ConfigError(f"{folder} exists but has no {IDENTITY_FILE}; delete the folder so it is rebuilt.")
    identity = json.loads(identity_path.read_text(encoding="utf-8"))
    if identity.get("recipe_sha256") != recipe_sha256:
        raise ConfigError(
            f"{folder} was built by another recipe (builder version {identity.get('builder_version')}, "
            f"now {BUILDER_VERSION}); delete the folder so it is rebuilt."
        )
    if sha256_file(folder / "config.json") != identity.get("files", {}).get("config.json"):
        raise ConfigError(f"{folder / 'config.json'} changed after it was built; delete {folder} so it is rebuilt.")
    return identity


def _build_once(folder: Path, recipe_sha256: str, writer) -> Path:
    """Build `folder` with `writer(temp_folder)` unless it exists; atomic rename, concurrency-safe."""
    with _BUILD_LOCK:
        if folder.exists():
            _verify_built(folder, recipe_sha256)
            return folder
        folder.parent.mkdir(parents=True, exist_ok=True)
        temp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.building-", dir=folder.parent))
        try:
            temp.chmod(0o755)  # mkdtemp makes it private; the built model is meant to be shared
            writer(temp)
            try:
                os.rename(temp, folder)
            except OSError:
                if not folder.exists():
                    raise
                # Another process finished first; its folder has the same recipe (checked below).
        finally:
            if temp.exists():
                shutil.rmtree(temp)
        _verify_built(folder, recipe_sha256)
        return folder


def build_tiny_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """Build (once) and return `<cache>/tiny-qwen2`, the tiny offline Qwen2 model."""
    folder = _cache_root(cache_dir) / TINY_FOLDER
    return _build_once(folder, _canonical_sha256(_tiny_recipe()), _write_tiny)


def build_random_init_model(model_id: str = QWEN25_05B_INSTRUCT, cache_dir: str | os.PathLike | None = None,
                            *, num_hidden_layers: int | None = None) -> Path:
    """Build (once) and return a folder with `model_id`'s architecture and seed-fixed random weights.

    Weights are float32 (about 2 GB for Qwen2.5-0.5B) and written once. `num_hidden_layers`
    shrinks the depth (tests); such a build is recorded in `architecture_overrides`.
    """
    _check_model_id(model_id)
    if model_id not in RANDOM_INIT_ARCHITECTURES:
        raise ConfigError(
            f"no architecture config for {model_id!r} in tools/models/architectures.py; random_init supports "
            f"{', '.join(RANDOM_INIT_ARCHITECTURES)}."
        )
    if num_hidden_layers is not None and (isinstance(num_hidden_layers, bool) or not isinstance(num_hidden_layers, int)
                                          or num_hidden_layers < 1):
        raise ConfigError(f"num_hidden_layers must be a positive integer, got {num_hidden_layers!r}.")
    folder = random_init_folder(model_id, cache_dir, num_hidden_layers)
    recipe_sha256 = _canonical_sha256(_random_init_recipe(model_id, num_hidden_layers))
    return _build_once(folder, recipe_sha256,
                       lambda temp: _write_random_init(temp, model_id, num_hidden_layers))
