"""Write-once JSON records: canonical encoding, atomic single writes, reading with schema and
sha256 checks, and lineage entries that tie a downstream record to the files it read."""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from tools.core.runs import evidence_level, validate_run_label, validate_run_mode
from tools.errors import ConfigError, RecordExistsError, UpstreamRecordError


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"record value of type {type(value).__name__} is not JSON serialisable: {value!r}")


def encode_record(record: Mapping[str, Any]) -> bytes:
    """Canonical UTF-8 JSON bytes of a record (NaN and infinity are refused: use null)."""
    text = json.dumps(record, ensure_ascii=False, indent=2, sort_keys=False,
                      allow_nan=False, default=_json_default)
    return (text + "\n").encode("utf-8")


NO_HARD_LINK_ERRNOS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}
"""What `os.link` raises where the output filesystem has no hard links (FUSE mounts, vfat, some
network and overlay filesystems)."""


def _place_without_link(temp_name: str, target: Path) -> None:
    """Claim `target` with an exclusive create (fails if it exists), then rename the finished temporary
    file over the claim: atomic, and never over another writer's record."""
    try:
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise RecordExistsError(
            f"record {target} already exists; records are write-once, use a new RUN_LABEL."
        ) from None
    os.replace(temp_name, target)


def save_json_record_once(path: str | os.PathLike, record: Mapping[str, Any]) -> str:
    """Write `record` to `path` atomically and exactly once; return the file's sha256.

    The JSON goes to a temporary file in the same folder and is then hard-linked into place,
    which fails if `path` exists, so a record is never overwritten, even by a concurrent writer.
    Where the filesystem has no hard links, the name is claimed with an exclusive create and the
    temporary file renamed over the claim (see `_place_without_link`): still never an overwrite.
    A record that cannot be encoded leaves nothing behind.
    """
    target = Path(path)
    if target.exists():
        raise RecordExistsError(f"record {target} already exists; records are write-once, use a new RUN_LABEL.")
    payload = encode_record(record)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_name, 0o644)  # mkstemp creates 0600; records are meant to be shared
        try:
            os.link(temp_name, target)
        except FileExistsError:
            raise RecordExistsError(
                f"record {target} already exists; records are write-once, use a new RUN_LABEL."
            ) from None
        except OSError as error:
            if error.errno not in NO_HARD_LINK_ERRNOS:
                raise
            _place_without_link(temp_name, target)
    finally:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
    return hashlib.sha256(payload).hexdigest()


def load_record(path: str | os.PathLike, *, schema_version: str | None = None,
                expected_sha256: str | None = None) -> dict:
    """Read a record, checking its schema and (optionally) its sha256 before returning it."""
    source = Path(path)
    if not source.is_file():
        raise UpstreamRecordError(f"required record {source} does not exist; run the stage that writes it first.")
    if expected_sha256 is not None:
        actual = sha256_file(source)
        if actual != expected_sha256:
            raise UpstreamRecordError(
                f"sha256 of {source} is {actual}, expected {expected_sha256}; the record changed since it was referenced."
            )
    try:
        record = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise UpstreamRecordError(f"record {source} is not valid JSON: {error}") from None
    if schema_version is not None and record.get("schema_version") != schema_version:
        raise UpstreamRecordError(
            f"record {source} has schema {record.get('schema_version')!r}, expected {schema_version!r}."
        )
    return record


def lineage_entry(path: str | os.PathLike, results_root: str | os.PathLike) -> dict:
    """The `{path, sha256}` a downstream record stores for an upstream file.

    `path` is relative to the results root (POSIX form), never a machine path: a record written on
    a cloud GPU and committed stays valid in every checkout. An upstream file outside the results
    root is refused (ConfigError).
    """
    source, root = Path(path).resolve(), Path(results_root).resolve()
    try:
        shown = source.relative_to(root)
    except ValueError:
        raise ConfigError(f"upstream record {source} lies outside the results root {root}; "
                          "keep every record of a run under one results folder.") from None
    return {"path": shown.as_posix(), "sha256": sha256_file(source)}


def resolve_lineage(entry: Mapping, results_root: str | os.PathLike, *, schema_version: str | None = None) -> dict:
    """Read the upstream record a lineage entry names, relative to `results_root`, checking its sha256."""
    if not isinstance(entry, Mapping) or not entry.get("path") or not entry.get("sha256"):
        raise UpstreamRecordError(f"lineage entry {entry!r} needs a path and a sha256.")
    relative = Path(entry["path"])
    if relative.is_absolute() or ".." in relative.parts:
        raise UpstreamRecordError(f"lineage path {entry['path']!r} must be relative to the results root.")
    return load_record(Path(results_root) / relative, schema_version=schema_version, expected_sha256=entry["sha256"])


def utc_timestamp() -> str:
    """Current UTC time in ISO 8601, second precision."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def record_header(*, schema_version: str, chapter: str, stage: str, run_mode: str, run_label: str) -> dict:
    """The fields every record starts with (ARCHITECTURE.md, "Records and evidence levels")."""
    return {
        "schema_version": schema_version,
        "chapter": chapter,
        "stage": stage,
        "run_label": validate_run_label(run_label),
        "run_mode": validate_run_mode(run_mode),
        "evidence_level": evidence_level(run_mode),
        "created_utc": utc_timestamp(),
    }
