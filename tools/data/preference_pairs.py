"""Project 84's offline preference pairs, built in code from the chain's task (`add_plus_one`).

Each pair asks one problem of the task (system "Add one to the result.", user "Compute a + b. ...")
and prefers the right reply (the sum plus one) over the mistake the chain's task invites most: the
plain sum, the answer the base was pretrained to give ("forgot plus one"). The pairs are offline:
written once, before any update, and never re-sampled from the policy.

Splits come from the lab task's own splits (by content hash), so no problem is in two of them:
`train` from the lab task's train split, `validation` from its validation split (read during
training, for the curve), `evaluation` from its heldout split with every problem of 64's frozen
evaluation split (which project 62 already opened) left out. The evaluation split is pinned by its
sha256 before training and opened once, after it.

The raw training delivery carries what an admission must see: a few prompts behind a long context
preamble (their prompt is cut at the prompt limit: the task input is truncated, the pair still
means something) and a few pairs whose chosen reply is a long worked answer (at the sequence limit
the reply is cut: the pair is meaningless and refused), and one pair whose two replies are the same.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Mapping, Sequence

from tools.data import lab_tasks, sft_raw
from tools.errors import ConfigError

PAIRS_VERSION = "offline-dpo-pairs/v1"
TASK = sft_raw.TASK
SPLITS = ("train", "validation", "evaluation")
SIZES = {"cpu_smoke": {"train": 48, "validation": 32, "evaluation": 160},
         "real_gpu": {"train": 24, "validation": 16, "evaluation": 160}}
"""Raw pairs per split (real_gpu: the original course's 24 training pairs; its 16 evaluation pairs are
too few for one pair to sit well below a decision threshold, so both modes judge 160)."""
PLANTED = {"long_context": 2, "long_reply": 2, "identical": 1}
"""Defects planted in the raw training split (their positions drawn with the split's seed)."""
SEEDS = {"train": 8401, "validation": 8402, "evaluation": 8403}
LONG_PREAMBLE = sft_raw.LONG_PREAMBLE
COMPARABILITY_NOTE = ("preference pairs built in code on the lab task (the sum plus one against the plain sum); the "
                      "original course's 24 / 16 pairs of length 1024 are other data: figures are not comparable")


def _key(problem: lab_tasks.LabProblem) -> tuple[int, int]:
    return (min(problem.a, problem.b), max(problem.a, problem.b))


def _pool(split: str) -> list[lab_tasks.LabProblem]:
    lab_split = {"train": "train", "validation": "validation", "evaluation": "heldout"}[split]
    pool = lab_tasks.problems(TASK, lab_split)
    if split == "evaluation":
        opened = {(min(int(a), int(b)), max(int(a), int(b))) for a, b in
                  (sft_raw.problem_identity(record).split(":")[1:] for record in sft_raw.frozen_evaluation())}
        pool = [problem for problem in pool if _key(problem) not in opened]
    return pool


def worked_reply(problem: lab_tasks.LabProblem) -> str:
    """A long worked answer (right, but far longer than the task's one-integer reply)."""
    return (f"Let me work it out step by step: {problem.a} + {problem.b} = {problem.label - 1}, and adding one "
            f"more gives {problem.label}. So the answer is {problem.label}.")


def _pair(pair_id: str, split: str, problem: lab_tasks.LabProblem, *, messages=None, chosen=None,
          rejected=None, planted=None) -> dict:
    return {"id": pair_id, "split": split, "content_sha256": problem.content_sha256,
            "messages": messages or problem.messages(), "chosen": problem.target if chosen is None else chosen,
            "rejected": str(problem.label - 1) if rejected is None else rejected, "planted": planted}


def build_split(split: str, run_mode: str = "cpu_smoke") -> list[dict]:
    """The raw pairs of one split (the train split with its planted defects), in a fixed order."""
    if split not in SPLITS:
        raise ConfigError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if run_mode not in SIZES:
        raise ConfigError(f"pairs are built for cpu_smoke or real_gpu, got {run_mode!r}")
    size = SIZES[run_mode][split]
    rng = random.Random(SEEDS[split])
    problems = rng.sample(_pool(split), size)
    pairs = [_pair(f"{split[:4]}-{n:03d}", split, problem) for n, problem in enumerate(problems, start=1)]
    if split != "train":
        return pairs
    slots = rng.sample(range(size), sum(PLANTED.values()))
    kinds = [kind for kind, count in PLANTED.items() for _ in range(count)]
    for slot, kind in zip(slots, kinds):
        problem, pair = problems[slot], pairs[slot]
        if kind == "long_context":
            system, user = problem.messages()
            pairs[slot] = _pair(pair["id"], split, problem, planted=kind,
                                messages=[system, {"role": "user", "content": LONG_PREAMBLE + user["content"]}])
        elif kind == "long_reply":
            pairs[slot] = _pair(pair["id"], split, problem, chosen=worked_reply(problem), planted=kind)
        else:
            pairs[slot] = _pair(pair["id"], split, problem, rejected=problem.target, planted=kind)
    return pairs


def build_pairs(run_mode: str = "cpu_smoke") -> dict[str, list[dict]]:
    """Every split's raw pairs."""
    return {split: build_split(split, run_mode) for split in SPLITS}


def pairs_sha256(pairs: Sequence[Mapping]) -> str:
    """sha256 of a split's pairs (every field, in their order)."""
    payload = json.dumps(list(pairs), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def prompt_text(pair: Mapping) -> str:
    """A pair's prompt as one string (system and user turns), the key `independent_evaluation` compares."""
    return "\n".join(f"{message['role']}: {message['content']}" for message in pair["messages"])
