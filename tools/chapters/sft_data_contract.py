"""Chapter 32 (SFT data contract and leakage audit): the dataset of the fixed check in its three
versions, the check's run and record, and the chapter's figures.

The learner writes the admission pipeline (`validate_records`, `audit_splits`,
`admission_verdict`); nothing here implements it. `run_fixed_check` takes the three functions as
arguments, so the notebook passes its reference and a test passes the same functions. The dataset is
built here from integer arithmetic: nothing is downloaded and no model is involved.
"""

from __future__ import annotations

import unicodedata
from typing import Callable, Mapping

CHAPTER_ID = "32"
RECORD_STAGE = "data_audit"
MEASUREMENT_NOTE = "none: pure computation on a dataset built in code; no model, GPU or download was involved"

CHECK_SCHEMA = {"id": str, "instruction": str, "input": str, "output": str}
CHECK_NON_EMPTY = ("id", "instruction", "output")
MAX_INVALID_FRACTION = 0.05
NORMALISATION = "NFKC, casefold, whitespace collapsed to single spaces"


def normalise_text(text: str) -> str:
    """The chapter's normalisation, exactly as its docstrings state it: NFKC, casefold, then runs of
    whitespace (spaces, tabs, newlines) collapsed to one space and the ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def task(record_id: str, instruction: str, input_text: str, output: str) -> dict:
    """One SFT record of the contract's four fields."""
    return {"id": record_id, "instruction": instruction, "input": input_text, "output": output}


ADD_PAIRS = [(17, 25), (31, 12), (48, 36), (23, 59), (64, 18), (72, 27), (15, 66), (39, 44), (81, 13), (56, 29),
             (27, 35), (93, 14), (45, 45), (62, 31), (38, 57), (74, 19), (26, 68), (53, 42), (88, 11), (34, 49)]
MUL_PAIRS = [(12, 4), (23, 3), (17, 6), (41, 2), (15, 7), (26, 5)]
SUB_PAIRS = [(91, 37), (64, 28), (75, 49), (83, 16), (52, 27), (70, 45)]


def base_splits() -> dict[str, list[dict]]:
    """The clean splits: addition for training, multiplication for validation, subtraction for test."""
    return {
        "train": [task(f"tr-{n:02d}", "Add the two numbers.", f"{a} + {b}", str(a + b))
                  for n, (a, b) in enumerate(ADD_PAIRS, start=1)],
        "validation": [task(f"va-{n:02d}", "Multiply the two numbers.", f"{a} * {b}", str(a * b))
                       for n, (a, b) in enumerate(MUL_PAIRS, start=1)],
        "test": [task(f"te-{n:02d}", "Subtract the second number from the first.", f"{a} - {b}", str(a - b))
                 for n, (a, b) in enumerate(SUB_PAIRS, start=1)],
    }


PLANTED = {
    "train": {
        "missing_output": {"id": "tr-21", "instruction": "Add the two numbers.", "input": "19 + 23"},
        "blank_output": task("tr-22", "Add the two numbers.", "47 + 15", "  "),
        "misspelt_field": {"id": "tr-23", "instruction": "Add the two numbers.", "input": "33 + 21", "ouput": "54"},
        "duplicate_id": task("tr-05", "Add the two numbers.", "61 + 17", "78"),
        "repeated_task": task("tr-24", "Add the two numbers.", "48  +  36", "84"),
        "conflicting_answer": task("tr-25", "Add the two numbers.", "72 + 27", "98"),
    },
    "validation": {
        "normalised_copy_of_train": task("va-07", "ADD THE TWO NUMBERS.", "５６ ＋ ２９", "85"),
    },
    "test": {
        "exact_copy_of_train": task("te-07", "Add the two numbers.", "93 + 14", "107"),
        "spacing_copy_of_validation": task("te-08", "Multiply  the two numbers.", "23 * 3", "69"),
    },
}
"""The problems planted in the delivery, each under a build key that is not part of the record."""

VERSION_DROPS = {
    "v1_delivered": {"base": (), "planted": ()},
    "v2_cleaned": {"base": ("tr-10", "tr-12"),
                   "planted": ("misspelt_field", "blank_output", "duplicate_id", "conflicting_answer",
                               "spacing_copy_of_validation")},
    "v3_admitted": {"base": ("tr-10", "tr-12"),
                    "planted": ("misspelt_field", "blank_output", "duplicate_id", "conflicting_answer",
                                "spacing_copy_of_validation", "missing_output", "repeated_task")},
}
"""What each version removes: base records by id, planted ones by build key."""


def build_version(version: str) -> dict[str, list[dict]]:
    """The raw splits of one version: the base records plus the planted ones, minus what it drops."""
    drops = VERSION_DROPS[version]
    return {split: [dict(record) for record in records if record["id"] not in drops["base"]]
            + [dict(record) for key, record in PLANTED[split].items() if key not in drops["planted"]]
            for split, records in base_splits().items()}


def run_fixed_check(validate_records: Callable, audit_splits: Callable, admission_verdict: Callable,
                    versions=tuple(VERSION_DROPS)) -> dict:
    """The whole admission pipeline on every version, with the functions given."""
    results = {}
    for version in versions:
        raw = build_version(version)
        schema_reports = {split: validate_records(records, CHECK_SCHEMA, CHECK_NON_EMPTY) for split, records in raw.items()}
        valid = {split: [raw[split][index] for index in schema_reports[split]["valid"]] for split in raw}
        audit = audit_splits(valid)
        verdict = admission_verdict(schema_reports, audit, MAX_INVALID_FRACTION)
        results[version] = {"raw_records": {split: len(records) for split, records in raw.items()},
                            "schema_reports": schema_reports, "audit": audit, "verdict": verdict}
    return results


def _reasons(verdict: Mapping) -> str:
    return ", ".join(f"{reason['level']}:{reason['code']}x{reason['count']}" for reason in verdict["reasons"]) or "-"


def summary_lines(results: Mapping) -> str:
    """Per version: raw record counts, invalid fractions, the verdict and every reason with its count."""
    lines = []
    for version, result in results.items():
        verdict = result["verdict"]
        fractions = ", ".join(f"{split} {'-' if value is None else format(value, '.3f')}"
                              for split, value in verdict["invalid_fractions"].items())
        lines.append(f"{version}: raw records {result['raw_records']}; invalid fraction {fractions}")
        lines.append(f"  verdict {verdict['verdict']}; reasons: {_reasons(verdict)}")
    return "\n".join(lines)


def finding_details(results: Mapping) -> str:
    """Per version: every invalid record with its problems, every duplicate group and every leak."""
    lines = []
    for version, result in results.items():
        lines.append(f"== {version}")
        for split, report in result["schema_reports"].items():
            lines += [f"  invalid   {split}[{entry['index']}] id={entry['id']}: {', '.join(entry['problems'])}"
                      for entry in report["invalid"]]
        lines += [f"  {'conflict ' if group['conflict'] else 'duplicate'} {group['split']} {group['ids']} key={group['key']}"
                  for group in result["audit"]["duplicate_groups"]]
        lines += [f"  leak      {leak['kind']:<10} {'/'.join(leak['splits'])} {leak['ids']} key={leak['key']}"
                  for leak in result["audit"]["leaks"]]
    return "\n".join(lines)


def record_body(results: Mapping) -> dict:
    """What the data_audit record holds after its header: the contract, the versions, every report."""
    verdicts = {version: result["verdict"]["verdict"] for version, result in results.items()}
    return {
        "measurement": MEASUREMENT_NOTE,
        "inputs": {
            "schema": {field: expected.__name__ for field, expected in CHECK_SCHEMA.items()},
            "non_empty": list(CHECK_NON_EMPTY),
            "max_invalid_fraction": MAX_INVALID_FRACTION,
            "normalisation": NORMALISATION,
            "versions": {version: build_version(version) for version in results},
        },
        "results": dict(results),
        "verdicts": verdicts,
        "registry_headline": "data versions: " + ", ".join(f"{version} {verdict}" for version, verdict in verdicts.items()),
    }


def record_summary(record: Mapping) -> list[str]:
    """Lines that show what a data_audit record concluded (for Step 5's own-run block)."""
    lines = [f"evidence level {record.get('evidence_level')}; {record.get('measurement')}"]
    for version, verdict in record.get("verdicts", {}).items():
        reasons = record.get("results", {}).get(version, {}).get("verdict", {"reasons": []})
        lines.append(f"{version}: {verdict} ({_reasons(reasons)})")
    return lines


# ---------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------

STEP3_SPLITS = {
    "train": [("Add the two numbers.", "17 + 25"), ("Add the two numbers.", "31 + 12"),
              ("Convert to metres.", "3 km"), ("Name the capital.", "Kenya"), ("add the two numbers.", "17  +  25")],
    "validation": [("Add the two numbers.", "１７ ＋ ２５"), ("Convert to metres.", "3 km"), ("Name the capital.", "Peru")],
    "test": [("ADD THE TWO NUMBERS.", "31 + 12"), ("Name the capital.", "Peru "), ("Convert to grams.", "2 kg")],
}
"""Step 3's small example: task inputs (instruction, input) per split."""


def step3_records(splits: Mapping[str, list[tuple[str, str]]] = STEP3_SPLITS) -> dict[str, list[dict]]:
    """Step 3's example as records audit_splits accepts (ids `<split>-<n>`, the output "x")."""
    return {split: [task(f"{split}-{n}", instruction, input_text, "x")
                    for n, (instruction, input_text) in enumerate(pairs, start=1)]
            for split, pairs in splits.items()}


def normalised_keys(splits: Mapping[str, list[tuple[str, str]]] = STEP3_SPLITS) -> str:
    """Every task input of the example beside its normalised key, one line each."""
    lines = []
    for split, pairs in splits.items():
        for instruction, input_text in pairs:
            key = (normalise_text(instruction), normalise_text(input_text))
            lines.append(f"{split:<11}{(instruction, input_text)!r:<48} -> {key!r}")
    return "\n".join(lines)


def draw_pipeline():
    """Step 1: validate each record, audit the splits, then decide (a diagram, no computation)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(12, 3.6))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 4)
    ax.axis("off")
    boxes = [(0.2, "raw splits\ntrain / validation / test", "#eeeeee"),
             (3.0, "validate_records\n(per split, per record)", "#8fc1e3"),
             (6.0, "audit_splits\n(valid records only)", "#b39ddb"),
             (9.0, "admission_verdict\naccept / tune / reject", "#80cbc4")]
    for x, label, color in boxes:
        ax.add_patch(FancyBboxPatch((x, 1.4), 2.4 if x == 9.0 else 2.1, 1.2, boxstyle="round,pad=0.05",
                                    facecolor=color, edgecolor="black"))
        ax.text(x + (1.2 if x == 9.0 else 1.05), 2.0, label, ha="center", va="center", fontsize=10)
    for start, end in [(2.35, 2.95), (5.15, 5.95), (8.15, 8.95)]:
        ax.add_patch(FancyArrowPatch((start, 2.0), (end, 2.0), arrowstyle="-|>", mutation_scale=18))
    ax.add_patch(FancyArrowPatch((4.05, 2.65), (10.2, 2.65), connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                 mutation_scale=18, linestyle="--"))
    ax.text(7.1, 3.75, "schema reports (invalid fraction per split)", ha="center", fontsize=9)
    ax.text(4.05, 1.0, "missing / type / empty /\nunexpected / duplicate_id", ha="center", va="top", fontsize=8)
    ax.text(7.05, 1.0, "duplicate inputs, conflicts,\nexact and normalised leaks", ha="center", va="top", fontsize=8)
    ax.text(10.2, 1.0, "every reason kept,\nreject > tune > accept", ha="center", va="top", fontsize=8)
    ax.set_title("SFT data admission: validate each record, audit the splits, then decide")
    return fig


def draw_distinct_inputs(splits: Mapping[str, list[tuple[str, str]]] = STEP3_SPLITS):
    """Step 3: distinct task inputs per split, compared as raw text and after normalisation."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = list(splits)
    raw = [len(set(splits[name])) for name in names]
    normalised = [len({(normalise_text(a), normalise_text(b)) for a, b in splits[name]}) for name in names]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    positions = range(len(names))
    ax.bar([p - 0.2 for p in positions], raw, width=0.4, label="raw text", color="#8fc1e3")
    ax.bar([p + 0.2 for p in positions], normalised, width=0.4, label="normalised text", color="#b39ddb")
    ax.set_xticks(list(positions), names)
    ax.set_ylabel("distinct task inputs")
    ax.set_title("Normalisation merges copies that exact matching keeps apart")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend()
    fig.tight_layout()
    return fig


REASON_CODES = ("empty_split", "schema_violations", "label_conflicts", "exact_leakage", "normalised_leakage",
                "invalid_records", "duplicate_inputs")


def draw_fixed_check(results: Mapping):
    """Step 5: the count of every reason per version (left) and each version's verdict (right)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    versions = list(results)
    colors = {"reject": "#e07b7b", "tune": "#ffcc80", "accept": "#9ad19a"}
    fig, (ax_counts, ax_verdict) = plt.subplots(1, 2, figsize=(13, 4), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(versions)
    for offset, version in enumerate(versions):
        counts = {reason["code"]: reason["count"] for reason in results[version]["verdict"]["reasons"]}
        ax_counts.bar([index + (offset - (len(versions) - 1) / 2) * width for index in range(len(REASON_CODES))],
                      [counts.get(code, 0) for code in REASON_CODES], width=width, label=version)
    ax_counts.set_xticks(range(len(REASON_CODES)), REASON_CODES, rotation=20, ha="right")
    ax_counts.axvline(4.5, color="black", linestyle=":")
    ax_counts.text(2.0, ax_counts.get_ylim()[1] * 0.92, "reject level", ha="center")
    ax_counts.text(5.5, ax_counts.get_ylim()[1] * 0.92, "tune level", ha="center")
    ax_counts.set_ylabel("count")
    ax_counts.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_counts.set_title("Reason counts per version")
    ax_counts.legend(loc="center right")
    for row, version in enumerate(versions):
        verdict = results[version]["verdict"]["verdict"]
        ax_verdict.barh(row, 1, color=colors[verdict])
        ax_verdict.text(0.5, row, f"{version}\n{verdict}", ha="center", va="center", fontsize=9)
    ax_verdict.set_ylim(len(versions) - 0.5, -0.5)
    ax_verdict.set_xticks([])
    ax_verdict.set_yticks([])
    ax_verdict.set_title("Verdict")
    fig.tight_layout()
    return fig
