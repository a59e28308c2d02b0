"""Writing a project's manifest through the run's sink, and reading the upstream one before any work.

The checks themselves live in `tools.core.handoff` (the batch runner and the notebooks use them too);
this module ties them to the experiment contract: the plan carries the promised sha256 of each
upstream manifest (`plan.options["upstream_sha256"]`, the notebooks' `UPSTREAM_SHA256`) and the
label to read it under (`upstream_label`, default the run's own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tools.core.catalog import find_chapter
from tools.core.handoff import MANIFEST_STAGE, Upstream, check_manifest_body, require_manifest, seal
from tools.core.records import load_record
from tools.errors import ConfigError, UpstreamRecordError


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
    if not isinstance(promised, Mapping):
        raise ConfigError(f"UPSTREAM_SHA256 must be a dict {{project id: sha256}}, got {promised!r}")
    return promised.get(upstream_id)


def read_upstream(results_root: Path, *, upstream_id: str, reader_id: str, run_mode: str, label: str,
                  options: Mapping[str, Any], schema_version: str, decisions=("accept",)) -> Upstream:
    """The upstream project's manifest, every check of `tools.core.handoff.require_manifest` passed."""
    upstream_label = options.get("upstream_label") or label
    return require_manifest(results_root, chapter_id=upstream_id, slug=find_chapter(upstream_id).slug,
                            label=upstream_label, run_mode=run_mode,
                            promised_sha256=promised_sha256(options, upstream_id), schema_version=schema_version,
                            decisions=decisions, reader=f"project {reader_id}")


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
    if actual != promised or split_sha256(data["evaluation"]) != upstream.record["admitted"].get("evaluation_sha256"):
        raise UpstreamRecordError(f"the admitted data of project {upstream.chapter} does not hold the splits its manifest "
                                  "names (split hashes differ); rerun project 64", stage=MANIFEST_STAGE)
    return data
