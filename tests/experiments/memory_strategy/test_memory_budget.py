"""Chapter 75 through the experiment contract: 76's decision read and checked before any work, the candidate
table on each run mode's memory axis, the three choice functions (the plan's, the learner's in the notebook),
and the package's copies of those functions against the notebook's reference."""

from __future__ import annotations

import json
import math
import random

import pytest

from chapter_factory import REPO_ROOT
from tools.core.catalog import find_chapter
from tools.core.records import lineage_entry, record_header, save_json_record_once, sha256_file
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.errors import ConfigError, UpstreamRecordError
from tools.experiments.contract import Mechanism, Plan, run
from tools.experiments.memory_strategy import baseline as tb
from tools.experiments.memory_strategy import budget
from tools.experiments.memory_strategy.plan import DECISION_SCHEMA, RUN_SCHEMA

SLUG76, SLUG75 = "76-activation-memory-strategies", "75-memory-budget"


def _plan(folder, label, **changes) -> Plan:
    return Plan(**{"experiment": "memory_budget", "chapter": "75", "run_mode": "cpu_smoke", "label": label,
                   "results_dir": folder, **changes})


# ---------------------------------------------------------------------------
# Synthetic real_gpu records of 73 and 76 (schema-true, numbers chosen by hand)
# ---------------------------------------------------------------------------

GPU_CANDIDATES = {  # name: (peak_reserved_mb, reserved range, samples/s); footprints add a 1024 MiB context margin
    "baseline": (10800.0, 30.0, 8.0), "checkpoint": (7600.0, 20.0, 6.4), "offload": (7900.0, 80.0, 5.0),
    "hybrid": (6100.0, 10.0, 4.2),
}


def _save(folder, path, record):
    path.parent.mkdir(parents=True, exist_ok=True)
    save_json_record_once(path, record)
    return lineage_entry(path, folder)


def write_gpu_upstream(folder, label, *, ready=True, eligible=("checkpoint", "offload", "hybrid"), floor=0.70,
                       run_mode="real_gpu"):
    """73's baseline, 76's G0 and decision for `label`, linked by sha256 as the real stages link them."""
    baseline_ref = _save(folder, tb.baseline_path(folder, label), {
        **record_header(schema_version=tb.BASELINE_SCHEMA_VERSION, chapter="73", stage="training_baseline",
                        run_mode=run_mode, run_label=label),
        "status": "ok", "model_size": {"parameters": 494_032_768, "static_bytes_per_parameter": 16}})
    candidates = [{"name": name, "status": "ok", "successful_runs": 3, "execution_path_verified": True,
                   "peak_memory_mb": reserved - 500, "peak_reserved_mb": reserved, "samples_per_s": speed,
                   "stability": {"peak_reserved_range_mb": spread}, "runs": []}
                  for name, (reserved, spread, speed) in GPU_CANDIDATES.items()]
    g0_ref = _save(folder, folder / SLUG76 / f"{SLUG76}_g0_{label}.json", {
        **record_header(schema_version=RUN_SCHEMA, chapter="76", stage="g0", run_mode=run_mode, run_label=label),
        "source_baseline": baseline_ref, "candidates": candidates,
        "budget": {"memory_cap_mb": 11200.0, "min_throughput_ratio": floor, "cuda_context_margin_mb": 1024.0}})
    gate = {"status": "ready_for_budget_review" if ready else "rerun_required",
            "eligible_candidates": list(eligible) if ready else []}
    close_path = budget.decision_path(folder, label)
    _save(folder, close_path, {
        **record_header(schema_version=DECISION_SCHEMA, chapter="76", stage="close", run_mode=run_mode,
                        run_label=label),
        "source_g0": g0_ref, "decision": {"decision": "accept" if ready else "tune"},
        "handoff": {"ready": ready, "gate": gate}})
    return close_path


def test_real_gpu_records_give_the_final_choice(tmp_path):
    """76's handoff is ready: footprints are reserved + 1024 MiB. At the 11200 MiB cap the baseline (11824 MiB) does
    not fit; of the rest, checkpoint is the fastest with at least 70 % of the baseline's throughput."""
    write_gpu_upstream(tmp_path, "pytest_gpu_a")
    record = run(_plan(tmp_path, "pytest_gpu_a", run_mode="real_gpu"))[0].load()
    assert record["status"] == "ok" and record["memory_axis"]["name"] == "device_footprint_mb"
    assert {row["name"]: row["memory_mb"] for row in record["candidates"]} == {
        name: reserved + 1024.0 for name, (reserved, _, _) in GPU_CANDIDATES.items()}
    assert {row["name"]: row["memory_spread_mb"] for row in record["candidates"]}["offload"] == 80.0
    assert record["target"]["budget_mb"] == 11200.0 and record["min_throughput_ratio"] == 0.70
    assert [(s["from_mb"], s["choice"]) for s in record["sweep"]["segments"]] == [
        (0.0, None), (8624.0, "checkpoint"), (11824.0, "baseline")]
    assert record["sweep"]["never_chosen"] == ["offload", "hybrid"]  # below the 70 % floor
    assert record["final"]["decision"] == "adopt" and record["final"]["headroom_mb"] == 11200.0 - 8624.0
    assert record["decision"] == {"decision": "adopt", "choice": "checkpoint", "reason": "76_handoff_ready"}
    assert record["consistency"]["disagreements"] == [] and record["consistency"]["final_matches_choice_at_target"]
    assert record["sources"]["close"]["sha256"] == sha256_file(budget.decision_path(tmp_path, "pytest_gpu_a"))


def test_other_targets_give_the_other_decisions(tmp_path):
    decided = {}
    for target in (7000.0, 8630.0, 20000.0):
        folder = tmp_path / str(target)
        write_gpu_upstream(folder, "pytest_gpu_b")
        record = run(_plan(folder, "pytest_gpu_b", run_mode="real_gpu",
                           options=budget.plan_options(target_budget_mb=target)))[0].load()
        assert record["target"]["rule"] == "given by the caller"
        decided[target] = (record["final"]["decision"], record["final"]["choice"], record["final"]["flip_above_mb"])
    assert decided == {7000.0: ("no_fit", None, 8624.0), 8630.0: ("tune", "checkpoint", 11824.0),
                       20000.0: ("keep_baseline", "baseline", None)}


def test_a_handoff_that_is_not_ready_blocks_the_choice(tmp_path):
    write_gpu_upstream(tmp_path, "pytest_gpu_c", ready=False)
    record = run(_plan(tmp_path, "pytest_gpu_c", run_mode="real_gpu"))[0].load()
    assert record["status"] == "blocked_by_upstream" and record["candidates"] == []
    assert record["decision"] == {"decision": "not_decided", "reason": "rerun_required"}


def least_memory_first(candidates, budget_mb, min_throughput_ratio=0.0):
    """Planted learner mistake (the mutant least_memory_wins): the smallest admissible footprint wins."""
    chosen = budget.choose_under_budget(candidates, budget_mb, min_throughput_ratio)
    admissible = [row for row in candidates if row["name"] in chosen["admissible"]]
    best = min(admissible, key=lambda row: row["memory_mb"], default=None)
    base = next(row["samples_per_s"] for row in candidates if row["name"] == "baseline")
    ratio = None if best is None else best["samples_per_s"] / base
    return {**chosen, "choice": None if best is None else best["name"], "throughput_ratio": ratio,
            "throughput_cost": None if ratio is None else 1 - ratio,
            "headroom_mb": None if best is None else budget_mb - best["memory_mb"]}


def sweep_without_dominance(candidates, min_throughput_ratio=0.0):
    """Planted learner mistake (the mutant every_candidate_on_the_frontier): every admissible candidate gets a segment."""
    base = next(row["samples_per_s"] for row in candidates if row["name"] == "baseline")
    kept = sorted((row for row in candidates if row["samples_per_s"] / base >= min_throughput_ratio),
                  key=lambda row: row["memory_mb"])
    segments = [{"from_mb": 0.0, "to_mb": float(kept[0]["memory_mb"]), "choice": None}]
    for position, row in enumerate(kept):
        upper = float(kept[position + 1]["memory_mb"]) if position + 1 < len(kept) else None
        segments.append({"from_mb": float(row["memory_mb"]), "to_mb": upper, "choice": row["name"]})
    return {"segments": segments, "flip_points_mb": [s["from_mb"] for s in segments[1:]], "never_chosen": []}


def test_a_planted_wrong_chooser_changes_the_choice_at_the_target(tmp_path):
    """Floor 0.5: checkpoint, offload and hybrid are all admissible at the cap; the fastest is checkpoint, the
    planted chooser takes hybrid, and the record's consistency check names the budgets where it disagrees."""
    correct_folder, wrong_folder = tmp_path / "correct", tmp_path / "wrong"
    for folder in (correct_folder, wrong_folder):
        write_gpu_upstream(folder, "pytest_gpu_d", floor=0.5)
    planted = Mechanism({"choose_under_budget": least_memory_first}, {"choose_under_budget": "learner"})
    correct = run(_plan(correct_folder, "pytest_gpu_d", run_mode="real_gpu"))[0].load()
    wrong = run(_plan(wrong_folder, "pytest_gpu_d", run_mode="real_gpu", mechanism=planted))[0].load()
    assert correct["at_target"]["choice"] == "checkpoint" and wrong["at_target"]["choice"] == "hybrid"
    assert wrong["mechanism"]["choose_under_budget"]["source"] == "learner"
    assert correct["consistency"]["disagreements"] == [] and wrong["consistency"]["disagreements"]
    assert wrong["consistency"]["final_matches_choice_at_target"] is False


def test_a_planted_sweep_without_dominance_changes_the_final_decision(tmp_path):
    correct_folder, wrong_folder = tmp_path / "correct", tmp_path / "wrong"
    for folder in (correct_folder, wrong_folder):
        write_gpu_upstream(folder, "pytest_gpu_e", floor=0.5)
    planted = Mechanism({"budget_sweep": sweep_without_dominance}, {"budget_sweep": "learner"})
    correct = run(_plan(correct_folder, "pytest_gpu_e", run_mode="real_gpu"))[0].load()
    wrong = run(_plan(wrong_folder, "pytest_gpu_e", run_mode="real_gpu", mechanism=planted))[0].load()
    assert correct["decision"]["choice"] == "checkpoint" and wrong["decision"]["choice"] == "offload"
    assert wrong["mechanism"]["budget_sweep"]["source"] == "learner"


def test_a_missing_decision_is_refused_before_any_work(tmp_path):
    with pytest.raises(UpstreamRecordError, match="--chapter 73 --chapter 76 --chapter 75"):
        run(_plan(tmp_path, "pytest_missing"))
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []


def test_upstream_that_does_not_match_is_refused_before_any_work(tmp_path):
    close = write_gpu_upstream(tmp_path, "pytest_mismatch")
    with pytest.raises(UpstreamRecordError, match="never feeds a cpu_smoke budget"):
        run(_plan(tmp_path, "pytest_mismatch"))  # a real_gpu decision read by a cpu_smoke run
    with pytest.raises(UpstreamRecordError, match="not the promised"):
        run(_plan(tmp_path, "pytest_mismatch", run_mode="real_gpu",
                  options=budget.plan_options(upstream_sha256="0" * 64)))
    g0 = tmp_path / SLUG76 / f"{SLUG76}_g0_pytest_mismatch.json"
    g0.write_text(g0.read_text(encoding="utf-8").replace("10800.0", "1080.0"), encoding="utf-8")
    with pytest.raises(UpstreamRecordError, match="sha256"):
        run(_plan(tmp_path, "pytest_mismatch", run_mode="real_gpu"))
    assert not (tmp_path / SLUG75).exists() and close.exists()


def test_plans_75_cannot_run_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="takes no --seed"):
        run(_plan(tmp_path, "pytest_refused", seeds=(1, 2)))
    with pytest.raises(ConfigError, match="takes the mechanism functions"):
        run(_plan(tmp_path, "pytest_refused", mechanism=Mechanism({"time_steps": len}, {"time_steps": "learner"})))


def test_dry_run_reads_and_writes_nothing(tmp_path):
    lines = []
    assert run(_plan(tmp_path, "anything", run_mode="dry_run"), log=lines.append) == []
    assert "nothing is written" in lines[0]


# ---------------------------------------------------------------------------
# The package's copies against the notebook's reference, and the sweep against the choice
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def notebook_reference():
    notebook = read_notebook(find_chapter("75", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math}
    for name in budget.MECHANISM:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in budget.MECHANISM}


def _random_table(rng):
    names = ["baseline"] + rng.sample(["checkpoint", "offload", "hybrid", "other"], rng.randint(0, 4))
    return [{"name": name, "memory_mb": rng.choice([float(rng.randint(0, 20)), rng.uniform(0, 20)]),
             "memory_spread_mb": rng.choice([0.0, rng.uniform(0, 1)]),
             "samples_per_s": rng.choice([float(rng.randint(1, 6)), rng.uniform(0.5, 6)])} for name in names]


def _outcome(function, *args):
    try:
        return "value", function(*args)
    except ValueError:
        return "ValueError", None


def test_the_package_copies_agree_with_the_notebooks_reference(notebook_reference):
    rng = random.Random(75)
    for _ in range(300):
        table, floor = _random_table(rng), rng.choice([0.0, 0.5, 0.7, 1.0, 1.5])
        target = rng.choice([0.0, rng.uniform(0, 25), -1.0])
        assert _outcome(budget.choose_under_budget, table, target, floor) == \
            _outcome(notebook_reference["choose_under_budget"], table, target, floor)
        swept = _outcome(budget.budget_sweep, table, floor)
        assert swept == _outcome(notebook_reference["budget_sweep"], table, floor)
        if swept[0] == "value":
            spreads = {row["name"]: row["memory_spread_mb"] for row in table}
            assert _outcome(budget.final_strategy_choice, swept[1]["segments"], target, spreads) == \
                _outcome(notebook_reference["final_strategy_choice"], swept[1]["segments"], target, spreads)


def test_the_sweep_gives_the_choice_at_every_budget():
    """Property: at every budget (each footprint, between them, beyond them) the segment that holds it names
    what choose_under_budget chooses there."""
    rng = random.Random(7)
    for _ in range(300):
        table, floor = _random_table(rng), rng.choice([0.0, 0.5, 0.8])
        segments = budget.budget_sweep(table, floor)["segments"]
        points = sorted({row["memory_mb"] for row in table})
        for value in [0.0, *points, *(p + 0.01 for p in points), *(p - 0.01 for p in points if p >= 0.01), 1e6]:
            held = next(s for s in reversed(segments) if s["from_mb"] <= value)["choice"]
            assert held == budget.choose_under_budget(table, value, floor)["choice"], (table, floor, value)


# ---------------------------------------------------------------------------
# cpu_smoke: the chain 73 -> 76 -> 75 through the contract
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_chain(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chain75") / "results"
    label = "pytest_chain_75"
    run(Plan(experiment="training_baseline", chapter="73", run_mode="cpu_smoke", label=label, results_dir=folder))
    run(Plan(experiment="memory_strategy", chapter="76", run_mode="cpu_smoke", label=label, results_dir=folder,
             stage="auto"))
    record = run(_plan(folder, label))[0].load()
    return folder, label, record


@pytest.mark.slow  # runs 73's baseline and 76's four stages first
def test_cpu_smoke_models_the_footprint_and_never_adopts(cpu_chain):
    folder, label, record = cpu_chain
    g0 = json.loads((folder / SLUG76 / f"{SLUG76}_g0_{label}.json").read_text(encoding="utf-8"))
    base = json.loads(tb.baseline_path(folder, label).read_text(encoding="utf-8"))
    static = base["model_size"]["parameters"] * 16 / 2**20
    assert record["memory_axis"]["name"] == "modelled_footprint_mb"
    assert record["memory_axis"]["static_floor_mb"] == pytest.approx(static)
    rows = {row["name"]: row for row in record["candidates"]}
    assert set(rows) == {"baseline", "checkpoint", "offload", "hybrid"}
    for name, row in rows.items():
        kept = g0["saved_bytes"][name]["device_saved_bytes"]
        assert row["memory_mb"] == pytest.approx(static + kept / 2**20), name
    assert rows["offload"]["memory_mb"] == rows["hybrid"]["memory_mb"] == pytest.approx(static)
    assert rows["hybrid"]["memory_mb"] < rows["checkpoint"]["memory_mb"] < rows["baseline"]["memory_mb"]
    assert record["target"]["budget_mb"] == pytest.approx((static + rows["baseline"]["memory_mb"]) / 2)
    assert record["decision"]["decision"] == "measure_on_gpu" and record["decision"]["choice"] is None
    assert record["decision"]["proxy_decision"] in budget.DECISIONS
    assert record["consistency"]["disagreements"] == []
    # Nothing fits below the least memory of a candidate above the throughput floor (the offload rows
    # when their measured throughput clears it; under a loaded CPU they may not).
    base_rate = rows["baseline"]["samples_per_s"]
    admissible = [row["memory_mb"] for row in rows.values()
                  if row["samples_per_s"] / base_rate >= record["min_throughput_ratio"]]
    assert record["sweep"]["segments"][0] == {"from_mb": 0.0, "to_mb": pytest.approx(min(admissible)),
                                              "choice": None}
    assert min(admissible) >= static - 1e-9
    assert record["sources"]["g0"]["sha256"] == sha256_file(folder / record["sources"]["g0"]["path"])
