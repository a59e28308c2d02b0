"""The raw SFT instruction data of the project chain (64 -> 63 / 65 -> 62), built in code.

Nothing is downloaded: a delivery is drawn from the course's arithmetic generator
(`tools.data.arithmetic`, the prompt wording the lab models know) and from a synthetic-instruction
pipeline (paraphrased instructions answered by a seeded simulated teacher that is sometimes verbose
or wrong), and then carries planted defects a data admission must find: exact and normalised
duplicates, contradicting answers, over-long samples, records that break the field contract, and
copies of frozen evaluation problems (leakage). The frozen evaluation split is drawn apart from every
delivery and pinned by its sha256.

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

from tools.data.arithmetic import OPERATIONS, PROMPT_TEMPLATE
from tools.errors import ConfigError

RAW_DATA_VERSION = "sft-raw-instructions/v1"
"""Version of this builder; change it whenever a delivery's drawing rules or planted defects change."""

COMPARABILITY_NOTE = ("built in code from the course's arithmetic generator and a simulated teacher; its counts, "
                      "truncation and overlap figures are not comparable with the original course's Alpaca / GSM8K "
                      "data")
NORMALISATION = "NFKC, casefold, whitespace collapsed to single spaces"
FIELDS = ("id", "instruction", "input", "output", "source")
"""Every field of a record (all str); `input` may be empty, `instruction` and `output` may not."""

OPERATION = "sub"
"""The operation of every problem: a new one for the lab models, pretrained on addition only."""
EVALUATION_SEED, EVALUATION_SIZE = 6401, 48
TRAIN_GENERATED, TRAIN_SYNTHETIC, VALIDATION_SIZE = 240, 60, 40
DELIVERY_SEED = 6402
TEACHER_SEED = 6403
MAX_LENGTH = 64
"""Tokens of a whole chat sample (template included) the training stages take; longer is over-length."""

SYNTHETIC_TEMPLATES = (
    ("Subtract {b} from {a}. Reply with the integer result only.", ""),
    ("Compute the difference. Reply with the integer result only.", "{a} - {b}"),
    ("What is {a} minus {b}? Reply with the integer result only.", ""),
)
"""The pipeline's paraphrases: (instruction, input); some put the problem in the input field."""

TEACHER_MIX = (("correct", 0.9), ("verbose", 0.05), ("off_by_one", 0.05))
"""How the simulated teacher answers (a teaching assumption, not a measured model)."""

LONG_PREAMBLE = ("Context: this question comes from a worksheet about two-digit numbers that a class of students "
                 "completed last week, and the teacher wants every answer checked twice before grading. ")


def normalise(text: str) -> str:
    """NFKC, casefold, then every run of whitespace as one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def content_key(record: Mapping) -> str:
    """A record's task content, normalised: instruction and input together (where the problem
    stands, in the instruction or in the input, does not matter)."""
    return normalise(f"{record['instruction']} {record['input']}")


def chat_prompt(record: Mapping) -> str:
    """The user turn of a record's chat: the instruction, then the input on its own line if any."""
    return record["instruction"] if not record["input"] else f"{record['instruction']}\n{record['input']}"


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def split_sha256(records: Sequence[Mapping]) -> str:
    """sha256 of a split's records (every field), independent of their order."""
    return hashlib.sha256(_canonical(sorted((dict(record) for record in records),
                                            key=lambda record: _canonical(record)))).hexdigest()


def delivery_sha256(splits: Mapping[str, Sequence[Mapping]]) -> str:
    """sha256 naming a delivery's version: every split's hash under its name."""
    return hashlib.sha256(_canonical({name: split_sha256(records) for name, records in splits.items()})).hexdigest()


_PROBLEM = re.compile(r"(\d+)\s*(?:-|minus)\s*(\d+)|subtract\s+(\d+)\s+from\s+(\d+)")


def verify_answer(record: Mapping) -> bool:
    """True when the record's output is one integer equal to its problem's difference, recomputed
    from the normalised content; False for a wrong, wordy or unreadable answer, or no problem."""
    match = _PROBLEM.search(content_key(record))
    output = normalise(str(record.get("output", "")))
    if match is None or not re.fullmatch(r"-?\d+", output):
        return False
    a, b = (int(match.group(1)), int(match.group(2))) if match.group(1) else (int(match.group(4)),
                                                                              int(match.group(3)))
    return int(output) == a - b


def _problems() -> list[tuple[int, int]]:
    return [(a, b) for a in range(10, 100) for b in range(10, a + 1)]


def _record(record_id: str, a: int, b: int, source: str = "generator", *, instruction: str | None = None,
            input_text: str = "", output: str | None = None) -> dict:
    symbol = OPERATIONS[OPERATION][0]
    return {"id": record_id, "instruction": instruction or PROMPT_TEMPLATE.format(a=a, symbol=symbol, b=b),
            "input": input_text, "output": str(a - b) if output is None else output, "source": source}


def _evaluation_problems() -> list[tuple[int, int]]:
    return random.Random(EVALUATION_SEED).sample(_problems(), EVALUATION_SIZE)


def frozen_evaluation() -> list[dict]:
    """The frozen evaluation split: EVALUATION_SIZE problems drawn from their own seed."""
    return [_record(f"eval-{n:03d}", a, b, "frozen_evaluation")
            for n, (a, b) in enumerate(_evaluation_problems(), start=1)]


FROZEN_EVALUATION_SHA256 = "d37be42c583dfc193925869400aaec0208c0df134cf4c04b2ef383e2fb5163d3"
"""The pinned hash of `frozen_evaluation()`; the admission refuses an evaluation split that differs."""


def _teacher_answer(a: int, b: int, rng: random.Random) -> tuple[str, str]:
    draw, kind = rng.random(), TEACHER_MIX[-1][0]
    for candidate, probability in TEACHER_MIX:
        if draw < probability:
            kind = candidate
            break
        draw -= probability
    if kind == "verbose":
        return kind, f"The answer is {a - b}."
    if kind == "off_by_one":
        return kind, str(a - b + rng.choice((-1, 1)))
    return kind, str(a - b)


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
                "builder": RAW_DATA_VERSION, "seed": self.seed, "records": {name: len(records) for name, records in self.splits.items()},
                "split_sha256": {name: split_sha256(records) for name, records in self.splits.items()}}


def _base_splits(seed: int) -> tuple[list[dict], list[dict], list[tuple[int, int]]]:
    """Generated and synthetic training records and validation records, on problems apart from evaluation."""
    evaluation = set(_evaluation_problems())
    pool = [problem for problem in _problems() if problem not in evaluation]
    rng = random.Random(seed)
    drawn = rng.sample(pool, TRAIN_GENERATED + TRAIN_SYNTHETIC + VALIDATION_SIZE)
    generated, synthetic, held = (drawn[:TRAIN_GENERATED], drawn[TRAIN_GENERATED:TRAIN_GENERATED + TRAIN_SYNTHETIC],
                                  drawn[TRAIN_GENERATED + TRAIN_SYNTHETIC:])
    train = [_record(f"gen-{n:04d}", a, b) for n, (a, b) in enumerate(generated, start=1)]
    teacher = random.Random(seed + TEACHER_SEED - DELIVERY_SEED)
    for n, (a, b) in enumerate(synthetic, start=1):
        instruction, input_text = SYNTHETIC_TEMPLATES[n % len(SYNTHETIC_TEMPLATES)]
        _, answer = _teacher_answer(a, b, teacher)
        train.append(_record(f"syn-{n:03d}", a, b, "synthetic", instruction=instruction.format(a=a, b=b),
                             input_text=input_text.format(a=a, b=b), output=answer))
    validation = [_record(f"val-{n:03d}", a, b) for n, (a, b) in enumerate(held, start=1)]
    return train, validation, generated


def build_delivery(line: str = "arith-sub", seed: int = DELIVERY_SEED) -> Delivery:
    """Version 1 of a delivery line, with its planted defects (`seed` draws its problems and answers).

    `arith-sub` holds defects a deterministic repair removes (duplicates, contract breaks, over-long
    samples, wrong or wordy teacher answers, copies of evaluation problems); `arith-sub-conflicting`
    is the same delivery plus two problems answered twice with different answers.
    """
    if line not in ("arith-sub", "arith-sub-conflicting"):
        raise ConfigError(f"unknown delivery line {line!r}; choose arith-sub or arith-sub-conflicting")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an int, got {seed!r}")
    train, validation, generated = _base_splits(seed)
    evaluation = frozen_evaluation()
    planted: dict[str, str] = {}

    def plant(split: list, record: dict, defect: str) -> None:
        split.append(record)
        planted[record["id"]] = defect

    for n, source in enumerate(train[:4], start=1):  # exact copies under new ids
        plant(train, dict(source, id=f"dup-{n}", source="synthetic"), "exact duplicate")
    (a1, b1), (a2, b2), (a3, b3) = generated[10], generated[11], generated[12]
    plant(train, _record("dup-5", a1, b1, "synthetic", instruction=f"COMPUTE {a1} - {b1}.  Reply with the integer "
                         "result only."), "normalised duplicate (case, spacing)")
    plant(train, _record("dup-6", a2, b2, "synthetic", instruction=_full_width(f"Compute {a2} - {b2}.") +
                         " Reply with the integer result only."), "normalised duplicate (full-width digits)")
    plant(train, _record("dup-7", a3, b3, "synthetic", instruction="Compute", input_text=f"{a3} - {b3}. Reply with "
                         "the integer result only."), "normalised duplicate (problem moved to the input)")
    for n, (a, b) in enumerate(generated[20:23], start=1):
        plant(train, _record(f"long-{n}", a, b, "synthetic", instruction=LONG_PREAMBLE + PROMPT_TEMPLATE.format(
            a=a, symbol="-", b=b)), "over-long sample")
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
    plant(validation, dict(evaluation[3], id="leak-5", source="generator",
                           instruction=evaluation[3]["instruction"].lower()),
          "validation copy of an evaluation problem (case)")
    if line == "arith-sub-conflicting":
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
