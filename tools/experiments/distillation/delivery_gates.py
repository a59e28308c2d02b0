"""Project 88's three gates, as the delivery stage runs them (the notebook's TODOs teach the same).

- `comparability`: the teacher and the student are two models of one tokenizer family, and the three
  stages G0 (baseline), G1 (the route's midpoint) and G2 (the candidate) start from the common student
  and read the same development set with the same decoding, value by value and type by type;
- `deployment_gates`: one candidate (one seed) against the baseline student: quality gain, retention of
  what the student already answered, reply format, and latency against the teacher, passed together;
- `terminal_decision`: accept / tune / reject from the comparability check and every seed's gates; only
  `accept` opens the final held-out set and writes the deployment handoff.
"""

from __future__ import annotations

import math

STAGES = ("G0", "G1", "G2")
MODEL_FIELDS = ("model_id", "tokenizer_sha256", "weights_sha256")
STAGE_FIELDS = ("start_sha256", "eval_sha256", "decoding")
GATE_NAMES = ("quality_gain", "retention", "format", "latency")
THRESHOLD_KEYS = ("min_gain", "min_retention", "min_format", "max_latency_ratio")
DECISIONS = ("accept", "tune", "reject")
NEXT_ACTIONS = {
    "accept": "deploy the candidate named in the handoff; the final held-out set was opened once for its report",
    "tune": "no deployment: change the route (anchored and distillation steps, learning rate) and run G1/G2 again "
            "under a new label; the final held-out set stays closed",
    "reject": "no deployment: the comparison is not valid (teacher-student identity, stage inputs) or the route "
              "gains nothing on any seed; fix the pair or the route first; the final held-out set stays closed",
}


def _same(first, second) -> bool:
    """Equal value and equal type, recursively (True is not 1, 0 is not 0.0)."""
    if type(first) is not type(second):
        return False
    if isinstance(first, (list, tuple)):
        return len(first) == len(second) and all(_same(a, b) for a, b in zip(first, second))
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(_same(first[key], second[key]) for key in first)
    return first == second


def _text(value) -> bool:
    return isinstance(value, str) and bool(value)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def comparability(teacher, student, stages):
    """Teacher-student identity and G0/G1/G2 comparability (see the notebook's TODO 1)."""
    for name, model in (("teacher", teacher), ("student", student)):
        if not isinstance(model, dict) or not all(_text(model.get(field)) for field in MODEL_FIELDS):
            raise ValueError(f"{name} must be a dict with non-empty str {', '.join(MODEL_FIELDS)}")
    if not isinstance(stages, dict) or set(stages) != set(STAGES) or len(stages) != len(STAGES):
        raise ValueError("stages must be a dict with exactly the keys G0, G1, G2")
    for stage in STAGES:
        entry = stages[stage]
        if not isinstance(entry, dict) or not _text(entry.get("start_sha256")) or not _text(entry.get("eval_sha256")) \
                or not isinstance(entry.get("decoding"), dict) or not all(isinstance(k, str) for k in entry["decoding"]):
            raise ValueError(f"stage {stage} needs non-empty str start_sha256 and eval_sha256 and a decoding dict")
    findings = []
    if teacher["weights_sha256"] == student["weights_sha256"]:
        findings.append("teacher_is_student")
    if teacher["tokenizer_sha256"] != student["tokenizer_sha256"]:
        findings.append("tokenizer_family")
    findings += [f"start:{stage}" for stage in STAGES if stages[stage]["start_sha256"] != student["weights_sha256"]]
    baseline = stages["G0"]
    for stage in STAGES[1:]:
        if stages[stage]["eval_sha256"] != baseline["eval_sha256"]:
            findings.append(f"evaluation:{stage}")
        if not _same(stages[stage]["decoding"], baseline["decoding"]):
            findings.append(f"decoding:{stage}")
    return {"comparable": not findings, "findings": findings}


def _outcomes(name, value):
    if not isinstance(value, dict) or not _number(value.get("latency_s")) or value["latency_s"] <= 0:
        raise ValueError(f"{name} must be a dict with a finite latency_s > 0")
    for field in ("correct", "formatted"):
        items = value.get(field)
        if not isinstance(items, list) or not items or not all(isinstance(item, bool) for item in items):
            raise ValueError(f"{name}[{field!r}] must be a non-empty list of bools")
    if len(value["correct"]) != len(value["formatted"]):
        raise ValueError(f"{name}'s correct and formatted lists differ in length")


def check_thresholds(thresholds) -> None:
    """ValueError unless `thresholds` holds exactly the four gates' thresholds, finite and in their ranges."""
    if not isinstance(thresholds, dict) or set(thresholds) != set(THRESHOLD_KEYS) \
            or not all(_number(thresholds[key]) for key in THRESHOLD_KEYS):
        raise ValueError(f"thresholds must hold exactly {', '.join(THRESHOLD_KEYS)} as finite numbers")
    if not -1 <= thresholds["min_gain"] <= 1 or not 0 <= thresholds["min_retention"] <= 1 \
            or not 0 <= thresholds["min_format"] <= 1 or thresholds["max_latency_ratio"] <= 0:
        raise ValueError("min_gain in [-1, 1], min_retention and min_format in [0, 1], max_latency_ratio > 0")


def deployment_gates(baseline, candidate, teacher_latency_s, thresholds):
    """One candidate's quality-retention and deployment-gain gates (see the notebook's TODO 2)."""
    _outcomes("baseline", baseline)
    _outcomes("candidate", candidate)
    if len(baseline["correct"]) != len(candidate["correct"]):
        raise ValueError("baseline and candidate must score the same problems")
    if not _number(teacher_latency_s) or teacher_latency_s <= 0:
        raise ValueError("teacher_latency_s must be a finite number > 0")
    check_thresholds(thresholds)
    count = len(candidate["correct"])
    gain = (sum(candidate["correct"]) - sum(baseline["correct"])) / count
    known = [index for index, correct in enumerate(baseline["correct"]) if correct]
    retention = sum(candidate["correct"][index] for index in known) / len(known) if known else None
    formatted = sum(candidate["formatted"]) / count
    ratio = candidate["latency_s"] / teacher_latency_s
    gates = [
        {"name": "quality_gain", "threshold": thresholds["min_gain"], "measured": gain,
         "passed": gain >= thresholds["min_gain"]},
        {"name": "retention", "threshold": thresholds["min_retention"], "measured": retention,
         "passed": retention is None or retention >= thresholds["min_retention"]},
        {"name": "format", "threshold": thresholds["min_format"], "measured": formatted,
         "passed": formatted >= thresholds["min_format"]},
        {"name": "latency", "threshold": thresholds["max_latency_ratio"], "measured": ratio,
         "passed": ratio <= thresholds["max_latency_ratio"]},
    ]
    return {"gates": gates, "qualifies": all(gate["passed"] for gate in gates)}


def terminal_decision(comparable, seed_gates):
    """accept / tune / reject and the terminal rule (see the notebook's TODO 3)."""
    if not isinstance(comparable, dict) or not isinstance(comparable.get("comparable"), bool) \
            or not isinstance(comparable.get("findings"), list) \
            or not all(isinstance(finding, str) and finding for finding in comparable["findings"]) \
            or comparable["comparable"] != (not comparable["findings"]):
        raise ValueError("comparable must be a consistent comparability result")
    if not isinstance(seed_gates, dict) or not seed_gates:
        raise ValueError("seed_gates must be a non-empty dict seed -> deployment_gates result")
    passed = {}
    for seed, result in seed_gates.items():
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed {seed!r} must be an int")
        gates = result.get("gates") if isinstance(result, dict) else None
        if not isinstance(gates, list) or not all(isinstance(gate, dict) for gate in gates) \
                or [gate.get("name") for gate in gates] != list(GATE_NAMES) \
                or not all(isinstance(gate.get("passed"), bool) for gate in gates) \
                or result.get("qualifies") is not all(gate["passed"] for gate in gates):
            raise ValueError(f"seed {seed}: gates must be a consistent deployment_gates result")
        passed[seed] = {gate["name"]: gate["passed"] for gate in gates}
    reasons = [f"incomparable:{finding}" for finding in comparable["findings"]]
    reasons += [f"seed_{seed}:{name}" for seed in sorted(passed) for name in GATE_NAMES if not passed[seed][name]]
    qualifying = [seed for seed in sorted(passed) if all(passed[seed].values())] if comparable["comparable"] else []
    if not comparable["comparable"]:
        decision = "reject"
    elif len(qualifying) == len(passed):
        decision = "accept"
    elif not any(passed[seed]["quality_gain"] for seed in passed):
        decision = "reject"
    else:
        decision = "tune"
    opened = decision == "accept"
    return {"decision": decision, "reasons": reasons, "qualifying_seeds": qualifying, "open_final_heldout": opened,
            "write_handoff": opened, "next_action": NEXT_ACTIONS[decision]}
