"""Project manifests: sealed when written, refused when missing, changed, promised otherwise, or foreign."""

import json

import pytest

from tools.core.handoff import (
    SEAL_FIELD,
    check_manifest_body,
    fix_command,
    manifest_path,
    require_manifest,
    seal,
)
from tools.core.records import record_header, save_json_record_once, sha256_file
from tools.errors import ConfigError, UpstreamRecordError

BODY = {
    "inputs": [{"role": "raw_data", "path": "64-x/raw.json", "sha256": "ab" * 32}],
    "candidates": [{"name": "v1"}],
    "gates": [{"name": "overlap", "threshold": 0, "measured": 0, "passed": True}],
    "decision": {"decision": "accept", "reasons": []},
    "next_action": "hand the admitted data to 63 and 65",
    "outputs": [],
}


def write(results, *, chapter="64", slug="64-x", label="chain_a", run_mode="cpu_smoke", body=BODY):
    record = {**record_header(schema_version="x/v1", chapter=chapter, stage="manifest", run_mode=run_mode,
                              run_label=label), **body}
    path = manifest_path(results, slug, label)
    return path, save_json_record_once(path, seal(record))


def read(results, **overrides):
    arguments = {"chapter_id": "64", "slug": "64-x", "label": "chain_a", "run_mode": "cpu_smoke"}
    return require_manifest(results, **{**arguments, **overrides})


def test_a_sealed_manifest_is_read_back_with_its_sha256_and_entry(tmp_path):
    path, digest = write(tmp_path)
    upstream = read(tmp_path, promised_sha256=digest, decisions=("accept",))
    assert upstream.sha256 == digest == sha256_file(path)
    assert upstream.record["decision"]["decision"] == "accept" and SEAL_FIELD in upstream.record
    assert upstream.entry(tmp_path) == {"role": "upstream_manifest", "path": "64-x/64-x_manifest_chain_a.json",
                                        "sha256": digest}


def test_a_missing_manifest_names_the_file_and_the_one_command_that_fixes_it(tmp_path):
    with pytest.raises(UpstreamRecordError, match=r"64-x_manifest_chain_a.json does not exist \(project 64 did not run "
                                                  r"under RUN_LABEL 'chain_a' in cpu_smoke\)") as refused:
        read(tmp_path, reader_id="63")
    assert refused.value.fix == fix_command("63", "cpu_smoke") == \
        "python -m tools.course run --chain 63 --run-mode cpu_smoke --label <a new label>"
    assert str(refused.value).endswith(f"Nothing was run. Fix: {refused.value.fix}")


def test_every_refusal_names_one_command_and_never_contradicts_itself(tmp_path):
    """The old stop message told the reader to rerun with RUN_LABEL 'X' and, in the same sentence, under a
    new label; now each refusal ends with the one command, which uses a new label."""
    path, digest = write(tmp_path)
    refusals = []
    for call in (lambda: read(tmp_path, label="other_label"), lambda: read(tmp_path, promised_sha256="0" * 64),
                 lambda: read(tmp_path, run_mode="real_gpu")):
        with pytest.raises(UpstreamRecordError) as refused:
            call()
        refusals.append(refused.value)
    path.write_text(path.read_text(encoding="utf-8").replace('"accept"', '"accepT"'), encoding="utf-8")
    with pytest.raises(UpstreamRecordError) as refused:
        read(tmp_path)
    refusals.append(refused.value)
    for error in refusals:
        message = str(error)
        assert message.count("python -m tools.course run") == 1 and message.endswith(f"Fix: {error.fix}"), message
        assert "RUN_LABEL 'chain_a' and" not in message and "under a new label" not in message


@pytest.mark.parametrize("edit", [
    lambda text: text.replace('"accept"', '"accepT"', 1),         # one character of a value
    lambda text: text.replace('"threshold": 0', '"threshold": 1'),  # one digit
    lambda text: text.replace("{\n", "{ \n", 1),                   # one space: same JSON, other bytes
])
def test_one_changed_byte_breaks_the_seal_even_without_a_promise(tmp_path, edit):
    path, _ = write(tmp_path)
    text = path.read_text(encoding="utf-8")
    changed = edit(text)
    assert len(changed.encode()) - len(text.encode()) in (0, 1) and changed != text
    path.write_text(changed, encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="changed after it was written"):
        read(tmp_path)


def test_a_resealed_edit_is_caught_by_the_promised_sha256(tmp_path):
    path, digest = write(tmp_path)
    record = json.loads(path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    record["decision"]["decision"] = "accept"
    record["gates"][0]["measured"] = 3  # a forger who also recomputes the seal
    path.unlink()
    save_json_record_once(path, seal(record))
    assert read(tmp_path)  # the seal alone cannot see it ...
    with pytest.raises(UpstreamRecordError, match="was promised"):
        read(tmp_path, promised_sha256=digest)  # ... the promise can


def test_another_run_mode_label_or_project_is_refused(tmp_path):
    write(tmp_path, run_mode="cpu_smoke")
    with pytest.raises(UpstreamRecordError, match="comes from a cpu_smoke run; a real_gpu project"):
        read(tmp_path, run_mode="real_gpu")
    write(tmp_path, chapter="65", slug="64-x", label="chain_b")
    with pytest.raises(UpstreamRecordError, match="names chapter '65'"):
        read(tmp_path, label="chain_b")
    with pytest.raises(ConfigError):
        read(tmp_path, run_mode="dry_run")


def test_a_decision_the_reader_cannot_start_from_is_refused_with_the_next_action(tmp_path):
    write(tmp_path, body={**BODY, "decision": {"decision": "tune", "reasons": ["duplicates"]},
                          "next_action": "repair and re-admit as a new version"})
    with pytest.raises(UpstreamRecordError, match="decided 'tune'.*re-admit as a new version"):
        read(tmp_path, decisions=("accept",), reader="project 63")
    assert read(tmp_path).record["decision"]["decision"] == "tune"


@pytest.mark.parametrize("change,message", [
    ({"gates": [{"name": "g", "threshold": 1}]}, "needs name, threshold, measured, passed"),
    ({"inputs": [{"role": "x", "path": "/abs/file.json", "sha256": "0"}]}, "relative to the results root"),
    ({"outputs": [{"role": "x", "path": "a.json"}]}, "needs role, path, sha256"),
    ({"decision": "accept"}, "str 'decision'"),
    ({"next_action": " "}, "next action"),
])
def test_an_incomplete_manifest_body_is_refused(change, message):
    check_manifest_body(BODY)
    with pytest.raises(ConfigError, match=message):
        check_manifest_body({**BODY, **change})
    with pytest.raises(ConfigError, match="missing candidates"):
        check_manifest_body({key: value for key, value in BODY.items() if key != "candidates"})


def test_a_record_is_sealed_once():
    with pytest.raises(ConfigError, match="sealed once"):
        seal(seal({"a": 1}))
