"""What every preference stage run shares: its settings per run mode, the model and its frozen reference,
the arithmetic task splits, and the measurement around one variant (time, peak memory from
`torch.cuda.max_memory_allocated` and the 0.25 s sampler, an out-of-memory error as a status).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from typing import Any

from tools.data.arithmetic import ArithmeticTask, generate_tasks
from tools.errors import ConfigError
from tools.measure.sampler import ResourceSampler, peaks
from tools.measure.training import free_device_memory, out_of_memory_error
from tools.models.loading import load_causal_lm, model_identity, resolve_model

MIB, GIB = 2 ** 20, 2 ** 30


COMMON_OPTIONS = ("progress",)
"""Options every experiment's command line carries (tools.experiments.cli); not settings of a stage."""


def settings_for(plan, defaults: Mapping[str, Mapping[str, Any]]) -> dict:
    """The run mode's defaults (dry_run describes real_gpu), overridden by the plan's options of the same names
    and by its first seed; an option the experiment does not know is refused."""
    base = dict(defaults["real_gpu" if plan.run_mode == "dry_run" else plan.run_mode])
    options = {key: value for key, value in plan.options.items() if key not in COMMON_OPTIONS}
    unknown = sorted(set(options) - set(base))
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown}; this experiment knows {sorted(base)}")
    settings = {**base, **{key: value for key, value in options.items() if value is not None}}
    if plan.seeds:
        settings["seed"] = plan.seeds[0]
    return settings


def task_splits(train_seed: int, train_per_operation: int, eval_seed: int, eval_per_operation: int) -> dict:
    """Training and held-out tasks from two generator seeds; a held-out task whose prompt is also a training
    prompt is dropped."""
    train = generate_tasks(seed=train_seed, per_operation=train_per_operation)
    prompts = {task.prompt for task in train}
    held = [task for task in generate_tasks(seed=eval_seed, per_operation=eval_per_operation)
            if task.prompt not in prompts]
    if not held:
        raise ConfigError("every held-out task is also a training task; choose another eval seed")
    return {"train": train, "held_out": held}


def lab_task_splits(train_seed: int, train_problems: int, eval_seed: int, eval_problems: int,
                    task: str = "add") -> dict:
    """Training problems from the lab task's train split and held-out problems from its heldout split
    (disjoint by content hash), as arithmetic tasks with the same prompt and label."""
    from tools.data.arithmetic import make_task
    from tools.data.lab_tasks import sample_problems

    def as_tasks(problems):
        return [make_task(f"{problem.task}-{problem.a}-{problem.b}", problem.operation, problem.a, problem.b)
                for problem in problems]

    return {"train": as_tasks(sample_problems(task, "train", train_problems, train_seed)),
            "held_out": as_tasks(sample_problems(task, "heldout", eval_problems, eval_seed))}


def lab_task_slice(split: str, count: int, seed: int, *, answers: str = "any", task: str = "add") -> list:
    """`count` problems of one split of a lab task drawn with `seed`, as arithmetic tasks; `answers`
    "two_digit" keeps the problems whose answer is below 100, "three_digit" those at or above it."""
    import random

    from tools.data.arithmetic import make_task
    from tools.data.lab_tasks import problems

    keep = {"any": lambda label: True, "two_digit": lambda label: label < 100,
            "three_digit": lambda label: label >= 100}
    if answers not in keep:
        raise ConfigError(f"answers must be one of {', '.join(keep)}, got {answers!r}")
    pool = [problem for problem in problems(task, split) if keep[answers](problem.label)]
    if not 1 <= count <= len(pool):
        raise ConfigError(f"count must lie in 1..{len(pool)} for {task}/{split}/{answers}, got {count!r}")
    return [make_task(f"{problem.task}-{problem.a}-{problem.b}", problem.operation, problem.a, problem.b)
            for problem in random.Random(seed).sample(pool, count)]


def manifest(tasks: list[ArithmeticTask]) -> list[dict]:
    return [{"task_id": task.task_id, "prompt": task.prompt, "label": task.label} for task in tasks]


def load_model(plan):
    """`(model, tokenizer, identity)` of the plan's model on its device (float32 on the CPU, bfloat16 on CUDA);
    loading bars only with the `progress` option."""
    from transformers.utils import logging as transformers_logging

    folder = resolve_model(plan.model, plan.model_source, cache_dir=plan.model_cache)
    dtype = "float32" if plan.device == "cpu" else "bfloat16"
    shown = transformers_logging.is_progress_bar_enabled()
    if not plan.option("progress", False):
        transformers_logging.disable_progress_bar()
    try:
        model, tokenizer = load_causal_lm(folder, dtype=dtype, device=plan.device)
    finally:
        if shown:
            transformers_logging.enable_progress_bar()
    model.eval()
    return model, tokenizer, {**model_identity(folder), "dtype": dtype, "device": plan.device}


def frozen_copy(model):
    """A copy of `model` that never trains: eval mode, no parameter requires a gradient."""
    reference = copy.deepcopy(model).eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


def trainable_copy(model):
    policy = copy.deepcopy(model)
    for parameter in policy.parameters():
        parameter.requires_grad_(True)
    return policy


def measured(work: Callable[[], dict], *, device: str) -> dict:
    """Run `work()` with the peak-memory counters and the sampler around it; an OOM becomes status `oom`,
    any other error status `failed` with its message (recorded, not hidden)."""
    import torch

    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    sampler = ResourceSampler(device="cuda" if cuda else "cpu")
    oom = out_of_memory_error(torch)
    started = time.perf_counter()
    body: dict[str, Any]
    with sampler:
        try:
            body = {"status": "ok", **work()}
        except oom as error:
            body = {"status": "oom", "error": str(error).strip().splitlines()[0] if str(error).strip() else "oom"}
        except Exception as error:  # recorded per variant: a failed variant is evidence too
            body = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / MIB if cuda else None
    if body["status"] != "ok":
        free_device_memory(torch)
    return {**body, "seconds": seconds, "peak_allocated_mib": peak,
            "sampled": {**peaks(sampler.snapshot()), **sampler.summary()},
            "comparable": {} if peak is None else {"peak_allocated_gib": peak * MIB / GIB}}
