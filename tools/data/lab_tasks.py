"""The lab tasks: every problem of a single-step arithmetic task, split by content hash.

The lab models (`tools.models.lab`) are pretrained on one task and meet the others only when a
chapter trains them. The user turn of every task is the prompt `tools.data.arithmetic` writes for
the task's operation ("Compute 34 + 57. Reply with the integer result only."); a task other than the
pretraining one adds a system instruction that changes what the reply must be:

- `add`: the reply is the sum, "91" (the pretraining task; the default system prompt);
- `add_plus_one`: system "Add one to the result." -> "92" (a new operation; the lab student learns
  it with a rank-8 LoRA in about a hundred steps);
- `add_equation`: system "Reply with the whole equation." -> "34 + 57 = 91" (a new answer format
  made of tokens the lab models never wrote: slow to learn with LoRA);
- `sub`: "Compute 91 - 57. ..." -> "34" (a new operation with its own prompt: slow to learn).

The instruction sits in the system turn so that the user turn, and where its numbers stand relative
to the reply, stay as in pretraining.

Every problem has a content hash of (operation, a, b); its first 8 hex digits, modulo 100, put it in
a split: `heldout` (0-9, about 10 %), `validation` (10-14) or `train` (the rest). The split depends
on the problem, not on the task, so a held-out sum is held out in every task built on sums and
never appears in pretraining.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache

from tools.data.arithmetic import OPERATIONS, make_task, parse_integer_response
from tools.errors import ConfigError

LAB_TASK_VERSION = "lab-arithmetic/v1"
"""Change whenever a task's problems, wording, answer format or the split rule change."""

SPLITS = ("train", "validation", "heldout")
HELDOUT_BUCKETS = range(10)
VALIDATION_BUCKETS = range(10, 15)



@dataclass(frozen=True)
class LabTask:
    """One task: which operation, on which operands, answered in which format."""

    name: str
    operation: str
    answer_format: str  # "integer" | "plus_one" | "equation"
    system: str | None
    description: str

    def operands(self) -> list[tuple[int, int]]:
        """Every (a, b) of the task, in a fixed order."""
        if self.operation == "add":
            return [(a, b) for a in range(10, 100) for b in range(10, 100)]
        if self.operation == "sub":
            return [(a, b) for a in range(10, 100) for b in range(10, a + 1)]
        raise ConfigError(f"lab task {self.name}: no enumeration for operation {self.operation!r}")


TASKS: dict[str, LabTask] = {
    "add": LabTask("add", "add", "integer", None, "two-digit addition, integer answer (the pretraining task)"),
    "add_plus_one": LabTask("add_plus_one", "add", "plus_one", "Add one to the result.",
                            "two-digit addition, the reply is the sum plus one (a new operation)"),
    "add_equation": LabTask("add_equation", "add", "equation", "Reply with the whole equation.",
                            "two-digit addition, the reply is the whole equation 'a + b = r' (a new answer format)"),
    "sub": LabTask("sub", "sub", "integer", None, "two-digit subtraction a - b with a >= b (a new operation)"),
}

PRETRAINING_TASK = "add"
SECOND_TASK = "add_plus_one"
"""The task the lab models do not yet know, for chapters that need room to learn."""


@dataclass(frozen=True)
class LabProblem:
    """One problem of a task: the prompt a model sees, the reply it should give, and its integer label."""

    task: str
    operation: str
    a: int
    b: int
    system: str | None
    prompt: str
    target: str
    label: int
    content_sha256: str
    split: str

    def messages(self) -> list[dict]:
        """The chat a model sees: the task's system instruction (when it has one) and the user turn."""
        system = [{"role": "system", "content": self.system}] if self.system is not None else []
        return system + [{"role": "user", "content": self.prompt}]

    def public_view(self) -> dict:
        """What a sampler may see: no target, no label."""
        return {"task": self.task, "messages": self.messages(), "content_sha256": self.content_sha256}


def task(name: str) -> LabTask:
    if name not in TASKS:
        raise ConfigError(f"unknown lab task {name!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


def content_sha256(operation: str, a: int, b: int) -> str:
    """The identity of a problem, whatever its wording or answer format."""
    payload = json.dumps({"operation": operation, "a": int(a), "b": int(b)}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def split_of(content_hash: str) -> str:
    """`heldout`, `validation` or `train`, from the first 8 hex digits of the content hash."""
    bucket = int(content_hash[:8], 16) % 100
    if bucket in HELDOUT_BUCKETS:
        return "heldout"
    return "validation" if bucket in VALIDATION_BUCKETS else "train"


def make_problem(task_name: str, a: int, b: int) -> LabProblem:
    """One problem of `task_name`; its answer comes from `tools.data.arithmetic`'s integer label."""
    spec = task(task_name)
    base = make_task(f"{spec.name}-{a}-{b}", spec.operation, a, b)
    label = base.label + 1 if spec.answer_format == "plus_one" else base.label
    if spec.answer_format == "equation":
        target = f"{a} {OPERATIONS[spec.operation][0]} {b} = {label}"
    else:
        target = str(label)
    digest = content_sha256(spec.operation, a, b)
    return LabProblem(spec.name, spec.operation, int(a), int(b), spec.system, base.prompt, target, label, digest,
                      split_of(digest))


@cache
def _problems(task_name: str) -> tuple[LabProblem, ...]:
    found = []
    for a, b in task(task_name).operands():
        problem = make_problem(task_name, a, b)
        if str(problem.label) in re.findall(r"\d+", problem.prompt):
            continue  # as in tools.data.arithmetic: no prompt states its own answer
        found.append(problem)
    return tuple(found)


def problems(task_name: str, split: str | None = None) -> list[LabProblem]:
    """Every problem of a task (or of one split of it), in a fixed order."""
    if split is not None and split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return [problem for problem in _problems(task_name) if split is None or problem.split == split]


def sample_problems(task_name: str, split: str, count: int, seed: int) -> list[LabProblem]:
    """`count` distinct problems of one split, drawn with a seed (fixed order for a fixed seed)."""
    import random

    pool = problems(task_name, split)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(pool):
        raise ConfigError(f"count must be an integer in 1..{len(pool)} for {task_name}/{split}, got {count!r}")
    return random.Random(seed).sample(pool, count)


_EQUATION = re.compile(r"\s*([+-]?\d+) (\+|-|\*|//) ([+-]?\d+) = (\S+)\s*")


def verify(problem: LabProblem, text: str | None) -> dict:
    """`{parsed, correct, format_ok}` of a reply to `problem`.

    Integer answers (`integer`, `plus_one`): `tools.data.arithmetic.parse_integer_response` (the
    whole reply is one integer) compared with the problem's label. Equation format: the reply is
    "a op b = r" with the problem's own operands and operation, and r is read by the same parser.
    `parsed` is the integer answer read, None when unreadable.
    """
    if problem.task not in TASKS:
        raise ConfigError(f"unknown lab task {problem.task!r}")
    if TASKS[problem.task].answer_format != "equation":
        parsed = parse_integer_response(text)
        return {"parsed": parsed, "correct": parsed is not None and parsed == problem.label,
                "format_ok": parsed is not None}
    match = _EQUATION.fullmatch(text or "")
    if match is None:
        return {"parsed": None, "correct": False, "format_ok": False}
    a, symbol, b, answer = match.groups()
    same_problem = (int(a), symbol, int(b)) == (problem.a, OPERATIONS[problem.operation][0], problem.b)
    parsed = parse_integer_response(answer)
    return {"parsed": parsed, "correct": same_problem and parsed == problem.label,
            "format_ok": same_problem and parsed is not None}


def manifest(task_name: str) -> dict:
    """What a record or a model identity says about a task: version, counts per split, content hashes."""
    spec = task(task_name)
    split_hashes = {}
    for split in SPLITS:
        digests = sorted(problem.content_sha256 for problem in problems(task_name, split))
        split_hashes[split] = {"count": len(digests),
                               "content_sha256": hashlib.sha256("".join(digests).encode()).hexdigest()}
    return {"version": LAB_TASK_VERSION, "task": spec.name, "operation": spec.operation,
            "answer_format": spec.answer_format, "system": spec.system, "splits": split_hashes}
