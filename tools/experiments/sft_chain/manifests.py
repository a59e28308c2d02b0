"""Writing a project's manifest through the run's sink, reading the upstream ones before any work, and
opening the sealed evaluation split.

The checks themselves live in `tools.core.handoff` (the batch runner and the notebooks use them too);
this module ties them to the experiment contract: the plan carries the promised sha256 of each
upstream manifest (`plan.options["upstream_sha256"]`, the notebooks' `UPSTREAM_SHA256`, required in
real_gpu) and the label to read it under (`upstream_label`, default the run's own).

The frozen evaluation split (project 64's `evaluation_split` record, sealed) is opened by project 62
only, for its final report (`open_evaluation_split`): selection reads the validation split. Every
opening writes a read receipt (`<64's folder>/evaluation_reads/<64's label>/<reader>_<label>.json`,
write-once), and the reader's record lists the receipts written before its own, so a second look at
the evaluation split is never silent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from tools.core.catalog import find_chapter
from tools.core.handoff import (
    MANIFEST_STAGE,
    SEAL_FIELD,
    Upstream,
    _seal_of,
    check_manifest_body,
    fix_command,
    require_manifest,
    seal,
)
from tools.core.records import encode_record, load_record, record_header, save_json_record_once, sha256_file
from tools.errors import ConfigError, SealedSplitError, UpstreamRecordError

EVALUATION_OPENERS = ("62",)
"""The projects that may open the frozen evaluation split (for the final report)."""
RECEIPT_SCHEMA = "sft-evaluation-read/v1"
ADMISSION_ID = "64"


def write_manifest(sink, body: Mapping[str, Any], *, schema_version: str):
    """Write the project's manifest once (header, runtime, body, seal); returns its RecordRef."""
    check_manifest_body(body)
    record = {**sink.header(MANIFEST_STAGE, schema_version), "runtime": sink.runtime(), **body}
    return sink.save(sink.record_path(MANIFEST_STAGE), seal(record), stage=MANIFEST_STAGE)


def promised_sha256(options: Mapping[str, Any], upstream_id: str) -> str | None:
    """The sha256 promised for an upstream manifest (None: none was promised, the seal alone is checked)."""
    promised = options.get("upstream_sha256") or {}
    if isinstance(promised, str):
        return promised
    if isinstance(promised, (list, tuple)) and all(isinstance(pair, (list, tuple)) and len(pair) == 2
                                                   for pair in promised):
        promised = dict(promised)  # the command line's repeated --upstream-sha256 ID=SHA256
    if not isinstance(promised, Mapping):
        raise ConfigError(f"UPSTREAM_SHA256 must be a dict {{project id: sha256}}, got {promised!r}")
    return promised.get(upstream_id)


def require_promise(run_mode: str, options: Mapping[str, Any], upstream_ids, reader_id: str) -> None:
    """In real_gpu every upstream manifest must come with a promised sha256 (the seal alone cannot
    catch a manifest edited and sealed again); ConfigError naming the one command otherwise."""
    if run_mode != "real_gpu":
        return
    missing = [upstream for upstream in upstream_ids if promised_sha256(options, upstream) is None]
    if missing:
        raise ConfigError(
            f"project {reader_id} in real_gpu needs UPSTREAM_SHA256 for project(s) {', '.join(missing)}: the seal "
            "alone does not catch a manifest that was edited and sealed again. Nothing was run. Fix: "
            f"{fix_command(reader_id, run_mode)} (the chain runner promises every sha256)",
            cause="no promised sha256", fix=fix_command(reader_id, run_mode))


def read_upstream(results_root: Path, *, upstream_id: str, reader_id: str, run_mode: str, label: str,
                  options: Mapping[str, Any], schema_version: str, decisions=("accept",)) -> Upstream:
    """The upstream project's manifest, every check of `tools.core.handoff.require_manifest` passed."""
    upstream_label = options.get("upstream_label") or label
    return require_manifest(results_root, chapter_id=upstream_id, slug=find_chapter(upstream_id).slug,
                            label=upstream_label, run_mode=run_mode,
                            promised_sha256=promised_sha256(options, upstream_id), schema_version=schema_version,
                            decisions=decisions, reader=f"project {reader_id}", reader_id=reader_id)


def read_output(upstream: Upstream, role: str, results_root: Path, *, schema_version: str | None = None) -> dict:
    """A file the upstream manifest lists as an output, read with its sha256 checked."""
    entry = upstream.output(role)
    path = Path(results_root) / entry["path"]
    try:
        return load_record(path, schema_version=schema_version, expected_sha256=entry["sha256"])
    except UpstreamRecordError as error:
        raise UpstreamRecordError(f"project {upstream.chapter}'s {role} ({entry['path']}): {error}",
                                  stage=MANIFEST_STAGE) from None


def admitted_data(upstream: Upstream, results_root: Path, *, schema_version: str) -> dict:
    """Project 64's admitted data, read through its manifest: the file's sha256 and every split's
    hash checked against what the manifest promised."""
    from tools.data.sft_raw import split_sha256

    data = read_output(upstream, "admitted_data", results_root, schema_version=schema_version)
    promised = upstream.record.get("admitted", {}).get("version", {}).get("split_sha256", {})
    actual = {name: split_sha256(records) for name, records in data["splits"].items()}
    if actual != promised or data.get("evaluation_sha256") != upstream.record["admitted"].get("evaluation_sha256"):
        raise UpstreamRecordError(f"the admitted data of project {upstream.chapter} does not hold the splits its manifest "
                                  "names (split hashes differ); rerun project 64", stage=MANIFEST_STAGE)
    return data


def admission_of(upstream: Upstream, results_root: Path, *, schema_version: str) -> Upstream:
    """Project 64's manifest as a project further down reads it: through the upstream manifest's
    input entry (path and sha256 checked, then every check of `require_manifest` but the promise)."""
    entry = next((item for item in upstream.record.get("inputs", []) if item.get("role") == "upstream_manifest"
                  and Path(item.get("path", "")).parts[:1] == (find_chapter(ADMISSION_ID).slug,)), None)
    if entry is None:
        raise UpstreamRecordError(f"the manifest of project {upstream.chapter} names no manifest of project "
                                  f"{ADMISSION_ID} among its inputs", stage=MANIFEST_STAGE)
    path = Path(results_root) / entry["path"]
    record = upstream_record_label(path)
    return require_manifest(results_root, chapter_id=ADMISSION_ID, slug=find_chapter(ADMISSION_ID).slug,
                            label=record, run_mode=upstream.record["run_mode"], promised_sha256=entry["sha256"],
                            schema_version=schema_version, decisions=("accept",),
                            reader=f"project {upstream.chapter}'s input", reader_id=upstream.chapter)


def upstream_record_label(path: Path) -> str:
    """The run label a manifest file names (read from the file; refused when it cannot be read)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))["run_label"]
    except (OSError, ValueError, KeyError):
        raise UpstreamRecordError(f"{path} is not a readable manifest", stage=MANIFEST_STAGE) from None


def receipts_folder(results_root: Path, admission: Upstream) -> Path:
    """Where the read receipts of one admission's evaluation split are kept."""
    return (Path(results_root) / find_chapter(ADMISSION_ID).slug / "evaluation_reads"
            / admission.record["run_label"])


def check_evaluation_split(results_root: Path, admission: Upstream, *, reader_id: str) -> dict:
    """The sealed evaluation split, checked (the reader may open it, the file's sha256 is the one 64's
    manifest lists, its seal holds, its records hash to the admitted split's hash) but not opened:
    SealedSplitError for a reader that may not open it, UpstreamRecordError for a changed file.
    Nothing is written."""
    if reader_id not in EVALUATION_OPENERS:
        raise SealedSplitError(
            f"project {reader_id} may not read the frozen evaluation split: selection reads the validation split, and "
            f"the evaluation split is opened once, by project {' / '.join(EVALUATION_OPENERS)}, for the final report. "
            "Nothing was read or written. Fix: select on the validation split (the default)",
            stage="evaluation_split", cause="sealed split", fix="select on the validation split")
    entry = admission.output("evaluation_split")
    path = Path(results_root) / entry["path"]
    if not path.is_file() or sha256_file(path) != entry["sha256"]:
        raise UpstreamRecordError(f"project 64's evaluation split ({entry['path']}) is missing or not the file its "
                                  f"manifest sealed. Nothing was run. Fix: {fix_command(reader_id, admission.record['run_mode'])}",
                                  stage="evaluation_split")
    data = path.read_bytes()
    record = json.loads(data.decode("utf-8"))
    from tools.data.sft_raw import split_sha256

    if (record.get(SEAL_FIELD) != _seal_of(record) or encode_record(record) != data
            or split_sha256(record["records"]) != admission.record["admitted"]["evaluation_sha256"]):
        raise UpstreamRecordError(f"project 64's evaluation split ({entry['path']}) no longer matches its seal. "
                                  f"Nothing was run. Fix: {fix_command(reader_id, admission.record['run_mode'])}",
                                  stage="evaluation_split")
    return {"records": record["records"], "sha256": record["sha256"], "entry": dict(entry)}


def open_evaluation_split(results_root: Path, admission: Upstream, *, reader_id: str, reader_label: str,
                          run_mode: str, purpose: str) -> dict:
    """The frozen evaluation split, opened: checked as `check_evaluation_split`, then a read receipt
    written (write-once). Returns `{records, sha256, entry, receipt, earlier_reads}`."""
    split = check_evaluation_split(results_root, admission, reader_id=reader_id)
    folder = receipts_folder(results_root, admission)
    earlier = []
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            receipt = json.loads(path.read_text(encoding="utf-8"))
            earlier.append({"path": path.relative_to(Path(results_root)).as_posix(), "reader": receipt["reader"],
                            "reader_label": receipt["reader_label"], "created_utc": receipt.get("created_utc")})
    receipt_path = folder / f"{reader_id}_{reader_label}.json"
    body = {**record_header(schema_version=RECEIPT_SCHEMA, chapter=reader_id, stage="evaluation_read",
                            run_mode=run_mode, run_label=reader_label),
            "reader": reader_id, "reader_label": reader_label, "split_sha256": split["sha256"],
            "split": split["entry"], "purpose": purpose, "earlier_reads": earlier}
    digest = save_json_record_once(receipt_path, body)
    return {**split, "receipt": {"path": receipt_path.relative_to(Path(results_root)).as_posix(), "sha256": digest},
            "earlier_reads": earlier}
