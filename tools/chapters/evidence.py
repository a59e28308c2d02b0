"""The original course's reported figures, shown beside a learner's own run, always labelled.

`reported_block(chapter_id)` is what a Step 5 cell prints: each figure with its label, the row of
the source table, and the words "reported by the original course, not re-measured here". It never
returns a number to compute with: reported figures do not feed decisions.
"""

from __future__ import annotations

from pathlib import Path

from tools.core.reported import load_reported

HEADER = "reported by the original course (evidence level `reported`), not re-measured here"


def reported_block(chapter_id: str, root: Path | None = None) -> str:
    """Printable lines of every figure the original course published for `chapter_id`."""
    figures = [figure for figure in load_reported(root) if chapter_id in figure.chapters]
    if not figures:
        return f"{chapter_id}: the original course published no figure for this stage."
    first = figures[0]
    shared = {(figure.hardware, figure.model) for figure in figures} == {(first.hardware, first.model)}
    lines = [f"{HEADER}: {first.hardware}, {first.model}" if shared else f"{HEADER} (each figure names its model):"]
    for figure in figures:
        flag = " [historical]" if figure.historical else ""
        where = "" if shared else f"{figure.model}, {figure.hardware}; "
        lines.append(f"  {figure.quantity}: {figure.shown()}  ({where}label {figure.label}{flag}; {figure.source_row})")
        if figure.note:
            lines.append(f"      {figure.note}")
    lines.append("Produce your own: set RUN_MODE = \"cpu_smoke\" (code path on the tiny model) or run real_gpu on a GPU.")
    return "\n".join(lines)
