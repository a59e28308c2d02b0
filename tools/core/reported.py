"""Figures the original course published (evidence level `reported`), read from one data file.

`benchmarks/reported/original_course.toml` holds them with their source row, hardware, model and
label; the file names the hardware and model most figures share, and a figure measured on another
model (or machine) names its own (`model = ...` in its entry), so every figure carries its model. They are shown beside our own runs, labelled as reported and never re-measured here, and
they never feed a decision: nothing in `tools` that decides imports this module.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tools.core.paths import resolve_project_root
from tools.errors import ConfigError

REPORTED_PATH = Path("benchmarks/reported/original_course.toml")
REPORTED_SCHEMA = "course-reported-figures/v1"
EVIDENCE_LEVEL = "reported"
REQUIRED = ("chapter", "label", "quantity", "value", "source_row")


@dataclass(frozen=True)
class ReportedFigure:
    chapter: str
    label: str
    quantity: str
    value: float | int | str
    source_row: str
    unit: str | None = None
    note: str | None = None
    approximate: bool = False
    historical: bool = False
    also: tuple[str, ...] = ()
    hardware: str = ""
    model: str = ""

    @property
    def chapters(self) -> tuple[str, ...]:
        return (self.chapter, *self.also)

    @property
    def numeric(self) -> bool:
        return isinstance(self.value, (int, float)) and not isinstance(self.value, bool)

    def shown(self) -> str:
        """`≈ 2.02 GiB` / `tune`: the value as the original course gave it."""
        text = f"{self.value:g}" if self.numeric else str(self.value)
        text = f"≈ {text}" if self.approximate else text
        return f"{text} {self.unit}" if self.unit else text


def load_reported(root: Path | None = None) -> list[ReportedFigure]:
    """Every reported figure, in file order; the file's schema and fields are checked."""
    path = (root or resolve_project_root()) / REPORTED_PATH
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    if data.get("schema_version") != REPORTED_SCHEMA:
        raise ConfigError(f"{path}: schema_version must be {REPORTED_SCHEMA!r}")
    figures = []
    for index, entry in enumerate(data.get("figure", []), start=1):
        missing = [name for name in REQUIRED if name not in entry]
        if missing:
            raise ConfigError(f"{path}: figure {index} lacks {', '.join(missing)}")
        value = entry["value"]
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: figure {index} ({entry['quantity']}) is not finite")
        figures.append(ReportedFigure(
            chapter=str(entry["chapter"]), label=entry["label"], quantity=entry["quantity"], value=value,
            source_row=entry["source_row"], unit=entry.get("unit"), note=entry.get("note"),
            approximate=bool(entry.get("approximate", False)), historical=bool(entry.get("historical", False)),
            also=tuple(entry.get("also", ())), hardware=entry.get("hardware", data["hardware"]),
            model=entry.get("model", data["model"])))
    return figures


def reported_for(chapter_id: str, root: Path | None = None) -> list[ReportedFigure]:
    """The figures the original course published for `chapter_id` (shared records included)."""
    return [figure for figure in load_reported(root) if chapter_id in figure.chapters]


def measured_over_reported(measured: float | None, figure: ReportedFigure) -> float | None:
    """measured ÷ reported for a numeric figure; None when either side is missing or not a number."""
    if measured is None or not figure.numeric or figure.value == 0:
        return None
    return measured / float(figure.value)
