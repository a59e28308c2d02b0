"""Chapter PT-AGENTIC-RL's stage: the lab model learns to call the calculator (see `tool_policy`).

Two variants, each from fresh lab weights with the same seed, tasks and step budget: `task_reward` (the
environment's reward) and `shuffled_reward` (the negative control: each batch's rewards permuted among
its episodes). One write-once record per variant (`tool_rl_<variant>`): the settings, the functions that
ran (`mechanism`: the learner's or the reference's env_step, assemble_trajectory and attribute_reward),
the greedy evaluation on held-out tasks before and after (share of episodes calling the calculator,
share answered correctly, and the lab task's exact match as a regression check) and every step's
sampled share, mean reward and loss; status ok or failed. Library code never prints: progress goes to `log`.
"""

from __future__ import annotations

import time
from typing import Callable

from tools.errors import ConfigError
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.tool_policy import PACKAGE_MECHANISM, ToolMechanism, ToolSettings, run_tool_rl

SCHEMA = "agentic-tool-rl/v2"
VARIANTS = {"task_reward": "task", "shuffled_reward": "shuffled"}
"""Variant -> the reward the credit reads (`ToolSettings.reward`)."""
MODEL = "lab"
MECHANISM_NAMES = ("env_step", "assemble_trajectory", "attribute_reward")


def stage_name(variant: str) -> str:
    return f"tool_rl_{variant}"


def package_functions() -> dict[str, Callable]:
    """The package's own copies of the chapter's functions (what a run without a notebook uses)."""
    return {name: getattr(PACKAGE_MECHANISM, name) for name in MECHANISM_NAMES}


def mechanism_of(plan_mechanism) -> ToolMechanism:
    """The functions a plan's mechanism passes, the package's where it passes none."""
    defaults = package_functions()
    return ToolMechanism(**{name: plan_mechanism.function(name, defaults[name]) for name in MECHANISM_NAMES})


def run_seed(seed: int, variant: str = "task_reward", overrides: dict | None = None,
             mechanism: ToolMechanism = PACKAGE_MECHANISM, *, log: Callable | None = None) -> dict:
    """One variant from fresh lab weights; the body of its record."""
    if variant not in VARIANTS:
        raise ConfigError(f"unknown variant {variant!r}; choose one of {list(VARIANTS)}")
    settings = ToolSettings(seed=seed, reward=VARIANTS[variant], **(overrides or {}))
    model, tokenizer, identity = load_quietly(MODEL)
    body = {"variant": variant, "model": identity, "settings": settings.public()}
    started = time.perf_counter()
    try:
        result = run_tool_rl(model, tokenizer, settings, mechanism, log=log)
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as error:  # a learner's function may raise anything
        return {**body, "status": "failed", "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
    return {**body, "status": "ok", "error": None, **result, "seconds": time.perf_counter() - started}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: the plan's variants (default both) on its first seed (default 0), one record each."""
    variants = tuple(plan.variants) or tuple(VARIANTS)
    sink.require_new([stage_name(variant) for variant in variants])
    seed = plan.seeds[0] if plan.seeds else 0
    say = log or (lambda _: None)
    functions = plan.mechanism.describe(package_functions())
    if not plan.writes:
        say(f"would train {MODEL} to use the calculator, variants {list(variants)}: {ToolSettings(seed=seed).public()}; "
            f"functions {plan.mechanism.sources_line(package_functions())}")
        return
    mechanism = mechanism_of(plan.mechanism)
    for variant in variants:
        say(f"variant {variant}")
        body = run_seed(seed, variant, dict(plan.options), mechanism, log=say)
        sink.save_record(stage_name(variant), {**body, "mechanism": functions}, schema_version=SCHEMA)
