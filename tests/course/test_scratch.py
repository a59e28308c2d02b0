"""Temporary folders whose owner died are removed by the next one made; no other folder is touched."""

import json
import os
import subprocess
import sys

import pytest

from tools.course import scratch
from tools.course.scratch import OWNER_FILE, owned_folder, scratch_folder, sweep_orphans

PREFIX = "course-scratch-test-"


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """Each test sweeps its own temporary directory, never the machine's /tmp."""
    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    return tmp_path


def made_by_a_process_that_died(tmp_path) -> str:
    code = (f"import tempfile; tempfile.tempdir = {str(tmp_path)!r}\n"
            "from tools.course.scratch import owned_folder\n"
            f"folder = owned_folder({PREFIX!r}); (folder / 'locked').mkdir(); (folder / 'locked' / 'f').write_text('x')\n"
            "(folder / 'locked').chmod(0o000); print(folder)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return completed.stdout.strip()


def test_a_dead_owners_folder_is_removed_by_the_next_and_a_living_owners_is_kept(private_tmp):
    dead = made_by_a_process_that_died(private_tmp)
    assert os.path.isdir(dead)
    mine = owned_folder(PREFIX)
    assert not os.path.exists(dead), "the folder of a process that died stays behind"
    assert mine.is_dir() and json.loads((mine / OWNER_FILE).read_text())["pid"] == os.getpid()
    assert sweep_orphans(PREFIX) == [] and mine.is_dir()


def test_folders_not_made_here_or_owned_on_another_host_are_never_touched(private_tmp):
    foreign = private_tmp / f"{PREFIX}foreign"
    foreign.mkdir()
    elsewhere = owned_folder(PREFIX)
    owner = json.loads((elsewhere / OWNER_FILE).read_text())
    (elsewhere / OWNER_FILE).write_text(json.dumps({**owner, "host": "another-node", "pid": 1, "started": 0.0}))
    other_prefix = private_tmp / "unrelated-dead"
    other_prefix.mkdir()
    (other_prefix / OWNER_FILE).write_text(json.dumps({**owner, "started": 0.0}))
    assert sweep_orphans(PREFIX) == []
    assert foreign.is_dir() and elsewhere.is_dir() and other_prefix.is_dir()


def test_a_reused_pid_does_not_keep_a_dead_owners_folder(private_tmp):
    """A pid that now belongs to another process (a different start time) does not own the folder."""
    folder = owned_folder(PREFIX)
    owner = json.loads((folder / OWNER_FILE).read_text())
    (folder / OWNER_FILE).write_text(json.dumps({**owner, "started": owner["started"] - 1000.0}))
    assert sweep_orphans(PREFIX) == [folder] and not folder.exists()


def test_the_scratch_block_removes_its_folder_even_on_an_error(private_tmp):
    with pytest.raises(RuntimeError), scratch_folder(PREFIX) as folder:
        (folder / "work").write_text("x")
        raise RuntimeError("stage failed")
    assert not folder.exists()
