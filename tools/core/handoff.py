"""Project manifests: what one project hands to the next, sealed, and the checks before it is read.

A project (catalog kind `project`) ends by writing one manifest record,
`<results root>/<slug>/<slug>_manifest_<label>.json`: its inputs (paths relative to the results root
and sha256), the candidates it considered, the gates with their thresholds and measured values, the
decision and the next action. A downstream project reads it only through `require_manifest`, which
refuses, before any work and with an UpstreamRecordError that says what to do, a manifest that

- is missing (the upstream project did not run under this label),
- has another sha256 than the one promised (the batch runner promises the sha256 it saw when the
  upstream project finished; `python -m tools.course run --chain 62`),
- no longer matches its own seal (any byte changed after it was written and not sealed again),
- comes from another run mode (a cpu_smoke manifest never feeds a real_gpu project), another label
  or another project, or
- decided something the downstream project cannot start from (e.g. `tune` data is not trained on).

The seal is the sha256 of the record's canonical encoding without the seal itself; the file must
also be exactly that canonical encoding, so a changed space is caught as surely as a changed digit.
What the seal protects against: an accidental change (an edited byte, a truncated copy) and a
mixed-up run (another project, label or run mode). What it does not: someone who edits the manifest
and seals it again, since the seal is computed from the file alone. Only a sha256 promised from
outside the file (the chain runner's, or one a person wrote down) catches that, which is why a
promise is required in real_gpu and whenever the chain runner runs a project.

Every refusal names the one command that fixes it: the chain up to the reading project, run again
under a new label (`fix_command`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from tools.core.paths import chapter_record_path
from tools.core.records import encode_record, lineage_entry
from tools.core.runs import validate_run_mode
from tools.errors import ConfigError, UpstreamRecordError

MANIFEST_STAGE = "manifest"
SEAL_FIELD = "seal_sha256"
MANIFEST_SECTIONS = ("inputs", "candidates", "gates", "decision", "next_action", "outputs")
GATE_FIELDS = ("name", "threshold", "measured", "passed")
FILE_FIELDS = ("role", "path", "sha256")


def manifest_path(results_root: Path, slug: str, label: str) -> Path:
    """Where a project's manifest of `label` lives."""
    return chapter_record_path(results_root, slug, MANIFEST_STAGE, label)


def _seal_of(record: Mapping[str, Any]) -> str:
    unsealed = {key: value for key, value in record.items() if key != SEAL_FIELD}
    return hashlib.sha256(encode_record(unsealed)).hexdigest()


def seal(record: Mapping[str, Any]) -> dict:
    """`record` with its seal as the last field (the sha256 of its canonical encoding without it)."""
    if SEAL_FIELD in record:
        raise ConfigError("a manifest is sealed once; build the record again instead of sealing it twice")
    return {**record, SEAL_FIELD: _seal_of(record)}


def check_manifest_body(body: Mapping[str, Any]) -> None:
    """Refuse a manifest body that lacks a section or whose gates and files are not complete."""
    missing = [name for name in MANIFEST_SECTIONS if name not in body]
    if missing:
        raise ConfigError(f"a manifest needs {', '.join(MANIFEST_SECTIONS)}; missing {', '.join(missing)}")
    for section in ("inputs", "outputs"):
        for entry in body[section]:
            if not isinstance(entry, Mapping) or any(not entry.get(field) for field in FILE_FIELDS):
                raise ConfigError(f"manifest {section} entry {entry!r} needs {', '.join(FILE_FIELDS)}")
            if Path(entry["path"]).is_absolute() or ".." in Path(entry["path"]).parts:
                raise ConfigError(f"manifest {section} path {entry['path']!r} must be relative to the results root")
    for gate in body["gates"]:
        if not isinstance(gate, Mapping) or any(field not in gate for field in GATE_FIELDS):
            raise ConfigError(f"manifest gate {gate!r} needs {', '.join(GATE_FIELDS)}")
    decision = body["decision"]
    if not isinstance(decision, Mapping) or not isinstance(decision.get("decision"), str):
        raise ConfigError("a manifest's decision is a dict with a str 'decision'")
    if not isinstance(body["next_action"], str) or not body["next_action"].strip():
        raise ConfigError("a manifest names its next action (a non-empty str)")


def file_entry(role: str, path: Path, results_root: Path) -> dict:
    """`{role, path, sha256}` of a file under the results root (an input or an output of a project)."""
    return {"role": role, **lineage_entry(path, results_root)}


@dataclass(frozen=True)
class Upstream:
    """An upstream manifest that passed every check: its project, file, sha256 and content."""

    chapter: str
    path: Path
    sha256: str
    record: dict

    def entry(self, results_root: Path, role: str = "upstream_manifest") -> dict:
        """The `{role, path, sha256}` a downstream record lists among its inputs."""
        return {"role": role, "path": self.path.resolve().relative_to(Path(results_root).resolve()).as_posix(),
                "sha256": self.sha256}

    def output(self, role: str) -> dict:
        """The upstream manifest's output entry named `role`."""
        for entry in self.record.get("outputs", []):
            if entry.get("role") == role:
                return entry
        raise UpstreamRecordError(f"the manifest of project {self.chapter} ({self.path.name}) lists no output "
                                  f"{role!r}; it was written by another version of the project")


def fix_command(project: str, run_mode: str) -> str:
    """The one command that rebuilds a chain up to `project` from scratch: every project it needs,
    in order, each promising its manifest's sha256 to the next, under a label no record has used."""
    return f"python -m tools.course run --chain {project} --run-mode {run_mode} --label <a new label>"


def require_manifest(results_root: Path, *, chapter_id: str, slug: str, label: str, run_mode: str,
                     promised_sha256: str | None = None, schema_version: str | None = None,
                     decisions: Iterable[str] | None = None, reader: str = "this project",
                     reader_id: str | None = None) -> Upstream:
    """The upstream project's manifest of `label`, after every check of the module docstring.

    `decisions` lists the upstream decisions `reader` can start from (None: any); `reader_id` (the
    reading project's id) names the chain the fix command rebuilds. Nothing is written; an
    UpstreamRecordError names the file and the one command that fixes it.
    """
    run_mode = validate_run_mode(run_mode)
    if run_mode == "dry_run":
        raise ConfigError("dry_run reads no manifest; check the upstream only in cpu_smoke or real_gpu")
    path = manifest_path(results_root, slug, label)
    fix = fix_command(reader_id or chapter_id, run_mode)
    if not path.is_file():
        raise UpstreamRecordError(f"{reader} needs the manifest of project {chapter_id}, and {path} does not exist "
                                  f"(project {chapter_id} did not run under RUN_LABEL {label!r} in {run_mode}). "
                                  f"Nothing was run. Fix: {fix}", stage=MANIFEST_STAGE, fix=fix)
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if promised_sha256 is not None and actual != promised_sha256:
        raise UpstreamRecordError(
            f"the manifest of project {chapter_id} ({path}) has sha256 {actual}, but {promised_sha256} was promised "
            f"when project {chapter_id} finished: it changed after it was written (sealed again or not). Nothing was "
            f"run. Fix: {fix}", stage=MANIFEST_STAGE, cause="sha256 mismatch", fix=fix)
    changed = (f"the manifest of project {chapter_id} ({path}) was changed after it was written "
               f"(its bytes no longer match its seal). Nothing was run. Fix: {fix}")
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UpstreamRecordError(changed, stage=MANIFEST_STAGE, cause="not valid JSON", fix=fix) from None
    if (not isinstance(record, dict) or record.get(SEAL_FIELD) != _seal_of(record)
            or encode_record(record) != data):
        raise UpstreamRecordError(changed, stage=MANIFEST_STAGE, cause="seal mismatch", fix=fix)
    if record.get("run_mode") != run_mode:
        raise UpstreamRecordError(
            f"the manifest of project {chapter_id} ({path}) comes from a {record.get('run_mode')} run; a {run_mode} "
            f"project reads only {run_mode} manifests. Nothing was run. Fix: {fix}", stage=MANIFEST_STAGE,
            cause="run mode mismatch", fix=fix)
    for field, expected in (("chapter", chapter_id), ("run_label", label), ("stage", MANIFEST_STAGE)):
        if record.get(field) != expected:
            raise UpstreamRecordError(f"{path} names {field} {record.get(field)!r}, expected {expected!r}: it is not "
                                      f"the manifest of project {chapter_id} under this label. Nothing was run. "
                                      f"Fix: {fix}", stage=MANIFEST_STAGE, fix=fix)
    if schema_version is not None and record.get("schema_version") != schema_version:
        raise UpstreamRecordError(f"{path} has schema {record.get('schema_version')!r}, {reader} reads "
                                  f"{schema_version!r} (another version of the course wrote it). Nothing was run. "
                                  f"Fix: {fix}", stage=MANIFEST_STAGE, fix=fix)
    decision = record.get("decision", {}).get("decision")
    if decisions is not None and decision not in tuple(decisions):
        raise UpstreamRecordError(
            f"project {chapter_id} decided {decision!r} ({path}); {reader} starts only from "
            f"{' or '.join(repr(d) for d in decisions)}. Its next action: {record.get('next_action')}",
            stage=MANIFEST_STAGE, cause=f"upstream decision {decision}")
    return Upstream(chapter_id, path, actual, record)
