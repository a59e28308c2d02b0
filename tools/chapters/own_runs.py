"""A learner's own run of a chapter stage, shown in Step 5 beside what the original course reported.

`own_run_block(run, stage, written, summarize)` is what a Step 5 cell prints about the learner's own
evidence: the record this run has just written, or (in dry_run, which writes nothing) the newest
cpu_smoke record of the same stage under the default results folder (or, when an earlier version of
the chapter wrote it in a shape this page no longer reads, a line saying so instead of an error), or a
line saying there is none yet; and always how to produce one. A cpu_smoke record proves the code path only; the block says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from tools.chapters.context import ChapterContext
from tools.core.catalog import find_chapter
from tools.core.paths import default_results_dir, resolve_project_root

HOW_TO_RUN = ('produce your own: set RUN_MODE = "cpu_smoke" and a new RUN_LABEL in the parameters cell, or run '
              '`python -m tools.course run --chapter {chapter} --run-mode cpu_smoke`')
STALE_RECORD = ("  this page cannot read that record (schema {schema!r}; {missing!r} not as this page expects): an "
                "earlier version of the chapter wrote it; run cpu_smoke again to see your run here")
LEVEL_NOTE = {"cpu_smoke": "cpu_smoke: proves the code path on this machine, not a GPU measurement",
              "real_gpu": "real_gpu"}


def latest_record(chapter_id: str, stage: str, *, run_mode: str = "cpu_smoke",
                  root: Path | None = None) -> tuple[Path, dict] | None:
    """The newest readable record of `stage` in the default results folder of `run_mode`, or None."""
    root = root or resolve_project_root()
    slug = find_chapter(chapter_id, root).slug
    folder = default_results_dir(run_mode, root) / slug
    found = []
    for path in sorted(folder.glob(f"{slug}_{stage}_*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue  # not a record this block can show; the registry reports broken files
        if isinstance(record, dict) and record.get("stage") == stage and record.get("run_mode") == run_mode:
            found.append((str(record.get("created_utc", "")), path.name, path, record))
    if not found:
        return None
    _, _, path, record = max(found)
    return path, record


def _shown_path(path: Path, root: Path | None) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix() if root else str(path)
    except ValueError:
        return str(path)


def own_run_block(run: ChapterContext, stage: str, written: tuple[Path, str] | None,
                  summarize: Callable[[dict], list[str]], *, root: Path | None = None) -> str:
    """Printable lines about the learner's own evidence for `stage` (see the module docstring)."""
    lines = []
    if written is not None:
        path, digest = written
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        lines.append(f"your run ({LEVEL_NOTE.get(run.run_mode, run.run_mode)}): "
                     f"{_shown_path(path, run.project_root)}, sha256 {digest[:12]}")
        lines += [f"  {line}" for line in summarize(record)]
    else:
        root = root or resolve_project_root()
        latest = latest_record(run.chapter_id, stage, root=root)
        if latest is None:
            lines.append("your run: this is a dry_run (nothing written), and no cpu_smoke record of this stage exists yet")
        else:
            path, record = latest
            lines.append(f"your latest run ({LEVEL_NOTE['cpu_smoke']}): {_shown_path(path, root)}, "
                         f"label {record.get('run_label')!r}, written {record.get('created_utc')}")
            try:
                lines += [f"  {line}" for line in summarize(record)]
            except (KeyError, TypeError, IndexError) as error:  # written by an earlier version of the chapter
                lines.append(STALE_RECORD.format(schema=record.get("schema_version"), missing=error))
    lines.append(HOW_TO_RUN.format(chapter=run.chapter_id))
    return "\n".join(lines)
