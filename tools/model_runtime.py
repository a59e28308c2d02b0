"""Where the course's models come from, and how they are loaded.

Three kinds of model folder, each loadable with `from_pretrained`:

- `"tiny"`: a small Qwen2 model (random weights, fixed seed) with a byte-level BPE tokenizer and
  a Qwen-style chat template, built offline in a few seconds for `cpu_smoke` runs;
- `source="local"`: a real model from a local Hugging Face cache (hub layout or plain folder);
  when it is absent, `ModelCacheMissingError` names the folder and the download command;
- `source="random_init"`: a known architecture (Qwen2.5-0.5B-Instruct) with seed-fixed random
  weights, for GPU machines that cannot download weights; recorded as `weights: "random_init"`.

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
import re
import shlex
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from tools.errors import ConfigError, ModelCacheMissingError
from tools.project_runtime import resolve_project_root, sha256_file

TINY_MODEL_ID = "tiny"
QWEN25_05B_INSTRUCT = "Qwen/Qwen2.5-0.5B-Instruct"

MODEL_CACHE_ENV = "COURSE_MODEL_CACHE"
"""Environment variable that overrides the default model cache folder."""

MODEL_SOURCES = ("local", "random_init")
IDENTITY_FILE = "course_model.json"
IDENTITY_SCHEMA = "course-model-identity/v1"
BUILDER_VERSION = 1
"""Bump when a recipe below changes; folders built by another version are refused, not reused."""

TINY_FOLDER = "tiny-qwen2"
TINY_SEED = 20240601
RANDOM_INIT_SEED = 42

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""The split pattern of Qwen2's pre-tokeniser (single digits, words with their leading mark).

The tiny tokenizer is trained with exactly this pipeline (NFC, Split, ByteLevel without prefix
space) because `AutoTokenizer` reloads a qwen2 folder through `Qwen2Tokenizer`, which rebuilds
that pipeline; a tokenizer trained another way would come back with different ids.
"""

# Qwen-style ChatML: a default system turn when none is given, one block per message, and the
# assistant header as generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- endif -%}"
)

TINY_TOKENIZER_VOCAB_TARGET = 512
TINY_ARCHITECTURE: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 2048,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
}

# Published architecture of Qwen/Qwen2.5-0.5B-Instruct (its config.json), encoded here because
# the GPU machines have no internet. Special-token ids are those of the real Qwen tokenizer.
RANDOM_INIT_ARCHITECTURES: dict[str, dict[str, Any]] = {
    QWEN25_05B_INSTRUCT: {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "intermediate_size": 4864,
        "vocab_size": 151936,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": 32768,
        "max_window_layers": 21,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
}
_RANDOM_INIT_GENERATION = {QWEN25_05B_INSTRUCT: {"bos_token_id": 151643, "eos_token_id": [151645, 151643],
                                                 "pad_token_id": 151643}}

_MODEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")
_BUILD_LOCK = threading.RLock()
"""Serialises builds inside one process (they seed torch's global RNG); processes rely on rename."""


# ---------------------------------------------------------------------------
# Cache folder and model ids
# ---------------------------------------------------------------------------

def default_cache_dir() -> Path:
    """`$COURSE_MODEL_CACHE` when set, else `<project root>/model_cache`."""
    configured = os.environ.get(MODEL_CACHE_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return resolve_project_root() / "model_cache"


def _cache_root(cache_dir: str | os.PathLike | None) -> Path:
    """The cache folder as an absolute path; a relative one is taken from the project root."""
    if cache_dir is None:
        return default_cache_dir()
    path = Path(cache_dir).expanduser()
    if not path.is_absolute():
        path = resolve_project_root() / path
    return path.resolve()


def _check_model_id(model_id: str) -> str:
    if not isinstance(model_id, str) or not _MODEL_ID_PATTERN.match(model_id) or ".." in model_id:
        raise ConfigError(
            f"invalid model id {model_id!r}: use 'tiny' or a Hugging Face repo id such as {QWEN25_05B_INSTRUCT!r}."
        )
    return model_id


def _check_source(source: str) -> str:
    if source not in MODEL_SOURCES:
        raise ConfigError(f"unknown model source {source!r}; choose one of {', '.join(MODEL_SOURCES)}.")
    return source


def _hub_folder(cache: Path, model_id: str) -> Path:
    """`<cache>/models--Org--Name`, the hub cache folder of a repo id."""
    return cache / ("models--" + model_id.replace("/", "--"))


def _plain_folders(cache: Path, model_id: str) -> list[Path]:
    """Plain-folder layouts accepted: `<cache>/<Name>` and `<cache>/<Org>/<Name>`."""
    name = model_id.split("/")[-1]
    folders = [cache / name]
    if "/" in model_id:
        folders.append(cache / model_id)
    return folders


def random_init_folder(model_id: str, cache_dir: str | os.PathLike | None = None,
                       num_hidden_layers: int | None = None) -> Path:
    """Folder of the random-weight build of `model_id` (a layer-count override gets its own folder)."""
    name = "random-init--" + _check_model_id(model_id).replace("/", "--")
    if num_hidden_layers is not None:
        name += f"--layers{num_hidden_layers}"
    return _cache_root(cache_dir) / name


def expected_model_path(model_id: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `model_id` is (when complete in the cache) or where the download command puts it.

    Loads nothing. For "tiny" it is the folder the offline builder writes. Note that the hub
    folder of a partial download exists although the model is unusable: use
    `find_local_model` or `model_cache_check` to decide whether the model is there.
    """
    cache = _cache_root(cache_dir)
    if _check_model_id(model_id) == TINY_MODEL_ID:
        return cache / TINY_FOLDER
    found = find_local_model(model_id, cache)
    return found if found is not None else _hub_folder(cache, model_id)


def download_command(model_id: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """The shell command that puts `model_id` into `cache_dir` on a machine with internet.

    None for "tiny", which is built offline and never downloaded.
    """
    if _check_model_id(model_id) == TINY_MODEL_ID:
        return None
    return f"hf download {model_id} --cache-dir {shlex.quote(str(_cache_root(cache_dir)))}"


# ---------------------------------------------------------------------------
# Local cache lookup
# ---------------------------------------------------------------------------

def _missing_files(folder: Path) -> list[str]:
    """What a folder lacks to be loaded with from_pretrained (config, weights, tokenizer)."""
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    weights = [name for name in _WEIGHT_FILES if (folder / name).is_file()]
    if not weights:
        missing.append("model.safetensors")
    elif weights[0] == "model.safetensors.index.json":
        try:
            index = json.loads((folder / weights[0]).read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            missing.append(f"{weights[0]} (unreadable)")
        else:
            shards = sorted(set(index.get("weight_map", {}).values()))
            missing.extend(shard for shard in shards if not (folder / shard).is_file())
    if not (folder / "tokenizer.json").is_file() and not (folder / "vocab.json").is_file():
        missing.append("tokenizer.json")
    return missing


def _hub_snapshot_candidates(cache: Path, model_id: str) -> tuple[list[Path], list[str]]:
    """Snapshot folders of `model_id` in a hub cache, best first, and notes on rejected ones."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    notes: list[str] = []
    candidates: list[Path] = []
    hub = _hub_folder(cache, model_id)
    if not hub.is_dir():
        return candidates, notes
    try:
        candidates.append(Path(snapshot_download(model_id, cache_dir=str(cache), local_files_only=True)))
    except LocalEntryNotFoundError as error:
        # No refs/main, or the cached file listing says files are missing: fall back to a scan.
        notes.append(f"huggingface_hub: {str(error).splitlines()[0]}")
    snapshots = hub / "snapshots"
    if snapshots.is_dir():
        others = sorted((p for p in snapshots.iterdir() if p.is_dir() and p not in candidates),
                        key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
        candidates.extend(others)
    return candidates, notes


def _search_local(model_id: str, cache: Path) -> tuple[Path | None, list[str]]:
    candidates, notes = _hub_snapshot_candidates(cache, model_id)
    candidates.extend(_plain_folders(cache, model_id))
    for folder in candidates:
        if not folder.is_dir():
            continue
        missing = _missing_files(folder)
        if not missing:
            return folder, notes
        notes.append(f"{folder} is incomplete (missing {', '.join(missing)})")
    return None, notes


def find_local_model(model_id: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The complete local folder of `model_id` (hub snapshot or plain folder), or None. Loads nothing."""
    found, _ = _search_local(_check_model_id(model_id), _cache_root(cache_dir))
    return found


def model_cache_check(model_id: str, cache_dir: str | os.PathLike | None = None, source: str = "local") -> dict:
    """A preflight check (for `preflight_report(extra_checks=...)`) saying whether the model is usable.

    Severity is `model_cache`, so a missing model alone gives preflight exit code 4. Loads nothing.
    """
    _check_source(source)
    cache = _cache_root(cache_dir)
    name = f"model_cache:{_check_model_id(model_id)}"
    if model_id == TINY_MODEL_ID:
        return {"name": name, "ok": True, "severity": "model_cache",
                "detail": f"tiny model is built offline on first use at {cache / TINY_FOLDER}", "fix": None}
    if source == "random_init":
        known = model_id in RANDOM_INIT_ARCHITECTURES
        target = random_init_folder(model_id, cache)
        return {"name": name, "ok": known, "severity": "blocked",
                "detail": (f"{model_id} architecture is known; random weights go to {target}"
                           if known else f"no architecture config for {model_id} in tools/model_runtime.py"),
                "fix": None if known else f"use source='local' or one of {', '.join(RANDOM_INIT_ARCHITECTURES)}"}
    found, notes = _search_local(model_id, cache)
    if found is not None:
        return {"name": name, "ok": True, "severity": "model_cache", "detail": f"{model_id} found at {found}",
                "fix": None}
    detail = f"{model_id} missing in {cache}" + (f" ({'; '.join(notes)})" if notes else "")
    return {"name": name, "ok": False, "severity": "model_cache", "detail": detail,
            "fix": download_command(model_id, cache)}


def _missing_model_message(model_id: str, cache: Path, notes: list[str]) -> str:
    looked = [f"{_hub_folder(cache, model_id)}/snapshots/<revision>/"]
    looked += [f"{folder}/" for folder in _plain_folders(cache, model_id)]
    lines = [
        f"model {model_id} is not in the local model cache {cache}.",
        "Looked for config.json, weights and tokenizer files in: " + ", ".join(looked) + ".",
    ]
    lines.extend(f"  note: {note}" for note in notes)
    lines += [
        "On a machine with internet, download it with:",
        f"  {download_command(model_id, cache)}",
        f"and copy {cache} to this machine (or point {MODEL_CACHE_ENV} or cache_dir at the folder that holds it).",
        "Without weights, source='random_init' loads the same architecture with random weights "
        "(recorded as weights: random_init).",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Tiny tokenizer
# ---------------------------------------------------------------------------

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


def build_tiny_tokenizer(model_max_length: int = TINY_ARCHITECTURE["max_position_embeddings"]):
    """The tiny tokenizer wrapped for transformers, with the Qwen-style chat template.

    eos is <|im_end|>, pad is <|endoftext|>, there is no bos token, as in Qwen2.5-Instruct.
    """
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tiny_bpe(),
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


# ---------------------------------------------------------------------------
# Building model folders
# ---------------------------------------------------------------------------

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
    tokenizer = build_tiny_tokenizer(model_max_length=architecture["max_position_embeddings"])
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
            "note": (f"the tokenizer's vocabulary is a subset of the embedding rows: ids 0..{len(tokenizer) - 1} "
                     f"of {architecture['vocab_size']}; config bos/eos ids are the real model's and lie outside "
                     "this tokenizer; "
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
            f"no architecture config for {model_id!r} in tools/model_runtime.py; random_init supports "
            f"{', '.join(RANDOM_INIT_ARCHITECTURES)}."
        )
    if num_hidden_layers is not None and (isinstance(num_hidden_layers, bool) or not isinstance(num_hidden_layers, int)
                                          or num_hidden_layers < 1):
        raise ConfigError(f"num_hidden_layers must be a positive integer, got {num_hidden_layers!r}.")
    folder = random_init_folder(model_id, cache_dir, num_hidden_layers)
    recipe_sha256 = _canonical_sha256(_random_init_recipe(model_id, num_hidden_layers))
    return _build_once(folder, recipe_sha256,
                       lambda temp: _write_random_init(temp, model_id, num_hidden_layers))


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------

def resolve_model(model_id: str, source: str = "local", cache_dir: str | os.PathLike | None = None) -> Path:
    """A folder loadable by `from_pretrained` for `model_id`.

    - "tiny" (either source): the tiny offline model, built on first use;
    - source "local": the model from the local cache, else ModelCacheMissingError with the
      download command;
    - source "random_init": the model's architecture with seed-fixed random weights.
    A relative `cache_dir` is taken from the project root; None means `default_cache_dir()`.
    """
    _check_source(source)
    _check_model_id(model_id)
    cache = _cache_root(cache_dir)
    if model_id == TINY_MODEL_ID:
        return build_tiny_model(cache)
    if source == "random_init":
        return build_random_init_model(model_id, cache)
    found, notes = _search_local(model_id, cache)
    if found is None:
        raise ModelCacheMissingError(_missing_model_message(model_id, cache, notes))
    return found


def _torch_dtype(dtype):
    import torch

    if isinstance(dtype, str):
        dtype = getattr(torch, dtype, None) if dtype in _SUPPORTED_DTYPES else None
    if not isinstance(dtype, torch.dtype) or str(dtype).removeprefix("torch.") not in _SUPPORTED_DTYPES:
        raise ConfigError(f"unsupported dtype {dtype!r}; use one of torch.{', torch.'.join(_SUPPORTED_DTYPES)}.")
    return dtype


def load_causal_lm(path: str | os.PathLike, *, dtype=None, device="cpu"):
    """Load `(model, tokenizer)` from a model folder with `from_pretrained`.

    `dtype` defaults to torch.float32. The model is moved to `device`; `model.config.use_cache`
    and the train/eval mode are left as `from_pretrained` sets them: the caller decides.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"{folder} is not a model folder (no config.json); get one from resolve_model().")
    dtype = _torch_dtype(torch.float32 if dtype is None else dtype)
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"invalid device {device!r}: {error}") from None
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} requested but torch {torch.__version__} sees no CUDA device.")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model.to(target), tokenizer


def _hub_coordinates(folder: Path) -> tuple[str | None, str | None]:
    """(repo id, revision) when `folder` is `.../models--Org--Name/snapshots/<revision>`."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        repo = folder.parent.parent.name.removeprefix("models--").replace("--", "/", 1)
        return repo, folder.name
    return None, None


def _lfs_sha256(path: Path) -> str | None:
    """The sha256 of a hub-cache file read from its blob name (no hashing); None elsewhere."""
    if not path.is_symlink():
        return None
    blob = path.resolve().name
    return blob if re.fullmatch(r"[0-9a-f]{64}", blob) else None


def model_identity(path: str | os.PathLike) -> dict:
    """Who a model folder is: model_id, weights ("pretrained" | "random_init"), source, config_sha256, ...

    Built folders report their `course_model.json` (checked against config.json); other folders
    are pretrained weights from a local cache. A weight hash not read is None, not guessed.
    """
    folder = Path(path)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ConfigError(f"{folder} is not a model folder (no config.json).")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_sha256 = sha256_file(config_path)
    summary = {
        "folder": folder.resolve().name,  # a name, not a machine path: records are committed from other machines
        "config_sha256": config_sha256,
        "architecture": (config.get("architectures") or [None])[0],
        "model_type": config.get("model_type"),
        "num_hidden_layers": config.get("num_hidden_layers"),
        "vocab_size": config.get("vocab_size"),
    }
    identity_path = folder / IDENTITY_FILE
    if identity_path.is_file():
        built = json.loads(identity_path.read_text(encoding="utf-8"))
        if built.get("files", {}).get("config.json") != config_sha256:
            raise ConfigError(f"{config_path} does not match {identity_path}; the folder was altered, rebuild it.")
        fields = ("model_id", "weights", "source", "seed", "fingerprint", "recipe_sha256", "builder_version",
                  "architecture_overrides", "tokenizer")
        return {**{key: built.get(key) for key in fields}, **summary, "revision": None,
                "weights_sha256": built.get("files", {}).get("model.safetensors")}
    repo, revision = _hub_coordinates(folder)
    if repo is None:
        repo = QWEN25_05B_INSTRUCT if folder.name == QWEN25_05B_INSTRUCT.split("/")[-1] else folder.name
    weights_file = folder / "model.safetensors"
    return {"model_id": repo, "weights": "pretrained", "source": "local", **summary, "revision": revision,
            "weights_sha256": _lfs_sha256(weights_file) if weights_file.exists() else None}


def sampling_generation_kwargs(temperature: float, max_new_tokens: int) -> dict:
    """`generate` kwargs that sample from the plain softmax of logits / temperature.

    transformers applies top_k=50 when neither the call nor the model's generation config sets
    top_k, and Qwen2.5's generation config sets top_k, top_p and a repetition penalty; any of
    these makes the sampled distribution differ from a forward pass. Here they are all turned
    off, so `log_softmax(scores)` from `output_scores` equals the forward pass's log-probs.
    """
    is_number = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    if not is_number or not math.isfinite(temperature) or temperature <= 0:
        raise ConfigError("temperature must be a finite number > 0 (sampling); use greedy decoding for 0.")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}.")
    return {
        "do_sample": True,
        "temperature": float(temperature),
        "top_k": 0,
        "top_p": 1.0,
        "typical_p": 1.0,
        "repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "num_beams": 1,
        "max_new_tokens": max_new_tokens,
    }

