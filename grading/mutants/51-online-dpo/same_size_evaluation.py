# mutant: same_size_evaluation
# exercise: adoption_gate
# mistake: a learner's gate that checks only that as many outcomes came back as there are evaluation prompts, not that they are the same prompts.
import math


def _settings_ok(eval_prompt_ids, confidence, min_decisive):
    ids_ok = isinstance(eval_prompt_ids, (list, tuple)) and eval_prompt_ids and len(set(eval_prompt_ids)) == len(eval_prompt_ids) \
        and all(isinstance(i, str) and i.strip() for i in eval_prompt_ids)
    numbers_ok = type(confidence) in (int, float) and math.isfinite(confidence) and 0 < confidence < 1 \
        and type(min_decisive) is int and min_decisive >= 1
    if not (ids_ok and numbers_ok):
        raise ValueError("bad evaluation set or settings")


def _tally(outcomes, size):
    if not isinstance(outcomes, dict) or len(outcomes) != size:
        raise ValueError("outcomes do not match the evaluation set")
    counts = {"win": 0, "loss": 0, "tie": 0}
    for verdict in outcomes.values():
        if verdict not in counts:
            raise ValueError("unknown outcome")
        counts[verdict] += 1
    return counts


def adoption_gate(outcomes, eval_prompt_ids, confidence=0.95, min_decisive=8):
    _settings_ok(eval_prompt_ids, confidence, min_decisive)
    c = _tally(outcomes, len(eval_prompt_ids))
    n = c["win"] + c["loss"]
    bounds = wilson_interval(c["win"], n, confidence) if n else None
    verdict = ("keep", "too_few_decisive") if n < min_decisive else ("adopt", None) if bounds[0] > 0.5 else ("keep", "not_better")
    return dict(wins=c["win"], losses=c["loss"], ties=c["tie"], decisive=n, win_rate=c["win"] / n if n else None,
                interval=bounds, decision=verdict[0], reason=verdict[1])
