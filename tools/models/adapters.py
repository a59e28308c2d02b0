"""A trained peft adapter on disk: written once, atomically, with no machine path in it, and hashed file by file."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools.core.records import sha256_file
from tools.errors import ConfigError


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, by path relative to it."""
    return {path.relative_to(folder).as_posix(): sha256_file(path)
            for path in sorted(Path(folder).rglob("*")) if path.is_file()}


def save_adapter(model, folder: Path, base_model: str, revision: str | None) -> dict[str, str]:
    """The adapter in peft's format under `folder` (which must not exist), written to a temporary folder
    and renamed into place; its config names the base by model id and revision, never by a machine
    path, and peft's blank model card is not kept (a project writes its own). Returns the files' sha256."""
    folder = Path(folder)
    if folder.exists():
        raise ConfigError(f"{folder} already exists; an adapter folder is written once")
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_model
        config.revision = revision
    temporary = folder.with_name(folder.name + ".partial")
    shutil.rmtree(temporary, ignore_errors=True)
    model.save_pretrained(temporary, save_embedding_layers=False)  # no lookup of the base model online
    (temporary / "README.md").unlink(missing_ok=True)
    temporary.rename(folder)
    return file_hashes(folder)
