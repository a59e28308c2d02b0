"""Project 85: the gates its stage runs are the gates its notebook teaches.

The notebook's reference solution is executed on its own and compared, on seeded generated inputs (valid and
not), with `tools.experiments.online_rl.project_gates`: the same value or the same exception class. A planted
mutant of the notebook must differ on the same inputs (the comparison can fail)."""

from __future__ import annotations

import math
import random

import pytest
from planted import mutant

from tools.course.cells import cells_with_role, read_notebook
from tools.experiments.online_rl import project_gates as gates

SLUG = "85-online-reward-optimisation"
OUTCOMES = ("correct", "wrong", "format_error", "truncated")


@pytest.fixture(scope="module")
def notebook():
    source = "\n".join(cell.source for _, cell in cells_with_role(read_notebook(f"notebooks/{SLUG}.ipynb"),
                                                                   "reference-solution"))
    namespace = {"math": math}
    exec(compile(source, f"<{SLUG} reference>", "exec"), namespace)
    return namespace


def outcome_of(function, *arguments):
    try:
        return function(*arguments)
    except ValueError:
        return ValueError


def batches(count=300, seed=0):
    rng = random.Random(seed)
    for _ in range(count):
        groups = [[{"outcome": (outcome := rng.choice(OUTCOMES)),
                    "reward": rng.choice([1.0, 1]) if outcome == "correct" else rng.choice([0.0, 0.5])}
                   for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 5))]
        limits = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(3)]
        if rng.random() < 0.2:
            where = rng.randrange(len(groups))
            groups[where][0] = rng.choice([{"outcome": "right", "reward": 1.0}, {"outcome": "wrong", "reward": True},
                                           {"outcome": "wrong", "reward": math.nan}, "wrong"])
        if rng.random() < 0.1:
            limits[rng.randrange(3)] = rng.choice([-0.1, 1.5, True, math.inf])
        yield (groups, *limits)


def runs(count=300, seed=1):
    rng = random.Random(seed)
    for _ in range(count):
        steps = []
        for _ in range(rng.randint(1, 6)):
            updates = rng.choice([0, 1, 2])
            steps.append({"rollouts": 16, "rollouts_in_loss": rng.randint(1, 16) if updates else rng.choice([0, 8]),
                          "optimizer_steps": updates, "policy_change": None if updates == 0 else rng.choice([0.0, 1e-6, 0.3]),
                          "seconds": rng.choice([0.1, 0.5, 1.0])})
        if rng.random() < 0.2:
            steps[rng.randrange(len(steps))][rng.choice(["seconds", "policy_change", "rollouts"])] = rng.choice(
                [0, None, -1.0, True])
        yield steps, rng.choice([1e-6, 0.0, 0.3])


def decisions(count=300, seed=2):
    rng = random.Random(seed)
    for _ in range(count):
        seeds = rng.sample([1, 2, 3, 4, 5], rng.randint(2, 4))
        shift = rng.choice([-0.3, 0.0, 0.1, 0.3])
        base = {s: rng.uniform(0.3, 0.6) for s in seeds}
        task = {"candidate": {s: v + shift + rng.uniform(-0.05, 0.05) for s, v in base.items()}, "baseline": base}
        skill = {"candidate": {s: 0.5 + rng.choice([-0.2, 0.0]) for s in seeds}, "baseline": {s: 0.5 for s in seeds}}
        resource = {"measured": rng.choice([None, 1.0, 3.0]), "budget": 2.0}
        updates = {s: rng.choice([0, 5, 5, 5]) for s in seeds}
        if rng.random() < 0.15:
            updates.pop(seeds[0])
        yield task, skill, resource, updates, rng.choice([12.706, 4.303, 3.182]), 0.0, 0.05


CALLS = {"rollout_coverage": batches, "update_throughput": runs, "adoption_decision": decisions}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_the_stage_gate_is_the_notebook_reference(notebook, name):
    valid = 0
    for call in CALLS[name]():
        expected = outcome_of(getattr(gates, name), *call)
        valid += expected is not ValueError
        assert outcome_of(notebook[name], *call) == expected, call
    assert valid > 100, f"too few valid calls of {name} ({valid})"


@pytest.mark.parametrize("name, planted", [("rollout_coverage", "truncated_group_kept"),
                                           ("update_throughput", "every_update_effective"),
                                           ("adoption_decision", "lost_skill_always_rejects")])
def test_a_planted_slip_is_told_apart_on_the_same_inputs(name, planted):
    exercise, function = mutant("85", planted, {"math": math})
    assert exercise == name
    assert any(outcome_of(function, *call) != outcome_of(getattr(gates, name), *call) for call in CALLS[name]())


def test_every_decision_has_a_next_action():
    assert set(gates.NEXT_ACTIONS) == set(gates.DECISIONS)


def test_the_stage_reads_62s_schema_and_regression_tolerance():
    """project_stage keeps 62's manifest schema and regression tolerance as its own constants (an experiment imports
    no other experiment); they must be 62's."""
    from tools.experiments.online_rl import project_stage
    from tools.experiments.sft_chain import delivery

    assert project_stage.UPSTREAM_SCHEMA == delivery.MANIFEST_SCHEMA
    assert project_stage.REGRESSION_TOLERANCE == delivery.REGRESSION_TOLERANCE


def test_recorded_outcome_letters_give_back_the_verdicts():
    from tools.experiments.online_rl.project_policy import outcome_codes, verdicts_of

    verdicts = [[{"outcome": "correct", "reward": 1.0}, {"outcome": "truncated", "reward": 0.0}],
                [{"outcome": "format_error", "reward": 0.0}, {"outcome": "wrong", "reward": 0.0}]]
    assert outcome_codes(verdicts) == ["ct", "fw"] and verdicts_of(["ct", "fw"]) == verdicts
