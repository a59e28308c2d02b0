"""Step 5 runs the learner's functions (tools.chapters.mechanism): kept before the reference redefines
them, a stub or a rerun after the reference never replaces them, and the plan and records say which ran."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tools.chapters import mechanism
from tools.core.catalog import find_chapter
from tools.errors import ConfigError
from tools.experiments.contract import Mechanism, Plan

from chapter_factory import REPO_ROOT

CHAPTER = "18"


def cell_sources(tag: str) -> list[str]:
    notebook = json.loads(find_chapter(CHAPTER, REPO_ROOT).notebook_path(REPO_ROOT).read_text(encoding="utf-8"))
    return ["".join(cell["source"]) for cell in notebook["cells"] if tag in cell["metadata"].get("tags", [])]


def module_from(tmp_path, name: str, source: str) -> dict:
    """The namespace of `source` run as a file (so inspect.getsource finds each function, as in a kernel)."""
    path = tmp_path / f"{name}.py"
    path.write_text("import math\nimport torch\n\n" + source + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return vars(module)


LEARNER_ADVANTAGES = '''
def group_advantages(group_rewards, scale_by_std=True, eps=1e-4):
    """A learner's version: centres every group, scoreable or not."""
    means = [sum(group) / len(group) for group in group_rewards]
    advantages = [[float(r - m) for r in group] for group, m in zip(group_rewards, means)]
    return {"advantages": advantages, "scoreable": [True] * len(group_rewards), "scoreable_share": 1.0}
'''


@pytest.fixture(autouse=True)
def fresh_kernel():
    mechanism.forget(CHAPTER)
    yield
    mechanism.forget(CHAPTER)


def test_the_exercise_names_and_reference_sources_come_from_the_notebook():
    assert mechanism.exercise_names(CHAPTER, REPO_ROOT) == ["verify_integer_answer", "group_advantages",
                                                            "clipped_grpo_loss"]
    references = mechanism.reference_sources(CHAPTER, REPO_ROOT)
    assert set(references) >= {"verify_integer_answer", "group_advantages", "clipped_grpo_loss"}


def test_stubs_run_the_reference_and_the_learners_function_is_kept_through_the_reference_cell(tmp_path):
    stubs = module_from(tmp_path, "stubs18", "\n\n".join(cell_sources("exercise")))
    assert {mechanism.classify(stubs[name], None) for name in mechanism.exercise_names(CHAPTER)} == {"stub"}
    namespace = dict(stubs)
    namespace.update(module_from(tmp_path, "learner18", LEARNER_ADVANTAGES))
    line = mechanism.keep_own(CHAPTER, namespace, root=REPO_ROOT)
    assert line == ("Step 5 will run your group_advantages; the reference verify_integer_answer, clipped_grpo_loss "
                    "(yours are not implemented)")
    learner_function = namespace["group_advantages"]
    with pytest.raises(ConfigError, match="verify_integer_answer is not implemented"):
        mechanism.step5_mechanism(CHAPTER, namespace, root=REPO_ROOT)

    namespace.update(module_from(tmp_path, "reference18", "\n\n".join(cell_sources("reference-solution"))))
    mechanism.keep_own(CHAPTER, namespace, root=REPO_ROOT)  # a rerun after the reference cell keeps the learner's
    chosen = mechanism.step5_mechanism(CHAPTER, namespace, root=REPO_ROOT)
    assert chosen.functions["group_advantages"] is learner_function
    assert chosen.sources == {"verify_integer_answer": "reference", "group_advantages": "learner",
                              "clipped_grpo_loss": "reference"}
    assert chosen.functions["clipped_grpo_loss"] is namespace["clipped_grpo_loss"]


def test_a_learner_who_goes_back_to_the_stub_gets_the_reference_again(tmp_path):
    stubs = module_from(tmp_path, "stubs18b", "\n\n".join(cell_sources("exercise")))
    learner = module_from(tmp_path, "learner18b", LEARNER_ADVANTAGES)
    mechanism.keep_own(CHAPTER, {**stubs, **learner}, root=REPO_ROOT)
    mechanism.keep_own(CHAPTER, stubs, root=REPO_ROOT)
    references = module_from(tmp_path, "reference18b", "\n\n".join(cell_sources("reference-solution")))
    assert set(mechanism.step5_mechanism(CHAPTER, references, root=REPO_ROOT).sources.values()) == {"reference"}


def test_a_plan_carries_the_mechanism_and_its_records_say_which_code_ran(tmp_path):
    learner = module_from(tmp_path, "learner18c", LEARNER_ADVANTAGES)
    chosen = Mechanism({"group_advantages": learner["group_advantages"]}, {"group_advantages": "learner"})
    plan = Plan(experiment="grpo_rlvr", chapter=CHAPTER, run_mode="dry_run", label="x", mechanism=chosen)
    assert plan.public()["mechanism"] == {"group_advantages": "learner"}

    def package_default(group_rewards):
        return group_rewards

    described = chosen.describe({"group_advantages": package_default, "other": package_default})
    assert described["group_advantages"]["source"] == "learner"
    assert described["other"]["source"] == "package"
    assert described["group_advantages"]["code_sha256"] != described["other"]["code_sha256"]
    assert chosen.function("other", package_default) is package_default
    with pytest.raises(ConfigError, match="needs a source"):
        Mechanism({"f": package_default}, {})
    with pytest.raises(ConfigError, match="mechanism must be a Mechanism"):
        Plan(experiment="grpo_rlvr", chapter=CHAPTER, run_mode="dry_run", label="x", mechanism={"f": package_default})


def test_an_experiment_refuses_a_function_it_does_not_declare(tmp_path):
    from tools.experiments.registry import get_experiment

    experiment = get_experiment("grpo_rlvr")
    learner = module_from(tmp_path, "learner18d", LEARNER_ADVANTAGES)
    stray = Mechanism({"not_a_grpo_function": learner["group_advantages"]}, {"not_a_grpo_function": "learner"})
    with pytest.raises(ConfigError, match="not_a_grpo_function"):
        experiment.check_plan(Plan(experiment="grpo_rlvr", chapter=CHAPTER, run_mode="dry_run", label="x",
                                   mechanism=stray))
