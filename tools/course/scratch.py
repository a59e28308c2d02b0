"""Temporary folders that outlive no one.

A Ray worker killed by a cancel, or a grading actor whose process dies, cannot run its own clean-up, so its
temporary folder would stay on the node for good (with a course's sources in it). Each folder made here
records its owner (host, pid, the process's start time); making a new one with the same prefix first removes
every folder of that prefix whose owner on this host has died. A folder without an owner file is not ours
and is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

OWNER_FILE = ".course-owner.json"


def remove_tree(path: Path) -> None:
    """Delete a folder even where a submission left folders without permissions."""
    for current, folders, _ in os.walk(path):
        for folder in folders:
            full = os.path.join(current, folder)
            if not os.path.islink(full):
                os.chmod(full, 0o700)
    shutil.rmtree(path)


def _started(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_orphan(folder: Path) -> bool:
    """Whether `folder` was made here by a process on this host that has since died."""
    try:
        owner = json.loads((folder / OWNER_FILE).read_text(encoding="utf-8"))
        host, pid, started = owner["host"], int(owner["pid"]), float(owner["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not made here, or still being made: leave it
    return host == socket.gethostname() and _started(pid) != started


def sweep_orphans(prefix: str) -> list[Path]:
    """Remove the folders named `prefix*` in the temporary directory whose owner on this host has died."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        if folder.is_dir() and not folder.is_symlink() and is_orphan(folder):
            try:
                remove_tree(folder)
            except FileNotFoundError:  # another sweeper was first
                continue
            removed.append(folder)
    return removed


def owned_folder(prefix: str) -> Path:
    """A new private temporary folder that names this process as its owner (after sweeping dead owners')."""
    sweep_orphans(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": _started(os.getpid())}
    descriptor = os.open(folder / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        json.dump(owner, handle)
    return folder


@contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """`owned_folder`, removed on leaving the block."""
    folder = owned_folder(prefix)
    try:
        yield folder
    finally:
        remove_tree(folder)
