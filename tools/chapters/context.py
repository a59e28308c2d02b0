"""What a chapter notebook's setup cell needs: its run parameters checked and its record paths.

A notebook calls `open_chapter(CHAPTER_ID, RUN_MODE, RUN_LABEL, RESULTS_DIR, stages=[...])` right
after its parameters cell. Before any work it checks the run mode and (outside dry_run) the label,
derives where each stage's record goes, and refuses a label whose records already exist. In
dry_run nothing is looked up or written, so the same cell runs in a grading sandbox that cannot see
the repository.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tools.core.catalog import find_chapter
from tools.core.environment import runtime_snapshot
from tools.core.paths import chapter_record_path, resolve_project_root, results_root_for
from tools.core.records import record_header, save_json_record_once
from tools.core.runs import validate_run_label, validate_run_mode
from tools.errors import RecordExistsError


@dataclass(frozen=True)
class ChapterContext:
    """A chapter's run: mode, label and where its records go (None everywhere in dry_run)."""

    chapter_id: str
    run_mode: str
    run_label: str
    slug: str | None = None
    results_root: Path | None = None
    project_root: Path | None = None
    stages: tuple[str, ...] = field(default_factory=tuple)

    @property
    def writes_records(self) -> bool:
        return self.run_mode != "dry_run"

    def record_path(self, stage: str) -> Path | None:
        """Where the record of `stage` goes, or None in dry_run."""
        if not self.writes_records:
            return None
        return chapter_record_path(self.results_root, self.slug, stage, self.run_label)

    def record_schema(self, stage: str) -> str:
        return f"{self.slug}-{stage}/v1"

    def save_record(self, stage: str, body: Mapping[str, Any], *, schema_version: str | None = None) -> tuple[Path, str]:
        """Write `stage`'s record once: the common header, the runtime snapshot, then `body`."""
        if not self.writes_records:
            raise RecordExistsError("dry_run writes no record")  # a notebook bug: guard the call with writes_records
        path = self.record_path(stage)
        record = {**record_header(schema_version=schema_version or self.record_schema(stage), chapter=self.chapter_id,
                                  stage=stage, run_mode=self.run_mode, run_label=self.run_label),
                  "runtime": runtime_snapshot(self.project_root), **body}
        return path, save_json_record_once(path, record)

    def describe(self) -> str:
        """Two lines for the learner: the parameters, and where records go."""
        lines = [f"RUN_MODE = {self.run_mode}, RUN_LABEL = {self.run_label!r}"]
        if not self.writes_records:
            lines.append("records: none (dry_run writes nothing)")
        else:
            lines += [f"record ({stage}): {self.record_path(stage)}" for stage in self.stages]
        return "\n".join(lines)


def open_chapter(chapter_id: str, run_mode: str, run_label: str, results_dir=None, *,
                 stages: tuple[str, ...] | list[str] = ()) -> ChapterContext:
    """Check a notebook's run parameters before any work and derive its record paths.

    `stages` are the records this notebook writes itself; if one of them exists for this label,
    RecordExistsError stops the notebook (records are write-once). Records a notebook only reads
    (e.g. the shared verl record) are not listed here.
    """
    run_mode = validate_run_mode(run_mode)
    if run_mode == "dry_run":
        return ChapterContext(chapter_id, run_mode, run_label, stages=tuple(stages))
    run_label = validate_run_label(run_label)
    project_root = resolve_project_root()
    chapter = find_chapter(chapter_id, project_root)
    context = ChapterContext(chapter.id, run_mode, run_label, chapter.slug,
                             results_root_for(run_mode, results_dir, project_root), project_root, tuple(stages))
    used = [context.record_path(stage) for stage in stages if context.record_path(stage).exists()]
    if used:
        raise RecordExistsError(f"{used[0]} already exists: RUN_LABEL {run_label!r} was used before. "
                                "Records are write-once; choose a new RUN_LABEL.")
    return context
