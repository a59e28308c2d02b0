"""Project 64 (SFT data admission): what the notebook shows around its three gates.

The learner writes the gates (`merge_blockers`, `find_leaks`, `admission_transition`); the admission
itself (checks, repair loop, records, manifest) is `tools.experiments.sft_chain.admission`, which the
notebook calls with its own functions for the fixed check and through the experiment contract for
the records. This module holds the pictures, the tables, the framework check against transformers'
truncation and `datasets`' filtering, and the lines that show a record. Nothing here prints.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from tools.chapters.sft_chain_pages import gates_table
from tools.data import sft_raw
from tools.experiments.sft_chain import admission as stage

CHAPTER_ID = stage.CHAPTER_ID
CHECK_COLOURS = {"frozen_split": "black", "conflict": "#c0392b", "too_many_blocked": "#8e44ad",
                 "too_few_left": "#5d6d7e", "contract": "#f39c12", "verifier": "#e67e22", "over_length": "#16a085",
                 "duplicate": "#7f8c8d", "leakage": "#2980b9"}


def tokenizer_for(run_mode: str, model_source: str):
    """The tokenizer the admission counts lengths with in `run_mode` (dry_run: the cpu_smoke one)."""
    from tools.experiments.contract import DEFAULT_MODELS

    mode = "cpu_smoke" if run_mode == "dry_run" else run_mode
    tokenizer, _ = stage.admission_tokenizer(mode, DEFAULT_MODELS[mode], model_source)
    return tokenizer


# ---- tables --------------------------------------------------------------------------------------

def delivery_table(delivery: sft_raw.Delivery) -> str:
    """What a delivery holds: records per split and source, and every planted defect by id."""
    lines = [f"line {delivery.line} {delivery.version} (seed {delivery.seed}), content sha256 {delivery.sha256[:16]}..."]
    for name, records in delivery.splits.items():
        sources = Counter(record.get("source", "?") for record in records)
        lines.append(f"  {name:<11}{len(records):>4} records  " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items())))
    for record_id, defect in delivery.planted.items():
        lines.append(f"  planted {record_id:<11}{defect}")
    return "\n".join(lines)


def rounds_table(result: Mapping) -> str:
    """Every admission round of every line: records, verdict, state, each blocker with its count."""
    lines = []
    for name, line in result["lines"].items():
        for item in line["rounds"]:
            delivery, merged, transition = item["delivery"], item["merged"], item["transition"]
            sizes = ", ".join(f"{split} {len(records)}" for split, records in delivery.splits.items())
            lines.append(f"{name} {delivery.version} ({sizes}; sha256 {delivery.sha256[:12]}): verdict "
                         f"{merged['verdict']} -> state {transition['state']} ({transition['reason']}), next "
                         f"{transition['next_action']}")
            for blocker in merged["blockers"]:
                shown = ", ".join(blocker["sample_ids"][:6]) + (" ..." if len(blocker["sample_ids"]) > 6 else "")
                lines.append(f"    {blocker['level']:<7}{blocker['check']:<17}{blocker['split']:<11}"
                             f"{blocker['count']:>4}  {shown}")
    return "\n".join(lines)


def paraphrase_lines(result: Mapping, line: str = stage.MAIN_LINE) -> str:
    """The leaks of a line's first version that only the problem identity found, each beside the
    record of the higher split it copies (the text of the two differs)."""
    first = result["lines"][line]["rounds"][0]
    splits = {"evaluation": result["evaluation"], **first["delivery"].splits}
    only = stage.paraphrase_leaks(first["checked"])
    lines = []
    for split, ids in only.items():
        for record_id in ids:
            record = next(r for r in splits[split] if r.get("id") == record_id)
            identity = sft_raw.problem_identity(record)
            twin = next(r for name in stage.PRIORITY[:stage.PRIORITY.index(split)] for r in splits[name]
                        if "input" in r and sft_raw.problem_identity(r) == identity)
            lines.append(f"{split}/{record_id} {identity}: {sft_raw.chat_prompt(record)!r}  <->  "
                         f"{twin['id']}: {sft_raw.chat_prompt(twin)!r}")
    return "leaks only the problem identity finds:\n" + ("\n".join(f"  {line}" for line in lines) or "  none")


def several_findings(result: Mapping, line: str = stage.MAIN_LINE) -> str:
    """The samples of a line's first version that more than one check blocks (no check hides another)."""
    details = result["lines"][line]["rounds"][0]["checked"].details
    lines = [f"{split}/{sample}: {', '.join(checks)}" for split, samples in details.items()
             for sample, checks in sorted(samples.items()) if len(checks) > 1]
    return "\n".join(lines) or "none"


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 64 (this run's or an earlier cpu_smoke one)."""
    decision = record.get("decision", {})
    lines = [f"evidence level {record.get('evidence_level')}: data admission on CPU, no model was trained",
             f"decision {decision.get('decision')} for {decision.get('line')} {decision.get('version')} "
             f"(content sha256 {str(decision.get('content_sha256'))[:12]}...); next: {record.get('next_action')}"]
    lines += gates_table(record.get("gates", [])).splitlines()
    lines.append(f"note: {record.get('comparability')}")
    return lines


# ---- framework check -----------------------------------------------------------------------------

def framework_check(result: Mapping, tokenizer) -> dict:
    """Our over-length and leakage findings against transformers and datasets, on the first version of
    the main line.

    - transformers: `apply_chat_template(..., truncation=True, max_length=MAX_LENGTH)` truncates
      exactly the samples our check calls over-length, and what it cuts is the reply (the
      supervised tokens), which is why an over-length sample is dropped rather than trained on;
    - datasets: `Dataset.map` (the normalised content as a column) and `Dataset.filter` (rows whose
      content stands in the evaluation split) find the same training leaks as `find_leaks`.
    Tolerance: none, the sets must be equal.
    """
    import datasets
    import transformers

    first = result["lines"][stage.MAIN_LINE]["rounds"][0]
    train = [record for record in first["delivery"].splits["train"] if not stage.contract_problems(record)]
    ours_long = sorted(record["id"] for record in train
                       if first["checked"].lengths["train"][record["id"]] > sft_raw.MAX_LENGTH)
    cut, reply_lost = [], []
    for record in train:
        messages = [{"role": "user", "content": sft_raw.chat_prompt(record)},
                    {"role": "assistant", "content": record["output"]}]
        full = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
        kept = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, truncation=True,
                                             max_length=sft_raw.MAX_LENGTH)["input_ids"]
        if len(kept) < len(full):
            cut.append(record["id"])
            prompt = tokenizer.apply_chat_template(messages[:1], tokenize=True, return_dict=True,
                                                   add_generation_prompt=True)["input_ids"]
            reply_lost.append(len(kept) <= len(prompt))
    evaluation = datasets.Dataset.from_list([{"content": stage.admission_gates.normalised_content(record)}
                                             for record in result["evaluation"]])
    keys = set(evaluation["content"])
    rows = datasets.Dataset.from_list([{key: record[key] for key in ("id", "instruction", "input")} for record in train])
    leaked = rows.map(lambda row: {"content": stage.admission_gates.normalised_content(row)}).filter(
        lambda row: row["content"] in keys)
    ours_leaks = first["checked"].leaks["leaked"]["train"]
    from_eval = sorted(record_id for record_id in ours_leaks
                       if stage.admission_gates.normalised_content(
                           next(r for r in train if r["id"] == record_id)) in keys)
    return {
        "transformers": transformers.__version__, "datasets": datasets.__version__,
        "over_length": {"ours": ours_long, "truncated_by_transformers": sorted(cut),
                        "equal": ours_long == sorted(cut), "reply_lost_in_every_cut": all(reply_lost)},
        "leakage": {"ours_against_evaluation": from_eval, "datasets_filter": sorted(leaked["id"]),
                    "equal": from_eval == sorted(leaked["id"])},
    }


def framework_lines(check: Mapping) -> str:
    long, leak = check["over_length"], check["leakage"]
    return "\n".join([
        f"transformers {check['transformers']}: truncation=True, max_length={sft_raw.MAX_LENGTH} cuts {long['truncated_by_transformers']}",
        f"  our over_length findings {long['ours']} -> equal: {long['equal']}; "
        f"the reply is gone in every cut sample: {long['reply_lost_in_every_cut']}",
        f"datasets {check['datasets']}: Dataset.map + Dataset.filter against the evaluation contents -> {leak['datasets_filter']}",
        f"  our leakage findings against the evaluation split {leak['ours_against_evaluation']} -> equal: {leak['equal']}",
    ])


# ---- figures -------------------------------------------------------------------------------------

def draw_chain():
    """Step 1: the four projects and the sealed manifests they hand down."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(12, 3.8))
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 4.2)
    ax.axis("off")
    boxes = {"64": (0.3, 1.6, "64 data admission\naccept / tune / reject", "#80cbc4"),
             "63": (4.3, 2.6, "63 LoRA variant selection\nranks 4 / 8 / 16 x 3 seeds", "#8fc1e3"),
             "65": (4.3, 0.4, "65 QLoRA branch\nNF4 vs bf16, capacity", "#ffe082"),
             "62": (8.5, 1.6, "62 training delivery\nfinal evaluation, deliver", "#b39ddb")}
    for x, y, label, colour in boxes.values():
        ax.add_patch(FancyBboxPatch((x, y), 3.0, 1.1, boxstyle="round,pad=0.05", facecolor=colour, edgecolor="black"))
        ax.text(x + 1.5, y + 0.55, label, ha="center", va="center", fontsize=9.5)
    for start, end, text in (((3.35, 2.3), (4.25, 3.1), "admission\nmanifest"),
                             ((3.35, 2.0), (4.25, 1.0), "admission\nmanifest")):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=18))
        ax.text((start[0] + end[0]) / 2 - 0.55, (start[1] + end[1]) / 2, text, ha="right", va="center", fontsize=8)
    ax.add_patch(FancyArrowPatch((7.35, 3.15), (8.45, 2.4), arrowstyle="-|>", mutation_scale=18))
    ax.text(7.9, 3.45, "selection\nmanifest", ha="center", fontsize=8)
    ax.add_patch(FancyArrowPatch((7.35, 0.95), (8.45, 1.8), arrowstyle="-|>", mutation_scale=18))
    ax.text(7.9, 0.7, "branch\nmanifest", ha="center", fontsize=8)
    ax.text(10.0, 1.2, "delivery + rollback manifests\n-> 84, 85, 86", ha="center", fontsize=8)
    ax.text(6.0, 4.05, "each hand-off: path relative to the results root + sha256; sealed; same run mode",
            ha="center", fontsize=9, style="italic")
    ax.set_title("The SFT project chain: a project starts only from the manifest its upstream sealed")
    return fig


def draw_delivery(delivery: sft_raw.Delivery):
    """Step 2: each split's records by source, with the planted defects on top."""
    import matplotlib.pyplot as plt

    defects = Counter(delivery.planted.values())
    planted_ids = set(delivery.planted)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1, 2]})
    names = list(delivery.splits)
    bottoms = [0] * len(names)
    for source, colour in (("generator", "#8fc1e3"), ("synthetic", "#ffcc80")):
        values = [sum(1 for r in delivery.splits[n] if r.get("source") == source and r["id"] not in planted_ids)
                  for n in names]
        left.bar(names, values, bottom=bottoms, color=colour, label=source)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    values = [sum(1 for r in delivery.splits[n] if r["id"] in planted_ids) for n in names]
    left.bar(names, values, bottom=bottoms, color="#e07b7b", label="planted defect")
    left.set_ylabel("records")
    left.set_title(f"delivery {delivery.line} {delivery.version}")
    left.legend(fontsize=8)
    labels = list(defects)
    right.barh(range(len(labels)), [defects[label] for label in labels], color="#e07b7b")
    right.set_yticks(range(len(labels)), labels, fontsize=8)
    right.invert_yaxis()
    right.set_xlabel("planted records")
    right.set_title("what the admission must find")
    fig.tight_layout()
    return fig


def draw_state_machine():
    """Step 3: the states of a data line and what moves it."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    fig, ax = plt.subplots(figsize=(11, 3.8))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 4)
    ax.axis("off")
    nodes = {"delivery": (0.3, 1.5, "#eeeeee"), "admit": (3.0, 1.5, "#dddddd"), "accept": (7.2, 2.8, "#9ad19a"),
             "tune": (7.2, 1.5, "#ffcc80"), "reject": (7.2, 0.2, "#e07b7b")}
    texts = {"delivery": "delivery v1\n(content sha256)", "admit": "checks + merge\n(every blocker)",
             "accept": "accept -> hand_off\n(manifest to 63, 65)", "tune": "tune -> repair_and_readmit\n(new version)",
             "reject": "reject -> return_to_owner\n(final)"}
    for name, (x, y, colour) in nodes.items():
        ax.add_patch(FancyBboxPatch((x, y), 2.4 if name != "admit" else 2.2, 1.0, boxstyle="round,pad=0.05",
                                    facecolor=colour, edgecolor="black"))
        ax.text(x + (1.2 if name != "admit" else 1.1), y + 0.5, texts[name], ha="center", va="center", fontsize=9)
    for start, end in (((2.75, 2.0), (2.95, 2.0)), ((5.25, 2.2), (7.15, 3.2)), ((5.25, 2.0), (7.15, 2.0)),
                       ((5.25, 1.8), (7.15, 0.7))):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=16))
    ax.add_patch(FancyArrowPatch((7.15, 1.65), (4.1, 1.45), connectionstyle="arc3,rad=-0.45", arrowstyle="-|>",
                                 mutation_scale=16, linestyle="--"))
    ax.text(4.6, 0.45, "repair: drop the repair plan, new version\n(parent = the tuned version)", ha="center", fontsize=8)
    ax.text(9.9, 1.95, "after max_repairs\nrepairs, tune -> reject", ha="left", fontsize=8)
    ax.set_title("Admission as a state machine: only a tune version may be repaired, and only a few times")
    return fig


def draw_admission(result: Mapping):
    """Step 5: every round's blockers by check (stacked), with the verdict and state above each bar."""
    import matplotlib.pyplot as plt

    rounds = [(name, item) for name, line in result["lines"].items() for item in line["rounds"]]
    fig, ax = plt.subplots(figsize=(10, 4))
    labels = [f"{name}\n{item['delivery'].version}" for name, item in rounds]
    bottoms = [0] * len(rounds)
    for check, colour in CHECK_COLOURS.items():
        values = [sum(b["count"] for b in item["merged"]["blockers"] if b["check"] == check) for _, item in rounds]
        if any(values):
            ax.bar(labels, values, bottom=bottoms, color=colour, label=check)
            bottoms = [b + v for b, v in zip(bottoms, values)]
    for index, (_, item) in enumerate(rounds):
        ax.text(index, bottoms[index] + 0.5, f"{item['merged']['verdict']} -> {item['transition']['state']}",
                ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, max(bottoms + [1]) * 1.2 + 1)
    ax.set_ylabel("blocker count (samples or shortfall)")
    ax.set_title("Admission rounds: blockers per check, verdict -> state")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig
