"""Project 84's three gates, as the offline DPO stage runs them (the notebook's TODOs teach the same).

- `admit_pairs`: preference-data admission. A prompt longer than the prompt limit is cut (its end is
  kept) and counted; a pair whose longer reply no longer fits the sequence limit after that is refused
  (a cut reply makes the preference meaningless: the judged ending is gone), and so is a pair whose
  two replies are the same text. Prompt and response truncation are measured apart; the data is
  `accept`ed, sent back to `tune` (too many task inputs cut) or `reject`ed (too few pairs left).
- `independent_evaluation`: held-out pairs never trained on, each judged in both orders (the chosen
  reply first, then second) by the implicit reward (policy minus reference log-probability); a pair
  counts only when both orders prefer the chosen reply; the pair accuracy with its Wilson interval
  against chance (0.5); the chosen and the rejected replies' log-ratios reported apart.
- `adoption_decision`: the quality-resource decision against 62's adapter: accept / tune / reject
  from held-out pair accuracy, the paired task gain, the regression gate on what 62's adapter
  already knew, and the training memory and serving cost.
"""

from __future__ import annotations

import math

WILSON_Z = 1.96
"""The normal quantile of the two-sided 95 % Wilson interval of the held-out pair accuracy."""
ORDERS = ("chosen_first", "rejected_first")
GATES = ("data_admitted", "pairs_beat_chance", "task_gain", "base_skill_kept", "memory_within_budget",
         "serving_cost_unchanged")
REJECTING = ("data_admitted", "pairs_beat_chance", "base_skill_kept")
"""The gates whose failure rejects the candidate (the others send it back to tune)."""
NEXT_ACTIONS = {
    "accept": "hand the DPO adapter and this candidate manifest to 86 (lifecycle and recovery)",
    "tune": "keep serving 62's adapter; change the budget (pairs, updates, beta) or the resources and run 84 again "
            "under a new label",
    "reject": "keep serving 62's adapter; the candidate is not used: fix the data or the recipe before any rerun",
}


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def admit_pairs(pairs, max_prompt_tokens, max_length, max_prompt_truncation, min_pairs):
    """Admission of preference pairs by their token counts (see the notebook's TODO 1)."""
    if not all(_count(v) and v >= 1 for v in (max_prompt_tokens, max_length, min_pairs)) \
            or max_prompt_tokens >= max_length:
        raise ValueError("max_prompt_tokens, max_length and min_pairs must be ints >= 1, the prompt limit below max_length")
    if not _number(max_prompt_truncation) or not 0 <= max_prompt_truncation <= 1:
        raise ValueError("max_prompt_truncation must be a finite number in [0, 1]")
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise ValueError("pairs must be a non-empty list or tuple")
    seen = set()
    for pair in pairs:
        if not isinstance(pair, dict) or not isinstance(pair.get("id"), str) or not pair["id"] or pair["id"] in seen:
            raise ValueError("every pair is a dict with a unique non-empty str id")
        seen.add(pair["id"])
        if not all(_count(pair.get(key)) and pair[key] >= 1 for key in ("prompt_tokens", "chosen_tokens",
                                                                          "rejected_tokens")):
            raise ValueError(f"pair {pair['id']!r}: token counts must be ints >= 1")
        if not all(isinstance(pair.get(key), str) for key in ("chosen", "rejected")):
            raise ValueError(f"pair {pair['id']!r}: chosen and rejected must be str")
    admitted, refused, prompt_cut, response_cuts = [], [], [], 0
    for pair in pairs:
        kept_prompt = min(pair["prompt_tokens"], max_prompt_tokens)
        reasons = []
        if kept_prompt + max(pair["chosen_tokens"], pair["rejected_tokens"]) > max_length:
            reasons.append("response_truncated")
            response_cuts += 1
        if pair["chosen"].split() == pair["rejected"].split():
            reasons.append("identical_responses")
        if reasons:
            refused.append({"id": pair["id"], "reasons": reasons})
            continue
        admitted.append(pair["id"])
        if pair["prompt_tokens"] > max_prompt_tokens:
            prompt_cut.append(pair["id"])
    prompt_rate = len(prompt_cut) / len(admitted) if admitted else None
    if len(admitted) < min_pairs:
        decision = "reject"
    elif prompt_rate > max_prompt_truncation:
        decision = "tune"
    else:
        decision = "accept"
    return {"admitted": admitted, "refused": refused, "prompt_truncated": prompt_cut,
            "prompt_truncation_rate": prompt_rate, "response_truncation_rate": response_cuts / len(pairs),
            "decision": decision}


def _wilson(successes: int, total: int, z: float = WILSON_Z) -> list[float]:
    share = successes / total
    centre = (share + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(share * (1 - share) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [centre - half, centre + half]


def independent_evaluation(judgements, train_prompts):
    """Held-out pair accuracy from judgements in both orders (see the notebook's TODO 2)."""
    if not isinstance(judgements, (list, tuple)) or not judgements:
        raise ValueError("judgements must be a non-empty list or tuple")
    if not isinstance(train_prompts, (list, tuple)) or not all(isinstance(prompt, str) for prompt in train_prompts):
        raise ValueError("train_prompts must be a list or tuple of str")
    by_pair: dict[str, dict] = {}
    for judgement in judgements:
        if not isinstance(judgement, dict) or not isinstance(judgement.get("pair_id"), str) or not judgement["pair_id"]:
            raise ValueError("every judgement is a dict with a non-empty str pair_id")
        if not isinstance(judgement.get("prompt"), str) or judgement.get("order") not in ORDERS:
            raise ValueError(f"judgement of {judgement['pair_id']!r}: a str prompt and an order in {ORDERS}")
        if not all(_number(judgement.get(key)) for key in ("policy_first", "policy_second", "reference_first",
                                                          "reference_second")):
            raise ValueError(f"judgement of {judgement['pair_id']!r}: four finite log-probabilities")
        orders = by_pair.setdefault(judgement["pair_id"], {})
        if judgement["order"] in orders:
            raise ValueError(f"pair {judgement['pair_id']!r} is judged twice in the order {judgement['order']}")
        orders[judgement["order"]] = judgement
    for pair_id, orders in by_pair.items():
        if len(orders) != 2 or orders["chosen_first"]["prompt"] != orders["rejected_first"]["prompt"]:
            raise ValueError(f"pair {pair_id!r} needs both orders with the same prompt")
    seen = set(train_prompts)
    leaked = sorted(pair_id for pair_id, orders in by_pair.items() if orders["chosen_first"]["prompt"] in seen)
    outcome = {"correct": 0, "wrong": 0, "inconsistent": 0}
    chosen_ratios, rejected_ratios = [], []
    for pair_id, orders in by_pair.items():
        if pair_id in leaked:
            continue
        wins = 0
        losses = 0
        for order, judgement in orders.items():
            first = judgement["policy_first"] - judgement["reference_first"]
            second = judgement["policy_second"] - judgement["reference_second"]
            chosen, rejected = (first, second) if order == "chosen_first" else (second, first)
            chosen_ratios.append(chosen)
            rejected_ratios.append(rejected)
            wins += chosen > rejected
            losses += chosen < rejected
        outcome["correct" if wins == 2 else "wrong" if losses == 2 else "inconsistent"] += 1
    judged = sum(outcome.values())
    accuracy = outcome["correct"] / judged if judged else None
    interval = _wilson(outcome["correct"], judged) if judged else None
    return {"pairs": judged, **outcome, "leaked": leaked, "pair_accuracy": accuracy, "interval": interval,
            "beats_chance": interval is not None and interval[0] > 0.5,
            "chosen_logratio": sum(chosen_ratios) / len(chosen_ratios) if judged else None,
            "rejected_logratio": sum(rejected_ratios) / len(rejected_ratios) if judged else None}


def _effect(value, name: str) -> None:
    if not isinstance(value, dict) or not all(_number(value.get(key)) for key in ("mean", "lower", "upper")) \
            or not value["lower"] <= value["mean"] <= value["upper"]:
        raise ValueError(f"{name} must be a paired effect with finite lower <= mean <= upper")


def adoption_decision(admission, evaluation, task_gain, skill_change, resources, tolerance):
    """accept / tune / reject against 62's adapter, with every gate (see the notebook's TODO 3)."""
    if not isinstance(admission, dict) or admission.get("decision") not in ("accept", "tune", "reject"):
        raise ValueError("admission must be an admit_pairs result")
    if not isinstance(evaluation, dict) or not isinstance(evaluation.get("beats_chance"), bool):
        raise ValueError("evaluation must be an independent_evaluation result")
    _effect(task_gain, "task_gain")
    _effect(skill_change, "skill_change")
    if not _number(tolerance) or tolerance < 0:
        raise ValueError("tolerance must be a finite number >= 0")
    if not isinstance(resources, dict):
        raise ValueError("resources must be a dict")
    peak, budget = resources.get("peak_memory_bytes"), resources.get("memory_budget_bytes")
    size, baseline_size = resources.get("adapter_bytes"), resources.get("baseline_adapter_bytes")
    if peak is not None and not (_count(peak) and peak >= 0):
        raise ValueError("peak_memory_bytes is None (not measured) or an int >= 0")
    if not all(_count(v) and v >= 1 for v in (budget, size, baseline_size)):
        raise ValueError("memory_budget_bytes, adapter_bytes and baseline_adapter_bytes must be ints >= 1")
    passed = {
        "data_admitted": admission["decision"] == "accept",
        "pairs_beat_chance": evaluation["beats_chance"],
        "task_gain": task_gain["lower"] > 0,
        "base_skill_kept": skill_change["mean"] >= -tolerance,
        "memory_within_budget": peak is not None and peak <= budget,
        "serving_cost_unchanged": size <= baseline_size,
    }
    measured = {"data_admitted": admission["decision"], "pairs_beat_chance": evaluation.get("interval"),
                "task_gain": task_gain["lower"], "base_skill_kept": skill_change["mean"],
                "memory_within_budget": peak, "serving_cost_unchanged": size}
    thresholds = {"data_admitted": "accept", "pairs_beat_chance": "interval lower end > 0.5",
                  "task_gain": "interval lower end > 0", "base_skill_kept": -tolerance,
                  "memory_within_budget": budget, "serving_cost_unchanged": baseline_size}
    gates = [{"name": name, "threshold": thresholds[name], "measured": measured[name], "passed": passed[name]}
             for name in GATES]
    reasons = [name for name in GATES if not passed[name]]
    decision = ("reject" if any(name in REJECTING for name in reasons) else "tune" if reasons else "accept")
    return {"decision": decision, "reasons": reasons, "gates": gates, "next_action": NEXT_ACTIONS[decision]}
