"""The model card project 62 writes beside a delivered adapter (`adapter/README.md`), from its records.

It says what a user needs before shipping the adapter: the base model and its revision, the data it
was trained on (by hash), the configuration, every metric with the split it came from (and the
no-adapter base beside it), the evidence level, and the known limits. It names files by their path
inside the delivery, never by a path of the machine that trained it.
"""

from __future__ import annotations

from typing import Mapping

SPLIT_NOTES = {
    "evaluation": "64's frozen evaluation split (sum plus one), opened once by this delivery",
    "base_skill_heldout": "the base's own skill, plain sums of the lab held-out split",
    "validation": "64's admitted validation split (63 selected on it)",
    "base_skill_validation": "the base's own skill, plain sums of the lab validation split (63 read it)",
}


def _number(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def metrics_table(report: Mapping) -> list[str]:
    seeds = [str(seed) for seed in report["seeds"]]
    lines = ["| split | what it is | base (no adapter) | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|---|---|" + "---|" * len(seeds)]
    for name in ("evaluation", "base_skill_heldout", "validation", "base_skill_validation"):
        if name not in report["base"]:
            continue
        row = [_number(report["runs"][s]["metrics"][name]["exact_match"]) for s in seeds]
        lines.append(f"| {name} | {SPLIT_NOTES[name]} | {_number(report['base'][name]['exact_match'])} | "
                     + " | ".join(row) + " |")
    return lines


def render(report: Mapping, manifest: Mapping, files: Mapping[str, str]) -> str:
    """The card's markdown (English: it is a tool's output)."""
    model, config, effects = report["model"], report["config"], report["effects"]
    gain, skill = effects["task_gain"], effects["base_skill_change"]
    branch = report.get("qlora_branch") or {}
    lines = [
        f"# SFT adapter: {report['task']} on {model.get('model_id')}",
        "",
        f"Delivered by project 62 of the course, run label `{manifest['run_label']}`, run mode `{manifest['run_mode']}` "
        f"(evidence level `{manifest['evidence_level']}`; a cpu_smoke figure comes from a tiny lab model on a CPU "
        "and is never a GPU result).",
        "",
        "## Base model",
        "",
        f"- model: `{model.get('model_id')}`, revision `{model.get('base_revision')}`, weights "
        f"`{model.get('weights')}`, source `{model.get('source')}`",
        f"- chat: the system turn `{report['system']}` asks for the sum plus one; without it the base answers "
        "plain sums (its own skill, which this adapter must keep)",
        "",
        "## Training data",
        "",
        f"- 64's admitted train split, sha256 `{config['data_sha256']}` ({report['data']['task_records']} task records, "
        f"{report['data']['replay_records']} replay records of plain sums, {config['replay_fraction']:.0%} of every "
        "batch)",
        "- built in code; not comparable with the original course's Alpaca / GSM8K data",
        "",
        "## Configuration",
        "",
        "| setting | value |",
        "|---|---|",
    ]
    lines += [f"| {key} | `{value}` |" for key, value in config.items() if key != "data_sha256"]
    lines += [
        "",
        "## Metrics",
        "",
        "Answer exact match (every reply token the greedy choice: the answer's digits and the end of turn); the "
        "delivered adapter is seed 1, seeds 2 and 3 train the same configuration to measure the spread.",
        "",
        *metrics_table(report),
        "",
        f"- answer gain over the base on the evaluation split: {gain['mean']:+.3f}, 95 % interval "
        f"[{gain['lower']:+.3f}, {gain['upper']:+.3f}] over {len(gain['seeds'])} seeds",
        f"- change of the base's own skill (held-out plain sums): {skill['mean']:+.3f}, 95 % interval "
        f"[{skill['lower']:+.3f}, {skill['upper']:+.3f}]; the delivery gate allows a mean loss of at most "
        f"{report['regression_tolerance']}",
        "",
        "## Known limits",
        "",
        "- one narrow task (two-digit sums plus one) on a toy model; nothing here says how the adapter behaves on "
        "other prompts",
        f"- the evaluation split had been opened {len(report['evaluation_split']['earlier_reads'])} time(s) before this "
        "delivery (0 means this report is its first look)",
        f"- QLoRA branch (project 65): decision `{branch.get('decision')}` ({', '.join(branch.get('reasons') or []) or '-'});"
        " this adapter was trained and evaluated on a float32 base only",
        "- the merged export equals base plus adapter within the tolerance stated in the delivery manifest, not bit "
        "for bit",
        "",
        "## Files",
        "",
    ]
    lines += [f"- `{path}` sha256 `{digest}`" for path, digest in sorted(files.items())]
    lines += ["", "Rollback: the delivery's rollback manifest names the base to serve without this adapter.", ""]
    return "\n".join(lines)
