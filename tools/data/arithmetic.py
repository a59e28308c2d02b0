"""The fixed single-step integer arithmetic tasks of the shared verl experiment.

The pool is drawn from a seed before any sampling: two problems each of addition, subtraction,
multiplication and integer division. Labels come from integer arithmetic and are never written
into a prompt; a response is read only when the whole response is one integer.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from tools.errors import ConfigError

TASK_VERSION = "arithmetic-single-step/v1"
"""Version of the generator; change it whenever the drawing rules or the prompt wording change."""

DEFAULT_TASK_SEED = 20240601
PROBLEMS_PER_OPERATION = 2

# name -> (symbol shown in the prompt, integer function)
OPERATIONS: dict[str, tuple[str, Any]] = {
    "add": ("+", lambda a, b: a + b),
    "sub": ("-", lambda a, b: a - b),
    "mul": ("*", lambda a, b: a * b),
    "floordiv": ("//", lambda a, b: a // b),
}

PROMPT_TEMPLATE = "Compute {a} {symbol} {b}. Reply with the integer result only."
_INTEGER_RESPONSE = re.compile(r"[+-]?\d+")


@dataclass(frozen=True)
class ArithmeticTask:
    """One problem. `label` is the integer answer; it is not part of `prompt`."""

    task_id: str
    operation: str
    a: int
    b: int
    prompt: str
    label: int

    def public_view(self) -> dict:
        """Everything a sampler may see: the task without its label."""
        return {"task_id": self.task_id, "operation": self.operation, "prompt": self.prompt}


def _draw_operands(operation: str, rng: random.Random) -> tuple[int, int]:
    if operation == "add":
        return rng.randint(10, 99), rng.randint(10, 99)
    if operation == "sub":
        first, second = rng.randint(10, 99), rng.randint(10, 99)
        return max(first, second), min(first, second)
    if operation == "mul":
        return rng.randint(11, 99), rng.randint(2, 9)
    if operation == "floordiv":
        divisor, quotient = rng.randint(2, 12), rng.randint(3, 19)
        return divisor * quotient + rng.randint(0, divisor - 1), divisor
    raise ConfigError(f"unknown operation {operation!r}; choose one of {', '.join(OPERATIONS)}")


def _numbers_in(text: str) -> set[str]:
    return set(re.findall(r"\d+", text))


def make_task(task_id: str, operation: str, a: int, b: int) -> ArithmeticTask:
    """Build one task; its label is computed with Python integer arithmetic."""
    if operation not in OPERATIONS:
        raise ConfigError(f"unknown operation {operation!r}; choose one of {', '.join(OPERATIONS)}")
    if operation == "floordiv" and b == 0:
        raise ConfigError("integer division by zero is not a task")
    symbol, function = OPERATIONS[operation]
    prompt = PROMPT_TEMPLATE.format(a=a, symbol=symbol, b=b)
    return ArithmeticTask(task_id=task_id, operation=operation, a=int(a), b=int(b), prompt=prompt,
                          label=int(function(int(a), int(b))))


def generate_tasks(seed: int = DEFAULT_TASK_SEED, per_operation: int = PROBLEMS_PER_OPERATION) -> list[ArithmeticTask]:
    """Draw `per_operation` problems of each operation, in a fixed order, from `seed`.

    A draw whose answer appears as a number in its own prompt is redrawn, so no prompt
    contains its label even by coincidence (e.g. 40 - 20).
    """
    if int(per_operation) < 1:
        raise ConfigError(f"per_operation must be >= 1, got {per_operation!r}")
    rng = random.Random(int(seed))
    tasks: list[ArithmeticTask] = []
    for operation in OPERATIONS:
        drawn = 0
        while drawn < int(per_operation):
            a, b = _draw_operands(operation, rng)
            task = make_task(f"{operation}-{drawn}", operation, a, b)
            if str(task.label) in _numbers_in(task.prompt):
                continue
            tasks.append(task)
            drawn += 1
    return tasks


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def task_sha256(task: ArithmeticTask) -> str:
    """Hash of one task including its label."""
    return hashlib.sha256(_canonical(asdict(task))).hexdigest()


def prompt_sha256(prompt: str) -> str:
    """Hash of a prompt text (UTF-8)."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def pool_sha256(tasks: Iterable[ArithmeticTask], version: str = TASK_VERSION) -> str:
    """Hash of the whole ordered pool and the generator version."""
    return hashlib.sha256(_canonical({"version": version, "tasks": [asdict(t) for t in tasks]})).hexdigest()


@dataclass(frozen=True)
class TaskPool:
    """The fixed pool with its identity: version, seed and sha256."""

    version: str
    seed: int
    tasks: tuple[ArithmeticTask, ...]
    sha256: str

    def manifest(self) -> dict:
        """The record entry for the pool (labels included: the record is not a prompt)."""
        return {
            "task_version": self.version,
            "seed": self.seed,
            "pool_sha256": self.sha256,
            "task_count": len(self.tasks),
            "operations": {name: sum(t.operation == name for t in self.tasks) for name in OPERATIONS},
            "tasks": [dict(asdict(t), task_sha256=task_sha256(t), prompt_sha256=prompt_sha256(t.prompt))
                      for t in self.tasks],
        }


def build_task_pool(seed: int = DEFAULT_TASK_SEED, per_operation: int = PROBLEMS_PER_OPERATION) -> TaskPool:
    """The fixed pool (8 tasks by default) with its version and sha256."""
    tasks = tuple(generate_tasks(seed, per_operation))
    return TaskPool(version=TASK_VERSION, seed=int(seed), tasks=tasks, sha256=pool_sha256(tasks))


def parse_integer_response(text: str | None) -> int | None:
    """The integer a response states, or None unless the whole stripped response is one integer."""
    if text is None:
        return None
    stripped = text.strip()
    if not _INTEGER_RESPONSE.fullmatch(stripped):
        return None
    return int(stripped)


def score_response(task: ArithmeticTask, text: str | None) -> dict:
    """`{parsed, correct}`: parsed is None when the response is not a whole integer."""
    parsed = parse_integer_response(text)
    return {"parsed": parsed, "correct": parsed is not None and parsed == task.label}


def task_from_record(entry: Mapping[str, Any]) -> ArithmeticTask:
    """Rebuild a task from its manifest entry, re-deriving the label and checking it."""
    task = make_task(entry["task_id"], entry["operation"], int(entry["a"]), int(entry["b"]))
    if "label" in entry and int(entry["label"]) != task.label:
        raise ConfigError(f"task {entry['task_id']}: stored label {entry['label']} != recomputed {task.label}")
    return task
