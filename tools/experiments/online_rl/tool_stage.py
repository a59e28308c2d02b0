"""Chapter PT-AGENTIC-RL's stage: the lab model learns to call the calculator (see `tool_policy`).

One write-once record (`tool_rl`): the settings, the greedy evaluation on held-out tasks before and
after (share of episodes calling the calculator, share answered correctly) and every step's sampled
share, mean reward and loss; status ok or failed. Library code never prints: progress goes to `log`.
"""

from __future__ import annotations

import time
from typing import Callable

from tools.errors import ConfigError
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.tool_policy import ToolSettings, run_tool_rl

SCHEMA = "agentic-tool-rl/v1"
STAGE = "tool_rl"
MODEL = "lab"


def run_seed(seed: int, overrides: dict | None = None, *, log: Callable | None = None) -> dict:
    """One run from fresh lab weights; the body of its record."""
    settings = ToolSettings(seed=seed, **(overrides or {}))
    model, tokenizer, identity = load_quietly(MODEL)
    body = {"model": identity, "settings": settings.public()}
    started = time.perf_counter()
    try:
        result = run_tool_rl(model, tokenizer, settings, log=log)
    except (RuntimeError, ConfigError) as error:
        return {**body, "status": "failed", "error": str(error).splitlines()[0]}
    return {**body, "status": "ok", "error": None, **result, "seconds": time.perf_counter() - started}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: one seed (the plan's first, default 0), one record."""
    sink.require_new([STAGE])
    seed = plan.seeds[0] if plan.seeds else 0
    if not plan.writes:
        if log:
            log(f"would train {MODEL} to use the calculator: {ToolSettings(seed=seed).public()}")
        return
    sink.save_record(STAGE, run_seed(seed, dict(plan.options), log=log), schema_version=SCHEMA)
