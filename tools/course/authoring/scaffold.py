"""`python -m tools.course new-chapter ID`: a new chapter from the template, every tag in place.

For a catalog entry that is still `planned`, it copies the template of `template/` (next to this file)
and fills in the chapter's id, slug and title: the chapter notebook (`chapter.ipynb`), its hidden tests
(`hidden_tests.py.template`) and mutants (`mutants/*.mutant`); then it marks the catalog entry
`implemented`, editing the TOML with tomlkit so comments and order stay. The template is a complete,
working chapter (three small exercises with a reference, visible, hidden and differential tests, eight
mutants and a Step 5 that writes a cpu_smoke record), so `check`, `grading build`, `run` and
`grading verify` work from the first minute; every place the author must replace is marked `TEMPLATE`,
and `check` refuses a chapter that still has one. Nothing outside the chapter's own files and the
catalog is touched.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from tools.core.catalog import CATALOG_PATH, NOTEBOOKS_DIR, Chapter, find_chapter
from tools.course.cells import read_notebook, write_notebook
from tools.course.layout import CourseLayout
from tools.errors import ConfigError

TEMPLATE_MARKER = re.compile(r"(?<!\w)TEMPLATE[:：]")
"""Every place of a scaffolded chapter that its author must replace carries `TEMPLATE:`."""

TEMPLATE_DIR = Path(__file__).parent / "template"
TEMPLATE_NOTEBOOK = TEMPLATE_DIR / "chapter.ipynb"
TEMPLATE_HIDDEN_TESTS = TEMPLATE_DIR / "hidden_tests.py.template"
TEMPLATE_MUTANTS = TEMPLATE_DIR / "mutants"
GPU_STAGE_PLACEHOLDER = "TEMPLATE: describe Step 5"


@dataclass
class Scaffold:
    notebook: Path
    hidden_tests: Path
    mutants: Path


def fill_placeholders(text: str, chapter: Chapter) -> str:
    """The template's `{{CHAPTER_ID}}`, `{{SLUG}}` and `{{TITLE_ZH}}` replaced by the chapter's."""
    for placeholder, value in (("{{CHAPTER_ID}}", chapter.id), ("{{SLUG}}", chapter.slug),
                               ("{{TITLE_ZH}}", chapter.title_zh)):
        text = text.replace(placeholder, value)
    return text


def template_notebook(chapter: Chapter):
    """The template notebook, filled in for `chapter`."""
    notebook = read_notebook(TEMPLATE_NOTEBOOK)
    for cell in notebook.cells:
        cell.source = fill_placeholders(cell.source, chapter)
    notebook.metadata["course"].update(chapter_id=chapter.id, slug=chapter.slug)
    return notebook


def mark_implemented(root: Path, chapter_id: str) -> None:
    """Set the catalog entry's status to implemented, with a Step 5 placeholder (comments and order stay)."""
    path = root / CATALOG_PATH
    catalog = tomlkit.parse(path.read_text(encoding="utf-8"))
    entries = [entry for entry in catalog.get("chapter", []) if entry.get("id") == chapter_id]
    if len(entries) != 1:
        raise ConfigError(f"{CATALOG_PATH}: expected one entry with id {chapter_id!r}, found {len(entries)}")
    entries[0]["status"] = "implemented"
    entries[0]["gpu_stage"] = GPU_STAGE_PLACEHOLDER
    path.write_text(tomlkit.dumps(catalog), encoding="utf-8")


def new_chapter(root: Path, chapter_id: str) -> Scaffold:
    """Write a new chapter from the template for a planned catalog entry; refuse to overwrite anything."""
    chapter = find_chapter(chapter_id, root)
    if chapter.implemented:
        raise ConfigError(f"chapter {chapter.id} is already implemented ({chapter.notebook}).")
    layout = CourseLayout(root)
    notebook_path = root / NOTEBOOKS_DIR / f"{chapter.slug}.ipynb"
    hidden, mutants = layout.hidden_tests(chapter.slug), layout.mutants(chapter.slug)
    existing = [str(path) for path in (notebook_path, hidden, mutants) if path.exists()]
    if existing:
        raise ConfigError(f"refusing to overwrite {', '.join(existing)}; remove them or pick another chapter.")
    write_notebook(template_notebook(chapter), notebook_path)
    hidden.parent.mkdir(parents=True, exist_ok=True)
    hidden.write_text(fill_placeholders(TEMPLATE_HIDDEN_TESTS.read_text(encoding="utf-8"), chapter), encoding="utf-8")
    shutil.copytree(TEMPLATE_MUTANTS, mutants)
    mark_implemented(root, chapter.id)
    return Scaffold(notebook_path, hidden, mutants)
