"""Chapter PT-RLOO's stage: the gradient variance of the leave-one-out baseline, measured on the lab model.

For each seed, `draws` batches of `group_size` sampled answers to `prompts` lab problems (train split,
drawn with the seed) are scored by integer-answer-v1, and the REINFORCE gradient estimate is formed on
the same answers under five weightings (see `variance`): none (raw 0/1 rewards: only the correct
answers carry weight), leave-one-out, the self-inclusive group mean, the batch mean, and `wrong_only`
(a constant baseline of 1: only the wrong answers carry weight). Per seed the record keeps each one's
total variance and mean-gradient norm and the comparisons: (a) variance LOO / none; (b) variance of LOO
scaled to the group mean's size, ((n-1)/n)^2 var(LOO) / var(group mean); (c) variance LOO / batch mean;
(d) variance wrong_only / none, where the noise sits; (e) the group mean's mean gradient against LOO's
(cosine, norm ratio, expected (n-1)/n); and each baseline's projection on the no-baseline mean gradient
(the unbiased one; noisy, not a result). One write-once record (`baseline_variance`), all seeds in one
process on the same weights (nothing is trained); status ok or failed. Library code never prints:
progress goes to `log`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.online_rl.advantages import leave_one_out_advantages
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.variance import (gradient_variance, group_mean_advantages, mean_gradients,
                                                  no_baseline_advantages, wrong_only_advantages)
from tools.experiments.online_rl.verifier import verify_integer_answer

SCHEMA = "rloo-baseline-variance/v1"
STAGE = "baseline_variance"
MODEL = "lab"
SEEDS = (0, 1, 2)
BASELINES = ("no_baseline", "leave_one_out", "group_mean", "batch_mean", "wrong_only")


@dataclass(frozen=True)
class VarianceSettings:
    group_size: int = 4
    prompts: int = 8
    draws: int = 24
    max_new_tokens: int = 6
    temperature: float = 1.0

    def public(self) -> dict:
        return {**asdict(self), "task": lab_tasks.PRETRAINING_TASK, "split": "train",
                "verifier": "integer-answer-v1", "model": MODEL}


def measure_seed(model, tokenizer, seed: int, settings: VarianceSettings) -> dict:
    """One seed's variances and mean-gradient comparisons (module docstring)."""
    tasks = lab_tasks.sample_problems(lab_tasks.PRETRAINING_TASK, "train", settings.prompts, seed)
    result = gradient_variance(model, tokenizer, tasks, group_size=settings.group_size, draws=settings.draws,
                               max_new_tokens=settings.max_new_tokens, verify=verify_integer_answer,
                               leave_one_out=leave_one_out_advantages, temperature=settings.temperature, seed=seed,
                               baselines={"no_baseline": no_baseline_advantages, "group_mean": group_mean_advantages,
                                          "wrong_only": wrong_only_advantages},
                               keep_means=True)
    means = result.pop("mean_vectors")
    variance = {name: result["baselines"][name]["total_variance"] for name in BASELINES}
    shrink = (settings.group_size - 1) / settings.group_size

    def ratio(top: float, bottom: float) -> float | None:
        return top / bottom if bottom > 0 else None

    return {"seed": seed, **result,
            "loo_over_none": ratio(variance["leave_one_out"], variance["no_baseline"]),
            "wrong_over_right": ratio(variance["wrong_only"], variance["no_baseline"]),
            "loo_over_batch_mean": ratio(variance["leave_one_out"], variance["batch_mean"]),
            "loo_over_group_mean": ratio(variance["leave_one_out"], variance["group_mean"]),
            "matched_scale_ratio": ratio(shrink ** 2 * variance["leave_one_out"], variance["group_mean"]),
            "group_mean_vs_loo": mean_gradients(means["leave_one_out"], means["group_mean"]),
            "projection_on_no_baseline": {name: mean_gradients(means["no_baseline"], means[name])["projection"]
                                          for name in ("leave_one_out", "group_mean")},
            "expected_norm_ratio": shrink}


def measure(model, tokenizer, seeds: Sequence[int] = SEEDS, settings: VarianceSettings = VarianceSettings(), *,
            log: Callable | None = None) -> list[dict]:
    """`measure_seed` for every seed on the same weights (the measurement changes no weight)."""
    results = []
    for seed in seeds:
        results.append(measure_seed(model, tokenizer, seed, settings))
        if log:
            log(f"seed {seed}: variance LOO / none {results[-1]['loo_over_none']:.3f}, LOO / batch mean "
                f"{results[-1]['loo_over_batch_mean']:.3f}, matched-scale LOO / group mean "
                f"{results[-1]['matched_scale_ratio']:.4f}")
    return results


def run_seeds(seeds: Sequence[int], overrides: dict | None = None, *, log: Callable | None = None) -> dict:
    """The record body: settings, one entry per seed, status ok or failed."""
    settings = VarianceSettings(**(overrides or {}))
    model, tokenizer, identity = load_quietly(MODEL)
    body = {"model": identity, "settings": settings.public(), "seeds": list(seeds)}
    started = time.perf_counter()
    try:
        per_seed = measure(model, tokenizer, seeds, settings, log=log)
    except (RuntimeError, ConfigError) as error:
        return {**body, "status": "failed", "error": str(error).splitlines()[0]}
    return {**body, "status": "ok", "error": None, "per_seed": per_seed, "seconds": time.perf_counter() - started}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: the plan's seeds (default 0, 1, 2) in one record."""
    sink.require_new([STAGE])
    seeds = tuple(plan.seeds) or SEEDS
    if not plan.writes:
        if log:
            log(f"would measure gradient variance under {', '.join(BASELINES)} on {MODEL}, seeds {list(seeds)}: "
                f"{VarianceSettings().public()}")
        return
    sink.save_record(STAGE, run_seeds(seeds, dict(plan.options), log=log), schema_version=SCHEMA)
