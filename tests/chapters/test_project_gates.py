"""Projects 63, 65 and 62: the gates their stages run are the gates their notebooks teach.

Each notebook's reference solution is executed on its own and compared, on generated inputs (valid
and not), with the library module the stage decides with: the same value or the same exception class.
A planted difference in one of them must be caught (the comparison can fail)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tools.course.cells import cells_with_role, read_notebook
from tools.experiments.sft_chain import delivery_gates, qlora_gates, selection_gates

SETTINGS = settings(max_examples=250, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))


def reference_of(slug: str) -> dict:
    source = "\n".join(cell.source for _, cell in cells_with_role(read_notebook(f"notebooks/{slug}.ipynb"),
                                                                   "reference-solution"))
    namespace = {"math": math, "NEXT_ACTIONS": delivery_gates.NEXT_ACTIONS, "T95": selection_gates.T95}
    exec(compile(source, f"<{slug} reference>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def notebooks():
    return {"63": reference_of("63-lora-variant-selection"), "65": reference_of("65-qlora-low-resource"),
            "62": reference_of("62-sft-delivery")}


def same(library, notebook, *arguments) -> None:
    try:
        expected = library(*arguments)
    except ValueError:
        with pytest.raises(ValueError):
            notebook(*arguments)
        return
    assert notebook(*arguments) == expected


# ---- 63 ----------------------------------------------------------------------------------------

@st.composite
def matrices(draw):
    base = {"steps": 10, "alpha": 16.0, "targets": ["q", "v"]}
    runs = []
    for value in draw(st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=3, unique=True)):
        for seed in draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4)):
            config = dict(base, rank=value, seed=seed)
            if draw(st.integers(0, 4)) == 0:
                config[draw(st.sampled_from(["steps", "alpha", "targets", "extra"]))] = draw(
                    st.sampled_from([11, 16, True, ("q", "v"), None]))
            runs.append({"name": f"run{len(runs)}", "config": config})
    return runs, draw(st.sampled_from(["rank", "seed"])), base, draw(st.sampled_from([[1, 2, 3], [1, 2], [1, 1]]))


@SETTINGS
@given(call=matrices())
def test_63_comparability_is_the_stage_gate(notebooks, call):
    same(selection_gates.comparable_candidates, notebooks["63"]["comparable_candidates"], *call)


@st.composite
def results(draw):
    seeds = list(range(draw(st.integers(1, 4))))
    table = {value: [{"seed": seed, "status": draw(st.sampled_from(["ok", "ok", "oom", "failed"])),
                      "quality": draw(st.sampled_from([None, 0.25, 0.5, 0.55, 0.6])),
                      "regression": draw(st.sampled_from([None, 0.4, 0.55, 0.6])),
                      "memory_bytes": draw(st.sampled_from([None, 100, 300]))} for seed in seeds]
             for value in draw(st.lists(st.sampled_from([4, 8, 16]), min_size=1, max_size=3, unique=True))}
    base = {"quality": draw(st.sampled_from([0.1, 0.5])), "regression": draw(st.sampled_from([0.6, 0.5]))}
    return (table, base, draw(st.sampled_from([200, 300, -1])), draw(st.sampled_from([0.0, 0.05])),
            draw(st.sampled_from([0.05, 0.1])), selection_gates.T95)


@SETTINGS
@given(call=results())
def test_63_quality_and_memory_gates_are_the_stage_gates(notebooks, call):
    same(selection_gates.gate_candidates, notebooks["63"]["gate_candidates"], *call)
    try:
        gated = selection_gates.gate_candidates(*call)
    except ValueError:
        return
    same(selection_gates.choose_candidate, notebooks["63"]["choose_candidate"], gated)


# ---- 65 ----------------------------------------------------------------------------------------

@st.composite
def pairs(draw):
    def side():
        return {seed: {"status": draw(st.sampled_from(["ok", "ok", "failed"])),
                       "peak_memory_bytes": draw(st.sampled_from([None, 0, 90, 100])),
                       "step_time_s": draw(st.sampled_from([None, 1.0, 1.4])),
                       "quality": draw(st.sampled_from([None, 0.4, 0.5]))}
                for seed in draw(st.lists(st.integers(1, 4), max_size=3, unique=True))}
    return side(), side()


@st.composite
def ladders(draw):
    def ladder():
        return [{"batch_size": size, "status": draw(st.sampled_from(["ok", "oom"])),
                 "peak_memory_bytes": draw(st.sampled_from([None, 50, 120]))}
                for size in draw(st.lists(st.sampled_from([2, 4, 8]), max_size=3, unique=True))]
    return {"bf16": ladder(), "nf4": ladder()}, draw(st.sampled_from([100, 200]))


@SETTINGS
@given(pair=pairs(), ladder=ladders(), required=st.sampled_from([2, 4, 8]))
def test_65_gates_are_the_stage_gates(notebooks, pair, ladder, required):
    same(qlora_gates.paired_deltas, notebooks["65"]["paired_deltas"], *pair)
    same(qlora_gates.capacity_gain, notebooks["65"]["capacity_gain"], *ladder)
    deltas, capacity = qlora_gates.paired_deltas(*pair), qlora_gates.capacity_gain(*ladder)
    same(qlora_gates.branch_decision, notebooks["65"]["branch_decision"], deltas, capacity, required, 0.05)


# ---- 62 ----------------------------------------------------------------------------------------

@st.composite
def deliveries(draw):
    selected = {"rank": draw(st.sampled_from([4, 8])), "targets": ["q", "v"], "data_sha256": "d"}
    used = dict(selected, **draw(st.sampled_from([{}, {"rank": 4.0}, {"data_sha256": "e"}, {"extra": 1},
                                                  {"targets": ["v", "q"]}, {"targets": ("q", "v")}])))
    recorded = {"a": "1", "b": "2"}
    found = dict(recorded, **draw(st.sampled_from([{}, {"a": "9"}, {"b": None}, {"c": "3"}])))
    losses = [2.0, 1.5, 1.2, 1.0]
    resume = {"reference_losses": losses, "checkpoint_step": 2,
              "resumed_losses": draw(st.sampled_from([None, [1.2, 1.0], [1.2, 1.1], [1.2]])),
              "resumed_first_step": draw(st.sampled_from([None, 3, 1, 2]))}
    reload = {"in_process": 0.5, "reloaded": draw(st.sampled_from([None, 0.5, 0.6]))}
    unordered = draw(st.sampled_from([(), ["targets"], ("targets", "rank")]))
    evaluation = [{"name": name, "passed": draw(st.booleans())} for name in ("task_gain", "base_skill_kept")]
    return selected, used, {"recorded": recorded, "found": found}, resume, reload, unordered, evaluation


@SETTINGS
@given(call=deliveries())
def test_62_gates_are_the_stage_gates(notebooks, call):
    selected, used, files, resume, reload, unordered, evaluation = call
    same(delivery_gates.upstream_identity, notebooks["62"]["upstream_identity"], selected, used, unordered)
    same(delivery_gates.artifact_checks, notebooks["62"]["artifact_checks"], files, resume, reload)
    identity = delivery_gates.upstream_identity(selected, used, unordered)
    integrity = delivery_gates.artifact_checks(files, resume, reload)
    same(delivery_gates.delivery_state, notebooks["62"]["delivery_state"], identity, integrity, evaluation)


def test_the_comparison_can_fail(notebooks):
    """A gate that differs in one clause is caught: the gain's lower end from the t value of n seeds
    instead of n - 1 degrees of freedom."""
    def seeds_not_degrees(results, base, memory_budget, margin, regression_tolerance, t_critical):
        return selection_gates.gate_candidates(results, base, memory_budget, margin, regression_tolerance,
                                               {df - 1: value for df, value in t_critical.items() if df > 1})

    runs = [{"seed": seed, "status": "ok", "quality": q, "regression": 0.5, "memory_bytes": 1}
            for seed, q in ((1, 0.5), (2, 0.7), (3, 0.6))]
    call = ({4: runs}, {"quality": 0.1, "regression": 0.5}, 10, 0.05, 0.05, selection_gates.T95)
    with pytest.raises(AssertionError):
        same(seeds_not_degrees, notebooks["63"]["gate_candidates"], *call)
