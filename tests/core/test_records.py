"""Write-once records where the output filesystem has no hard links: `save_json_record_once` falls back
to an exclusive claim of the name and an atomic rename over it, and still never overwrites a record."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from tools.core import records
from tools.errors import RecordExistsError


def _no_links(error_number: int):
    def link(source, target):
        raise OSError(error_number, "hard links are not supported here")
    return link


@pytest.mark.parametrize("error_number", [errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV])
def test_a_record_is_written_once_without_hard_links(tmp_path, monkeypatch, error_number):
    monkeypatch.setattr(records.os, "link", _no_links(error_number))
    path = tmp_path / "folder" / "record.json"
    digest = records.save_json_record_once(path, {"value": 1})
    assert json.loads(path.read_text(encoding="utf-8")) == {"value": 1}
    assert digest == records.sha256_file(path) and oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]  # no temporary file left
    with pytest.raises(RecordExistsError):
        records.save_json_record_once(path, {"value": 2})
    assert json.loads(path.read_text(encoding="utf-8")) == {"value": 1}
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]


def test_without_hard_links_a_concurrent_writer_is_never_overwritten(tmp_path, monkeypatch):
    path = tmp_path / "record.json"

    def racing_link(source, target):
        Path(target).write_text("{\"winner\": true}", encoding="utf-8")  # another writer wins the name first
        raise OSError(errno.EPERM, "hard links are not supported here")

    monkeypatch.setattr(records.os, "link", racing_link)
    with pytest.raises(RecordExistsError):
        records.save_json_record_once(path, {"value": 1})
    assert json.loads(path.read_text(encoding="utf-8")) == {"winner": True}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_other_link_failures_are_not_hidden(tmp_path, monkeypatch):
    monkeypatch.setattr(records.os, "link", _no_links(errno.ENOSPC))
    with pytest.raises(OSError) as raised:
        records.save_json_record_once(tmp_path / "record.json", {"value": 1})
    assert raised.value.errno == errno.ENOSPC and list(tmp_path.iterdir()) == []

