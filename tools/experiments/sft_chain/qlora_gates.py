"""Project 65's three gates, as the QLoRA branch stage runs them (the notebook's TODOs teach the same).

- `paired_deltas`: NF4 base against bf16 base, paired by seed: relative peak-memory and step-time
  deltas and the absolute quality delta per seed, and their means; a measurement not taken stays None
  and an unpaired or failed seed is listed, never averaged in.
- `capacity_gain`: the largest batch that fits the memory budget on each base (a ladder recorded
  apart from the quality pair), and whether 4-bit buys a larger one (or a fit where bf16 has none).
- `branch_decision`: QLoRA is accepted only where it buys capacity the budget needs with quality kept;
  a smaller peak alone, or capacity nobody measured, is `tune`; lost quality or no usable pair is
  `reject`.
"""

from __future__ import annotations

import math

STATUSES = ("ok", "oom", "failed")
METRICS = ("peak_memory_bytes", "step_time_s", "quality")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_runs(name, runs):
    if not isinstance(runs, dict):
        raise ValueError(f"{name} must be a dict {{seed: run}}")
    for seed, run in runs.items():
        if not _is_int(seed) or not isinstance(run, dict) or run.get("status") not in STATUSES:
            raise ValueError(f"{name}[{seed!r}] must be a run dict with a status of {STATUSES}, under an int seed")
        for metric in METRICS:
            value = run.get(metric)
            if value is not None and (not _finite(value) or value < 0 and metric != "quality"):
                raise ValueError(f"{name}[{seed}] {metric} must be None or a finite number (>= 0 unless quality)")


def paired_deltas(nf4_runs, bf16_runs):
    """Per-seed deltas of the NF4 base against the bf16 base (see the notebook's TODO 1)."""
    _check_runs("nf4_runs", nf4_runs)
    _check_runs("bf16_runs", bf16_runs)
    paired = sorted(seed for seed in set(nf4_runs) & set(bf16_runs)
                    if nf4_runs[seed]["status"] == "ok" and bf16_runs[seed]["status"] == "ok")
    unpaired = sorted((set(nf4_runs) | set(bf16_runs)) - set(paired))
    per_seed = {}
    for seed in paired:
        nf4, bf16 = nf4_runs[seed], bf16_runs[seed]
        row = {}
        for metric, key in (("peak_memory_bytes", "memory_change"), ("step_time_s", "step_time_change")):
            a, b = nf4.get(metric), bf16.get(metric)
            row[key] = (a - b) / b if a is not None and b is not None and b > 0 else None
        a, b = nf4.get("quality"), bf16.get("quality")
        row["quality_delta"] = a - b if a is not None and b is not None else None
        per_seed[seed] = row
    mean = {}
    for key in ("memory_change", "step_time_change", "quality_delta"):
        values = [row[key] for row in per_seed.values() if row[key] is not None]
        mean[key] = sum(values) / len(values) if values else None
    return {"paired": paired, "unpaired": unpaired, "per_seed": per_seed, "mean": mean}


def capacity_gain(ladders, memory_budget):
    """The largest batch that fits on each base, and the gain (see the notebook's TODO 2)."""
    if not _is_int(memory_budget) or memory_budget < 0:
        raise ValueError(f"memory_budget must be an int >= 0 (bytes), got {memory_budget!r}")
    if not isinstance(ladders, dict) or sorted(ladders) != ["bf16", "nf4"]:
        raise ValueError("ladders must be a dict with exactly the keys 'bf16' and 'nf4'")
    largest, measured = {}, {}
    for base in ("bf16", "nf4"):
        steps = ladders[base]
        if not isinstance(steps, (list, tuple)):
            raise ValueError(f"ladders[{base!r}] must be a list of steps")
        sizes = []
        for step in steps:
            if (not isinstance(step, dict) or not _is_int(step.get("batch_size")) or step["batch_size"] < 1
                    or step.get("status") not in STATUSES
                    or not (step.get("peak_memory_bytes") is None
                            or (_is_int(step["peak_memory_bytes"]) and step["peak_memory_bytes"] >= 0))):
                raise ValueError(f"ladders[{base!r}]: malformed step {step!r}")
            sizes.append(step["batch_size"])
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"ladders[{base!r}] tries a batch size twice")
        fits = [step["batch_size"] for step in steps if step["status"] == "ok"
                and step["peak_memory_bytes"] is not None and step["peak_memory_bytes"] <= memory_budget]
        measured[base] = any(step["status"] == "oom" or step["peak_memory_bytes"] is not None for step in steps)
        largest[base] = max(fits) if fits else None
    if not (measured["bf16"] and measured["nf4"]):
        return {"largest": largest, "measured": False, "gain": None, "capacity_gained": None}
    bf16, nf4 = largest["bf16"], largest["nf4"]
    gain = nf4 / bf16 if bf16 and nf4 else None
    gained = nf4 is not None and (bf16 is None or nf4 > bf16)
    return {"largest": largest, "measured": True, "gain": gain, "capacity_gained": gained}


def branch_decision(deltas, capacity, required_batch, quality_tolerance=0.02):
    """accept / tune / reject for the QLoRA branch, with every reason (see the notebook's TODO 3)."""
    if not _is_int(required_batch) or required_batch < 1:
        raise ValueError(f"required_batch must be an int >= 1, got {required_batch!r}")
    if not _finite(quality_tolerance) or quality_tolerance < 0:
        raise ValueError(f"quality_tolerance must be a finite number >= 0, got {quality_tolerance!r}")
    if (not isinstance(deltas, dict) or not isinstance(deltas.get("paired"), (list, tuple))
            or not isinstance(deltas.get("mean"), dict)
            or any(not (deltas["mean"].get(key) is None or _finite(deltas["mean"].get(key)))
                   for key in ("memory_change", "step_time_change", "quality_delta"))):
        raise ValueError("deltas must be a paired_deltas result")
    if (not isinstance(capacity, dict) or not isinstance(capacity.get("largest"), dict)
            or not isinstance(capacity.get("measured"), bool)
            or any(not (capacity["largest"].get(base) is None or _is_int(capacity["largest"].get(base)))
                   for base in ("bf16", "nf4"))):
        raise ValueError("capacity must be a capacity_gain result")
    mean = deltas["mean"]
    reasons = []
    if not deltas["paired"]:
        reasons.append("no_paired_seed")
    elif mean["quality_delta"] is None:
        reasons.append("quality_not_measured")
    elif mean["quality_delta"] < -quality_tolerance:
        reasons.append("quality_lost")
    if reasons:
        return {"decision": "reject", "reasons": reasons, "scope": None}
    bf16, nf4 = capacity["largest"]["bf16"], capacity["largest"]["nf4"]
    needed = bf16 is None or bf16 < required_batch
    bought = nf4 is not None and nf4 >= required_batch
    if not capacity["measured"]:
        reasons.append("capacity_not_measured")
    elif not needed:
        reasons.append("capacity_not_needed")
    elif not bought:
        reasons.append("no_capacity_gain")
    if mean["step_time_change"] is not None and mean["step_time_change"] > 0:
        reasons.append("slower_steps")
    if mean["memory_change"] is None:
        reasons.append("memory_not_measured")
    if capacity["measured"] and needed and bought:
        return {"decision": "accept", "reasons": reasons, "scope": "capacity-bound training"}
    return {"decision": "tune", "reasons": reasons, "scope": None}
