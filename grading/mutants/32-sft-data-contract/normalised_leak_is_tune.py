# mutant: normalised_leak_is_tune
# exercise: admission_verdict
# mistake: treats a leak visible only after normalisation as a tuning matter instead of a blocking one.
import math
import unicodedata


def admission_verdict(schema_reports, audit_report, max_invalid_fraction=0.02):
    if (isinstance(max_invalid_fraction, bool) or not isinstance(max_invalid_fraction, (int, float))
            or not math.isfinite(max_invalid_fraction) or not 0 <= max_invalid_fraction < 1):
        raise ValueError(f"max_invalid_fraction must be a finite number in [0, 1), got {max_invalid_fraction!r}")
    if not isinstance(schema_reports, dict):
        raise ValueError("schema_reports must be a dict of split -> validate_records result")
    for name, report in schema_reports.items():
        if not isinstance(report, dict) or not all(isinstance(report.get(key), list) for key in ("valid", "invalid")):
            raise ValueError(f"schema report of {name!r} needs 'valid' and 'invalid' lists")
    if not isinstance(audit_report, dict) or not isinstance(audit_report.get("records"), dict) or not all(
            isinstance(audit_report.get(key), list) for key in ("splits", "duplicate_groups", "leaks")):
        raise ValueError("audit_report needs 'splits', 'records', 'duplicate_groups' and 'leaks'")
    if sorted(schema_reports) != sorted(audit_report["splits"]) or sorted(audit_report["records"]) != sorted(schema_reports):
        raise ValueError(f"the reports name different splits: {sorted(schema_reports)} vs {sorted(audit_report['splits'])}")
    for name, report in schema_reports.items():
        if audit_report["records"][name] != len(report["valid"]):
            raise ValueError(f"split {name!r}: the audit saw {audit_report['records'][name]} records, "
                             f"the schema report has {len(report['valid'])} valid ones")

    fractions, empty, over, within = {}, 0, 0, 0
    for name, report in schema_reports.items():
        bad, total = len(report["invalid"]), len(report["valid"]) + len(report["invalid"])
        fractions[name] = bad / total if total else None
        if not total:
            empty += 1
        elif bad / total > max_invalid_fraction:
            over += bad
        elif bad:
            within += bad
    conflicts = sum(1 for group in audit_report["duplicate_groups"] if group["conflict"])
    duplicates = len(audit_report["duplicate_groups"]) - conflicts
    exact = sum(1 for leak in audit_report["leaks"] if leak["kind"] == "exact")
    normalised = sum(1 for leak in audit_report["leaks"] if leak["kind"] == "normalised")

    candidates = [("reject", "empty_split", empty), ("reject", "schema_violations", over),
                  ("reject", "label_conflicts", conflicts), ("reject", "exact_leakage", exact),
                  ("tune", "normalised_leakage", normalised), ("tune", "invalid_records", within),
                  ("tune", "duplicate_inputs", duplicates)]
    reasons = [{"level": level, "code": code, "count": count} for level, code, count in candidates if count > 0]
    levels = {reason["level"] for reason in reasons}
    verdict = "reject" if "reject" in levels else "tune" if "tune" in levels else "accept"
    return {"invalid_fractions": fractions, "reasons": reasons, "verdict": verdict}
