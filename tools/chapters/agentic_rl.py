"""What the PT-AGENTIC-RL notebook (environment trajectories and reward attribution) runs around its
three exercises.

The learner writes the mechanism: the environment step, the trajectory assembly with its loss mask,
and the terminal reward's attribution to the model turns. This module holds the scripted episodes
and figures of Steps 1-3, and the interface check: the learner's step function behind gymnasium's
`Env` interface (`tools.experiments.online_rl.tool_env.CalculatorEnv`), checked by gymnasium's own
environment checker and replayed against scripted policies. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.core.environment import installed_version
from tools.experiments.online_rl.tool_env import CalculatorEnv, check_with_gymnasium

CHAPTER_ID = "PT-AGENTIC-RL"
INTERFACE_STAGE = "interface_check"
INTERFACE_TASKS = [(12, "+", 30), (81, "-", 47), (23, "*", 4), (95, "//", 7)]
"""The tasks the checked environment draws from on reset (a op b)."""
MAX_TURNS = 3
MEASUREMENT_NOTE = ("interface check of the learner's environment step with gymnasium's environment checker and "
                    "scripted episodes; no model; not a GPU measurement")


def scripted_actions(policy: str, task: tuple[int, str, int]) -> list[str]:
    """The actions a scripted policy takes on `task`: it calls the tool, guesses, or rambles."""
    a, op, b = task
    if policy == "tool_user":
        return [f"CALC {a} {op} {b}", "ANSWER {result}"]
    if policy == "guesser":
        return [f"ANSWER {a + b + 1}"]
    if policy == "rambler":
        return ["Let me think about it.", "The answer is probably big.", "Hmm."]
    raise ValueError(f"unknown scripted policy {policy!r}")


def play_episode(step_fn: Callable, task: tuple[int, str, int], policy: str, max_turns: int = MAX_TURNS) -> list[dict]:
    """One episode of a scripted policy through `step_fn`; each step's action and result.

    The tool user answers with the number its calculator call returned, as a model reading the
    observation would."""
    a, op, b = task
    state = {"a": a, "op": op, "b": b, "turn": 0, "max_turns": max_turns, "done": False}
    steps, last_result = [], None
    for action in scripted_actions(policy, task):
        if state["done"]:
            break
        if "{result}" in action:
            action = action.format(result=last_result)
        result = step_fn(dict(state), action)
        if result["observation"].startswith("RESULT "):
            last_result = result["observation"].split(" ", 1)[1]
        steps.append({"action": action, **{key: result[key] for key in ("observation", "reward", "terminated",
                                                                       "truncated", "kind")}})
        state = result["state"]
    return steps


def draw_episodes(episodes: Mapping[str, Sequence[dict]]):
    """Figure: one row per scripted episode, a box per turn (action above, observation below)."""
    import matplotlib.pyplot as plt

    colors = {"calc": "#9ecae1", "answer": "#a1d99b", "invalid": "#fdae6b"}
    fig, ax = plt.subplots(figsize=(12, 1.4 * len(episodes) + 0.6))
    for row, (name, steps) in enumerate(episodes.items()):
        y = -row * 1.4
        ax.text(-0.1, y + 0.5, name, ha="right", va="center", fontsize=9)
        for column, step in enumerate(steps):
            ax.add_patch(plt.Rectangle((column * 3.2, y), 3.0, 1.0, color=colors[step["kind"]]))
            ax.text(column * 3.2 + 1.5, y + 0.68, step["action"][:28], ha="center", va="center", fontsize=7)
            ax.text(column * 3.2 + 1.5, y + 0.3, "-> " + step["observation"][:26], ha="center", va="center",
                    fontsize=7, style="italic")
        last = steps[-1]
        end = ("terminated" if last["terminated"] else "truncated" if last["truncated"] else "running")
        ax.text(len(steps) * 3.2 + 0.1, y + 0.5, f"{end}, reward {last['reward']:g}", va="center", fontsize=8)
    ax.set_xlim(-2.5, 3.2 * MAX_TURNS + 3.5)
    ax.set_ylim(-1.4 * (len(episodes) - 1) - 0.2, 1.2)
    ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in colors.values()]
    ax.legend(handles, list(colors), ncol=3, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=8)
    fig.tight_layout()
    return fig


def trajectory_segments(tokenizer, texts: Sequence[tuple[str, str]]) -> list[dict]:
    """`[(source, text), ...]` -> the segments assemble_trajectory reads, tokenised with `tokenizer`."""
    return [{"source": source, "token_ids": list(tokenizer(text, add_special_tokens=False)["input_ids"])}
            for source, text in texts]


def draw_trajectory(tokens: Sequence[str], loss_mask: Sequence[int], sources: Sequence[str], per_row: int = 16):
    """Figure: every token of a trajectory, coloured by who wrote it; a thick frame where it enters the loss."""
    import math

    import matplotlib.pyplot as plt

    colors = {"prompt": "#d9d9d9", "model": "#74c476", "env": "#fdd0a2"}
    rows = math.ceil(len(tokens) / per_row)
    fig, ax = plt.subplots(figsize=(13, 0.7 * rows + 1.2))
    for position, (token, in_loss, source) in enumerate(zip(tokens, loss_mask, sources)):
        row, column = divmod(position, per_row)
        ax.add_patch(plt.Rectangle((column, -row), 0.95, 0.8, facecolor=colors[source],
                                   edgecolor="black" if in_loss else "none", linewidth=1.5))
        ax.text(column + 0.47, -row + 0.4, token.replace("\n", "\\n")[:7], ha="center", va="center", fontsize=7)
    ax.set_xlim(0, per_row)
    ax.set_ylim(-rows + 0.9, 0.9)
    ax.axis("off")
    handles = [plt.Rectangle((0, 0), 1, 1, color=color) for color in colors.values()]
    ax.legend(handles, [f"{name} tokens" for name in colors], ncol=3, loc="upper center",
              bbox_to_anchor=(0.5, -0.02), fontsize=8)
    ax.set_title("Who wrote each token (framed = in the loss)")
    fig.tight_layout()
    return fig


def discounted_credit(turns: int, gamma: float, reward: float = 1.0) -> list[float]:
    """R * gamma**(K-1-k) for each model turn k of an episode with K model turns."""
    return [reward * gamma ** (turns - 1 - turn) for turn in range(turns)]


def draw_turn_credit(turns: int = 4, gammas: Sequence[float] = (1.0, 0.9, 0.5)):
    """Figure: the credit each model turn receives from a terminal reward of 1, per discount."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(gammas)
    for index, gamma in enumerate(gammas):
        ax.bar([turn + index * width for turn in range(turns)], discounted_credit(turns, gamma), width=width,
               label=f"gamma = {gamma}")
    ax.set_xticks([turn + width * (len(gammas) - 1) / 2 for turn in range(turns)],
                  [f"model turn {turn}" for turn in range(turns)])
    ax.set_ylabel("credit from a terminal reward of 1")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def interface_check(step_fn: Callable) -> dict:
    """gymnasium's environment checker on `CalculatorEnv(step_fn=...)`, then scripted episodes through it.

    `passed` only when the checker neither raised nor warned (it warns, for example, when an
    observation falls outside the declared space); the error or warnings are kept as data, and the
    episodes run only when the checker did not raise."""
    env = CalculatorEnv(INTERFACE_TASKS, MAX_TURNS, step_fn=step_fn)
    result = {"library": "gymnasium", "version": installed_version("gymnasium"),
              "checker": "gymnasium.utils.env_checker.check_env (skip_render_check=True)", "error": None,
              "warnings": [], "reset_observation": None, "answer_step": None, "episodes": {}}
    try:
        result["warnings"] = check_with_gymnasium(env)
    except Exception as failure:  # the checker raises on a failed check: that is the result being recorded
        result["error"] = f"{type(failure).__name__}: {failure}"
        return {**result, "passed": False}
    observation, info = env.reset(seed=7)
    result["reset_observation"] = observation
    result["answer_step"] = list(env.step("ANSWER " + str(info["answer"]))[:4])
    result["episodes"] = {policy: play_episode(step_fn, INTERFACE_TASKS[0], policy)
                          for policy in ("tool_user", "guesser", "rambler")}
    return {**result, "passed": not result["warnings"]}


def interface_lines(check: Mapping) -> list[str]:
    verdict = "passed" if check["passed"] else "FAILED"
    lines = [f"{check['library']} {check['version']} {check['checker']}: {verdict}, {len(check['warnings'])} warning(s)"]
    lines += [f"  error: {check['error']}"] if check.get("error") else []
    lines += [f"  warning: {warning}" for warning in check["warnings"]]
    if check["reset_observation"] is None:
        return lines
    lines.append(f"  reset(seed=7): {check['reset_observation']!r}; step(correct answer) -> {check['answer_step']}")
    for name, steps in check["episodes"].items():
        last = steps[-1]
        lines.append(f"  {name:<9} {len(steps)} turn(s), terminated {last['terminated']}, truncated "
                     f"{last['truncated']}, reward {last['reward']:g}")
    return lines


def interface_record_body(check: Mapping) -> dict:
    return {"measurement": MEASUREMENT_NOTE,
            "inputs": {"tasks": [list(task) for task in INTERFACE_TASKS], "max_turns": MAX_TURNS, "reset_seed": 7},
            "framework": {key: check[key] for key in ("library", "version", "checker")},
            "results": {key: check[key] for key in ("passed", "error", "warnings", "reset_observation", "answer_step",
                                                    "episodes")}}


def interface_summary(record: Mapping) -> list[str]:
    lines = [f"evidence level {record.get('evidence_level')}: an interface check, not a GPU measurement"]
    return lines + interface_lines({**record["framework"], **record["results"]})


# ---------------------------------------------------------------------------
# Step 5.2: the lab model learns to call the calculator (experiment tool_use_rl)
# ---------------------------------------------------------------------------

TOOL_EXPERIMENT = "tool_use_rl"
TOOL_VARIANTS = ("task_reward", "shuffled_reward")
TOOL_STAGES = tuple(f"tool_rl_{variant}" for variant in TOOL_VARIANTS)


def tool_lines(record: Mapping) -> list[str]:
    """Lines that show a tool_rl_<variant> record: greedy held-out shares before and after, the regression
    check on the lab task, and the sampled share per step."""
    if record.get("status") != "ok":
        return [f"{record.get('variant')}: status {record.get('status')}: {record.get('error')}"]
    settings, before, after = record["settings"], record["before"], record["after"]
    return [f"{record['variant']} (reward {settings['reward']}), seed {settings['seed']}, {settings['steps']} steps x "
            f"{settings['episodes_per_step']} episodes, lr {settings['learning_rate']:g}, T {settings['temperature']:g}, "
            f"gamma {settings['gamma']}: on {before['episodes']} held-out tasks (greedy) episodes calling the calculator "
            f"{before['calculator_share']:.3f} -> {after['calculator_share']:.3f}, answered correctly "
            f"{before['success']:.3f} -> {after['success']:.3f}",
            f"  regression check, lab task held-out exact match (no tool, {before['lab_task']['problems']} problems): "
            f"{before['lab_task']['exact_match']:.3f} -> {after['lab_task']['exact_match']:.3f}",
            "  sampled episodes calling the calculator per step "
            + " ".join(f"{step['calculator_share']:.2f}" for step in record["steps"]),
            "  successful turns given a negative advantage per step "
            + " ".join(str(step["successful_turns_with_negative_advantage"]) for step in record["steps"])]


def tool_effects(records: Sequence[Mapping]) -> dict | None:
    """This run's differences (one seed): after - before for the task reward, and task - shuffled after
    training, for the calculator share, success and the lab task; None unless both variants are ok."""
    by_variant = {record.get("variant"): record for record in records if record.get("status") == "ok"}
    if set(by_variant) != set(TOOL_VARIANTS):
        return None
    task, control = by_variant["task_reward"], by_variant["shuffled_reward"]
    out = {"seed": task["settings"]["seed"]}
    for key in ("calculator_share", "success"):
        out[key] = {"before": task["before"][key], "task_reward": task["after"][key],
                    "shuffled_reward": control["after"][key]}
    out["lab_task"] = {"before": task["before"]["lab_task"]["exact_match"],
                       "task_reward": task["after"]["lab_task"]["exact_match"],
                       "shuffled_reward": control["after"]["lab_task"]["exact_match"]}
    return out


def tool_effect_sentences(records: Sequence[Mapping]) -> list[str]:
    """The page's sentences about this run's effect, the control and the regression check."""
    effects = tool_effects(records)
    if effects is None:
        return [lesson_text.text("agentic_rl.effect_missing")]
    lines = []
    for key, name in (("calculator_share", "agentic_rl.metric_calculator"), ("success", "agentic_rl.metric_success")):
        item = effects[key]
        lines.append(lesson_text.text("agentic_rl.effect_one_seed", metric=lesson_text.text(name), seed=effects["seed"],
                                      before=item["before"], task=item["task_reward"], control=item["shuffled_reward"],
                                      rise=item["task_reward"] - item["before"],
                                      over_control=item["task_reward"] - item["shuffled_reward"]))
    lab = effects["lab_task"]
    lines.append(lesson_text.text("agentic_rl.regression_one_seed", before=lab["before"], task=lab["task_reward"],
                                  control=lab["shuffled_reward"]))
    return lines


def draw_tool_learning(records: Sequence[Mapping]):
    """Figure: per step the sampled share of episodes calling the calculator of each variant, and the greedy
    held-out shares and the lab task's exact match before and after training."""
    import matplotlib.pyplot as plt

    shown = [record for record in records if record.get("status") == "ok"]
    fig, (steps_ax, eval_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    for record in shown:
        steps = record["steps"]
        steps_ax.plot([step["step"] for step in steps], [step["calculator_share"] for step in steps], marker="o",
                      label=f"{record['variant']}: episodes calling CALC")
        steps_ax.plot([step["step"] for step in steps], [step["mean_reward"] for step in steps], marker="s", ls=":",
                      label=f"{record['variant']}: mean reward")
    steps_ax.set_ylim(0, 1.05)
    steps_ax.set(xlabel="REINFORCE step", ylabel="share of sampled episodes", title="Sampled episodes while training")
    steps_ax.grid(alpha=0.3)
    steps_ax.legend(fontsize=7)
    names = ["calls the calculator", "answers correctly", "lab task (no tool)"]
    values = {"before": [], **{record["variant"]: [] for record in shown}}
    if shown:
        first = shown[0]["before"]
        values["before"] = [first["calculator_share"], first["success"], first["lab_task"]["exact_match"]]
    for record in shown:
        after = record["after"]
        values[record["variant"]] = [after["calculator_share"], after["success"], after["lab_task"]["exact_match"]]
    width = 0.8 / max(len(values), 1)
    for index, (label, heights) in enumerate(values.items()):
        if heights:
            eval_ax.bar([p + (index - (len(values) - 1) / 2) * width for p in range(3)], heights, width=width,
                        label=label if label == "before" else f"after {label}")
    eval_ax.set_xticks(range(3), names)
    eval_ax.set_ylim(0, 1.05)
    eval_ax.set(ylabel="held-out share (greedy)", title="Held-out tasks, and the regression check")
    eval_ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
