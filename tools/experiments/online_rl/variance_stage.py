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
(the unbiased one; noisy, not a result). Every weighting is formed from the same per-answer gradients,
so the record also has, per seed, the share p of rewarded answers and the mean gradient norm of the
rewarded and of the unrewarded answers, and splits the ratios LOO / none and wrong_only / none into the
part the rewards alone explain (the count of unrewarded per rewarded answer and the leave-one-out
baseline's noise; n/(n-1) (1 - p) in expectation for LOO / none with independent 0/1 rewards), the part
the per-answer gradient norms add, and the residual of that uncorrelated-answers approximation
(`variance.ratio_split`); across the seeds, paired effects (`tools.core.effects`) of the log variance
LOO vs none and of the log squared gradient norm unrewarded vs rewarded. The leave-one-out advantages
are the plan's mechanism (the learner's `leave_one_out_advantages` when the notebook passes it, else the
package's). One write-once record (`baseline_variance`), all seeds in one process on the same weights
(nothing is trained); status ok or failed. Library code never prints: progress goes to `log`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.core import effects
from tools.core.numerics import cpu_numerics
from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.online_rl.advantages import leave_one_out_advantages
from tools.experiments.online_rl.models import load_quietly
from tools.experiments.online_rl.variance import (gradient_variance, group_mean_advantages, mean_gradients,
                                                  no_baseline_advantages, ratio_split, wrong_only_advantages)
from tools.experiments.online_rl.verifier import verify_integer_answer

SCHEMA = "rloo-baseline-variance/v2"
STAGE = "baseline_variance"
MODEL = "lab"
SEEDS = (0, 1, 2, 3, 4)
BASELINES = ("no_baseline", "leave_one_out", "group_mean", "batch_mean", "wrong_only")
MECHANISM = ("leave_one_out_advantages",)
PACKAGE_FUNCTIONS = {"leave_one_out_advantages": leave_one_out_advantages}
"""The package's copy of the chapter's exercise function the stage runs (a run without a notebook uses it)."""


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


def measure_seed(model, tokenizer, seed: int, settings: VarianceSettings,
                 leave_one_out: Callable = leave_one_out_advantages) -> dict:
    """One seed's variances, mean-gradient comparisons and ratio splits (module docstring)."""
    tasks = lab_tasks.sample_problems(lab_tasks.PRETRAINING_TASK, "train", settings.prompts, seed)
    result = gradient_variance(model, tokenizer, tasks, group_size=settings.group_size, draws=settings.draws,
                               max_new_tokens=settings.max_new_tokens, verify=verify_integer_answer,
                               leave_one_out=leave_one_out, temperature=settings.temperature, seed=seed,
                               baselines={"no_baseline": no_baseline_advantages, "group_mean": group_mean_advantages,
                                          "wrong_only": wrong_only_advantages},
                               keep_means=True)
    means = result.pop("mean_vectors")
    answers = result.pop("answers")
    variance = {name: result["baselines"][name]["total_variance"] for name in BASELINES}
    shrink = (settings.group_size - 1) / settings.group_size
    p = result["mean_reward"]

    def split(top: str) -> dict:
        return ratio_split(answers["weights"][top], answers["weights"]["no_baseline"], answers["squared_norm"],
                           variance[top], variance["no_baseline"])

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
            "expected_norm_ratio": shrink,
            "rewarded_share": p,
            "splits": {"loo_over_none": {**split("leave_one_out"),
                                         "independent_rewards_advantage_part": settings.group_size
                                         / (settings.group_size - 1) * (1 - p)},
                       "wrong_over_right": {**split("wrong_only"),
                                            "count_part": (1 - p) / p if p > 0 else None}}}


def measure(model, tokenizer, seeds: Sequence[int] = SEEDS, settings: VarianceSettings = VarianceSettings(), *,
            log: Callable | None = None, leave_one_out: Callable = leave_one_out_advantages) -> list[dict]:
    """`measure_seed` for every seed on the same weights (the measurement changes no weight)."""
    results = []
    for seed in seeds:
        results.append(measure_seed(model, tokenizer, seed, settings, leave_one_out))
        if log:
            log(f"seed {seed}: variance LOO / none {results[-1]['loo_over_none']:.3f}, LOO / batch mean "
                f"{results[-1]['loo_over_batch_mean']:.3f}, matched-scale LOO / group mean "
                f"{results[-1]['matched_scale_ratio']:.4f}")
    return results


def paired_effects(per_seed: list[dict]) -> dict | None:
    """Across the seeds (None with fewer than two): the natural log of the total variance under LOO vs no
    baseline, and the log of the mean squared gradient norm of the unrewarded vs the rewarded answers."""
    if len(per_seed) < 2 or any(entry["gradient_norms"][side]["mean_squared_norm"] is None
                                for entry in per_seed for side in ("rewarded", "unrewarded")):
        return None

    def log_of(read) -> dict:
        return {entry["seed"]: math.log(read(entry)) for entry in per_seed}

    return {"log_variance_loo_over_none": effects.paired_effect(
                log_of(lambda entry: entry["baselines"]["leave_one_out"]["total_variance"]),
                log_of(lambda entry: entry["baselines"]["no_baseline"]["total_variance"]), metric="log total variance"),
            "log_squared_norm_unrewarded_over_rewarded": effects.paired_effect(
                log_of(lambda entry: entry["gradient_norms"]["unrewarded"]["mean_squared_norm"]),
                log_of(lambda entry: entry["gradient_norms"]["rewarded"]["mean_squared_norm"]),
                metric="log mean squared per-answer gradient norm")}


def run_seeds(seeds: Sequence[int], overrides: dict | None = None, *, log: Callable | None = None,
              functions: dict | None = None) -> dict:
    """The record body: settings, one entry per seed, the paired effects, status ok or failed."""
    settings = VarianceSettings(**(overrides or {}))
    leave_one_out = (functions or PACKAGE_FUNCTIONS)["leave_one_out_advantages"]
    model, tokenizer, identity = load_quietly(MODEL)
    body = {"model": identity, "settings": settings.public(), "seeds": list(seeds), "cpu_numerics": cpu_numerics()}
    started = time.perf_counter()
    try:
        per_seed = measure(model, tokenizer, seeds, settings, log=log, leave_one_out=leave_one_out)
    except (RuntimeError, ConfigError) as error:
        return {**body, "status": "failed", "error": str(error).splitlines()[0]}
    return {**body, "status": "ok", "error": None, "per_seed": per_seed, "effects": paired_effects(per_seed),
            "seconds": time.perf_counter() - started}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: the plan's seeds (default 0, 1, 2) in one record."""
    sink.require_new([STAGE])
    seeds = tuple(plan.seeds) or SEEDS
    if not plan.writes:
        if log:
            log(f"would measure gradient variance under {', '.join(BASELINES)} on {MODEL}, seeds {list(seeds)}: "
                f"{VarianceSettings().public()}; functions {plan.mechanism.sources_line(PACKAGE_FUNCTIONS)}")
        return
    functions = {name: plan.mechanism.function(name, PACKAGE_FUNCTIONS[name]) for name in MECHANISM}
    body = run_seeds(seeds, dict(plan.options), log=log, functions=functions)
    sink.save_record(STAGE, {**body, "mechanism": plan.mechanism.describe(PACKAGE_FUNCTIONS)}, schema_version=SCHEMA)
