"""Learning curves of an adapter on a lab task: the effect a training chapter's Step 5 shows on a CPU.

The `lab` student (tools.models.lab) does not yet know `add_plus_one` (lab_tasks.SECOND_TASK): its
held-out exact-match there starts low, and a rank-8 LoRA learns the task in tens of steps. A chapter
compares variants (target modules, a real update and its look-alikes, an NF4 or bf16 base, LoRA
and rsLoRA) by training each from the same lab model with the same seeded data order and the same
budget (steps, rows per step, learning rate), and reads, as a practitioner would accept:

- the curve: the validation loss (mean over the reply tokens, teacher-forced) and the validation
  exact-match (every reply token the argmax given the correct prefix: greedy exact-match from one
  forward pass) at step 0, every `eval_every` steps and at the end, on `eval_problems` problems of
  the task's validation split;
- the claim: the same two numbers on `heldout_problems` problems of the held-out split (never in
  pretraining, never trained on, never used to choose anything), measured twice: on the input model
  (the baseline row: a LoRA adapter starts as the identity) and once at the end;
- the regression check: the held-out exact match of the task the model already knew
  (`regression_task`, the pretraining task `add`) before and after, so a gain bought by forgetting shows;
- the training loss, the gradient norm and the learning rate the optimiser applied at every step.

A step's loss is the sum over its supervised tokens divided by the step's whole supervised count, so
`grad_accumulation` micro-batches of `batch_size` rows give the curve of one batch of
`batch_size * grad_accumulation` rows (the same rows: each step draws its rows before splitting).
A chapter's own gradient accumulation (chapter 15's `accumulate_gradients`) may compute that step.
Library code: nothing is printed; the chapter words the result.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import asdict, dataclass

import torch

from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.sft_training.training import supervised_loss_sum

LR_SCHEDULES = ("constant", "linear_decay")
"""`linear_decay`: the rate falls linearly from `learning_rate` at step 0 to a step's worth above 0 at the last."""
UPDATES = ("real", "grads_zeroed")
"""`grads_zeroed`: a misplaced `optimizer.zero_grad(set_to_none=False)` between backward and step."""


@dataclass(frozen=True)
class CurvePlan:
    """How one curve is trained and measured (the same for every variant of a comparison)."""

    task: str = lab_tasks.SECOND_TASK
    steps: int = 60
    batch_size: int = 16
    grad_accumulation: int = 1
    learning_rate: float = 3e-3
    eval_every: int = 15
    eval_problems: int = 128
    eval_seed: int = 0
    heldout_problems: int = 256
    regression_task: str | None = lab_tasks.PRETRAINING_TASK
    lr_schedule: str = "constant"

    def __post_init__(self) -> None:
        lab_tasks.task(self.task)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ConfigError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.regression_task is not None:
            lab_tasks.task(self.regression_task)
        for name in ("steps", "batch_size", "grad_accumulation", "eval_every", "eval_problems", "heldout_problems"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.learning_rate, bool) or not isinstance(self.learning_rate, (int, float)) \
                or not math.isfinite(self.learning_rate) or self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be a finite number > 0, got {self.learning_rate!r}")

    @property
    def rows_per_step(self) -> int:
        return self.batch_size * self.grad_accumulation

    def eval_steps(self) -> list[int]:
        return sorted({0, self.steps, *range(self.eval_every, self.steps, self.eval_every)})

    def public(self) -> dict:
        return asdict(self)


@dataclass
class CurveData:
    """The task's training pool (train split, rendered on first use) and the evaluation batches:
    `validation` (the curve), `heldout` (the claim) and `regression` (the task the model already knew)."""

    problems: list
    validation: dict
    heldout: dict
    regression: dict | None
    pad_id: int
    manifest: dict
    tokenizer: object
    rendered: dict

    def rows(self, indices: list[int]) -> list[tuple[list[int], int]]:
        """The rendered chats of these pool indices (each rendered once, then cached)."""
        from tools.models.lab import chat_ids

        for index in indices:
            if index not in self.rendered:
                problem = self.problems[index]
                self.rendered[index] = chat_ids(self.tokenizer, problem.messages(), problem.target)
        return [self.rendered[index] for index in indices]


def _batch_of(tokenizer, problems: list, pad_id: int) -> dict:
    from tools.models.lab import chat_ids, training_batch

    return training_batch([chat_ids(tokenizer, problem.messages(), problem.target) for problem in problems], pad_id)


def curve_data(tokenizer, plan: CurvePlan) -> CurveData:
    """The task's `train` problems (rendered through the chat template when a step first needs them),
    `eval_problems` validation problems, `heldout_problems` held-out problems and as many held-out
    problems of the regression task (each drawn with `eval_seed`) as right-padded batches; the manifest
    names them and checks that no evaluated problem is a training problem."""
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    train_problems = lab_tasks.problems(plan.task, "train")
    validation = lab_tasks.sample_problems(plan.task, "validation", plan.eval_problems, plan.eval_seed)
    heldout = lab_tasks.sample_problems(plan.task, "heldout", plan.heldout_problems, plan.eval_seed)
    regression = (None if plan.regression_task is None else
                  lab_tasks.sample_problems(plan.regression_task, "heldout", plan.heldout_problems, plan.eval_seed))
    trained = {p.content_sha256 for p in train_problems}
    evaluated = [*validation, *heldout, *(regression or [])]
    manifest = {"task": lab_tasks.manifest(plan.task), "train_problems": len(train_problems),
                "validation_problems": len(validation), "heldout_problems": len(heldout),
                "regression_task": plan.regression_task, "regression_problems": len(regression or []),
                "overlap": len(trained & {p.content_sha256 for p in evaluated})}
    return CurveData(train_problems, _batch_of(tokenizer, validation, pad_id), _batch_of(tokenizer, heldout, pad_id),
                     None if regression is None else _batch_of(tokenizer, regression, pad_id), pad_id, manifest,
                     tokenizer, {})


def step_rows(pool_size: int, plan: CurvePlan, seed: int) -> list[list[int]]:
    """Per step, the `rows_per_step` pool indices it trains on (distinct within a step), seeded."""
    if pool_size < plan.rows_per_step:
        raise ConfigError(f"a step needs {plan.rows_per_step} rows, the pool has {pool_size}")
    rng = random.Random(seed)
    return [rng.sample(range(pool_size), plan.rows_per_step) for _ in range(plan.steps)]


def heldout_measure(model, batch: dict) -> tuple[float, float]:
    """(mean reply-token loss, teacher-forced exact-match) on the held-out batch, in eval mode, no gradients."""
    from tools.models.lab import IGNORE_INDEX

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    finally:
        model.train(was_training)
    labels = batch["labels"][:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                             ignore_index=IGNORE_INDEX)
    exact = ((logits.argmax(-1) == labels) | (labels == IGNORE_INDEX)).all(dim=1).float().mean()
    return float(loss), float(exact)


def train_curve(model, data: CurveData, plan: CurvePlan, seed: int, *, update: str = "real",
                compute_dtype: torch.dtype | None = None, accumulate=None) -> dict:
    """Train the trainable parameters of `model` (an adapter-wrapped lab model) on the plan's task and
    return the curve. `update="grads_zeroed"` plants the misplaced `zero_grad` (the step still runs:
    AdamW's weight decay moves the parameters, the gradient is gone). `compute_dtype=torch.bfloat16`
    runs the forward passes under CPU/CUDA autocast. `accumulate(model, micro_batches)` (chapter 15's
    `accumulate_gradients` contract) computes each step's gradient instead of the loop here; it
    returns `{"loss": float, ...}` and leaves the gradient in `.grad`."""
    from tools.models.lab import training_batch

    if update not in UPDATES:
        raise ConfigError(f"update must be one of {UPDATES}, got {update!r}")
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    if not trainable:
        raise ConfigError("the model has no trainable parameter: attach an adapter first")
    device = next(model.parameters()).device
    batches = {name: {key: value.to(device) for key, value in batch.items()}
               for name, batch in (("validation", data.validation), ("heldout", data.heldout),
                                   ("regression", data.regression)) if batch is not None}
    rows = step_rows(len(data.problems), plan, seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(trainable, lr=plan.learning_rate)
    autocast = torch.autocast(device_type=device.type, dtype=compute_dtype or torch.float32,
                              enabled=compute_dtype is not None)

    def measured(name: str) -> tuple[float, float]:
        with autocast:
            return heldout_measure(model, batches[name])

    curve = {"seed": seed, "update": update, "eval_steps": [], "validation_loss": [], "validation_exact_match": [],
             "heldout": {"steps": [0, plan.steps], "loss": [], "exact_match": []},
             "regression": None if data.regression is None else {"task": plan.regression_task, "loss": [],
                                                                  "exact_match": []},
             "train_loss": [], "grad_norms": [], "learning_rates": [],
             "trainable_parameters": sum(parameter.numel() for parameter in trainable)}
    evaluations = set(plan.eval_steps())
    fingerprint_before = _fingerprint(model)
    started = time.perf_counter()
    model.train()
    for step in range(plan.steps + 1):
        if step in evaluations:
            loss, exact = measured("validation")
            curve["eval_steps"].append(step)
            curve["validation_loss"].append(loss)
            curve["validation_exact_match"].append(exact)
        if step in (0, plan.steps):  # the baseline row, and the one look at the held-out split after training
            for name in ("heldout", "regression"):
                if curve[name] is not None:
                    loss, exact = measured(name)
                    curve[name]["loss"].append(loss)
                    curve[name]["exact_match"].append(exact)
        if step == plan.steps:
            break
        chosen = rows[step]
        micro = [training_batch(data.rows(chosen[start:start + plan.batch_size]), data.pad_id)
                 for start in range(0, len(chosen), plan.batch_size)]
        micro = [{key: value.to(device) for key, value in batch.items()} for batch in micro]
        if plan.lr_schedule == "linear_decay":
            for group in optimizer.param_groups:
                group["lr"] = plan.learning_rate * (1 - step / plan.steps)
        optimizer.zero_grad(set_to_none=True)
        if accumulate is not None:
            with autocast:
                step_loss = float(accumulate(model, micro)["loss"])
        else:
            supervised = sum(int((batch["labels"][:, 1:] != -100).sum()) for batch in micro)
            step_loss = 0.0
            for batch in micro:
                with autocast:
                    loss_sum, _ = supervised_loss_sum(model, batch, device)
                (loss_sum / supervised).backward()
                step_loss += float(loss_sum.detach()) / supervised
        if update == "grads_zeroed":
            optimizer.zero_grad(set_to_none=False)  # the planted mistake
        norm = torch.nn.utils.clip_grad_norm_(trainable, float("inf"))
        curve["learning_rates"].append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        curve["train_loss"].append(step_loss)
        curve["grad_norms"].append(float(norm))
    curve["seconds"] = time.perf_counter() - started
    curve["trainable_changed"] = _fingerprint(model) != fingerprint_before
    return curve


def _fingerprint(model) -> str:
    """One sha256 over the trainable tensors (dtype, shape, bytes), in parameter order."""
    import hashlib

    from tools.experiments.sft_training.adapters import tensor_digest

    digests = [f"{name}={tensor_digest(p)}" for name, p in model.named_parameters() if p.requires_grad]
    return hashlib.sha256(";".join(digests).encode()).hexdigest()


def value_of(curve: dict, key: str) -> list[float]:
    """A curve's series by key; a dotted key reaches into a part (`heldout.exact_match`)."""
    value = curve
    for part in key.split("."):
        value = value[part]
    return value


def summary(curves: list[dict], key: str = "heldout.exact_match") -> dict:
    """Mean, min and max over seeds of a series' last value and its change from its first."""
    if not curves:
        raise ConfigError("no curves to summarise")
    final = [value_of(curve, key)[-1] for curve in curves]
    change = [value_of(curve, key)[-1] - value_of(curve, key)[0] for curve in curves]
    return {"key": key, "seeds": [curve["seed"] for curve in curves], "final": final, "change": change,
            "final_mean": sum(final) / len(final), "final_min": min(final), "final_max": max(final),
            "change_mean": sum(change) / len(change), "change_min": min(change), "change_max": max(change)}


def by_seed(curves: list[dict], key: str = "heldout.exact_match", at: int = -1) -> dict[int, float]:
    """`{seed: the series' value at position `at`}`: one arm of a paired effect (tools.core.effects)."""
    return {curve["seed"]: value_of(curve, key)[at] for curve in curves}


def paired(treatment: list[dict], control: list[dict], key: str = "heldout.exact_match", *, at: int = -1,
           change: bool = False) -> dict:
    """The paired effect `treatment - control` over the seeds both arms ran (each seed: the same start,
    data order and held-out problems), of a series' value at `at`, or of its change from the first
    value when `change` (tools.core.effects.paired_effect)."""
    from tools.core.effects import paired_effect

    def arm(curves):
        values = by_seed(curves, key, at)
        return {seed: value - by_seed(curves, key, 0)[seed] for seed, value in values.items()} if change else values

    return paired_effect(arm(treatment), arm(control), metric=f"{key}{' change' if change else ''}")


def gain(curves: list[dict], key: str = "heldout.exact_match") -> dict:
    """The paired effect of training itself: the series' last value minus its first (the baseline row:
    the input model, a LoRA adapter starting as the identity), per seed."""
    from tools.core.effects import paired_effect

    return paired_effect(by_seed(curves, key, -1), by_seed(curves, key, 0), metric=f"{key} gain over the baseline")


def measurement_context() -> dict:
    """Where a curve's numbers came from: the CPU numerics in force and where the lab weights came from
    (`committed`, or `build`: pretrained under these numerics)."""
    from tools.core.numerics import cpu_numerics
    from tools.models.lab import lab_source

    return {"cpu_numerics": cpu_numerics(), "lab_models": lab_source()}


def one_thread():
    """A context manager: torch at one thread for the duration (the curves are tiny; the machine is shared)."""
    from contextlib import contextmanager

    @contextmanager
    def scope():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    return scope()
