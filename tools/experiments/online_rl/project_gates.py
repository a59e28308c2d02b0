"""Project 85's three gates, as the online reward-optimisation stage runs them (the notebook's TODOs
teach the same contracts; the tests bind the two together on generated inputs).

- `rollout_coverage`: before a sampled batch may update the policy, what the sampler and the verifier
  covered: the outcome counts, the truncation and parse-failure rates, which groups are scoreable (every
  reply finished and parsed, rewards not all equal), and whether the batch may update at all.
- `update_throughput`: effective update throughput: the optimiser updates of the steps that changed the
  policy, per second of the whole run, beside the raw samples per second that hide the idle steps.
- `adoption_decision`: the paired quality-resource decision against the SFT adapter: held-out task gain
  per seed with a Student-t interval, the base skill the input model knew, the resource budget and the
  effective updates; `accept` / `tune` / `reject` with every reason.

Each checks its inputs before computing, raises ValueError on bad ones and leaves its arguments as they were.
"""

from __future__ import annotations

import math

OUTCOMES = ("correct", "wrong", "format_error", "truncated")
DECISIONS = ("accept", "tune", "reject")
NEXT_ACTIONS = {
    "accept": "hand the GRPO adapter and this candidate manifest to 86 (lifecycle and recovery) for adoption",
    "tune": "adopt nothing yet: keep 62's SFT adapter in service and change what the reasons name (more replay of "
            "the base's task, a lower learning rate or fewer steps, a larger budget), then rerun under a new label",
    "reject": "adopt nothing: keep 62's SFT adapter in service; the candidate made the task worse, lost the base's "
              "skill without a task gain, or never changed the policy",
}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def rollout_coverage(groups, min_scoreable_share=0.5, max_truncation=0.1, max_parse_failure=0.1):
    """Sampler and verifier coverage of one sampled batch (see the notebook's TODO 1)."""
    if not isinstance(groups, list) or not groups:
        raise ValueError("groups must be a non-empty list of groups")
    for index, group in enumerate(groups):
        if not isinstance(group, list) or not group:
            raise ValueError(f"group {index} must be a non-empty list of verdicts")
        for verdict in group:
            if not isinstance(verdict, dict) or verdict.get("outcome") not in OUTCOMES \
                    or not _number(verdict.get("reward")):
                raise ValueError(f"group {index}: {verdict!r} is not a verdict with an outcome and a finite reward")
    for name, value in (("min_scoreable_share", min_scoreable_share), ("max_truncation", max_truncation),
                        ("max_parse_failure", max_parse_failure)):
        if not _number(value) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    outcomes = [verdict["outcome"] for group in groups for verdict in group]
    counts = {name: outcomes.count(name) for name in OUTCOMES}
    rollouts = len(outcomes)
    scoreable = [index for index, group in enumerate(groups)
                 if all(v["outcome"] in ("correct", "wrong") for v in group)
                 and len({v["reward"] for v in group}) > 1]
    truncation = counts["truncated"] / rollouts
    parse_failure = counts["format_error"] / rollouts
    share = len(scoreable) / len(groups)
    reasons = []
    if truncation > max_truncation:
        reasons.append("truncation")
    if parse_failure > max_parse_failure:
        reasons.append("parse_failures")
    if share < min_scoreable_share:
        reasons.append("too_few_scoreable")
    return {"groups": len(groups), "rollouts": rollouts, "outcomes": counts, "truncation_rate": truncation,
            "parse_failure_rate": parse_failure, "scoreable": scoreable, "scoreable_share": share,
            "update_allowed": not reasons, "reasons": reasons}


STEP_FIELDS = ("rollouts", "rollouts_in_loss", "optimizer_steps", "policy_change", "seconds")


def update_throughput(steps, min_change=1e-6):
    """Effective update throughput of a run's sampling steps (see the notebook's TODO 2)."""
    if not isinstance(steps, list) or not steps:
        raise ValueError("steps must be a non-empty list of step dicts")
    if not _number(min_change) or min_change < 0:
        raise ValueError(f"min_change must be a finite number >= 0, got {min_change!r}")
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or any(field not in step for field in STEP_FIELDS):
            raise ValueError(f"step {index} must hold {', '.join(STEP_FIELDS)}")
        rollouts, in_loss, updates = step["rollouts"], step["rollouts_in_loss"], step["optimizer_steps"]
        change, seconds = step["policy_change"], step["seconds"]
        if not _count(rollouts) or rollouts < 1 or not _count(in_loss) or in_loss > rollouts or not _count(updates):
            raise ValueError(f"step {index}: rollouts >= 1, 0 <= rollouts_in_loss <= rollouts and optimizer_steps >= 0")
        if not _number(seconds) or seconds <= 0:
            raise ValueError(f"step {index}: seconds must be a finite number > 0")
        if (change is None) != (updates == 0):
            raise ValueError(f"step {index}: policy_change is None exactly when no optimiser step was made")
        if change is not None and (not _number(change) or change < 0):
            raise ValueError(f"step {index}: policy_change must be a finite number >= 0")
        if updates > 0 and in_loss == 0:
            raise ValueError(f"step {index}: an optimiser step needs rollouts in the loss")
    effective = [index for index, step in enumerate(steps)
                 if step["optimizer_steps"] > 0 and step["policy_change"] > min_change]
    seconds = sum(step["seconds"] for step in steps)
    return {"steps": len(steps), "effective_steps": len(effective),
            "ineffective": [index for index in range(len(steps)) if index not in effective],
            "seconds": seconds,
            "samples_per_second": sum(step["rollouts"] for step in steps) / seconds,
            "effective_updates_per_second": sum(steps[index]["optimizer_steps"] for index in effective) / seconds,
            "useful_rollouts_per_second": sum(steps[index]["rollouts_in_loss"] for index in effective) / seconds,
            "idle_seconds": sum(steps[index]["seconds"] for index in range(len(steps)) if index not in effective)}


def _per_seed(name, value):
    if not isinstance(value, dict) or set(value) != {"candidate", "baseline"}:
        raise ValueError(f"{name} must be {{'candidate': {{seed: value}}, 'baseline': {{seed: value}}}}")
    for side in ("candidate", "baseline"):
        table = value[side]
        if not isinstance(table, dict) or not all(isinstance(k, int) and not isinstance(k, bool) for k in table) \
                or not all(_number(v) for v in table.values()):
            raise ValueError(f"{name}[{side!r}] must map int seeds to finite numbers")
    if set(value["candidate"]) != set(value["baseline"]) or len(value["candidate"]) < 2:
        raise ValueError(f"{name} needs the same seeds (at least two) on both sides")
    return sorted(value["candidate"])


def _paired(value, seeds):
    differences = [value["candidate"][seed] - value["baseline"][seed] for seed in seeds]
    mean = sum(differences) / len(differences)
    return differences, mean


def adoption_decision(task, skill, resource, effective_updates, t_value, margin=0.0, regression_tolerance=0.05):
    """The paired quality-resource adoption decision (see the notebook's TODO 3)."""
    seeds = _per_seed("task", task)
    if _per_seed("skill", skill) != seeds:
        raise ValueError("task and skill must name the same seeds")
    if not isinstance(resource, dict) or set(resource) != {"measured", "budget"} \
            or not (resource["measured"] is None or (_number(resource["measured"]) and resource["measured"] >= 0)) \
            or not _number(resource["budget"]) or resource["budget"] <= 0:
        raise ValueError("resource must be {'measured': None or a number >= 0, 'budget': a number > 0}")
    if not isinstance(effective_updates, dict) or not all(type(seed) is int for seed in effective_updates) \
            or set(effective_updates) != set(seeds) \
            or not all(_count(v) for v in effective_updates.values()):
        raise ValueError("effective_updates must map every seed to an int >= 0")
    for name, value in (("t_value", t_value), ("margin", margin), ("regression_tolerance", regression_tolerance)):
        if not _number(value) or value < 0 or (name == "t_value" and value == 0):
            raise ValueError(f"{name} must be a finite number ({'> 0' if name == 't_value' else '>= 0'})")
    differences, mean = _paired(task, seeds)
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (len(differences) - 1))
    half = t_value * sd / math.sqrt(len(differences))
    lower, upper = mean - half, mean + half
    skill_differences, skill_mean = _paired(skill, seeds)
    gain, worse, kept = lower > margin, upper < 0, skill_mean >= -regression_tolerance
    reasons = []
    if any(effective_updates[seed] == 0 for seed in seeds):
        reasons.append("no_effective_update")
    if worse:
        reasons.append("task_worse")
    elif not gain:
        reasons.append("task_gain_not_shown")
    if not kept:
        reasons.append("base_skill_lost")
    if resource["measured"] is None:
        reasons.append("resource_not_measured")
    elif resource["measured"] > resource["budget"]:
        reasons.append("resource_over_budget")
    if "no_effective_update" in reasons or worse or (not kept and not gain):
        decision = "reject"
    else:
        decision = "tune" if reasons else "accept"
    return {"decision": decision, "reasons": reasons,
            "task_gain": {"seeds": seeds, "differences": differences, "mean": mean, "lower": lower, "upper": upper},
            "skill_change": {"seeds": seeds, "differences": skill_differences, "mean": skill_mean}}
