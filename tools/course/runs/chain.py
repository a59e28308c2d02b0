"""The project chain inside a batch run: who hands a manifest to whom, and what was promised.

Projects (catalog kind `project`) read their upstream project's manifest. In a batch the runner
orders chapters by their prerequisites (`tools.core.catalog.order_by_prerequisites`), and this
ledger keeps, for every project that passed and wrote its manifest, the manifest's sha256 at that
moment. A downstream project receives those sha256 as its `UPSTREAM_SHA256` parameter
(`{upstream id: sha256}`) and refuses to start when the file it finds has another one
(`tools.core.handoff.require_manifest`). A project whose upstream failed in this batch is not run:
its outcome says which upstream blocked it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tools.core.catalog import Chapter, load_catalog
from tools.core.handoff import manifest_path
from tools.core.records import sha256_file

UPSTREAM_PARAMETER = "UPSTREAM_SHA256"
"""The notebook parameter that carries the promised sha256 of each upstream manifest."""


@dataclass
class HandOffs:
    """The manifests handed down in one batch (see the module docstring)."""

    root: Path
    results: Path | None
    label: str
    promised: dict[str, dict] = field(default_factory=dict)
    """project id -> {"path": relative to the results root, "sha256": ...} of the manifest it wrote."""
    failed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._kinds = {chapter.id: chapter.kind for chapter in load_catalog(self.root)}

    def upstreams(self, chapter: Chapter) -> tuple[str, ...]:
        """The projects among `chapter`'s direct prerequisites (only projects hand manifests down)."""
        if chapter.kind != "project":
            return ()
        return tuple(need for need in chapter.prerequisites if self._kinds.get(need) == "project")

    def blocked_by(self, chapter: Chapter) -> list[str]:
        """The upstream projects that failed (or were blocked) earlier in this batch."""
        return [upstream for upstream in self.upstreams(chapter) if upstream in self.failed]

    def parameters(self, chapter: Chapter) -> dict:
        """`{UPSTREAM_SHA256: {id: sha256}}` for the upstream manifests written in this batch, else {}."""
        promised = {upstream: self.promised[upstream]["sha256"] for upstream in self.upstreams(chapter)
                    if upstream in self.promised}
        return {UPSTREAM_PARAMETER: promised} if promised else {}

    def finished(self, chapter: Chapter, passed: bool) -> None:
        """Note a chapter's outcome; a passed project's manifest (if it wrote one) is promised downstream."""
        if not passed:
            self.failed.add(chapter.id)
            return
        if chapter.kind != "project" or self.results is None:
            return
        path = manifest_path(self.results, chapter.slug, self.label)
        if path.is_file():
            self.promised[chapter.id] = {"path": path.relative_to(self.results).as_posix(),
                                         "sha256": sha256_file(path)}
