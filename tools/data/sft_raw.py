"""The raw SFT instruction data of the project chain (64 -> 63 / 65 -> 62), built in code.

The chain teaches the lab student a task it does not know, `add_plus_one` of `tools.data.lab_tasks`
(system "Add one to the result.", user "Compute 34 + 57. Reply with the integer result only.",
reply "92"), while it must keep the skill it was pretrained on, plain two-digit addition (`add`).

Nothing is downloaded: a delivery is drawn from the lab tasks (the prompt wording the lab models
know) and from a synthetic-instruction pipeline (paraphrased user turns answered by a seeded simulated
teacher that is sometimes wordy or forgets to add one), plus replay records of the base's own task
(plain sums, the default system prompt: practitioners mix them in so the base does not forget). It
then carries planted defects a data admission must find: exact and normalised duplicates,
contradicting answers, over-long samples, records that break the field contract, and copies of
evaluation problems (leakage), some in the pipeline's own paraphrases that only the problem's
identity (operation and operands, `problem_identity`) reveals.

Every problem comes from one split of the lab tasks, so the chain never trains on a problem it
evaluates: training and replay records from `train`, validation records from `validation`, the
frozen evaluation split from `heldout`. No two splits share a problem identity, whichever operand
comes first (addition commutes). The frozen evaluation split is drawn apart from every delivery and
pinned by its sha256.

A delivery is versioned by content: `delivery_sha256` hashes its splits, and a repaired delivery is a
new version with a new hash. The quality figures measured on this data are not comparable with the
original course's (Alpaca / GSM8K); records say so (`COMPARABILITY_NOTE`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import unicodedata
from dataclasses import dataclass
from typing import Mapping, Sequence

from tools.data import lab_tasks
from tools.data.arithmetic import PROMPT_TEMPLATE
from tools.errors import ConfigError

RAW_DATA_VERSION = "sft-raw-instructions/v2"
"""Version of this builder; change it whenever a delivery's drawing rules or planted defects change."""

COMPARABILITY_NOTE = ("built in code from the lab tasks and a simulated teacher; its counts, truncation and overlap "
                      "figures, and every quality figure measured on it, are not comparable with the original course's "
                      "Alpaca / GSM8K data")
NORMALISATION = "NFKC, casefold, whitespace collapsed to single spaces"
FIELDS = ("id", "system", "instruction", "input", "output", "source")
"""Every field of a record (all str); `system` and `input` may be empty, `instruction` and `output` may not."""

TASK = lab_tasks.SECOND_TASK
"""The task the chain teaches: two-digit addition, the reply is the sum plus one."""
REPLAY_TASK = lab_tasks.PRETRAINING_TASK
"""The base's own task (plain sums): replay records, and the regression suites of `base_skill_suite`."""
TASK_SYSTEM = lab_tasks.task(TASK).system
LINES = ("arith-plus-one", "arith-plus-one-conflicting")
EVALUATION_SEED, EVALUATION_SIZE = 6401, 400
VALIDATION_SIZE = 320
TRAIN_GENERATED, TRAIN_SYNTHETIC, TRAIN_REPLAY = 240, 60, 300
DELIVERY_SEED = 6402
TEACHER_SEED = 6403
MAX_LENGTH = 64
"""Tokens of a whole chat sample (template included) the training stages take; longer is over-length."""

SYNTHETIC_TEMPLATES = (
    ("What is {a} plus {b}? Reply with the integer result only.", ""),
    ("Compute the sum. Reply with the integer result only.", "{a} + {b}"),
    ("Add {b} to {a}. Reply with the integer result only.", ""),
)
"""The pipeline's paraphrases of the user turn: (instruction, input); one puts the problem in the input field."""

TEACHER_MIX = (("correct", 0.9), ("verbose", 0.05), ("forgot_plus_one", 0.05))
"""How the simulated teacher answers (a teaching assumption, not a measured model)."""

PLUS_ONE_SYSTEMS = ("add one to the result.",)
"""The system instructions (normalised) whose answer is the sum plus one; an empty system asks for the sum."""

LONG_PREAMBLE = ("Context: this question comes from a worksheet about two-digit numbers that a class of students "
                 "completed last week, and the teacher wants every answer checked twice before grading. ")


def normalise(text: str) -> str:
    """NFKC, casefold, then every run of whitespace as one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def content_key(record: Mapping) -> str:
    """A record's task content, normalised: its system instruction, instruction and input together
    (where the problem stands, in the instruction or in the input, does not matter)."""
    return normalise(f"{record.get('system', '')} {record['instruction']} {record['input']}")


def chat_prompt(record: Mapping) -> str:
    """The user turn of a record's chat: the instruction, then the input on its own line if any."""
    return record["instruction"] if not record["input"] else f"{record['instruction']}\n{record['input']}"


def chat_messages(record: Mapping) -> list[dict]:
    """The chat a model sees: the record's system turn when it has one (else the template's default),
    then the user turn."""
    system = [{"role": "system", "content": record["system"]}] if record.get("system") else []
    return system + [{"role": "user", "content": chat_prompt(record)}]


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def split_sha256(records: Sequence[Mapping]) -> str:
    """sha256 of a split's records (every field), independent of their order."""
    return hashlib.sha256(_canonical(sorted((dict(record) for record in records),
                                            key=lambda record: _canonical(record)))).hexdigest()


def delivery_sha256(splits: Mapping[str, Sequence[Mapping]]) -> str:
    """sha256 naming a delivery's version: every split's hash under its name."""
    return hashlib.sha256(_canonical({name: split_sha256(records) for name, records in splits.items()})).hexdigest()


_PROBLEMS = (re.compile(r"(\d+)\s*\+\s*(\d+)"), re.compile(r"(\d+) plus (\d+)"),
             re.compile(r"add (\d+) to (\d+)"), re.compile(r"sum of (\d+) and (\d+)"))


def problem_identity(record: Mapping) -> str | None:
    """The problem a record asks, whatever its wording: `"add:<smaller>:<larger>"` (addition
    commutes, so "34 + 57", "What is 57 plus 34?" and "Compute the sum." with "34 + 57" in the input
    are one problem), read from the normalised user turn; None when it states no sum or more than one."""
    text = normalise(f"{record['instruction']} {record['input']}")
    found = {tuple(sorted(int(value) for value in match.groups())) for pattern in _PROBLEMS
             for match in pattern.finditer(text)}
    if len(found) != 1:
        return None
    a, b = found.pop()
    return f"add:{a}:{b}"


def expected_answer(record: Mapping) -> int | None:
    """The answer a record's content asks for: the sum (no system instruction) or the sum plus one
    (a plus-one instruction); None for an unknown instruction or no readable problem."""
    identity = problem_identity(record)
    system = normalise(record.get("system", ""))
    if identity is None or (system and system not in PLUS_ONE_SYSTEMS):
        return None
    _, a, b = identity.split(":")
    return int(a) + int(b) + (1 if system else 0)


def verify_answer(record: Mapping) -> bool:
    """True when the record's output is one integer equal to the answer its content asks for
    (`expected_answer`, recomputed); False for a wrong, wordy or unreadable answer, or no problem."""
    expected = expected_answer(record)
    output = normalise(str(record.get("output", "")))
    return expected is not None and re.fullmatch(r"-?\d+", output) is not None and int(output) == expected


def _record(record_id: str, problem: lab_tasks.LabProblem, source: str = "generator", *, system: str | None = None,
            instruction: str | None = None, input_text: str = "", output: str | None = None) -> dict:
    return {"id": record_id, "system": (problem.system or "") if system is None else system,
            "instruction": problem.prompt if instruction is None else instruction, "input": input_text,
            "output": problem.target if output is None else output, "source": source}


def _key(problem: lab_tasks.LabProblem) -> tuple[int, int]:
    return (min(problem.a, problem.b), max(problem.a, problem.b))


def _evaluation_problems() -> list[lab_tasks.LabProblem]:
    return random.Random(EVALUATION_SEED).sample(lab_tasks.problems(TASK, "heldout"), EVALUATION_SIZE)


def frozen_evaluation() -> list[dict]:
    """The frozen evaluation split: EVALUATION_SIZE problems of the lab task's held-out split, drawn
    from their own seed."""
    return [_record(f"eval-{n:03d}", problem, "frozen_evaluation")
            for n, problem in enumerate(_evaluation_problems(), start=1)]


FROZEN_EVALUATION_SHA256 = "181d190d53df3cb0a1df2a167824d18fe09b957bf131bba317a799546312a96f"
"""The pinned hash of `frozen_evaluation()`; the admission refuses an evaluation split that differs."""


def base_skill_suite(split: str) -> list[lab_tasks.LabProblem]:
    """The base's own skill as a regression suite: every plain-sum problem of a lab split
    (`validation` for selection, `heldout` for the final report), none of which the chain trains on."""
    if split not in ("validation", "heldout"):
        raise ConfigError(f"a regression suite reads the validation or heldout split, got {split!r}")
    return lab_tasks.problems(REPLAY_TASK, split)


def _teacher_answer(problem: lab_tasks.LabProblem, rng: random.Random) -> str:
    draw, kind = rng.random(), TEACHER_MIX[-1][0]
    for candidate, probability in TEACHER_MIX:
        if draw < probability:
            kind = candidate
            break
        draw -= probability
    if kind == "verbose":
        return f"The answer is {problem.label}."
    if kind == "forgot_plus_one":
        return str(problem.label - 1)
    return problem.target


def _full_width(text: str) -> str:
    return "".join(chr(ord(char) + 0xFEE0) if "0" <= char <= "9" else char for char in text)


@dataclass(frozen=True)
class Delivery:
    """One data delivery: its line and version, its splits, and what was planted (by id, for the notes)."""

    line: str
    version: str
    parent: str | None
    splits: dict
    planted: dict
    seed: int = DELIVERY_SEED

    @property
    def sha256(self) -> str:
        return delivery_sha256(self.splits)

    def identity(self) -> dict:
        return {"line": self.line, "version": self.version, "parent": self.parent, "content_sha256": self.sha256,
                "builder": RAW_DATA_VERSION, "seed": self.seed, "task": TASK, "replay_task": REPLAY_TASK,
                "records": {name: len(records) for name, records in self.splits.items()},
                "split_sha256": {name: split_sha256(records) for name, records in self.splits.items()}}


def _base_splits(seed: int) -> tuple[list[dict], list[dict], list[lab_tasks.LabProblem]]:
    """Generated, synthetic and replay training records and validation records; no problem identity
    of the evaluation split (either operand order) in any of them."""
    evaluation = {_key(problem) for problem in _evaluation_problems()}
    rng = random.Random(seed)
    validation_pool = [p for p in lab_tasks.problems(TASK, "validation") if _key(p) not in evaluation]
    held = rng.sample(validation_pool, VALIDATION_SIZE)
    apart = evaluation | {_key(problem) for problem in held}
    pool = [p for p in lab_tasks.problems(TASK, "train") if _key(p) not in apart]
    drawn = rng.sample(pool, TRAIN_GENERATED + TRAIN_SYNTHETIC)
    generated, synthetic = drawn[:TRAIN_GENERATED], drawn[TRAIN_GENERATED:]
    replay_pool = [p for p in lab_tasks.problems(REPLAY_TASK, "train") if _key(p) not in apart]
    train = [_record(f"gen-{n:04d}", problem) for n, problem in enumerate(generated, start=1)]
    teacher = random.Random(seed + TEACHER_SEED - DELIVERY_SEED)
    for n, problem in enumerate(synthetic, start=1):
        instruction, input_text = SYNTHETIC_TEMPLATES[n % len(SYNTHETIC_TEMPLATES)]
        train.append(_record(f"syn-{n:03d}", problem, "synthetic",
                             instruction=instruction.format(a=problem.a, b=problem.b),
                             input_text=input_text.format(a=problem.a, b=problem.b),
                             output=_teacher_answer(problem, teacher)))
    train += [_record(f"rep-{n:04d}", problem, "replay")
              for n, problem in enumerate(rng.sample(replay_pool, TRAIN_REPLAY), start=1)]
    validation = [_record(f"val-{n:03d}", problem) for n, problem in enumerate(held, start=1)]
    return train, validation, generated


def build_delivery(line: str = LINES[0], seed: int = DELIVERY_SEED) -> Delivery:
    """Version 1 of a delivery line, with its planted defects (`seed` draws its problems and answers).

    `arith-plus-one` holds defects a deterministic repair removes (duplicates, contract breaks,
    over-long samples, wrong or wordy teacher answers, copies of evaluation problems, some only in
    the pipeline's paraphrases); `arith-plus-one-conflicting` is the same delivery plus two problems
    answered twice with different answers.
    """
    if line not in LINES:
        raise ConfigError(f"unknown delivery line {line!r}; choose one of {', '.join(LINES)}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    train, validation, generated = _base_splits(seed)
    evaluation, problems = frozen_evaluation(), _evaluation_problems()
    planted: dict[str, str] = {}

    def plant(split: list, record: dict, defect: str) -> None:
        split.append(record)
        planted[record["id"]] = defect

    for n, source in enumerate(train[:4], start=1):  # exact copies under new ids
        plant(train, dict(source, id=f"dup-{n}", source="synthetic"), "exact duplicate")
    p1, p2, p3 = generated[10], generated[11], generated[12]
    plant(train, _record("dup-5", p1, "synthetic", instruction=f"COMPUTE {p1.a} + {p1.b}.  Reply with the integer "
                         "result only."), "normalised duplicate (case, spacing)")
    plant(train, _record("dup-6", p2, "synthetic", instruction=_full_width(f"Compute {p2.a} + {p2.b}.") +
                         " Reply with the integer result only."), "normalised duplicate (full-width digits)")
    plant(train, _record("dup-7", p3, "synthetic", instruction="Compute", input_text=f"{p3.a} + {p3.b}. Reply with "
                         "the integer result only."), "normalised duplicate (problem moved to the input)")
    for n, problem in enumerate(generated[20:23], start=1):
        plant(train, _record(f"long-{n}", problem, "synthetic", instruction=LONG_PREAMBLE + problem.prompt),
              "over-long sample")
    plant(train, dict(train[30], id="bad-1", output="  "), "field contract: blank output")
    broken = dict(train[31], id="bad-2")
    broken.pop("input")
    plant(train, broken, "field contract: missing input")
    plant(train, dict(evaluation[0], id="leak-1", source="synthetic"), "copy of an evaluation problem (exact)")
    plant(train, dict(evaluation[1], id="leak-2", source="synthetic",
                      instruction=evaluation[1]["instruction"].upper()), "copy of an evaluation problem (case)")
    plant(train, dict(evaluation[2], id="leak-3", source="synthetic",
                      instruction=_full_width(evaluation[2]["instruction"])),
          "copy of an evaluation problem (full-width)")
    plant(train, dict(validation[0], id="leak-4", source="synthetic",
                      instruction=validation[0]["instruction"].replace(" ", "  ")),
          "copy of a validation problem (spacing)")
    plant(train, dict(evaluation[4], id="leak-6", source="synthetic", instruction="Compute",
                      input=evaluation[4]["instruction"][len("Compute "):]),
          "copy of an evaluation problem (problem moved to the input)")
    for n, (index, template) in enumerate(((5, SYNTHETIC_TEMPLATES[0]), (6, SYNTHETIC_TEMPLATES[1])), start=7):
        problem = problems[index]
        plant(train, _record(f"leak-{n}", problem, "synthetic", instruction=template[0].format(a=problem.a, b=problem.b),
                             input_text=template[1].format(a=problem.a, b=problem.b)),
              "paraphrase of an evaluation problem (the pipeline's own template)")
    problem = problems[7]
    plant(train, _record("leak-9", problem, "synthetic", instruction=PROMPT_TEMPLATE.format(a=problem.b, symbol="+",
                                                                                          b=problem.a)),
          "paraphrase of an evaluation problem (operands swapped)")
    plant(validation, dict(evaluation[3], id="leak-5", source="generator",
                           instruction=evaluation[3]["instruction"].lower()),
          "validation copy of an evaluation problem (case)")
    if line == LINES[1]:
        for n, source in enumerate(train[40:42], start=1):
            plant(train, dict(source, id=f"conflict-{n}", source="synthetic", output=str(int(source["output"]) + 10)),
                  "contradicting answer")
    return Delivery(line, "v1", None, {"train": train, "validation": validation}, planted, seed)


def repaired(delivery: Delivery, drop: Mapping[str, Sequence[str]]) -> Delivery:
    """The next version of a delivery: the same records minus the ids in `drop` (per split)."""
    unknown = {split: sorted(set(ids) - {record.get("id") for record in delivery.splits.get(split, [])})
               for split, ids in drop.items()}
    unknown = {split: ids for split, ids in unknown.items() if ids or split not in delivery.splits}
    if unknown:
        raise ConfigError(f"repair names records the delivery does not hold: {unknown}")
    splits = {name: [dict(record) for record in records if record.get("id") not in set(drop.get(name, ()))]
              for name, records in delivery.splits.items()}
    number = int(delivery.version.lstrip("v")) + 1
    return Delivery(delivery.line, f"v{number}", delivery.version, splits, {}, delivery.seed)
