"""Project 64 (SFT data admission): the gates the stage runs are the ones the notebook teaches, every
planted defect is found and no clean record is blocked, the admission reaches tune -> accept and
reject across delivery seeds, the framework check holds, and the stage writes a sealed manifest."""

from __future__ import annotations

import json
import math
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.chapters import sft_data_admission as project
from tools.core.handoff import require_manifest
from tools.course.cells import cells_with_role, read_notebook
from tools.data import sft_raw
from tools.errors import ConfigError, RecordExistsError
from tools.experiments.contract import Plan, run
from tools.experiments.sft_chain import admission as stage
from tools.experiments.sft_chain import admission_gates as gates

NOTEBOOK = "notebooks/64-sft-data-admission.ipynb"
GATES = ("merge_blockers", "find_leaks", "admission_transition")


@pytest.fixture(scope="module")
def reference():
    source = "\n".join(cell.source for _, cell in cells_with_role(read_notebook(NOTEBOOK), "reference-solution"))
    namespace = {"math": math, "unicodedata": unicodedata}
    exec(compile(source, "<64 reference>", "exec"), namespace)
    return {name: namespace[name] for name in GATES}


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer):
    """The cpu_smoke admission counts lengths with the tiny tokenizer (the lab models share it)."""
    return tiny_tokenizer


@pytest.fixture(scope="module")
def fixed(tokenizer):
    return stage.run_admission(tokenizer=tokenizer)


def _same(library, notebook, *arguments):
    try:
        expected = library(*arguments)
    except ValueError:
        with pytest.raises(ValueError):
            notebook(*arguments)
        return
    assert notebook(*arguments) == expected


CHECKS = list(gates.SAMPLE_CHECKS)


@st.composite
def merge_calls(draw):
    sizes = {name: draw(st.integers(0, 5)) for name in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1,
                                                                     max_size=3, unique=True))}
    findings = [{"check": draw(st.sampled_from(CHECKS + ["typo"] * (draw(st.integers(0, 20)) == 0))),
                 "split": name, "sample_id": f"s{draw(st.integers(0, max(size, 1)))}"}
                for name, size in sizes.items() for _ in range(draw(st.integers(0, size + 1)))]
    frozen = draw(st.lists(st.sampled_from(sorted(sizes)), max_size=1, unique=True))
    return findings, sizes, frozen, draw(st.sampled_from([0, 0.1, 0.25, 0.5, 1.0])), draw(st.integers(-1, 4))


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(call=merge_calls())
def test_the_notebook_merge_is_the_stage_merge(reference, call):
    _same(gates.merge_blockers, reference["merge_blockers"], *call)


TEXTS = ["Compute 4 - 2.", "compute ４ － ２.", "Compute", "4 - 2.", "Straße", "STRASSE", "", "a  b"]


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(names=st.lists(st.sampled_from(["e", "v", "t"]), min_size=1, max_size=3, unique=True), data=st.data())
def test_the_notebook_leak_check_is_the_stage_leak_check(reference, names, data):
    splits = {name: [{"id": f"{name}{n}", "instruction": data.draw(st.sampled_from(TEXTS)),
                      "input": data.draw(st.sampled_from(TEXTS))} for n in range(data.draw(st.integers(0, 4)))]
              for name in names}
    priority = list(data.draw(st.permutations(names)))
    if data.draw(st.integers(0, 6)) == 0:
        priority = priority[:-1]
    _same(gates.find_leaks, reference["find_leaks"], splits, priority)


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(length=st.integers(0, 3), data=st.data())
def test_the_notebook_transition_is_the_stage_transition(reference, length, data):
    history = [{"version": f"v{n + 1}", "content_sha256": f"s{n + 1}", "parent": f"v{n}" if n else None,
                "verdict": "tune" if n < length - 1 else data.draw(st.sampled_from(["tune", "accept", "reject"]))}
               for n in range(length)]
    admission = {"version": data.draw(st.sampled_from([f"v{length + 1}", "v1"])),
                 "content_sha256": data.draw(st.sampled_from([f"s{length + 1}", "s1"])),
                 "parent": data.draw(st.sampled_from([f"v{length}" if length else None, None, "v0"])),
                 "verdict": data.draw(st.sampled_from(["tune", "accept", "reject"]))}
    _same(gates.admission_transition, reference["admission_transition"], history, admission,
          data.draw(st.sampled_from([0, 1, 2, 3])))


@pytest.mark.slow
def test_every_planted_defect_is_found_and_no_clean_record_is_blocked(fixed):
    for line in fixed["lines"].values():
        first = line["rounds"][0]
        delivery, details = first["delivery"], first["checked"].details
        blocked = {sample for samples in details.values() for sample in samples}
        expected = {"exact duplicate": "duplicate", "over-long sample": "over_length", "field contract": "contract",
                    "copy of": "leakage", "validation copy": "leakage", "normalised duplicate": "duplicate",
                    "contradicting answer": "conflict", "paraphrase of": "leakage"}
        for record_id, defect in delivery.planted.items():
            check = next(value for key, value in expected.items() if defect.startswith(key))
            split = "validation" if record_id == "leak-5" else "train"
            assert check in details[split].get(record_id, []), (record_id, defect, details[split].get(record_id))
        teacher_errors = {r["id"] for r in delivery.splits["train"]
                          if r["id"] not in delivery.planted and "input" in r and not sft_raw.verify_answer(r)}
        assert teacher_errors and all(r.startswith("syn-") for r in teacher_errors)
        twins = {"gen-0041", "gen-0042"} if line["line"] == sft_raw.LINES[1] else set()
        assert blocked == set(delivery.planted) | teacher_errors | twins


@pytest.mark.slow
@pytest.mark.parametrize("seed", [sft_raw.DELIVERY_SEED, 2, 3])
def test_effect_admission_repairs_once_then_accepts_and_rejects_the_conflicting_line(tokenizer, seed):
    """The effect of the project across delivery seeds: the delivered data is tune (every planted
    defect repairable), one repair makes a new version that is accepted with zero overlap and zero
    truncation while keeping at least 90 % of the training records; contradicting answers reject."""
    result = stage.run_admission(tokenizer=tokenizer, seed=seed)
    main = result["lines"][sft_raw.LINES[0]]
    assert [item["transition"]["state"] for item in main["rounds"]] == ["tune", "accept"]
    raw, final = main["rounds"][0], main["rounds"][-1]
    assert final["delivery"].parent == raw["delivery"].version and final["delivery"].sha256 != raw["delivery"].sha256
    gates_ = {gate["name"]: gate for gate in stage.manifest_gates(raw, final)}
    assert all(gate["passed"] for gate in gates_.values()), gates_
    assert gates_["cross_split_overlap"]["measured"] == 0
    # truncation is measured on the delivery as received (after the repair it would be 0 by construction)
    assert gates_["truncation_rate_delivered"]["measured"] == raw["checked"].truncation_rate["train"] > 0
    assert final["checked"].truncation_rate["train"] == 0
    assert len(final["delivery"].splits["train"]) >= 0.9 * len(raw["delivery"].splits["train"])
    conflicting = result["lines"][sft_raw.LINES[1]]
    assert conflicting["state"] == "reject" and len(conflicting["rounds"]) == 1
    blockers = conflicting["rounds"][0]["merged"]["blockers"]
    assert blockers[0]["check"] == "conflict" and {"conflict-1", "conflict-2"} <= set(blockers[0]["sample_ids"])
    assert any(blocker["level"] == "tune" for blocker in blockers)  # the reject does not hide them


def test_a_changed_evaluation_split_stops_the_admission():
    evaluation = sft_raw.frozen_evaluation()
    evaluation[0] = dict(evaluation[0], output="0")
    with pytest.raises(ConfigError, match="frozen evaluation split changed"):
        stage.check_frozen_evaluation(evaluation)


@pytest.mark.slow
def test_the_framework_check_agrees_with_transformers_and_datasets(fixed, tokenizer):
    check = project.framework_check(fixed, tokenizer)
    assert check["over_length"]["equal"] and check["over_length"]["reply_lost_in_every_cut"]
    assert check["over_length"]["ours"] and check["leakage"]["equal"] and check["leakage"]["datasets_filter"]
    assert "transformers" in project.framework_lines(check)


@pytest.mark.slow
def test_the_stage_writes_a_sealed_manifest_63_can_read(tmp_path):
    plan = Plan(experiment="sft_data_admission", chapter="64", run_mode="cpu_smoke", label="t64_stage",
                results_dir=tmp_path)
    refs = run(plan)
    assert [ref.stage for ref in refs] == ["raw_data", "admitted_data", "evaluation_split", "manifest"]
    manifest = refs[-1].load()
    assert manifest["decision"]["decision"] == "accept" and manifest["schema_version"] == stage.MANIFEST_SCHEMA
    assert manifest["inputs"] == [{"role": "raw_data", "path": refs[0].path.relative_to(tmp_path).as_posix(),
                                   "sha256": refs[0].sha256}]
    assert manifest["outputs"] == [{"role": role, "path": ref.path.relative_to(tmp_path).as_posix(), "sha256": ref.sha256}
                                   for role, ref in (("admitted_data", refs[1]), ("evaluation_split", refs[2]))]
    assert [gate["name"] for gate in manifest["gates"]] == ["admission_state", "frozen_evaluation_sha256",
                                                            "valid_train_records", "truncation_rate_delivered",
                                                            "cross_split_overlap"]
    assert [candidate["state"] for candidate in manifest["candidates"]] == ["tune", "accept", "reject"]
    assert "not comparable" in manifest["comparability"]
    upstream = require_manifest(tmp_path, chapter_id="64", slug="64-sft-data-admission", label="t64_stage",
                                run_mode="cpu_smoke", promised_sha256=refs[-1].sha256, decisions=("accept",))
    admitted = refs[1].load()
    assert upstream.record["admitted"]["version"]["split_sha256"] == {
        name: sft_raw.split_sha256(records) for name, records in admitted["splits"].items()}
    assert "lines" in manifest and manifest["lines"][sft_raw.LINES[1]]["state"] == "reject"
    assert "evaluation" not in admitted and refs[2].load()["sha256"] == sft_raw.FROZEN_EVALUATION_SHA256
    with pytest.raises(RecordExistsError):
        run(plan)
    assert json.loads(refs[0].path.read_text(encoding="utf-8"))["builder"] == sft_raw.RAW_DATA_VERSION


def test_dry_run_writes_nothing(tmp_path):
    lines = []
    assert run(Plan(experiment="sft_data_admission", chapter="64", run_mode="dry_run", label="x",
                    results_dir=tmp_path), log=lines.append) == []
    assert "nothing is read, loaded or written" in lines[0] and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_tables_and_figures_draw(fixed):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    delivery = fixed["lines"][sft_raw.LINES[0]]["rounds"][0]["delivery"]
    assert "planted leak-6" in project.delivery_table(delivery)
    assert "leak-8 add:26:64" in project.paraphrase_lines(fixed) and "eval-" in project.paraphrase_lines(fixed)
    assert "reject conflict" in project.rounds_table(fixed) and "leak-2" in project.several_findings(fixed)
    for figure in (project.draw_chain(), project.draw_delivery(delivery), project.draw_state_machine(),
                   project.draw_admission(fixed)):
        assert figure.axes
        plt.close(figure)


LEARNER_FIND_LEAKS = '''def find_leaks(splits, priority):
    """A learner's version: the same contract, written with a helper and explicit loops."""
    def key(record):
        text = unicodedata.normalize("NFKC", record["instruction"] + " " + record["input"]).casefold()
        return " ".join(text.split())

    if not isinstance(splits, dict) or not splits:
        raise ValueError("splits must be a non-empty dict")
    if not isinstance(priority, (list, tuple)) or len(priority) != len(set(priority)) \\
            or any(not isinstance(name, str) for name in priority) or set(priority) != set(splits):
        raise ValueError("priority must name every split once")
    seen_above, leaked, overlap = set(), {}, []
    contents = {}
    for name in priority:
        if not isinstance(splits[name], (list, tuple)):
            raise ValueError("a split must be a list")
        contents[name] = []
        for record in splits[name]:
            if not isinstance(record, dict) or not all(isinstance(record.get(f), str) for f in ("id", "instruction", "input")):
                raise ValueError("records need str id, instruction and input")
            contents[name].append((key(record), record["id"]))
    for place, name in enumerate(priority):
        mine = {content for content, _ in contents[name]}
        for higher in priority[:place]:
            overlap.append({"higher": higher, "lower": name,
                            "shared": len(mine & {content for content, _ in contents[higher]})})
        leaked[name] = sorted(ident for content, ident in contents[name] if content in seen_above)
        seen_above |= mine
    return {"leaked": leaked, "overlap": overlap}'''


@pytest.mark.integration
@pytest.mark.slow
def test_a_learners_own_find_leaks_is_the_one_step5_runs(tmp_path):
    """A copy of the notebook whose TODO 2 cell holds a correct learner implementation (not the reference's
    text), executed in cpu_smoke: the admission's records say find_leaks came from the learner, the other
    two gates from the reference, and the admission reaches the same states."""
    from chapter_factory import REPO_ROOT

    from tools.core.catalog import find_chapter
    from tools.course.runs.runner import run_chapter

    chapter = find_chapter("64", REPO_ROOT)
    notebook = read_notebook(chapter.notebook_path(REPO_ROOT))
    cell = next(c for c in notebook.cells if c.metadata.get("course", {}).get("exercise") == "find_leaks")
    cell.source = LEARNER_FIND_LEAKS
    root = tmp_path / "copy"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / f"{chapter.slug}.ipynb").write_text(json.dumps(notebook, ensure_ascii=False),
                                                              encoding="utf-8")
    results = tmp_path / "results"
    outcome = run_chapter(root, chapter, run_mode="cpu_smoke", label="pytest_learner_64", results_dir=results,
                          output_dir=tmp_path / "out")
    assert outcome.status == "passed", f"cell {outcome.failed_cell}: {outcome.error}"
    for record_stage in ("raw_data", "manifest"):
        record = json.loads((results / chapter.slug / f"{chapter.slug}_{record_stage}_pytest_learner_64.json")
                            .read_text(encoding="utf-8"))
        assert record["mechanism"]["find_leaks"]["source"] == "learner", record_stage
        assert record["mechanism"]["merge_blockers"]["source"] == "reference", record_stage
    manifest = json.loads((results / chapter.slug / f"{chapter.slug}_manifest_pytest_learner_64.json")
                          .read_text(encoding="utf-8"))
    assert [candidate["state"] for candidate in manifest["candidates"]] == ["tune", "accept", "reject"]
