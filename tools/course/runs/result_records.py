"""The records under `benchmarks/results/` (real_gpu evidence, committed): found, read and summarised.

The registry page and a profile's preflight both read them; neither imports the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tools.core.catalog import load_catalog
from tools.core.records import sha256_file
from tools.errors import UpstreamRecordError

RESULTS_DIR = Path("benchmarks/results")


@dataclass(frozen=True)
class RecordRef:
    """A record found under benchmarks/results, with what the registry shows of it."""

    path: str
    sha256: str
    schema_version: str
    chapters: tuple[str, ...]
    stage: str
    run_label: str
    run_mode: str
    evidence_level: str | None
    headline: str
    comparable: tuple[tuple[str, float], ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.evidence_level == "real_gpu"

    def link(self) -> str:
        name = Path(self.path).name
        relative = Path(self.path).relative_to(RESULTS_DIR)
        return f"[{name}]({relative.as_posix()}) `sha256:{self.sha256[:12]}`"


def headline(record: dict) -> str:
    """One line of what a record concluded, read from its own fields."""
    if isinstance(record.get("registry_headline"), str):
        return record["registry_headline"]
    decision = record.get("decision")
    if isinstance(decision, dict):
        decision = decision.get("decision") or decision.get("status")
    parts = []
    if decision:
        parts.append(f"decision: {decision}")
    if record.get("status"):
        parts.append(f"status: {record['status']}")
    checks = record.get("system_decision", {}).get("checks") if isinstance(record.get("system_decision"), dict) else None
    if isinstance(checks, dict) and checks:
        passed = sum(1 for value in checks.values() if value is True)
        parts.append(f"checks {passed}/{len(checks)} true")
    weights = record.get("model", {}).get("weights") if isinstance(record.get("model"), dict) else None
    if weights:
        parts.append(f"weights: {weights}")
    return "; ".join(parts) or "recorded (no decision field)"


def discover_records(root: Path) -> list[RecordRef]:
    """Every course record (a JSON object with schema_version and run_label) under benchmarks/results."""
    found = []
    for path in sorted((root / RESULTS_DIR).rglob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise UpstreamRecordError(f"{path} is not a readable JSON record ({error}); records are write-once: "
                                      "restore it from git, or move it out of benchmarks/results") from None
        if not isinstance(record, dict) or "schema_version" not in record or "run_label" not in record:
            continue
        chapters = record.get("chapters") or ([record["chapter"]] if record.get("chapter") else [])
        found.append(RecordRef(
            path=str(path.relative_to(root)), sha256=sha256_file(path), schema_version=str(record["schema_version"]),
            chapters=tuple(str(c) for c in chapters), stage=str(record.get("stage", "")),
            run_label=str(record["run_label"]), run_mode=str(record.get("run_mode", "")),
            evidence_level=record.get("evidence_level"), headline=headline(record),
            comparable=tuple((str(k), float(v)) for k, v in (record.get("comparable") or {}).items()
                             if isinstance(v, (int, float)) and not isinstance(v, bool)),
        ))
    return found


def profile_gpu_records(root: Path, profile_name: str, records: list[RecordRef] | None = None) -> list[RecordRef]:
    """Committed real_gpu records of the chapters that name the profile `profile_name`."""
    served = {chapter.id for chapter in load_catalog(root) if profile_name in chapter.profiles}
    records = discover_records(root) if records is None else records
    return [record for record in records if record.is_gpu and served & set(record.chapters)]
