"""Two grading threads never build a trusted spec at the same time: the spec parses exercise cells with `ast`,
which CPython 3.11.7 does not allow from two threads at once (gh-106905: "AST constructor recursion depth
mismatch", seen when a class was graded beside CPU hogs)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from tools.course.classroom import batch


def test_slot_trusted_spec_builds_one_spec_at_a_time(tmp_path, monkeypatch):
    inside, overlaps = [], []

    def slow_spec(source, folder):
        inside.append(folder)
        if len(inside) > 1:
            overlaps.append(list(inside))
        time.sleep(0.2)
        inside.remove(folder)
        return {"cwd": str(folder)}

    monkeypatch.setattr(batch, "trusted_spec", slow_spec)
    monkeypatch.setattr(batch, "copy_regular_files", lambda *args, **kwargs: None)
    course = tmp_path / "course"
    context = SimpleNamespace(source=object(), course=course, slug="toy")
    slots = [SimpleNamespace(dir=tmp_path / f"slot{index}") for index in range(3)]
    for slot in slots:
        slot.dir.mkdir()
    specs = {}
    threads = [threading.Thread(target=lambda slot=slot: specs.update({slot.dir.name: batch.slot_trusted_spec(slot, context)}))
               for slot in slots]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert overlaps == []
    assert specs == {slot.dir.name: {"cwd": str(slot.dir / "trusted-cwd")} for slot in slots}
    assert all((slot.dir / "trusted-cwd").is_dir() for slot in slots)
