"""Chapters 33 and 32: the library behind their Step 1, 3 and 5 cells, tied to the notebooks' own references.

The fixed checks run with the reference functions taken from each notebook's reference-solution cells,
so a change of the mechanism or of the assumed inputs that the prose describes fails here.
"""

from __future__ import annotations

import json

import matplotlib
import pytest

from chapter_factory import REPO_ROOT
from tools.chapters import post_training_admission as admission
from tools.chapters import sft_data_contract as contract
from tools.chapters.context import ChapterContext
from tools.chapters.own_runs import latest_record, own_run_block
from tools.core.records import encode_record
from tools.core.reported import reported_for
from tools.course.cells import cells_with_role, read_notebook
from tools.errors import ConfigError

matplotlib.use("Agg")


def reference_of(slug: str) -> dict:
    """The namespace that a notebook's reference-solution cells define."""
    namespace: dict = {}
    for _, cell in cells_with_role(read_notebook(REPO_ROOT / "notebooks" / f"{slug}.ipynb"), "reference-solution"):
        exec(compile(cell.source, f"<{slug} reference>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def ch33():
    return reference_of("33-post-training-admission")


@pytest.fixture(scope="module")
def ch32():
    return reference_of("32-sft-data-contract")


# ---------------------------------------------------------------------------
# 33: post-training admission
# ---------------------------------------------------------------------------

def test_patterns_become_runs_and_groups():
    runs = admission.runs_from_patterns({"a": "PF-", "b": "-FP"})
    assert runs == [{"a": True}, {"a": False, "b": False}, {"b": True}]
    assert admission.groups_from_patterns(["PPF", "FF"]) == [[True, True, False], [False, False]]
    with pytest.raises(ConfigError, match="same number of runs"):
        admission.runs_from_patterns({"a": "PF", "b": "P"})
    with pytest.raises(ConfigError, match="unknown outcome mark"):
        admission.runs_from_patterns({"a": "PX"})
    with pytest.raises(ConfigError, match="P and F"):
        admission.groups_from_patterns(["P-F"])


def test_the_fixed_check_reaches_the_decisions_the_prose_describes(ch33):
    results = admission.run_fixed_check(ch33["classify_failures"], ch33["baseline_gap_report"],
                                        ch33["choose_entry_stage"])
    decided = {name: (result["entry"]["decision"], result["entry"]["stage"]) for name, result in results.items()}
    assert decided == {
        "json-extraction": ("reject", None), "unit-conversion": ("proceed", "sft"),
        "support-tone": ("reject", None), "sql-repair": ("proceed", "online_rl"),
        "olympiad-proofs": ("hold", None), "arithmetic-drills": ("hold", None),
        "product-summaries": ("proceed", "preference"),
    }
    drills = results["arithmetic-drills"]["entry"]
    assert drills["pass_rate"] == 0.8 and drills["mixed_group_share"] == 0.0, "the old 0 < p < 1 gate would admit it"
    assert drills["reasons"] == [{"level": "hold", "code": "no_reward_variance"}]
    sql = results["sql-repair"]["entry"]
    assert sql["pass_rate"] == pytest.approx(2 / 12) and sql["mixed_group_share"] == pytest.approx(2 / 3)
    assert results["support-tone"]["entry"]["reasons"] == [{"level": "reject", "code": "no_stable_failure"},
                                                            {"level": "hold", "code": "baseline_not_tried"}]
    table = admission.summary_table(results)
    assert all(name in table for name in admission.PROJECTS) and "0.80   0.00" in table
    assert "missing ['m1']" in admission.ledger_details(results)
    assert "arithmetic-drills" in admission.describe_projects() and "min_mixed_group_share=0.25" in admission.describe_projects()


def test_step1_example_classes_match_the_prose(ch33):
    step1 = ch33["classify_failures"](admission.runs_from_patterns(admission.STEP1_PATTERNS), **admission.STEP1_SETTINGS)
    assert step1["insufficient"] == ["q6"], "q6 failed both times it was seen, yet is only insufficient evidence"
    assert step1["stable"] == ["q1", "q2", "q5", "q8"] and step1["flaky"] == ["q3", "q7"]


def test_the_reported_shape_matches_the_reported_figure():
    groups = admission.groups_from_patterns(admission.reported_arithmetic_groups())
    answers = [outcome for group in groups for outcome in group]
    mixed = sum(1 for group in groups if len(set(group)) == 2)
    all_right = sum(1 for group in groups if all(group))
    shown = f"{sum(answers)}/{len(answers)} correct; {all_right} groups all right, " \
            f"{len(groups) - all_right - mixed} all wrong, {mixed} mixed"
    figures = [figure for figure in reported_for("33", REPO_ROOT) if figure.quantity == "arithmetic_rollout_groups"]
    assert [figure.value for figure in figures] == [shown]
    assert sum(sum(map(bool, group)) for group in admission.groups_from_patterns(admission.SAME_RATE_MIXED_GROUPS)) == 28


def test_group_advantages_vanish_inside_uniform_groups():
    advantages = admission.group_advantages([[True] * 4, [False] * 4, [True, False, False, False]])
    assert advantages[0] == [0.0] * 4 and advantages[1] == [0.0] * 4
    assert advantages[2] == [0.75, -0.25, -0.25, -0.25]


def test_the_record_body_is_json_and_names_its_evidence(ch33):
    results = admission.run_fixed_check(ch33["classify_failures"], ch33["baseline_gap_report"],
                                        ch33["choose_entry_stage"])
    body = admission.record_body(results)
    encode_record(body)  # no NaN, nothing that JSON cannot hold
    assert body["measurement"].startswith("none:") and body["inputs"]["settings"]["min_mixed_group_share"] == 0.25
    assert body["registry_headline"] == ("7 assumed requests: 3 proceed (product-summaries -> preference, "
                                         "sql-repair -> online_rl, unit-conversion -> sft), 2 hold, 2 reject")
    lines = admission.record_summary({**body, "evidence_level": "cpu_smoke"})
    assert lines[0].startswith("evidence level cpu_smoke") and "arithmetic-drills: hold (mixed group share 0.00)" in lines


def test_33_figures_draw(ch33):
    results = admission.run_fixed_check(ch33["classify_failures"], ch33["baseline_gap_report"],
                                        ch33["choose_entry_stage"])
    for figure in (admission.draw_outcome_grid(), admission.draw_fixed_check(results),
                   admission.draw_prompt_groups({"reported": admission.reported_arithmetic_groups()})):
        assert figure.axes
        matplotlib.pyplot.close(figure)


# ---------------------------------------------------------------------------
# 32: SFT data contract
# ---------------------------------------------------------------------------

def test_normalise_text_is_the_formula_of_the_audit_docstring(ch32):
    samples = ["  Straße\tIS\nhere ", "ﬁnd １７ ＋ ２５", "A\u3000B", ""]
    for text in samples:
        audit = ch32["audit_splits"]({"s": [contract.task("a", text, text, "x")]})
        assert audit["records"] == {"s": 1}
        key = ch32["audit_splits"]({"s": [contract.task("a", text, "", "x"), contract.task("b", text, "", "y")]})
        assert key["duplicate_groups"][0]["key"] == [contract.normalise_text(text), ""]
    assert contract.normalise_text("  Straße\tIS\nhere ") == "strasse is here"


def test_step3_example_has_the_leaks_the_prose_promises(ch32):
    leaks = ch32["audit_splits"](contract.step3_records())["leaks"]
    assert len(leaks) == 4 and [leak["kind"] for leak in leaks].count("exact") == 1


def test_the_versions_reach_reject_tune_accept(ch32):
    results = contract.run_fixed_check(ch32["validate_records"], ch32["audit_splits"], ch32["admission_verdict"])
    assert {version: result["verdict"]["verdict"] for version, result in results.items()} == {
        "v1_delivered": "reject", "v2_cleaned": "tune", "v3_admitted": "accept"}
    codes = [reason["code"] for reason in results["v1_delivered"]["verdict"]["reasons"]]
    assert codes == ["schema_violations", "label_conflicts", "exact_leakage", "normalised_leakage", "duplicate_inputs"]
    assert results["v2_cleaned"]["verdict"]["invalid_fractions"]["train"] == 0.05, "exactly at the limit is tune"
    assert {split: len(records) for split, records in contract.build_version("v1_delivered").items()} == {
        "train": 26, "validation": 7, "test": 8}
    body = contract.record_body(results)
    encode_record(body)
    assert body["inputs"]["schema"] == {"id": "str", "instruction": "str", "input": "str", "output": "str"}
    assert body["registry_headline"] == "data versions: v1_delivered reject, v2_cleaned tune, v3_admitted accept"
    assert "v2_cleaned: tune (tune:invalid_recordsx1, tune:duplicate_inputsx1)" in contract.record_summary(body)
    assert "tr-05" in contract.finding_details(results) and "verdict accept" in contract.summary_lines(results)
    for figure in (contract.draw_pipeline(), contract.draw_distinct_inputs(), contract.draw_fixed_check(results)):
        assert figure.axes
        matplotlib.pyplot.close(figure)


def test_building_a_version_leaves_the_planted_records_alone():
    before = json.dumps(contract.PLANTED, ensure_ascii=False)
    version = contract.build_version("v1_delivered")
    version["train"][-1]["output"] = "changed"
    assert json.dumps(contract.PLANTED, ensure_ascii=False) == before


# ---------------------------------------------------------------------------
# Step 5: the learner's own run
# ---------------------------------------------------------------------------

def _write(path, **fields):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields), encoding="utf-8")


def test_latest_record_is_the_newest_cpu_smoke_record_of_the_stage(tmp_path):
    folder = tmp_path / "build" / "results" / "33-post-training-admission"
    stem = "33-post-training-admission_stage_selection"
    _write(folder / f"{stem}_old.json", stage="stage_selection", run_mode="cpu_smoke", run_label="old",
           created_utc="2026-01-01T00:00:00+00:00")
    _write(folder / f"{stem}_new.json", stage="stage_selection", run_mode="cpu_smoke", run_label="new",
           created_utc="2026-02-01T00:00:00+00:00")
    _write(folder / f"{stem}_gpu.json", stage="stage_selection", run_mode="real_gpu", run_label="gpu",
           created_utc="2026-03-01T00:00:00+00:00")
    (folder / f"{stem}_broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "catalog.toml").write_bytes((REPO_ROOT / "notebooks" / "catalog.toml").read_bytes())
    path, record = latest_record("33", "stage_selection", root=tmp_path)
    assert path.name == f"{stem}_new.json" and record["run_label"] == "new"
    assert latest_record("32", "data_audit", root=tmp_path) is None

    run = ChapterContext("33", "dry_run", "dry")
    block = own_run_block(run, "stage_selection", None, lambda record: [f"label {record['run_label']}"], root=tmp_path)
    assert "your latest run (cpu_smoke: proves the code path" in block and "label new" in block
    assert "build/results/33-post-training-admission/" in block and str(tmp_path) not in block
    assert 'RUN_MODE = "cpu_smoke"' in block and "--chapter 33 --run-mode cpu_smoke" in block
    none_yet = own_run_block(ChapterContext("32", "dry_run", "dry"), "data_audit", None, lambda record: [], root=tmp_path)
    assert "no cpu_smoke record of this stage exists yet" in none_yet
    # a record an earlier version of the chapter wrote, without a field this page reads: named, not a crash
    stale = own_run_block(run, "stage_selection", None, lambda record: [f"weights {record['weighting']}"],
                          root=tmp_path)
    assert "label 'new'" in stale and "this page cannot read that record" in stale and "'weighting'" in stale
    assert 'RUN_MODE = "cpu_smoke"' in stale


def test_own_run_block_shows_the_record_this_run_wrote(tmp_path):
    path = tmp_path / "results" / "record.json"
    _write(path, run_label="mine", evidence_level="cpu_smoke")
    run = ChapterContext("33", "cpu_smoke", "mine", "33-post-training-admission", tmp_path / "results", tmp_path)
    block = own_run_block(run, "stage_selection", (path, "ab" * 32), lambda record: [record["run_label"]])
    assert block.splitlines()[0] == ("your run (cpu_smoke: proves the code path on this machine, not a GPU "
                                     "measurement): results/record.json, sha256 abababababab")
    assert block.splitlines()[1] == "  mine"
