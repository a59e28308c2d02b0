"""Distilling the lab teacher into the lab student: on-policy (student-sampled) vs fixed (teacher-written)
trajectories, the loss of `divergences.mixed_distillation_loss` on the student's and the teacher's logits.

Each step draws `prompts_per_step` training problems. An on-policy sequence is the student's own reply,
sampled now (temperature 1) through `tools.models.lab_sampling.sample`; a fixed sequence is the
teacher's greedy reply to the same problem, written once before training. On every response position
the student's next-token distribution is pulled towards the teacher's (reverse KL over the whole
vocabulary, the teacher frozen and without gradient). The student's held-out exact match is measured
before and after, and the teacher's once: the share of the gap closed is (after - before) / (teacher - before).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.distillation.divergences import mixed_distillation_loss
from tools.models.lab_sampling import exact_match, sample

KINDS = {"on_policy": 1.0, "fixed": 0.0}
"""Trajectory kind -> lam of the mixed loss (1: student-sampled only, 0: teacher-written only)."""


@dataclass(frozen=True)
class DistillSettings:
    """One distillation run: which trajectories, how many steps and prompts, optimiser and sampling."""

    kind: str = "on_policy"
    steps: int = 12
    prompts_per_step: int = 32
    learning_rate: float = 1e-3
    max_new_tokens: int = 6
    train_problems: int = 256
    train_seed: int = 101
    seed: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    def public(self) -> dict:
        return asdict(self)


def pack_sequences(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> dict:
    """Prompt + response rows, right-padded: `input_ids`, `attention_mask` and `response_mask`, where
    `response_mask[i, t]` is True when position t predicts a response token (the logits at t score token t + 1)."""
    import torch

    if len(prompts) != len(responses) or not prompts or any(not response for response in responses):
        raise ConfigError("need one non-empty response per prompt")
    rows = [list(prompt) + list(response) for prompt, response in zip(prompts, responses)]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    response_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for index, (prompt, row) in enumerate(zip(prompts, rows)):
        input_ids[index, :len(row)] = torch.tensor(row)
        attention[index, :len(row)] = 1
        response_mask[index, len(prompt) - 1:len(row) - 1] = True
    return {"input_ids": input_ids, "attention_mask": attention, "response_mask": response_mask}


def teacher_trajectories(teacher, tokenizer, problems: Sequence, *, max_new_tokens: int) -> list[dict]:
    """The teacher's greedy reply to each problem: the fixed trajectories."""
    return sample(teacher, tokenizer, [problem.messages() for problem in problems], temperature=0.0,
                  max_new_tokens=max_new_tokens)


def distill_step(student, teacher, optimizer, tokenizer, prompt_ids, response_ids, on_policy: list[bool],
                 lam: float) -> dict:
    """One update of the student on the given sequences; the loss and the per-kind mean reverse KL."""
    import torch

    batch = pack_sequences(prompt_ids, response_ids, tokenizer.pad_token_id)
    with torch.no_grad():
        teacher_logits = teacher(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    student_logits = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    out = mixed_distillation_loss(student_logits, teacher_logits, batch["response_mask"], on_policy, lam)
    optimizer.zero_grad(set_to_none=True)
    out["loss"].backward()
    optimizer.step()
    return {"loss": float(out["loss"].detach()), "on_policy_kl": out["on_policy_kl"], "fixed_kl": out["fixed_kl"],
            "response_tokens": int(batch["response_mask"].sum())}


def run_distillation(student, teacher, tokenizer, settings: DistillSettings, *, teacher_exact_match: float | None = None,
                     log: Callable | None = None) -> dict:
    """Held-out exact match of the student before, `settings.steps` distillation steps, and after."""
    import torch

    torch.manual_seed(settings.seed)
    teacher.eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    train = lab_tasks.sample_problems(lab_tasks.PRETRAINING_TASK, "train", settings.train_problems, settings.train_seed)
    fixed = teacher_trajectories(teacher, tokenizer, train, max_new_tokens=settings.max_new_tokens)
    teacher_score = teacher_exact_match
    if teacher_score is None:
        teacher_score = exact_match(teacher, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout")["accuracy"]
    before = exact_match(student, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout")
    optimizer = torch.optim.AdamW(student.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    lam = KINDS[settings.kind]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed)).tolist()
    steps = []
    for step in range(settings.steps):
        chosen = [order[(step * settings.prompts_per_step + offset) % len(train)]
                  for offset in range(settings.prompts_per_step)]
        if settings.kind == "on_policy":
            replies = sample(student, tokenizer, [train[index].messages() for index in chosen], temperature=1.0,
                             max_new_tokens=settings.max_new_tokens, seed=settings.seed * 1000 + step)
        else:
            replies = [fixed[index] for index in chosen]
        student.train()
        record = distill_step(student, teacher, optimizer, tokenizer, [reply["prompt_ids"] for reply in replies],
                              [reply["response_ids"] for reply in replies], [settings.kind == "on_policy"] * len(replies),
                              lam)
        steps.append({"step": step, **record})
        if log:
            log(f"{settings.kind} step {step}: loss {record['loss']:.4f}")
    student.eval()
    after = exact_match(student, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout")
    gap = teacher_score - before["accuracy"]
    return {"settings": settings.public(), "teacher_exact_match": teacher_score,
            "before": before, "after": after, "steps": steps,
            "gap_closed": (after["accuracy"] - before["accuracy"]) / gap if gap > 0 else None}
