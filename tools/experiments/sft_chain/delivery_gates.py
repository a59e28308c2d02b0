"""Project 62's three gates, as the delivery stage runs them (the notebook's TODOs teach the same).

- `upstream_identity`: what this delivery trained, read back from its files (peft's adapter config,
  the trainer state, the adapter's hash), against what 63's manifest chose, key by key and type by
  type (the data hash and the chosen run's adapter hash included); the keys a file keeps in no
  particular order (peft writes `target_modules` in set order) compare as sets.
- `artifact_checks`: every delivered file hashed and found unchanged; a resumed run continues the
  reference loss curve from the checkpoint's optimiser step (not a restart); a reloaded adapter
  reproduces the evaluation within tolerance.
- `delivery_state`: delivered / needs_rerun / blocked / rejected, with every reason; a check that did
  not run is not a pass, and a delivery whose final evaluation fails a gate (no task gain over the
  base, the base's skill lost beyond the tolerance) is rejected.
"""

from __future__ import annotations

import math

CHECKS = ("files_intact", "resume_continues", "reload_reproduces")
UNORDERED = ("target_modules",)
"""The keys whose lists compare as sets (peft writes target_modules in set order)."""
NEXT_ACTIONS = {"delivered": "hand the adapter and the delivery manifest to 84 (offline DPO) and 85 (online RL)",
                "needs_rerun": "rerun the delivery under a new label; the failed checks say what broke",
                "blocked": "the training did not use 63's selection: fix the configuration or rerun 63, then deliver",
                "rejected": "nothing is delivered: the final evaluation failed a gate (no answer gain over the base, or "
                            "the base's own skill lost beyond the tolerance); go back to 63 with more replay, a lower "
                            "rank or learning rate, and select again"}


def _same(first, second) -> bool:
    if type(first) is not type(second):
        return False
    if isinstance(first, list):
        return len(first) == len(second) and all(_same(a, b) for a, b in zip(first, second))
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(_same(first[key], second[key]) for key in first)
    return first == second


def _str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def upstream_identity(selected, used, unordered=()):
    """Key-by-key identity of the used configuration with the selected one (see the notebook's TODO 1)."""
    for name, value in (("selected", selected), ("used", used)):
        if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
            raise ValueError(f"{name} must be a dict with str keys")
    if "data_sha256" not in selected:
        raise ValueError("the selection must name its data_sha256")
    if not isinstance(unordered, (list, tuple)) or not all(isinstance(key, str) for key in unordered):
        raise ValueError("unordered must be a list or tuple of str keys")

    def same(key):
        if key in unordered and _str_list(selected[key]) and _str_list(used[key]):
            return set(selected[key]) == set(used[key])
        return _same(selected[key], used[key])

    mismatches = [{"key": key, "expected": selected[key], "actual": used.get(key)}
                  for key in sorted(selected) if key not in used or not same(key)]
    return {"matches": not mismatches, "mismatches": mismatches}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _hashes(name, value, allow_none):
    if not isinstance(value, dict) or any(not isinstance(key, str) or not key for key in value) or any(
            not ((allow_none and digest is None) or (isinstance(digest, str) and digest)) for digest in value.values()):
        raise ValueError(f"{name} must be a dict {{path: sha256}}" + (" (None: not found)" if allow_none else ""))


def artifact_checks(files, resume, reload, loss_tolerance=1e-6, eval_tolerance=1e-4):
    """Files, resume and reload checks, each with its findings (see the notebook's TODO 2)."""
    if not isinstance(files, dict) or set(files) != {"recorded", "found"}:
        raise ValueError("files must be {'recorded': {path: sha256}, 'found': {path: sha256 or None}}")
    _hashes("files['recorded']", files["recorded"], False)
    _hashes("files['found']", files["found"], True)
    if not files["recorded"]:
        raise ValueError("a delivery records at least one file")
    for name, tolerance in (("loss_tolerance", loss_tolerance), ("eval_tolerance", eval_tolerance)):
        if not _finite(tolerance) or tolerance < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {tolerance!r}")
    if not isinstance(resume, dict) or not isinstance(reload, dict):
        raise ValueError("resume and reload must be dicts")
    reference, resumed = resume.get("reference_losses"), resume.get("resumed_losses")
    checkpoint, first = resume.get("checkpoint_step"), resume.get("resumed_first_step")
    if (not isinstance(reference, (list, tuple)) or not reference or not all(_finite(v) for v in reference)
            or not isinstance(checkpoint, int) or isinstance(checkpoint, bool) or not 1 <= checkpoint < len(reference)):
        raise ValueError("resume needs reference_losses (finite numbers) and a checkpoint_step in [1, len - 1]")
    if resumed is not None and (not isinstance(resumed, (list, tuple)) or not all(_finite(v) for v in resumed)):
        raise ValueError("resumed_losses must be None (not run) or a list of finite numbers")
    if first is not None and (not isinstance(first, int) or isinstance(first, bool)):
        raise ValueError("resumed_first_step must be None or an int")
    for key in ("in_process", "reloaded"):
        if reload.get(key) is not None and not _finite(reload.get(key)):
            raise ValueError(f"reload[{key!r}] must be None (not run) or a finite number")

    findings = []
    for path in sorted(files["recorded"]):
        found = files["found"].get(path)
        if found is None:
            findings.append(f"missing:{path}")
        elif found != files["recorded"][path]:
            findings.append(f"changed:{path}")
    findings += [f"unrecorded:{path}" for path in sorted(set(files["found"]) - set(files["recorded"]))
                 if files["found"][path] is not None]
    checks = [{"name": "files_intact", "passed": not findings, "findings": findings}]

    if resumed is None or first is None:
        checks.append({"name": "resume_continues", "passed": None, "findings": ["not_run"]})
    else:
        findings = []
        if first != checkpoint + 1:
            findings.append("restarted" if first == 1 else "wrong_step")
        expected = list(reference[checkpoint:])
        if len(resumed) != len(expected):
            findings.append("length")
        elif any(abs(a - b) > loss_tolerance for a, b in zip(resumed, expected)):
            findings.append("diverged")
        checks.append({"name": "resume_continues", "passed": not findings, "findings": findings})

    if reload.get("in_process") is None or reload.get("reloaded") is None:
        checks.append({"name": "reload_reproduces", "passed": None, "findings": ["not_run"]})
    else:
        close = abs(reload["reloaded"] - reload["in_process"]) <= eval_tolerance
        checks.append({"name": "reload_reproduces", "passed": close, "findings": [] if close else ["differs"]})
    return {"checks": checks, "passed": all(check["passed"] is True for check in checks)}


def delivery_state(identity, integrity, evaluation):
    """delivered / needs_rerun / blocked / rejected with every reason (see the notebook's TODO 3)."""
    if (not isinstance(identity, dict) or not isinstance(identity.get("matches"), bool)
            or not isinstance(identity.get("mismatches"), (list, tuple))
            or any(not isinstance(item, dict) or not isinstance(item.get("key"), str) for item in identity["mismatches"])):
        raise ValueError("identity must be an upstream_identity result")
    if identity["matches"] == bool(identity["mismatches"]):
        raise ValueError("identity says it matches and lists mismatches (or the other way round)")
    if not isinstance(integrity, dict) or not isinstance(integrity.get("checks"), (list, tuple)):
        raise ValueError("integrity must be an artifact_checks result")
    names = []
    for check in integrity["checks"]:
        if (not isinstance(check, dict) or check.get("name") not in CHECKS or check.get("passed") not in (True, False, None)
                or not isinstance(check.get("findings"), (list, tuple))):
            raise ValueError(f"malformed check {check!r}")
        names.append(check["name"])
    if sorted(names) != sorted(CHECKS):
        raise ValueError(f"integrity must hold each of {CHECKS} once")
    if (not isinstance(evaluation, (list, tuple)) or not evaluation
            or any(not isinstance(gate, dict) or not isinstance(gate.get("name"), str) or not gate["name"]
                   or not isinstance(gate.get("passed"), bool) for gate in evaluation)
            or len({gate["name"] for gate in evaluation}) != len(evaluation)):
        raise ValueError("evaluation must be a non-empty list of gates {'name': str (unique), 'passed': bool}")
    reasons = [f"mismatch:{item['key']}" for item in identity["mismatches"]]
    by_name = {check["name"]: check for check in integrity["checks"]}
    for name in CHECKS:
        check = by_name[name]
        if check["passed"] is None:
            reasons.append(f"not_run:{name}")
        elif not check["passed"]:
            reasons += [f"{name}:{finding}" for finding in check["findings"]] or [f"{name}:failed"]
    integrity_failed = len(reasons) > len(identity["mismatches"])
    reasons += [f"evaluation:{gate['name']}" for gate in evaluation if not gate["passed"]]
    if not identity["matches"]:
        state = "blocked"
    elif integrity_failed:
        state = "needs_rerun"
    elif reasons:
        state = "rejected"
    else:
        state = "delivered"
    return {"state": state, "reasons": reasons, "next_action": NEXT_ACTIONS[state]}
