"""Finding a model in the local cache (hub layout or plain folder), and saying how to download it.

A missing model is a `ModelCacheMissingError` that names the folder and the `hf download` command;
nothing is downloaded here.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from tools.core.paths import resolve_project_root
from tools.errors import ConfigError

from tools.models.architectures import (
    LAB_MODEL_IDS,
    QWEN25_05B_INSTRUCT,
    RANDOM_INIT_ARCHITECTURES,
    TINY_FOLDER,
    TINY_MODEL_ID,
)

MODEL_CACHE_ENV = "COURSE_MODEL_CACHE"
"""Environment variable that overrides the default model cache folder."""

MODEL_SOURCES = ("local", "random_init")

_MODEL_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


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


def download_command(model_id: str, cache_dir: str | os.PathLike | None = None) -> str | None:
    """The shell command that puts `model_id` into `cache_dir` on a machine with internet.

    None for "tiny" and the lab models, which are built offline and never downloaded.
    """
    if _check_model_id(model_id) == TINY_MODEL_ID or model_id in LAB_MODEL_IDS:
        return None
    return f"hf download {model_id} --cache-dir {shlex.quote(str(_cache_root(cache_dir)))}"


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
    if model_id in LAB_MODEL_IDS:
        return {"name": name, "ok": True, "severity": "model_cache",
                "detail": f"lab model {model_id} is pretrained in code on first use (build/lab_models)", "fix": None}
    if source == "random_init":
        known = model_id in RANDOM_INIT_ARCHITECTURES
        target = random_init_folder(model_id, cache)
        return {"name": name, "ok": known, "severity": "blocked",
                "detail": (f"{model_id} architecture is known; random weights go to {target}"
                           if known else f"no architecture config for {model_id} in tools/models/architectures.py"),
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
