"""Whose time was it: what a cell that ran out of time spent, and whether the host starved it.

A cell that passes its limit while other submissions run beside it may have been starved, or the learner's
code may have spent the time itself (a function that never returns, a sleep, spinners). Only the first is
graded again. Per cell the grading worker samples (`ContentionProbe`):

* the CPU seconds the submission's control group used (all its processes),
* how long the kernel's main thread and the trusted grader process waited on a run queue for a CPU
  (`/proc/<pid>/schedstat`, second field: time runnable but not running),

and the trusted side reports how long it waited for the learner's replies. `contention_evidence` says
whether a cell's timeout shows starvation: a process of the submission waited for a CPU for at least
`WAIT_SHARE` of the cell's time while the submission's group had used less than `SPENT_SHARE` of the CPU
its quota allowed (a group that used its quota spent its own time: its processes queue behind each other
and behind the quota, which is the learner's doing), or the trusted grader itself waited that long.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

WAIT_SHARE = 0.25
NOTEBOOK_WAIT_SHARE = 0.5
"""For a whole notebook stopped at its limit the wait must be most of it: a notebook that slept its way past
its limit while the setup waited a little is the learner's own."""
SPENT_SHARE = 0.5


def run_delay_s(pid: int | None) -> float | None:
    """Seconds the task `pid` has waited on a run queue since it started (None when unknown)."""
    if not pid:
        return None
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text(encoding="ascii").split()
        return int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def group_cpu_s(usage_file: str | None) -> float | None:
    """CPU seconds a control group used: `cpuacct.usage` (ns, v1) or `cpu.stat`'s usage_usec (v2)."""
    if not usage_file:
        return None
    try:
        text = Path(usage_file).read_text(encoding="ascii")
    except OSError:
        return None
    if usage_file.endswith("cpu.stat"):
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec":
                return int(value) / 1e6
        return None
    try:
        return int(text.strip()) / 1e9
    except ValueError:
        return None


@dataclass(frozen=True)
class Sample:
    wall: float
    group_cpu: float | None
    kernel_wait: float | None
    trusted_wait: float | None


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(max(after - before, 0.0), 3)


class ContentionProbe:
    """Samples of one submission: its group's CPU usage file, and the pids of its kernel and trusted grader."""

    def __init__(self, usage_file: str | None = None, cpus: float | None = None):
        self.usage_file, self.cpus = usage_file, cpus

    def sample(self, kernel_pid: int | None, trusted_pid: int | None) -> Sample:
        return Sample(time.monotonic(), group_cpu_s(self.usage_file), run_delay_s(kernel_pid),
                      run_delay_s(trusted_pid))

    def between(self, before: Sample, after: Sample) -> dict:
        return {"wall_s": round(after.wall - before.wall, 3), "group_cpu_s": _delta(after.group_cpu, before.group_cpu),
                "kernel_wait_s": _delta(after.kernel_wait, before.kernel_wait),
                "trusted_wait_s": _delta(after.trusted_wait, before.trusted_wait), "cpus": self.cpus}


def contention_evidence(measure: dict, wait_share: float = WAIT_SHARE) -> str | None:
    """Why `measure` (`ContentionProbe.between`, for a cell or, with `NOTEBOOK_WAIT_SHARE`, a whole notebook)
    shows that the host starved the submission, or None (see the module docstring)."""
    wall = measure.get("wall_s") or 0.0
    if wall <= 0:
        return None
    trusted = measure.get("trusted_wait_s")
    if trusted is not None and trusted >= wait_share * wall:
        return f"the trusted grader waited {trusted:.1f} s of {wall:.1f} s for a CPU"
    kernel, used, cpus = measure.get("kernel_wait_s"), measure.get("group_cpu_s"), measure.get("cpus")
    if kernel is None or kernel < wait_share * wall:
        return None
    allowed = (cpus or 1.0) * wall
    if used is not None and used >= SPENT_SHARE * allowed:
        return None  # the submission used its CPU: it spent its own time
    shown = "unknown" if used is None else f"{used:.1f} s"
    return (f"the kernel waited {kernel:.1f} s of {wall:.1f} s for a CPU while its group used {shown} of the "
            f"{allowed:.1f} s it may")
