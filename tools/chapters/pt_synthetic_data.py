"""What the PT-SYNTHETIC-DATA notebook runs around its three exercises.

The chapter's learner writes the mechanism (generation identity, overlap screening, verifier
admission). This module holds the rest, so the notebook stays thin: a seeded stand-in for a teacher
model, the five fixed generation jobs, the curves of Steps 2 and 3, the fixed check that pushes the
jobs through the three functions it is given (the notebook passes its own), the record body and the
funnel figure. Nothing here prints; the notebook shows what these functions return.
"""

from __future__ import annotations

import hashlib
import random
import unicodedata
from typing import Callable, Mapping, Sequence

from tools.data.arithmetic import (
    DEFAULT_TASK_SEED,
    OPERATIONS,
    PROMPT_TEMPLATE,
    TASK_VERSION,
    build_task_pool,
    generate_tasks,
)
from tools.errors import ConfigError

CHAPTER_ID = "PT-SYNTHETIC-DATA"
RECORD_STAGE = "admission"
GENERATOR_NAME = "tools.data.arithmetic.generate_tasks"
NORMALISATION = "NFKC, casefold, whitespace collapsed to single spaces"
MEASUREMENT_NOTE = "none: pure computation on the fixed generator, a simulated teacher and fixed thresholds"

TEACHER_STYLES: dict[str, tuple[tuple[str, float], ...]] = {
    "careful": (("correct", 0.97), ("verbose", 0.03)),
    "chatty": (("correct", 0.60), ("verbose", 0.35), ("empty", 0.05)),
    "weak": (("correct", 0.70), ("off_by_one", 0.25), ("verbose", 0.05)),
}
"""Answer styles of the simulated teacher: (kind, probability) pairs, an assumption made for teaching."""

IME_TEMPLATE = "compute  {a} {symbol} {b}\uff0e\u3000Reply with the integer result only\uff0e"
"""The course template as retyped with a Chinese input method: full-width full stops and space."""

THRESHOLDS = {"min_pass_rate": 0.9, "max_wrong_rate": 0.05}

JOBS: tuple[dict, ...] = (
    {"name": "careful-101", "seed": 101, "per_operation": 12, "template": PROMPT_TEMPLATE,
     "teacher": "careful", "teacher_seed": 1},
    {"name": "bulk-103", "seed": 103, "per_operation": 60, "template": PROMPT_TEMPLATE,
     "teacher": "careful", "teacher_seed": 3},
    {"name": "chatty-102", "seed": 102, "per_operation": 12, "template": PROMPT_TEMPLATE,
     "teacher": "chatty", "teacher_seed": 2},
    {"name": "default-seed", "seed": DEFAULT_TASK_SEED, "per_operation": 12, "template": PROMPT_TEMPLATE,
     "teacher": "careful", "teacher_seed": 4},
    {"name": "ime-template-101", "seed": 101, "per_operation": 6, "template": IME_TEMPLATE,
     "teacher": "weak", "teacher_seed": 5},
)
"""The fixed check's generation jobs, in the order they enter the pipeline."""


def prompt_key(text: str) -> str:
    """The chapter's normalised key: NFKC, then casefold, then any run of whitespace as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def simulated_answer(task, style: str, rng: random.Random) -> str:
    """One answer to `task` in `style`, drawn from `rng`; the simulation reads the task's label."""
    if style not in TEACHER_STYLES:
        raise ConfigError(f"unknown teacher style {style!r}; choose one of {', '.join(TEACHER_STYLES)}")
    draw, kind = rng.random(), TEACHER_STYLES[style][-1][0]
    for candidate, probability in TEACHER_STYLES[style]:
        if draw < probability:
            kind = candidate
            break
        draw -= probability
    if kind == "correct":
        return str(task.label)
    if kind == "verbose":
        return f"The answer is {task.label}."
    if kind == "off_by_one":
        return str(task.label + rng.choice((-1, 1)))
    return ""


def run_generation_job(job: Mapping) -> tuple[list[dict], dict[str, int]]:
    """Draw a job's tasks, write each prompt with the job's template and let the teacher answer.

    Returns `(samples, labels)`: samples carry sample_id ("<job name>/<task id>"), prompt, response
    and task_id; the labels stay apart in `{sample_id: int}`, as a verifier holds them.
    """
    rng = random.Random(job["teacher_seed"])
    samples, labels = [], {}
    for task in generate_tasks(job["seed"], job["per_operation"]):
        sample_id = f"{job['name']}/{task.task_id}"
        samples.append({"sample_id": sample_id,
                        "prompt": job["template"].format(a=task.a, symbol=OPERATIONS[task.operation][0], b=task.b),
                        "response": simulated_answer(task, job["teacher"], rng),
                        "task_id": task.task_id})
        labels[sample_id] = task.label
    return samples, labels


def duplicate_fraction_by_volume(seed: int, draw_sizes: Sequence[int]) -> dict[str, list[float]]:
    """Per operation, the share of drawn prompts that repeat an earlier prompt exactly, per draw size."""
    fractions: dict[str, list[float]] = {operation: [] for operation in OPERATIONS}
    for size in draw_sizes:
        tasks = generate_tasks(seed, size)
        for operation in OPERATIONS:
            prompts = [task.prompt for task in tasks if task.operation == operation]
            fractions[operation].append(1 - len(set(prompts)) / len(prompts))
    return fractions


def evaluation_overlap(seeds: Sequence[int], draw_sizes: Sequence[int]) -> dict[int, list[int]]:
    """Per generator seed and draw size, how many evaluation prompts (by normalised key) come back."""
    eval_keys = {prompt_key(task.prompt) for task in build_task_pool().tasks}
    return {seed: [len({prompt_key(task.prompt) for task in generate_tasks(seed, size)} & eval_keys)
                   for size in draw_sizes]
            for seed in seeds}


def run_fixed_check(stamp_generation: Callable, screen_overlap: Callable, admit_by_verifier: Callable,
                    jobs: Sequence[Mapping] = JOBS, thresholds: Mapping = THRESHOLDS) -> dict:
    """The chapter's fixed check with the three functions given: identity per job, one overlap screen
    over every job's samples against the evaluation pool, then admission per job of what survived."""
    eval_pool = build_task_pool()
    stamped_jobs, all_samples, all_labels = {}, [], {}
    for job in jobs:
        samples, labels = run_generation_job(job)
        stamped = stamp_generation(samples, GENERATOR_NAME, job["template"], job["seed"], TASK_VERSION)
        stamped_jobs[job["name"]] = stamped
        all_samples.extend(stamped["samples"])
        all_labels.update(labels)
    screen = screen_overlap(all_samples, [task.prompt for task in eval_pool.tasks])
    kept, duplicates, contaminated = set(screen["kept"]), screen["duplicates"], set(screen["contaminated"])
    per_job = {}
    for job in jobs:
        stamped = stamped_jobs[job["name"]]
        ids = [sample["sample_id"] for sample in stamped["samples"]]
        survivors = [sample for sample in stamped["samples"] if sample["sample_id"] in kept]
        admission = admit_by_verifier(survivors, all_labels, **thresholds)
        per_job[job["name"]] = {
            "generation": stamped["generation"],
            "generated": len(ids),
            "duplicate": sum(sample_id in duplicates for sample_id in ids),
            "contaminated": sum(sample_id in contaminated for sample_id in ids),
            "screened_in": len(survivors),
            "admission": {key: admission[key] for key in ("decision", "reasons", "counts", "pass_rate", "wrong_rate")},
            "rejected": admission["rejected"],
            "admitted_ids": admission["admitted"],
        }
    content = {sample["sample_id"]: sample["content_sha256"] for sample in all_samples}
    admitted_hashes = sorted(content[sample_id] for job in per_job.values() for sample_id in job["admitted_ids"])
    return {
        "eval_pool": {"task_version": eval_pool.version, "seed": eval_pool.seed, "pool_sha256": eval_pool.sha256,
                      "task_count": len(eval_pool.tasks)},
        "eval_hits": [eval_pool.tasks[index].task_id for index in screen["eval_hits"]],
        "screen_counts": screen["counts"],
        "contaminated_ids": screen["contaminated"],
        "jobs": per_job,
        "admitted_total": len(admitted_hashes),
        "admitted_manifest_sha256": hashlib.sha256("\n".join(admitted_hashes).encode("utf-8")).hexdigest(),
    }


def record_body(results: Mapping, jobs: Sequence[Mapping] = JOBS, thresholds: Mapping = THRESHOLDS) -> dict:
    """The `admission` record's body (the header and runtime come from `ChapterContext.save_record`)."""
    return {
        "measurement": MEASUREMENT_NOTE,
        "inputs": {"generator": GENERATOR_NAME, "task_version": TASK_VERSION, "normalisation": NORMALISATION,
                   "thresholds": dict(thresholds),
                   "teacher_styles": {style: dict(mix) for style, mix in TEACHER_STYLES.items()},
                   "jobs": [dict(job) for job in jobs]},
        "results": dict(results),
    }


def funnel_table(results: Mapping) -> str:
    """The fixed check as a text table: one row per job, its funnel counts, pass rate and decision."""
    header = (f"{'job':<18}{'generated':>10}{'duplicate':>10}{'contam.':>9}{'verified':>9}{'admitted':>9}"
              f"{'not_int':>8}{'wrong':>7}{'pass':>7}  {'decision':<8} reasons")
    lines = [header, "-" * len(header)]
    for name, job in results["jobs"].items():
        admission, counts = job["admission"], job["admission"]["counts"]
        shown_rate = "-" if admission["pass_rate"] is None else f"{admission['pass_rate']:.2f}"
        lines.append(f"{name:<18}{job['generated']:>10}{job['duplicate']:>10}{job['contaminated']:>9}"
                     f"{counts['total']:>9}{counts['admitted']:>9}{counts['not_integer']:>8}"
                     f"{counts['wrong_answer']:>7}{shown_rate:>7}  {admission['decision']:<8} "
                     f"{', '.join(admission['reasons']) or '-'}")
    lines.append(f"evaluation problems leaked by the generators: {results['eval_hits']}")
    lines.append(f"admitted samples: {results['admitted_total']}, "
                 f"manifest sha256 {results['admitted_manifest_sha256'][:16]}...")
    return "\n".join(lines)


def record_summary(record: Mapping) -> list[str]:
    """Lines that show an `admission` record (this run's or an earlier cpu_smoke one) in Step 5."""
    return [f"evidence level {record.get('evidence_level')}: computation only, not a GPU measurement",
            *funnel_table(record["results"]).splitlines()]


FUNNEL_STAGES = {"admitted": "tab:green", "not_integer": "tab:orange", "wrong_answer": "tab:red",
                 "no_label": "tab:purple", "duplicate": "tab:gray", "contaminated": "black"}


def draw_duplicate_growth(fractions: Mapping[str, Sequence[float]], draw_sizes: Sequence[int], seed: int):
    """Figure: share of exact repeats per operation against the number of problems drawn."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for operation, values in fractions.items():
        ax.plot(draw_sizes, values, marker="o", label=f"{operation} ({OPERATIONS[operation][0]})")
    ax.set_xscale("log")
    ax.set_xlabel("problems drawn per operation (log scale)")
    ax.set_ylabel("fraction that repeats an earlier prompt")
    ax.set_title(f"Exact duplicates grow with volume (seed {seed})")
    ax.legend()
    fig.tight_layout()
    return fig


def draw_evaluation_overlap(overlap: Mapping[int, Sequence[int]], draw_sizes: Sequence[int], eval_size: int):
    """Figure: evaluation prompts reproduced by each generator seed against the number drawn."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for (seed, hits), style in zip(overlap.items(), ("-", "--", ":", "-.")):
        label = f"seed {seed}" + (" (the evaluation seed)" if seed == DEFAULT_TASK_SEED else "")
        ax.step(draw_sizes, hits, where="post", linestyle=style, linewidth=2, label=label)
    ax.axhline(eval_size, color="black", linestyle="--", label=f"evaluation set size = {eval_size}")
    ax.set_xlabel("problems drawn per operation")
    ax.set_ylabel("evaluation problems reproduced")
    ax.set_title("Reusing the evaluation seed leaks evaluation problems")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_funnel(results: Mapping):
    """Figure: where each job's samples end up, stacked by stage, with the job's decision on top."""
    import matplotlib.pyplot as plt

    names = list(results["jobs"])
    fig, ax = plt.subplots(figsize=(10, 4))
    bottoms = [0] * len(names)
    for stage, color in FUNNEL_STAGES.items():
        values = [results["jobs"][name][stage] if stage in ("duplicate", "contaminated")
                  else results["jobs"][name]["admission"]["counts"][stage] for name in names]
        ax.bar(names, values, bottom=bottoms, color=color, label=stage)
        bottoms = [bottom + value for bottom, value in zip(bottoms, values)]
    for index, name in enumerate(names):
        ax.text(index, bottoms[index], results["jobs"][name]["admission"]["decision"], ha="center", va="bottom")
    ax.set_ylim(0, max(bottoms) * 1.12)
    ax.set_ylabel("samples")
    ax.set_title("Where each generation job's samples end up (label above a bar = decision)")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    return fig
