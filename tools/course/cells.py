"""Finding notebook cells by their role tags and course metadata (never by their text)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import nbformat
from nbformat import NotebookNode

ROLE_TAGS = (
    "parameters",
    "exercise",
    "visible-tests",
    "stop-here",
    "keep-own",
    "reference-solution",
    "reference-check",
    "gpu-stage",
)
AUXILIARY_TAGS = ("raises-exception",)
KNOWN_TAGS = ROLE_TAGS + AUXILIARY_TAGS

SOLUTION_PLACEHOLDER = "# YOUR CODE HERE"

COURSE_METADATA_VERSION = 1
"""Version of the `metadata.course` block of a chapter notebook (chapter_id, slug, cell roles)."""


def read_notebook(path: str | Path) -> NotebookNode:
    """Read a notebook as nbformat v4 (UTF-8)."""
    with open(path, encoding="utf-8") as handle:
        return nbformat.read(handle, as_version=4)


def write_notebook(notebook: NotebookNode, path: str | Path) -> None:
    """Write a notebook as UTF-8 with a trailing newline, creating the folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(nbformat.writes(notebook) + "\n", encoding="utf-8")


def tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def role(cell: NotebookNode) -> str | None:
    """The cell's role tag, or None for a plain cell."""
    roles = [tag for tag in tags(cell) if tag in ROLE_TAGS]
    return roles[0] if roles else None


def course_meta(cell: NotebookNode) -> dict:
    return dict(cell.get("metadata", {}).get("course", {}))


def exercise_id(cell: NotebookNode) -> str | None:
    return course_meta(cell).get("exercise")


def cells_with_role(notebook: NotebookNode, wanted: str) -> Iterator[tuple[int, NotebookNode]]:
    """(index, cell) of every cell whose role is `wanted`."""
    for index, cell in enumerate(notebook.cells):
        if role(cell) == wanted:
            yield index, cell


def describe(cell: NotebookNode, index: int) -> str:
    """Short human description of a cell for error messages: index, role and first line."""
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "<empty>")
    label = role(cell) or cell.cell_type
    exercise = exercise_id(cell)
    if exercise:
        label += f" {exercise}"
    return f"cell {index} [{label}] {first[:60]!r}"


def chapter_meta(notebook: NotebookNode) -> dict:
    return dict(notebook.metadata.get("course", {}))
