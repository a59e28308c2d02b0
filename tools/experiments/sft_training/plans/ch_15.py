"""Chapter 15 (effective SFT update and the training loop): an update that really trains vs two that only look like it.

- `effective`: LoRA r8 alpha 16 on q/v; the reference run.
- `vanishing_scale`: the same adapter with alpha 1e-4 (scaling 1.25e-5). Its tensors change (Adam moves
  lora_B by about the learning rate whatever the gradient's size) and its gradient norms are finite
  and non-zero, yet the model's function barely moves: the same batch's loss stays where it was.
- `eval_leak`: the effective adapter, but its collate swaps one example of every micro-batch for a
  held-apart evaluation example; its evaluation loss improves most, for the wrong reason.

All three share data, seeds, steps, examples per step and a linearly decaying learning rate: the
look-alikes are controls at the real update's budget. In cpu_smoke they train the lab student on a
task it does not know yet (`add_plus_one`: training problems from the task's train split, the
held-apart set from its held-out split), so the real update's held-apart loss falls for a reason
the chapter names. The chapter's functions run inside the stage (MECHANISM; the learner's from the
notebook, else the package's copies): `accumulate_gradients` computes every step's gradient,
`isolated_evaluation` is the stage's evaluation before and after training (the real optimiser's
state compared, the trained hashes intersected with the held-apart ones), and the chapter decides
with `effective_update_check`. `measure` records the same batch's loss before and after training,
the stage's own audit of the evaluation's side effects and of the trained examples (independent
evidence beside the learner's function), and the learning rates the schedule planned.
"""

from __future__ import annotations

from tools.experiments.sft_training.config import AdapterSpec
from tools.experiments.sft_training.data import pad_batch
from tools.experiments.sft_training.effective_update import (
    TrainingLedger,
    evaluation_examples,
    evaluation_side_effects,
    leaking_examples,
    same_batch_losses,
    split_audit,
)
from tools.experiments.sft_training.lab_curves import (
    CurvePlan,
    curve_data,
    measurement_context,
    one_thread,
    train_curve,
)
from tools.experiments.sft_training.training import learning_rate

MECHANISM = ("accumulate_gradients", "effective_update_check", "isolated_evaluation")
LEAKING_VARIANTS = ("eval_leak",)
STAGE = {
    "cpu_smoke": {"model_id": "lab", "lab_task": "add_plus_one", "lab_train_problems": 64, "lab_eval_problems": 64,
                  "steps": 8, "batch_size": 8, "lr_schedule": "linear_decay", "learning_rate": 3e-3},
    "real_gpu": {"steps": 8, "batch_size": 4, "grad_accumulation": 2, "lr_schedule": "linear_decay",
                 "learning_rate": 1e-3},
}
"""cpu_smoke: before, the stage trained the arithmetic chats, whose held-apart loss hardly moved in 8 steps
(3.965 -> 4.005 with 2 tasks per operation, 4.320 -> 4.306 with 4, under the AVX2 profile; up on other
machines), so the real update read `tune` there (issue 30). The lab task moves it for a reason."""


def defaults() -> dict:
    """The package's copies of the chapter's functions (what a run without a notebook uses)."""
    from tools.experiments.sft_training import effective_update

    return {name: getattr(effective_update, name) for name in MECHANISM}


LEDGER = TrainingLedger()
_calls: dict[str, int] = {}


def variants(run_mode: str) -> list[AdapterSpec]:
    return [AdapterSpec("effective", rank=8, alpha=16.0),
            AdapterSpec("vanishing_scale", rank=8, alpha=1e-4),
            AdapterSpec("eval_leak", rank=8, alpha=16.0)]


def prepare(model, spec: AdapterSpec):
    """Start the variant's training ledger; the base model is not changed."""
    LEDGER.start(spec.name)
    _calls[spec.name] = 0
    return model


def collate(examples, pad_id: int, spec: AdapterSpec, config) -> dict:
    """Right-padded micro-batches; every example that goes into one is written in the ledger."""
    if spec.name in LEAKING_VARIANTS:
        examples = leaking_examples(examples, evaluation_examples(config, spec), _calls[spec.name])
    _calls[spec.name] += 1
    LEDGER.add(spec.name, examples)
    return pad_batch(examples, pad_id)


def accumulate(model, micro_batches, *, functions=None) -> dict:
    """One step's gradient, computed by the chapter's `accumulate_gradients`."""
    return (functions or defaults())["accumulate_gradients"](model, micro_batches)


def evaluate(model, batches, optimizer, spec: AdapterSpec, split, *, functions=None) -> dict:
    """The held-apart evaluation, by the chapter's `isolated_evaluation`: the training optimiser's state
    is compared, and the examples trained so far (the ledger) meet the held-apart hashes."""
    return (functions or defaults())["isolated_evaluation"](
        model, batches, optimizer, LEDGER.seen(spec.name), [example.content_sha256 for example in split.evaluation])


def measure(model, spec: AdapterSpec, split, config, tokenizer) -> dict:
    return {"same_batch": same_batch_losses(model, split, config, tokenizer),
            "evaluation_side_effects": evaluation_side_effects(model, split, config, tokenizer),
            "split_audit": split_audit(LEDGER.seen(spec.name), split),
            "planned_learning_rates": [learning_rate(config, step) for step in range(config.steps)]}


# ---- the effect on the lab model (Step 5's curves; tests/chapters/test_lab_effects.py) --------------------

EFFECT = CurvePlan(steps=40, batch_size=16, learning_rate=3e-3, eval_every=10, eval_problems=128, heldout_problems=256)
EFFECT_SEEDS = (0, 1, 2)
EFFECT_VARIANTS = {
    # name: (alpha, update, micro-batches per step); rows per step stay EFFECT.rows_per_step
    "effective": (16.0, "real", 1),
    "effective_accumulated": (16.0, "real", 4),
    "vanishing_scale": (1e-4, "real", 1),
    "grads_zeroed": (16.0, "grads_zeroed", 1),
}
"""The real update, the same update accumulated over 4 micro-batches, and two look-alikes whose
adapter tensors change too: a scaling of 1.25e-5, and a zero_grad between backward and step."""


def only(mechanism, *names: str):
    """The part of `mechanism` (a contract.Mechanism) that names `names`: what one measurement really ran."""
    from tools.experiments.contract import Mechanism

    return Mechanism({name: mechanism.functions[name] for name in names if name in mechanism.functions},
                     {name: mechanism.sources[name] for name in names if name in mechanism.functions})


def effect(seeds=EFFECT_SEEDS, plan: CurvePlan = EFFECT, model_id: str = "lab", *, mechanism=None) -> dict:
    """Each variant trained from the lab model on the task it does not know, one curve per seed (all in
    this process): LoRA r8 on q/v, the same rows, steps and learning rate for every variant (the
    look-alikes are controls at the real update's budget). Every step's gradient is computed by the
    chapter's `accumulate_gradients` (from `mechanism`, a tools.experiments.contract.Mechanism: the
    learner's, else the package's copy); the result says which ran (`mechanism`)."""
    import copy
    from dataclasses import replace

    from tools.experiments.sft_training.adapters import attach
    from tools.models.loading import load_causal_lm, model_identity, resolve_model

    from tools.experiments.contract import Mechanism
    from tools.experiments.sft_training.plans import plan_for

    mechanism = mechanism if mechanism is not None else Mechanism()
    functions = plan_for("15").bound(mechanism).functions
    folder = resolve_model(model_id)
    with one_thread():
        base, tokenizer = load_causal_lm(folder, dtype="float32")
        data = curve_data(tokenizer, plan)
        variants = {}
        for name, (alpha, update, micro) in EFFECT_VARIANTS.items():
            variant_plan = replace(plan, batch_size=plan.rows_per_step // micro, grad_accumulation=micro)
            spec = AdapterSpec(name, rank=8, alpha=alpha)
            curves = [train_curve(attach(copy.deepcopy(base), spec, seed), data, variant_plan, seed, update=update,
                                  accumulate=functions["accumulate_gradients"]) for seed in seeds]
            variants[name] = {"alpha": alpha, "scaling": spec.scaling, "update": update,
                              "micro_batches": micro, "batch_size": variant_plan.batch_size,
                              "budget": {"steps": variant_plan.steps, "rows_per_step": variant_plan.rows_per_step,
                                         "learning_rate": variant_plan.learning_rate},
                              "curves": curves}
    return {"plan": plan.public(), "model": model_identity(folder), **measurement_context(), "data": data.manifest,
            "seeds": list(seeds), "mechanism": only(mechanism, "accumulate_gradients").describe(
                {"accumulate_gradients": defaults()["accumulate_gradients"]}),
            "variants": variants}
