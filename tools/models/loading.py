"""Resolving a model id to a folder (building the tiny or random-init ones when asked), loading
it with `from_pretrained`, and saying who it is in a record."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tools.core.records import sha256_file
from tools.errors import ConfigError, ModelCacheMissingError

from tools.models.architectures import IDENTITY_FILE, LAB_MODEL_IDS, QWEN25_05B_INSTRUCT, TINY_FOLDER, TINY_MODEL_ID
from tools.models.builders import build_random_init_model, build_tiny_model
from tools.models.cache import (
    _cache_root,
    _check_model_id,
    _check_source,
    _hub_folder,
    _missing_model_message,
    _search_local,
    find_local_model,
)
from tools.models.generation import sampling_generation_kwargs  # noqa: F401 (re-exported)
from tools.models.lab import LabRecipe, build_lab_model, lab_model_folder, recipe_for

_SUPPORTED_DTYPES = ("float32", "bfloat16", "float16")


def resolve_model(model_id: str, source: str = "local", cache_dir: str | os.PathLike | None = None) -> Path:
    """A folder loadable by `from_pretrained` for `model_id`.

    - "tiny" (either source): the tiny offline model, built on first use;
    - "lab", "lab-teacher" (either source): the lab models, pretrained in code on first use and
      cached under build/lab_models (not in `cache_dir`);
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
    if model_id in LAB_MODEL_IDS:
        return build_lab_model(model_id)
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
        identity = {**{key: built.get(key) for key in fields}, **summary, "revision": None,
                    "weights_sha256": built.get("files", {}).get("model.safetensors")}
        if "lab" in built:  # a lab model: what it was pretrained on and how well it does
            identity["lab"] = {"task": built["lab"]["task"]["task"], "parameters": built["lab"]["parameters"],
                               "pretraining_steps": built["lab"]["pretraining"]["steps"],
                               "heldout_exact_match": built["lab"]["heldout_exact_match"]["accuracy"]}
        return identity
    repo, revision = _hub_coordinates(folder)
    if repo is None:
        repo = QWEN25_05B_INSTRUCT if folder.name == QWEN25_05B_INSTRUCT.split("/")[-1] else folder.name
    weights_file = folder / "model.safetensors"
    return {"model_id": repo, "weights": "pretrained", "source": "local", **summary, "revision": revision,
            "weights_sha256": _lfs_sha256(weights_file) if weights_file.exists() else None}


def expected_model_path(model_id: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `model_id` is (when complete in the cache) or where the download command puts it.

    Loads nothing. For "tiny" it is the folder the offline builder writes. Note that the hub
    folder of a partial download exists although the model is unusable: use
    `find_local_model` or `model_cache_check` to decide whether the model is there.
    """
    cache = _cache_root(cache_dir)
    if _check_model_id(model_id) == TINY_MODEL_ID:
        return cache / TINY_FOLDER
    if model_id in LAB_MODEL_IDS:
        return lab_model_folder(recipe_for(model_id))
    found = find_local_model(model_id, cache)
    return found if found is not None else _hub_folder(cache, model_id)


def load_lab_model(name: str = "lab", cache_dir: str | os.PathLike | None = None, *, device: str = "cpu",
                   recipe: LabRecipe | None = None):
    """`(model, tokenizer)` of a lab model, built first if needed, loaded with `from_pretrained` in
    float32 and in eval mode."""
    model, tokenizer = load_causal_lm(build_lab_model(name, cache_dir, recipe=recipe), device=device)
    model.eval()
    return model, tokenizer
