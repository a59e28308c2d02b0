"""Per-submission control groups: what the probe finds on each kind of host, and the limits a group gets.

The probe and the limits are checked against fake hierarchies in a temporary folder (the files the
kernel would offer); `test_sandbox.py` checks the real groups of this host when it has any.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.course.classroom import cgroups
from tools.course.classroom.cgroups import (
    BatchCgroups,
    CgroupHost,
    CgroupLimits,
    probe_v1,
    probe_v2,
)

MOUNTINFO_V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {root}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
CGROUP_V1 = "8:pids:/\n4:memory:/jobs/42\n2:cpuacct:/\n1:cpu:/\n0::/\n"


def _v1_tree(root: Path) -> None:
    for name in ("cpu", "cpuacct", "memory/jobs/42", "pids", "unified"):
        (root / name).mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("\n", encoding="utf-8")


def test_own_groups_and_mounts_are_read_from_proc_text(tmp_path):
    mounts = cgroups._mounts(MOUNTINFO_V1.format(root=tmp_path))
    assert (str(tmp_path / "memory"), "cgroup", "rw,memory") in mounts
    assert cgroups._own_groups(CGROUP_V1) == {"pids": "/", "memory": "/jobs/42", "cpuacct": "/", "cpu": "/",
                                               "unified": "/"}


def test_an_empty_unified_hierarchy_falls_back_to_v1_under_the_graders_own_memory_group(tmp_path):
    _v1_tree(tmp_path)
    mounts, groups = cgroups._mounts(MOUNTINFO_V1.format(root=tmp_path)), cgroups._own_groups(CGROUP_V1)
    host, why = probe_v2(mounts, groups)
    assert host is None and "not delegated" in why
    host, why = probe_v1(mounts, groups)
    assert host.version == "v1" and why == ""
    assert host.bases == {"memory": str(tmp_path / "memory" / "jobs" / "42"), "pids": str(tmp_path / "pids"),
                          "cpu": str(tmp_path / "cpu"), "cpuacct": str(tmp_path / "cpuacct")}


def test_a_v2_group_that_cannot_delegate_its_controllers_is_refused_with_the_reason(tmp_path, monkeypatch):
    base = tmp_path / "unified" / "svc"
    base.mkdir(parents=True)
    (base / "cgroup.controllers").write_text("cpu memory pids io\n", encoding="utf-8")
    (base / "cgroup.subtree_control").write_text("\n", encoding="utf-8")
    mounts = [(str(tmp_path / "unified"), "cgroup2", "rw")]

    def busy(path, value):
        raise OSError(16, "Device or resource busy")

    monkeypatch.setattr(cgroups, "_write", busy)
    host, why = probe_v2(mounts, {"unified": "/svc"})
    assert host is None and "cannot enable" in why and "busy" in why
    monkeypatch.undo()
    host, why = probe_v2(mounts, {"unified": "/svc"})
    assert host.version == "v2" and host.bases == {"unified": str(base)}
    assert (base / "cgroup.subtree_control").read_text(encoding="utf-8") == "+memory +pids +cpu"


def _fake_files(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / name).write_text("", encoding="utf-8")


def test_v1_and_v2_groups_get_memory_tasks_and_cpu_limits_and_an_equal_weight(tmp_path, monkeypatch):
    made = []
    real_mkdir = Path.mkdir

    def mkdir_with_files(self, *args, **kwargs):  # what the kernel would create inside a new group
        real_mkdir(self, *args, **kwargs)
        made.append(self)
        _fake_files(self, ["cgroup.procs", "cgroup.subtree_control", "cpu.weight", "cpu.shares",
                           "memory.memsw.limit_in_bytes"])

    monkeypatch.setattr(Path, "mkdir", mkdir_with_files)
    limits = CgroupLimits(memory_bytes=512 * 2 ** 20, max_tasks=32, cpus=0.5)
    v1_bases = {}
    for name in ("memory", "pids", "cpu"):
        v1_bases[name] = str(tmp_path / "v1" / name)
        real_mkdir(tmp_path / "v1" / name, parents=True)
    batch = BatchCgroups(CgroupHost("v1", "test", v1_bases), slots=2)
    group = batch.submission("sub", limits)
    read = lambda key, name: (Path(group.dirs[key]) / name).read_text(encoding="utf-8")
    assert read("memory", "memory.limit_in_bytes") == read("memory", "memory.memsw.limit_in_bytes") == str(512 * 2 ** 20)
    assert read("pids", "pids.max") == "32"
    assert (read("cpu", "cpu.cfs_quota_us"), read("cpu", "cpu.cfs_period_us"), read("cpu", "cpu.shares")) == \
        ("50000", "100000", "1024")
    assert (batch.dirs["cpu"] / "cpu.shares").read_text(encoding="utf-8") == "1024"  # one submission runs
    assert sorted(Path(path).parent.name for path in group.procs_files) == ["sub", "sub", "sub"]
    other = batch.submission("other", limits)
    assert (batch.dirs["cpu"] / "cpu.shares").read_text(encoding="utf-8") == "2048"  # two run: two processes' weight
    monkeypatch.setattr(cgroups, "_remove_dir", lambda folder: None)
    monkeypatch.setattr(cgroups.SubmissionCgroup, "read_usage", lambda self: {})
    other.remove()
    assert (batch.dirs["cpu"] / "cpu.shares").read_text(encoding="utf-8") == "1024"
    monkeypatch.undo()
    monkeypatch.setattr(Path, "mkdir", mkdir_with_files)

    real_mkdir(tmp_path / "v2", parents=True)
    batch = BatchCgroups(CgroupHost("v2", "test", {"unified": str(tmp_path / "v2")}), slots=2)
    group = batch.submission("sub", limits)
    folder = Path(group.dirs["unified"])
    assert (folder / "memory.max").read_text(encoding="utf-8") == str(512 * 2 ** 20)
    assert (folder / "pids.max").read_text(encoding="utf-8") == "32"
    assert (folder / "cpu.max").read_text(encoding="utf-8") == "50000 100000"
    assert (folder / "cpu.weight").read_text(encoding="utf-8") == "100"
    assert (batch.dirs["unified"] / "cpu.weight").read_text(encoding="utf-8") == "100"
    assert (batch.dirs["unified"] / "cgroup.subtree_control").read_text(encoding="utf-8") == "+memory +pids +cpu"
    assert group.procs_files == [str(folder / "cgroup.procs")]


def test_no_limit_means_nothing_written_but_the_weight(tmp_path):
    base = tmp_path / "v2"
    base.mkdir()
    batch = BatchCgroups(CgroupHost("v2", "test", {"unified": str(base)}))
    group = batch.submission("sub", CgroupLimits(None, None, None))
    assert sorted(path.name for path in Path(group.dirs["unified"]).iterdir()) == ["cpu.weight"]


def test_a_host_without_cgroups_has_no_batch_groups():
    with pytest.raises(ValueError):
        BatchCgroups(CgroupHost(None, "none here"))
