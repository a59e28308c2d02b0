"""The chapter catalog (`notebooks/catalog.toml`): which chapters exist, where, and in what state."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tools.errors import ConfigError
from tools.core.paths import resolve_project_root

NOTEBOOKS_DIR = "notebooks"
CATALOG_PATH = Path(NOTEBOOKS_DIR) / "catalog.toml"
STATUSES = ("implemented", "planned")
KINDS = ("mechanism", "project", "neighbour")
REQUIRED_FIELDS = ("id", "slug", "kind", "title_zh", "title_en", "status")


@dataclass(frozen=True)
class Chapter:
    """One catalog entry."""

    id: str
    slug: str
    kind: str
    title_zh: str
    title_en: str
    status: str
    branch: str = ""
    prerequisites: tuple[str, ...] = ()
    profiles: tuple[str, ...] = ()
    fixed_inputs: str = ""
    compared_variable: str = ""
    gpu_stage: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def implemented(self) -> bool:
        return self.status == "implemented"

    @property
    def notebook(self) -> str | None:
        """`notebooks/<slug>.ipynb` for an implemented chapter (the name follows from the slug)."""
        return f"{NOTEBOOKS_DIR}/{self.slug}.ipynb" if self.implemented else None

    def notebook_path(self, root: Path) -> Path:
        if not self.notebook:
            raise ConfigError(f"chapter {self.id} has no notebook (status {self.status}).")
        return root / self.notebook


def _chapter_from_entry(entry: dict, index: int) -> Chapter:
    missing = [name for name in REQUIRED_FIELDS if not entry.get(name)]
    if missing:
        raise ConfigError(f"{CATALOG_PATH} entry {index + 1}: missing {', '.join(missing)}")
    if entry["status"] not in STATUSES:
        raise ConfigError(f"{CATALOG_PATH} entry {entry['id']}: status must be one of {STATUSES}")
    if entry["kind"] not in KINDS:
        raise ConfigError(f"{CATALOG_PATH} entry {entry['id']}: kind must be one of {KINDS}")
    known = {name for name in Chapter.__dataclass_fields__ if name != "extra"}
    values = {name: entry[name] for name in known if name in entry}
    for name in ("prerequisites", "profiles"):
        values[name] = tuple(values.get(name, ()))
    values["extra"] = {name: value for name, value in entry.items() if name not in known}
    if "notebook" in values["extra"]:
        raise ConfigError(f"{CATALOG_PATH} entry {entry['id']}: drop `notebook`; the notebook is "
                          f"{NOTEBOOKS_DIR}/<slug>.ipynb")
    return Chapter(**values)


def load_catalog(root: Path | None = None) -> list[Chapter]:
    """All catalog entries in file order; ids and slugs are unique."""
    root = root or resolve_project_root()
    data = tomllib.loads((root / CATALOG_PATH).read_text(encoding="utf-8"))
    chapters = [_chapter_from_entry(entry, index) for index, entry in enumerate(data.get("chapter", []))]
    for attribute in ("id", "slug"):
        values = [getattr(chapter, attribute) for chapter in chapters]
        duplicates = sorted({value for value in values if values.count(value) > 1})
        if duplicates:
            raise ConfigError(f"{CATALOG_PATH}: duplicate chapter {attribute}s: {', '.join(duplicates)}")
    return chapters


def implemented_chapters(root: Path | None = None) -> list[Chapter]:
    """Catalog entries that have a notebook, in catalog order."""
    return [chapter for chapter in load_catalog(root) if chapter.implemented]


def find_chapter(key: str, root: Path | None = None) -> Chapter:
    """The chapter whose id or slug is `key` (case-insensitive)."""
    wanted = key.lower()
    for chapter in load_catalog(root):
        if wanted in (chapter.id.lower(), chapter.slug.lower()):
            return chapter
    raise ConfigError(f"unknown chapter {key!r}; see {CATALOG_PATH} for ids and slugs.")


def select_chapters(keys: list[str] | None, root: Path | None = None) -> list[Chapter]:
    """Chapters named by `keys` (all implemented ones when empty); a planned chapter is an error."""
    if not keys:
        return implemented_chapters(root)
    chapters = [find_chapter(key, root) for key in keys]
    planned = [chapter.id for chapter in chapters if not chapter.implemented]
    if planned:
        raise ConfigError(f"chapter(s) {', '.join(planned)} are planned, not implemented yet.")
    return chapters


def order_by_prerequisites(chapters: list[Chapter]) -> list[Chapter]:
    """`chapters` with every chapter after those of its prerequisites that are in the list.

    Stable: among chapters whose prerequisites are all placed, the earliest in the given order goes
    first, so a list that already respects the prerequisites comes back unchanged. A cycle among the
    given chapters is a ConfigError naming them.
    """
    given = {chapter.id for chapter in chapters}
    placed: list[Chapter] = []
    done: set[str] = set()
    waiting = list(chapters)
    while waiting:
        ready = next((chapter for chapter in waiting
                      if all(need in done or need not in given for need in chapter.prerequisites)), None)
        if ready is None:
            raise ConfigError(f"{CATALOG_PATH}: the prerequisites of {', '.join(c.id for c in waiting)} form a cycle")
        placed.append(ready)
        done.add(ready.id)
        waiting.remove(ready)
    return placed


def project_chain(key: str, root: Path | None = None) -> list[Chapter]:
    """The projects a project needs, transitively, then the project itself, in run order.

    `project_chain("62")` is 64, 63, 65, 62: each project of the chain hands its manifest to the next.
    Prerequisites that are mechanism chapters are not part of a chain (they hand nothing down). Every
    project of the chain must be implemented.
    """
    catalog = load_catalog(root)
    by_id = {chapter.id: chapter for chapter in catalog}
    last = find_chapter(key, root)
    if last.kind != "project":
        raise ConfigError(f"{last.id} is a {last.kind} chapter; --chain takes a project (e.g. 62).")
    members, pending = {last.id}, [last]
    while pending:
        for need in pending.pop().prerequisites:
            upstream = by_id.get(need)
            if upstream is None:
                raise ConfigError(f"{CATALOG_PATH}: a prerequisite {need!r} is not in the catalog")
            if upstream.kind == "project" and upstream.id not in members:
                members.add(upstream.id)
                pending.append(upstream)
    chain = order_by_prerequisites([chapter for chapter in catalog if chapter.id in members])
    planned = [chapter.id for chapter in chain if not chapter.implemented]
    if planned:
        raise ConfigError(f"the chain of {last.id} needs project(s) {', '.join(planned)}, still planned.")
    return chain


def project_upstreams(chapter: Chapter, root: Path | None = None) -> tuple[str, ...]:
    """The ids of the projects among a chapter's direct prerequisites (whose manifests it reads)."""
    by_id = {entry.id: entry for entry in load_catalog(root)}
    return tuple(need for need in chapter.prerequisites if need in by_id and by_id[need].kind == "project")
