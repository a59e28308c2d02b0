"""Distilling the lab teacher into the lab student: the two recipes of the chapter's Step 1, and a control.

Each step draws `prompts_per_step` training problems (the same problems, in the same order, for every kind
of a seed: the budget of prompts, sequences and updates is matched). Per kind:

- `on_policy`: the student's own reply, sampled now (temperature 1) through `tools.models.lab_sampling.sample`;
  on every response position the student's next-token distribution is pulled towards the teacher's by the
  reverse KL(student || teacher) over the whole vocabulary: `mixed_distillation_loss` with lam = 1
  (a mean per sequence, then over sequences);
- `fixed`: the teacher's greedy reply to the same problem, written once before training (the supervised
  recipe); the loss is the forward KL(teacher || student) over the whole vocabulary, `generalized_jsd` with
  beta = 0, also averaged per sequence and then over sequences, so that only the trajectories and the
  direction of the KL differ between the two kinds;
- `shuffled_teacher` (the negative control): as `on_policy`, but the teacher reads each student reply after
  another problem's prompt (a rotation of the batch), so it still gives sharp, well-formed next-token
  distributions but knows nothing about the problem the student answered.

The teacher is frozen (eval mode, no gradient) and every loss detaches its logits too. Every step also
logs, through `token_reverse_kl`, the student's reverse KL to the teacher on the step's sequences averaged
per token (TRL's GKD convention) beside the per-sequence average the loss uses. The student's held-out
exact match is measured before and after, and the teacher's once: the share of the gap closed is
(after - before) / (teacher - before); the regression check counts the held-out problems the student answered
before that it still answers after.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from tools.data import lab_tasks
from tools.errors import ConfigError
from tools.experiments.distillation import divergences
from tools.models.lab_sampling import exact_match, sample

KINDS = {"on_policy": 1.0, "fixed": 0.0, "shuffled_teacher": 1.0}
"""Kind -> lam of the mixed loss it stands for (1: student-sampled sequences only, 0: teacher-written only)."""
DIVERGENCE = {"on_policy": "reverse_kl", "fixed": "forward_kl", "shuffled_teacher": "reverse_kl"}


@dataclass(frozen=True)
class DistillSettings:
    """One distillation run: which kind, how many steps and prompts, optimiser and sampling."""

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


@dataclass(frozen=True)
class DistillMechanism:
    """The chapter's three functions a step runs; the package's own by default."""

    token_reverse_kl: Callable = divergences.token_reverse_kl
    generalized_jsd: Callable = divergences.generalized_jsd
    mixed_distillation_loss: Callable = divergences.mixed_distillation_loss


PACKAGE_MECHANISM = DistillMechanism()


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


def response_logits(model, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int):
    """`[batch, longest response, vocab]` float32 logits: row i, position r holds the model's distribution of
    response token r of sequence i (after its own prompt); positions past a response's end repeat its last."""
    import torch

    batch = pack_sequences(prompts, responses, pad_id)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    longest = max(len(response) for response in responses)
    offsets = torch.arange(longest)
    index = torch.stack([torch.clamp(len(prompt) - 1 + offsets, max=len(prompt) + len(response) - 2)
                         for prompt, response in zip(prompts, responses)])
    return logits.gather(1, index.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))


def response_tensors(responses: Sequence[Sequence[int]]) -> tuple:
    """`(tokens, mask)` [batch, longest response]: the response tokens (0 past the end) and where they are."""
    import torch

    longest = max(len(response) for response in responses)
    tokens = torch.zeros((len(responses), longest), dtype=torch.long)
    mask = torch.zeros((len(responses), longest), dtype=torch.bool)
    for row, response in enumerate(responses):
        tokens[row, :len(response)] = torch.tensor(list(response))
        mask[row, :len(response)] = True
    return tokens, mask


def per_sequence_mean(token_values, mask):
    """The mean over each row's masked-in positions, then over the rows (a 0-dim tensor)."""
    return ((token_values * mask).sum(dim=1) / mask.sum(dim=1).to(token_values.dtype)).mean()


def distill_step(student, teacher, optimizer, tokenizer, prompt_ids, response_ids, kind: str,
                 mechanism: DistillMechanism = PACKAGE_MECHANISM, teacher_prompt_ids=None) -> dict:
    """One update of the student on the given sequences (the teacher reads them after `teacher_prompt_ids`,
    its own prompts by default); the loss and the step's reverse KL averaged per sequence and per token."""
    import torch

    tokens, mask = response_tensors(response_ids)
    with torch.no_grad():
        teacher_logits = response_logits(teacher, teacher_prompt_ids or prompt_ids, response_ids, tokenizer.pad_token_id)
    student_logits = response_logits(student, prompt_ids, response_ids, tokenizer.pad_token_id)
    if DIVERGENCE[kind] == "reverse_kl":
        out = mechanism.mixed_distillation_loss(student_logits, teacher_logits, mask, [True] * len(response_ids), 1.0)
        loss = out["loss"]
    else:
        out = mechanism.generalized_jsd(student_logits, teacher_logits, mask, 0.0, 1.0)
        loss = per_sequence_mean(out["token_divergence"], mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    watched = mechanism.token_reverse_kl(student_logits.detach(), teacher_logits, tokens, mask)
    return {"loss": float(loss.detach()), "reverse_kl_per_token": float(watched["mean_kl"]),
            "reverse_kl_per_sequence": float(per_sequence_mean(watched["token_kl"], mask)),
            "sampled_log_ratio_per_token": float(watched["sampled_log_ratio"].sum() / watched["tokens"]),
            "response_tokens": int(mask.sum()), "sequences": len(response_ids)}


def teacher_trajectories(teacher, tokenizer, problems: Sequence, *, max_new_tokens: int) -> list[dict]:
    """The teacher's greedy reply to each problem: the fixed trajectories."""
    return sample(teacher, tokenizer, [problem.messages() for problem in problems], temperature=0.0,
                  max_new_tokens=max_new_tokens)


def run_distillation(student, teacher, tokenizer, settings: DistillSettings, *, teacher_exact_match: float | None = None,
                     mechanism: DistillMechanism = PACKAGE_MECHANISM, log: Callable | None = None) -> dict:
    """Held-out exact match of the student before, `settings.steps` distillation steps, and after."""
    import torch

    torch.manual_seed(settings.seed)
    teacher.eval()
    for parameter in teacher.parameters():
        parameter.requires_grad_(False)
    train = lab_tasks.sample_problems(lab_tasks.PRETRAINING_TASK, "train", settings.train_problems, settings.train_seed)
    fixed = teacher_trajectories(teacher, tokenizer, train, max_new_tokens=settings.max_new_tokens) \
        if settings.kind == "fixed" else None
    teacher_score = teacher_exact_match
    if teacher_score is None:
        teacher_score = exact_match(teacher, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout")["accuracy"]
    before = exact_match(student, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout", per_problem=True)
    optimizer = torch.optim.AdamW(student.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(settings.seed)).tolist()
    steps = []
    for step in range(settings.steps):
        chosen = [order[(step * settings.prompts_per_step + offset) % len(train)]
                  for offset in range(settings.prompts_per_step)]
        if settings.kind == "fixed":
            replies = [fixed[index] for index in chosen]
        else:
            replies = sample(student, tokenizer, [train[index].messages() for index in chosen], temperature=1.0,
                             max_new_tokens=settings.max_new_tokens, seed=settings.seed * 1000 + step)
        prompts = [reply["prompt_ids"] for reply in replies]
        teacher_prompts = prompts[1:] + prompts[:1] if settings.kind == "shuffled_teacher" else None
        student.train()
        record = distill_step(student, teacher, optimizer, tokenizer, prompts, [reply["response_ids"] for reply in replies],
                              settings.kind, mechanism, teacher_prompts)
        steps.append({"step": step, **record})
        if log and (step % 6 == 5 or step == settings.steps - 1):  # every step's loss is in the record
            log(f"{settings.kind} step {step}: loss {record['loss']:.4f}")
    student.eval()
    after = exact_match(student, tokenizer, lab_tasks.PRETRAINING_TASK, "heldout", per_problem=True)
    known = [index for index, correct in enumerate(before.pop("correct_by_problem")) if correct]
    kept = after.pop("correct_by_problem")
    retained = {"correct_before": len(known), "still_correct_after": sum(kept[index] for index in known)}
    retained["share"] = retained["still_correct_after"] / len(known) if known else None
    gap = teacher_score - before["accuracy"]
    return {"settings": settings.public(), "teacher_exact_match": teacher_score,
            "before": before, "after": after, "retained": retained, "steps": steps,
            "gap_closed": (after["accuracy"] - before["accuracy"]) / gap if gap > 0 else None}
