# mutant: sorted_group_ends
# exercise: build_online_pairs
# mistake: a learner's version that sorts each group by score and takes the two ends, so among equal best scores the last one wins.
import math


def _valid(groups, current_version):
    if not isinstance(current_version, str) or not current_version.strip() or not isinstance(groups, (list, tuple)):
        raise ValueError("bad arguments")
    ids = []
    for group in groups:
        if not isinstance(group, dict) or sorted(group) != ["policy_version", "prompt", "prompt_id", "responses", "scores"]:
            raise ValueError("bad group")
        if not isinstance(group["prompt_id"], str) or not group["prompt_id"].strip() or group["prompt_id"] in ids:
            raise ValueError("bad id")
        ids.append(group["prompt_id"])
        if not isinstance(group["prompt"], str) or not isinstance(group["policy_version"], str) \
                or not group["policy_version"].strip():
            raise ValueError("bad prompt or version")
        answers, marks = group["responses"], group["scores"]
        if not isinstance(answers, (list, tuple)) or len(answers) < 2 or any(type(a) is not str for a in answers) \
                or not isinstance(marks, (list, tuple)) or len(marks) != len(answers) \
                or any(type(m) not in (int, float) or not math.isfinite(m) for m in marks):
            raise ValueError("bad responses or scores")


def build_online_pairs(groups, current_version):
    _valid(groups, current_version)
    out = {"pairs": [], "ties": [], "stale": []}
    for group in groups:
        if group["policy_version"] != current_version:
            out["stale"].append(group["prompt_id"])
            continue
        ranked = sorted(range(len(group["scores"])), key=lambda index: group["scores"][index])
        low, high = ranked[0], ranked[-1]
        if group["scores"][low] == group["scores"][high]:
            out["ties"].append(group["prompt_id"])
            continue
        out["pairs"].append({"prompt_id": group["prompt_id"], "prompt": group["prompt"],
                             "chosen": group["responses"][high], "rejected": group["responses"][low],
                             "chosen_score": group["scores"][high], "rejected_score": group["scores"][low],
                             "policy_version": current_version})
    return out
