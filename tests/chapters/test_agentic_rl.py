"""PT-AGENTIC-RL's library: the scripted episodes, figures and the gymnasium interface check, and the
online_rl environment and trajectory functions tied to the notebook's reference on generated inputs."""

from __future__ import annotations

import json
import math

import matplotlib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chapter_factory import REPO_ROOT
from tools.chapters import agentic_rl as chapter
from tools.core.catalog import find_chapter
from tools.course.cells import read_notebook
from tools.course.grader.build import reference_source
from tools.course.grader.differential import difference
from tools.experiments.online_rl import tool_env, trajectories

matplotlib.use("Agg")

EXERCISES = ("env_step", "assemble_trajectory", "attribute_reward")
SEARCH = settings(max_examples=200, derandomize=True, database=None, deadline=None)


@pytest.fixture(scope="module")
def reference():
    notebook = read_notebook(find_chapter("PT-AGENTIC-RL", REPO_ROOT).notebook_path(REPO_ROOT))
    namespace = {"math": math}
    for name in EXERCISES:
        exec(reference_source(notebook, name), namespace)
    return {name: namespace[name] for name in EXERCISES}


def outcome(function, *args):
    try:
        return "value", function(*args)
    except ValueError as error:
        return "raised", type(error).__name__


def same(left, right) -> bool:
    return left[0] == right[0] and (left[0] == "raised" or difference(left[1], right[1]) is None)


def test_scripted_episodes_end_as_the_prose_says(reference):
    episodes = {policy: chapter.play_episode(reference["env_step"], (12, "+", 30), policy)
                for policy in ("tool_user", "guesser", "rambler")}
    assert [step["kind"] for step in episodes["tool_user"]] == ["calc", "answer"]
    assert episodes["tool_user"][-1]["reward"] == 1.0 and episodes["guesser"][-1]["reward"] == 0.0
    assert episodes["rambler"][-1]["truncated"] and not episodes["rambler"][-1]["terminated"]
    assert chapter.discounted_credit(3, 0.5) == [0.25, 0.5, 1.0]
    with pytest.raises(ValueError):
        chapter.scripted_actions("teacher", (1, "+", 1))


def test_figures_draw(reference):
    episodes = {"tool_user": chapter.play_episode(reference["env_step"], (12, "+", 30), "tool_user")}
    for figure in (chapter.draw_episodes(episodes), chapter.draw_turn_credit(),
                   chapter.draw_trajectory(["a", "b", "\n"], [0, 1, 0], ["prompt", "model", "env"])):
        assert figure.axes
        matplotlib.pyplot.close(figure)


def test_interface_check_passes_the_reference_and_fails_a_broken_step(reference):
    check = chapter.interface_check(reference["env_step"])
    assert check["passed"] and check["version"] == "1.4.0" and check["answer_step"] == ["END", 1.0, True, False]
    body = chapter.interface_record_body(check)
    lines = "\n".join(chapter.interface_summary({"evidence_level": "cpu_smoke", **json.loads(json.dumps(body))}))
    assert "gymnasium 1.4.0" in lines and "rambler" in lines

    def tab_in_observation(state, action):
        result = reference["env_step"](state, action)
        return {**result, "observation": result["observation"] + "\t"}

    outside = chapter.interface_check(tab_in_observation)
    assert not outside["passed"] and any("observation space" in warning for warning in outside["warnings"])

    def tuple_result(state, action):
        result = reference["env_step"](state, action)
        return (result["observation"], result["reward"])

    broken = chapter.interface_check(tuple_result)
    assert not broken["passed"] and broken["error"] and "FAILED" in chapter.interface_lines(broken)[0]


def test_calculator_env_refuses_bad_settings_and_steps_before_reset():
    with pytest.raises(ValueError):
        tool_env.CalculatorEnv([(1, "//", 0)])
    with pytest.raises(ValueError):
        tool_env.CalculatorEnv([(1, "+", 1)], max_turns=0)
    with pytest.raises(ValueError):
        tool_env.CalculatorEnv([(1, "+", 1)]).step("ANSWER 2")


_actions = st.one_of(st.sampled_from(["CALC 1 + 2", "ANSWER 3", "calc 1 + 1", " ANSWER 3\n", "CALC 4 // 0", "x"]),
                     st.text(alphabet="CALNSWER0123456789 +-*/\n", max_size=12), st.sampled_from([None, 3]))
_states = st.fixed_dictionaries({"a": st.sampled_from([1, -7, 9, True]), "op": st.sampled_from(["+", "-", "*", "//", "/"]),
                                 "b": st.sampled_from([2, 3, 1.0]), "turn": st.integers(-1, 3),
                                 "max_turns": st.integers(0, 3), "done": st.sampled_from([False, False, True])})


@SEARCH
@given(_states, _actions)
def test_package_env_step_agrees_with_the_notebook(reference, state, action):
    assert same(outcome(tool_env.env_step, state, action), outcome(reference["env_step"], state, action))


_segments = st.lists(st.fixed_dictionaries({"source": st.sampled_from(["prompt", "model", "env", "tool"]),
                                            "token_ids": st.lists(st.integers(-1, 5), max_size=3)}), max_size=5)


@SEARCH
@given(_segments, st.lists(st.integers(-2, 3), max_size=6), st.sampled_from([1.0, 0.5, 0, 2]),
       st.sampled_from([0.9, 1, 0.0, 1.5]))
def test_package_trajectory_functions_agree_with_the_notebook(reference, segments, turn_ids, reward, gamma):
    assert same(outcome(trajectories.assemble_trajectory, segments), outcome(reference["assemble_trajectory"], segments))
    assert same(outcome(trajectories.attribute_reward, turn_ids, reward, gamma),
                outcome(reference["attribute_reward"], turn_ids, reward, gamma))


EFFECT_SEEDS = (0, 1, 2, 3, 4)
MARGIN = 0.15
"""Calibrated under both numerics profiles (lr 2e-4, 10 steps x 16 episodes, 128 held-out tasks): success after
minus before 0.39-0.46 (pinned AVX2) and 0.31-0.38 (generic); task reward minus shuffled reward after training
0.29-0.48 and 0.33-0.43; the spread of those per-seed differences is below 0.1."""


@pytest.fixture(scope="module")
def tool_runs(lab_models):
    """Both variants of cpu_smoke's settings on every effect seed, each from the same lab weights."""
    import torch

    from tools.experiments.online_rl.tool_stage import VARIANTS, run_seed

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = {}
        for seed in EFFECT_SEEDS:
            for variant in VARIANTS:
                record = run_seed(seed, variant)
                assert record["status"] == "ok", record.get("error")
                runs[variant, seed] = record
        return runs
    finally:
        torch.set_num_threads(before)


@pytest.mark.effect
@pytest.mark.slow
def test_the_task_reward_teaches_the_calculator_and_shuffled_rewards_do_not(tool_runs):
    """Step 5.2's effect, paired over seeds: on the held-out tasks the greedy policy calls the calculator and
    answers correctly more often after training than before (the baseline row), and more often than after the
    same training on shuffled rewards (the negative control), each interval beyond the margin. With the
    leave-one-out baseline of the same quantity, no turn of a successful episode gets a negative advantage.
    The regression check the page reports holds too: the lab task's exact match (sums without the tool) falls."""
    from tools.core import effects

    for key in ("calculator_share", "success"):
        after = {seed: tool_runs["task_reward", seed]["after"][key] for seed in EFFECT_SEEDS}
        before = {seed: tool_runs["task_reward", seed]["before"][key] for seed in EFFECT_SEEDS}
        control = {seed: tool_runs["shuffled_reward", seed]["after"][key] for seed in EFFECT_SEEDS}
        rise, over_control = effects.paired_effect(after, before), effects.paired_effect(after, control)
        assert effects.holds(rise, MARGIN), (key, effects.describe(rise), rise["differences"])
        assert effects.holds(over_control, MARGIN), (key, effects.describe(over_control), over_control["differences"])
    for (variant, seed), record in tool_runs.items():
        assert len(record["steps"]) == record["settings"]["steps"] and record["after"]["episodes"] == 128
        assert record["before"]["lab_task"]["problems"] == 810
        if variant == "task_reward":
            assert all(step["successful_turns_with_negative_advantage"] == 0 for step in record["steps"])
    lab_before = {seed: tool_runs["task_reward", seed]["before"]["lab_task"]["exact_match"] for seed in EFFECT_SEEDS}
    lab_after = {seed: tool_runs["task_reward", seed]["after"]["lab_task"]["exact_match"] for seed in EFFECT_SEEDS}
    regression = effects.paired_effect(lab_before, lab_after, metric="lab task exact match lost")
    assert effects.holds(regression, 0.0), ("the page reports a measured loss of the addition skill",
                                            effects.describe(regression))


@pytest.mark.effect
@pytest.mark.slow
def test_a_planted_environment_that_pays_every_answer_changes_step5(lab_models, one_cpu_thread, tmp_path):
    """Step 5 runs the learner's functions: the notebook's run(plan), once with the course's functions and once
    with a learner's env_step that rewards any well-formed ANSWER (the mutant every_answer_rewarded). The
    planted run's record says env_step was the learner's; the policy it trains no longer learns to answer the
    held-out tasks (judged by the course's environment), where the course's run does."""
    from planted_functions import learner_mechanism

    from tools.experiments.contract import Limits, Mechanism, Plan, run

    rises = {}
    for name, mechanism in (("course", Mechanism()),
                            ("planted", learner_mechanism("PT-AGENTIC-RL", "every_answer_rewarded", tmp_path))):
        plan = Plan(experiment=chapter.TOOL_EXPERIMENT, chapter="PT-AGENTIC-RL", run_mode="cpu_smoke",
                    label=f"planted-{name}", results_dir=tmp_path / name, variants=("task_reward",),
                    limits=Limits(cpu_threads=1), mechanism=mechanism)
        (record,) = [ref.load() for ref in run(plan)]
        assert record["status"] == "ok", record.get("error")
        assert record["mechanism"]["env_step"]["source"] == ("package" if name == "course" else "learner")
        assert record["mechanism"]["attribute_reward"]["source"] == "package"
        rises[name] = record["after"]["success"] - record["before"]["success"]
    assert rises["course"] >= 0.2 and rises["planted"] <= 0.1 and rises["course"] - rises["planted"] >= 0.2, rises


LEARNER_ATTRIBUTE_REWARD = '''def attribute_reward(turn_ids, terminal_reward, gamma=1.0, baseline=0.0):
    """A learner's version, written differently: the turns counted first, the returns built from the end."""
    def finite(value):
        return type(value) in (int, float) and math.isfinite(value)

    if type(turn_ids) is not list or any(type(turn) is not int for turn in turn_ids):
        raise ValueError("turn_ids must be a list of ints")
    turns, last = [], None
    for turn in turn_ids:
        if turn < -1:
            raise ValueError(f"turn id {turn} is below -1")
        if turn >= 0 and turn != last:
            if turn != len(turns):
                raise ValueError("the model turns must be contiguous runs numbered 0, 1, 2, ...")
            turns.append(turn)
        last = turn
    if not turns:
        raise ValueError("there is no model turn to credit")
    if not (finite(terminal_reward) and finite(baseline)):
        raise ValueError("the reward and the baseline must be finite numbers")
    if not finite(gamma) or not (0 < gamma <= 1):
        raise ValueError("gamma must lie in (0, 1]")
    returns = [0.0] * len(turns)
    value = float(terminal_reward)
    for turn in reversed(turns):
        returns[turn] = value
        value *= gamma
    gains = [credit - baseline for credit in returns]
    return {"turn_returns": returns, "turn_advantages": [float(gain) for gain in gains],
            "token_advantages": [0.0 if turn < 0 else float(gains[turn]) for turn in turn_ids]}'''


@pytest.mark.integration
def test_the_notebook_trains_with_the_learners_own_function(tmp_path):
    """A copy of the chapter whose TODO 3 holds a learner's correct, differently written attribute_reward,
    executed by papermill in cpu_smoke as a learner would run it: its records say Step 5 ran the learner's
    attribute_reward and the reference env_step and assemble_trajectory, and the page says so."""
    import papermill

    from tools.course.cells import read_notebook, write_notebook
    from tools.course.runs.runner import KERNEL_ARGUMENTS, unexpected_error

    source = find_chapter("PT-AGENTIC-RL", REPO_ROOT).notebook_path(REPO_ROOT)
    notebook = read_notebook(source)
    (cell,) = [cell for cell in notebook.cells if cell.get("metadata", {}).get("course", {}).get("exercise")
               == "attribute_reward" and "exercise" in cell.metadata.get("tags", [])]
    cell.source = LEARNER_ATTRIBUTE_REWARD
    copy, executed, results = tmp_path / source.name, tmp_path / "executed.ipynb", tmp_path / "results"
    write_notebook(notebook, copy)
    try:
        papermill.execute_notebook(str(copy), str(executed), cwd=str(source.parent), progress_bar=False,
                                   log_output=False, extra_arguments=KERNEL_ARGUMENTS,
                                   parameters={"RUN_MODE": "cpu_smoke", "RUN_LABEL": "learner-function",
                                               "RESULTS_DIR": str(results)})
    except papermill.PapermillExecutionError:
        pass  # the visible tests of the two stubbed TODOs fail, as they do for a learner; any other error is not
    assert unexpected_error(executed) is None, unexpected_error(executed)
    for variant in chapter.TOOL_VARIANTS:
        path = results / "pt-agentic-rl" / f"pt-agentic-rl_tool_rl_{variant}_learner-function.json"
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["status"] == "ok", record.get("error")
        assert {name: item["source"] for name, item in record["mechanism"].items()} == {
            "attribute_reward": "learner", "env_step": "reference", "assemble_trajectory": "reference"}
    outputs = "".join(output.get("text", "") for cell in read_notebook(executed).cells if cell.cell_type == "code"
                      for output in cell.get("outputs", []))
    assert "Step 5 will run your attribute_reward" in outputs and "你自己写的 `attribute_reward`" in outputs
