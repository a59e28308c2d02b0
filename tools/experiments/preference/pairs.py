"""Preference data from a model's own samples on the arithmetic task, judged by the verifier.

`verified_pairs`: per prompt, the first correct sample as chosen and the first wrong sample (after
whitespace normalisation, different from the chosen text) as rejected; a prompt whose samples are
all right or all wrong gives no pair and is counted. `binary_examples`: every distinct sample with its
verdict (desirable = correct), the unpaired data of KTO.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.data.arithmetic import ArithmeticTask, score_response


def _normalised(text: str) -> str:
    return " ".join(text.split())


def verified_pairs(tasks: Sequence[ArithmeticTask], replies: Sequence[Sequence[str]]) -> tuple[list[dict], dict]:
    """`(pairs, counts)`: pairs `{"task_id", "prompt", "chosen", "rejected"}` in task order, and how many
    prompts were all right, all wrong or paired."""
    pairs, counts = [], {"paired": 0, "all_right": 0, "all_wrong": 0}
    for task, group in zip(tasks, replies, strict=True):
        right = [reply for reply in group if score_response(task, reply)["correct"]]
        wrong = [reply for reply in group if not score_response(task, reply)["correct"]]
        if not right or not wrong:
            counts["all_wrong" if not right else "all_right"] += 1
            continue
        chosen = right[0]
        rejected = next((reply for reply in wrong if _normalised(reply) != _normalised(chosen)), None)
        if rejected is None:
            counts["all_right"] += 1
            continue
        pairs.append({"task_id": task.task_id, "prompt": task.prompt, "chosen": chosen, "rejected": rejected})
        counts["paired"] += 1
    return pairs, counts


def binary_examples(tasks: Sequence[ArithmeticTask], replies: Sequence[Sequence[str]]) -> list[dict]:
    """Every distinct sample per prompt as `{"task_id", "prompt", "completion", "label"}` (label: correct)."""
    examples = []
    for task, group in zip(tasks, replies, strict=True):
        seen = set()
        for reply in group:
            key = _normalised(reply)
            if key in seen:
                continue
            seen.add(key)
            examples.append({"task_id": task.task_id, "prompt": task.prompt, "completion": reply,
                             "label": bool(score_response(task, reply)["correct"])})
    return examples
