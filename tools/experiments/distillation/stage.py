"""Chapter DISTILL-OPD's stage: the lab teacher distilled into the lab student by the two recipes of the
chapter's Step 1 (on-policy reverse KL, fixed teacher-written trajectories with the forward KL) and a
negative control (on-policy with a teacher that reads another problem), each from the same student weights
at the same budget; one write-once record per kind (status ok or failed).

A record holds the settings, the functions that ran (`mechanism`: the learner's or the reference's
token_reverse_kl, generalized_jsd and mixed_distillation_loss), the student's held-out exact match
before and after, the teacher's, the share of the gap closed and every step's loss and reverse KL.
Library code never prints: progress goes to `log`.
"""

from __future__ import annotations

import time
from typing import Callable

from tools.experiments.distillation.training import (
    DIVERGENCE,
    KINDS,
    PACKAGE_MECHANISM,
    DistillMechanism,
    DistillSettings,
    run_distillation,
)
from tools.models.architectures import LAB_MODEL_IDS

SCHEMA = "distill-opd-kind/v2"
MECHANISM_NAMES = ("token_reverse_kl", "generalized_jsd", "mixed_distillation_loss")
LEARNER_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AttributeError)
"""What a learner's function may raise inside a step; the kind is then recorded as failed."""
STUDENT, TEACHER = LAB_MODEL_IDS
PLAN = {"steps": 24, "prompts_per_step": 32, "learning_rate": 3e-4, "max_new_tokens": 6, "train_problems": 256,
        "train_seed": 101}
"""cpu_smoke's plan (the only run mode that trains: both models are the course's lab models)."""


def stage_names(kinds) -> list[str]:
    return [f"distill_{kind}" for kind in kinds]


def settings_for(kind: str, seed: int, overrides: dict | None = None) -> DistillSettings:
    return DistillSettings(kind=kind, seed=seed, **{**PLAN, **(overrides or {})})


def load_quietly(name: str):
    """`(model, tokenizer)` of a lab model (built first if needed), without transformers' loading bar."""
    from transformers.utils import logging as transformers_logging

    from tools.models.loading import load_lab_model

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        return load_lab_model(name)
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def package_functions() -> dict[str, Callable]:
    """The package's own copies of the chapter's functions (what a run without a notebook uses)."""
    return {name: getattr(PACKAGE_MECHANISM, name) for name in MECHANISM_NAMES}


def mechanism_of(plan_mechanism) -> DistillMechanism:
    """The functions a plan's mechanism passes, the package's where it passes none."""
    defaults = package_functions()
    return DistillMechanism(**{name: plan_mechanism.function(name, defaults[name]) for name in MECHANISM_NAMES})


def run_kind(kind: str, seed: int, overrides: dict | None = None, *, teacher_exact_match: float | None = None,
             mechanism: DistillMechanism = PACKAGE_MECHANISM, log: Callable | None = None) -> dict:
    """One kind from fresh student weights; the body of its record."""
    from tools.models.lab import build_lab_model
    from tools.models.loading import model_identity

    settings = settings_for(kind, seed, overrides)
    student, tokenizer = load_quietly(STUDENT)
    teacher, _ = load_quietly(TEACHER)
    body = {"kind": kind, "lam": KINDS[kind], "divergence": DIVERGENCE[kind], "settings": settings.public(),
            "student": model_identity(build_lab_model(STUDENT)), "teacher": model_identity(build_lab_model(TEACHER))}
    started = time.perf_counter()
    try:
        result = run_distillation(student, teacher, tokenizer, settings, teacher_exact_match=teacher_exact_match,
                                  mechanism=mechanism, log=log)
    except LEARNER_ERRORS as error:
        return {**body, "status": "failed", "error": f"{type(error).__name__}: {error}".splitlines()[0]}
    return {**body, "status": "ok", "error": None, **result, "seconds": time.perf_counter() - started}


def run(plan, sink, *, log: Callable | None = None) -> None:
    """The contract runner: the plan's kinds (default both), one record each."""
    kinds = tuple(plan.variants) or tuple(KINDS)
    sink.require_new(stage_names(kinds))
    seed = plan.seeds[0] if plan.seeds else 0
    say = log or (lambda _: None)
    if not plan.writes:
        for kind in kinds:
            say(f"would distill {TEACHER} into {STUDENT}, kind {kind}: {settings_for(kind, seed).public()}")
        say(f"functions: {plan.mechanism.sources_line(package_functions())}")
        return
    teacher_score = None
    mechanism, functions = mechanism_of(plan.mechanism), plan.mechanism.describe(package_functions())
    for kind in kinds:
        say(f"distillation, kind {kind}")
        body = run_kind(kind, seed, dict(plan.options), teacher_exact_match=teacher_score, mechanism=mechanism, log=say)
        teacher_score = body.get("teacher_exact_match", teacher_score)
        sink.save_record(f"distill_{kind}", {**body, "mechanism": functions}, schema_version=SCHEMA)
