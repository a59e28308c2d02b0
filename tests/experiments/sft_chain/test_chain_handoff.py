"""The SFT chain's hand-off between real projects: 63 (and 65, 62) refuse, before any work and without
writing a record, an upstream manifest that is missing, changed by one byte, promised otherwise,
from another run mode, or not an accept; every refusal names the one command that fixes it."""

from __future__ import annotations

import json

import pytest

from tools.errors import UpstreamRecordError
from tools.experiments.contract import Plan, run

LABEL = "chain_handoff"
pytestmark = pytest.mark.slow  # the module runs project 64 once (tokenizer, admission): about 10 s


@pytest.fixture(scope="module")
def admitted(tmp_path_factory):
    """Project 64 run once (CPU only, a few seconds): its manifest and where it lies."""
    results = tmp_path_factory.mktemp("results")
    refs = run(Plan(experiment="sft_data_admission", chapter="64", run_mode="cpu_smoke", label=LABEL,
                    results_dir=results))
    manifest = next(ref for ref in refs if ref.stage == "manifest")
    return results, manifest


def downstream(results, experiment="lora_selection", chapter="63", run_mode="cpu_smoke", label="chain_next", **options):
    return Plan(experiment=experiment, chapter=chapter, run_mode=run_mode, label=label, results_dir=results,
                device="cpu" if run_mode == "cpu_smoke" else "cuda", options={"upstream_label": LABEL, **options})


def records_of(results, slug):
    folder = results / slug
    return sorted(path.name for path in folder.rglob("*")) if folder.exists() else []


def tampered_copy(results, manifest, tmp_path, edit):
    """A results root holding 64's records with the manifest edited by `edit` (bytes -> bytes)."""
    import shutil

    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    path = copy / manifest.path.relative_to(results)
    before = path.read_bytes()
    after = edit(before)
    assert after != before and len(after) == len(before)  # one byte changed, nothing else
    assert sum(a != b for a, b in zip(before, after)) == 1
    path.write_bytes(after)
    return copy


def one_digit(data: bytes) -> bytes:
    """The last digit of the valid_train_records gate's measured count, changed."""
    import re

    gate = data.index(b'"name": "valid_train_records"')
    match = re.compile(rb'"measured": (\d+)').search(data, gate)
    index = match.end() - 1
    return data[:index] + (b"1" if data[index:index + 1] != b"1" else b"2") + data[index + 1:]


@pytest.mark.parametrize("experiment,chapter,slug", [("lora_selection", "63", "63-lora-variant-selection"),
                                                     ("qlora_branch", "65", "65-qlora-low-resource")])
def test_a_one_byte_change_stops_the_next_project_with_no_record(admitted, tmp_path, experiment, chapter, slug):
    results, manifest = admitted
    copy = tampered_copy(results, manifest, tmp_path, one_digit)
    with pytest.raises(UpstreamRecordError, match=r"sha256 .* was promised when project 64 finished.*Nothing was run\. "
                                                  rf"Fix: python -m tools\.course run --chain {chapter} --run-mode cpu_smoke "
                                                  r"--label <a new label>$"):
        run(downstream(copy, experiment, chapter, upstream_sha256=manifest.sha256))
    with pytest.raises(UpstreamRecordError, match="was changed after it was written"):
        run(downstream(copy, experiment, chapter))  # no promise: the seal still sees it
    assert records_of(copy, slug) == []


def test_a_changed_space_breaks_the_seal(admitted, tmp_path):
    results, manifest = admitted
    copy = tampered_copy(results, manifest, tmp_path, lambda data: data.replace(b'": ', b'":\t', 1))
    with pytest.raises(UpstreamRecordError, match="no longer match its seal"):
        run(downstream(copy))
    assert records_of(copy, "63-lora-variant-selection") == []


def test_a_missing_manifest_names_the_project_to_run(admitted):
    results, _ = admitted
    with pytest.raises(UpstreamRecordError, match="needs the manifest of project 64.*does not exist"):
        run(downstream(results, upstream_label="never_ran"))
    assert records_of(results, "63-lora-variant-selection") == []


def test_a_cpu_smoke_manifest_never_feeds_a_real_gpu_project(admitted):
    results, manifest = admitted
    with pytest.raises(UpstreamRecordError, match="comes from a cpu_smoke run; a real_gpu project reads only real_gpu"):
        run(downstream(results, run_mode="real_gpu", label="gpu_next", upstream_sha256=manifest.sha256))
    assert records_of(results, "63-lora-variant-selection") == []


def test_a_tune_upstream_is_refused_with_its_next_action(admitted, tmp_path):
    from tools.core.handoff import SEAL_FIELD, seal
    from tools.core.records import save_json_record_once

    results, manifest = admitted
    record = json.loads(manifest.path.read_text(encoding="utf-8"))
    record.pop(SEAL_FIELD)
    record["decision"]["decision"] = "tune"
    record["next_action"] = "repair the delivery and admit it again as a new version"
    copy = tmp_path / "tuned"
    save_json_record_once(copy / manifest.path.relative_to(results), seal(record))
    with pytest.raises(UpstreamRecordError, match="decided 'tune'.*starts only from 'accept'.*new version"):
        run(downstream(copy))


def test_62_refuses_a_missing_selection(admitted):
    results, _ = admitted
    with pytest.raises(UpstreamRecordError, match="needs the manifest of project 63"):
        run(downstream(results, "sft_delivery", "62"))
    assert records_of(results, "62-sft-delivery") == []
