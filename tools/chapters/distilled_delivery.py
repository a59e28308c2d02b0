"""Project 88 (distilled student delivery): what the notebook shows around its three gates.

The learner writes the gates (`comparability`, `deployment_gates`, `terminal_decision`); the project
stage (`tools.experiments.distillation.delivery`) measures G0, runs the route G1, measures the candidates
G2 and decides with them (the notebook passes its functions through the plan's mechanism). This module
checks the route's two losses against TRL's GKD loss on the lab models' own logits, reads the stage's
records back, re-decides them with given functions, draws the stages and the gates, and words the
findings (`lesson_text`, section `distilled_delivery`). Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from tools.chapters import lesson_text
from tools.chapters.sft_chain_pages import gates_table, manifest_lines
from tools.core.effects import describe as describe_effect
from tools.core.environment import installed_version
from tools.experiments.distillation import delivery as stage
from tools.experiments.distillation import delivery_gates

CHAPTER_ID = stage.CHAPTER_ID
EXPERIMENT = "distill_delivery"
FRAMEWORK_STAGE = "framework_check"
RECORD_STAGES = (FRAMEWORK_STAGE, *stage.RECORD_STAGES)
THRESHOLDS = stage.THRESHOLDS
FRAMEWORK_TOLERANCE = 1e-5
"""Largest absolute difference allowed between TRL's loss and ours: float32 logits, losses of order 1, the
same formula up to the order of additions."""
FRAMEWORK_BETAS = (0.0, 0.5, 1.0)
FRAMEWORK_PROBLEMS = 8


# ---------------------------------------------------------------------------
# Framework check: the route's losses against TRL's GKD loss, on the lab models' logits
# ---------------------------------------------------------------------------

def route_logits(problems: int = FRAMEWORK_PROBLEMS) -> dict:
    """The lab student's and the lab teacher's float32 logits on the teacher's greedy replies to the first
    `problems` development problems (the sequences an anchored step trains on), and their response mask."""
    import torch

    from tools.data import lab_tasks
    from tools.experiments.distillation.stage import load_quietly
    from tools.experiments.distillation.training import response_logits, response_tensors, teacher_trajectories

    student, tokenizer = load_quietly(stage.PLANS["cpu_smoke"]["student"])
    teacher, _ = load_quietly(stage.PLANS["cpu_smoke"]["teacher"])
    chosen = lab_tasks.problems(stage.TASK, stage.DEV_SPLIT)[:problems]
    replies = teacher_trajectories(teacher, tokenizer, chosen, max_new_tokens=stage.PLANS["cpu_smoke"]["max_new_tokens"])
    prompts, responses = [reply["prompt_ids"] for reply in replies], [reply["response_ids"] for reply in replies]
    with torch.no_grad():
        student_logits = response_logits(student, prompts, responses, tokenizer.pad_token_id)
        teacher_logits = response_logits(teacher, prompts, responses, tokenizer.pad_token_id)
    _, mask = response_tensors(responses)
    return {"student": student_logits, "teacher": teacher_logits, "mask": mask}


def compare_route_losses_with_trl(logits: Mapping | None = None) -> dict:
    """DISTILL-OPD's `generalized_jsd` (what the route's steps call: beta 0 anchored, beta 1 on-policy) against
    TRL's GKD `generalized_jsd_loss` on the same logits, per beta."""
    from tools.experiments.distillation.divergences import generalized_jsd
    from tools.experiments.distillation.gkd_reference import trl_generalized_jsd

    logits = logits or route_logits()
    rows = []
    for beta in FRAMEWORK_BETAS:
        theirs = trl_generalized_jsd(logits["student"], logits["teacher"], logits["mask"], beta, 1.0)
        ours = float(generalized_jsd(logits["student"], logits["teacher"], logits["mask"], beta, 1.0)["loss"])
        rows.append({"beta": beta, "trl_loss": theirs, "our_loss": ours, "abs_diff": abs(theirs - ours)})
    worst = max(row["abs_diff"] for row in rows)
    return {"framework": {"library": "trl", "version": installed_version("trl"),
                          "reference_call": "trl.experimental.gkd.GKDTrainer.generalized_jsd_loss(student_logits, "
                                            "teacher_logits, labels, beta, temperature=1, reduction='batchmean')",
                          "tolerance_abs": FRAMEWORK_TOLERANCE},
            "shape": list(logits["student"].shape), "positions": int(logits["mask"].sum()), "rows": rows,
            "max_abs_diff": worst, "matches": worst <= FRAMEWORK_TOLERANCE}


def framework_lines(check: Mapping) -> list[str]:
    info = check["framework"]
    lines = [f"{info['library']} {info['version']} {info['reference_call']}",
             f"  lab student and lab teacher logits {check['shape']} (float32) on the teacher's replies, "
             f"{check['positions']} response positions; tolerance {info['tolerance_abs']:g} (absolute)"]
    lines += [f"  beta {row['beta']:<4} ({'anchored, forward KL' if row['beta'] == 0 else 'on-policy, reverse KL' if row['beta'] == 1 else 'JSD'}) "
              f"TRL {row['trl_loss']:.7f} ours {row['our_loss']:.7f} |diff| {row['abs_diff']:.1e}" for row in check["rows"]]
    lines.append(f"  max |diff| {check['max_abs_diff']:.1e} -> matches: {check['matches']}")
    return lines


def framework_record_body(check: Mapping) -> dict:
    return {"measurement": "equality check of the route's losses against TRL's GKD generalized_jsd_loss on the lab "
                           "models' logits; not a GPU measurement",
            "inputs": {"problems": FRAMEWORK_PROBLEMS, "split": stage.DEV_SPLIT, "shape": check["shape"],
                       "dtype": "float32", "device": "cpu"},
            "framework": dict(check["framework"]),
            "results": {key: check[key] for key in ("positions", "rows", "max_abs_diff", "matches")}}


# ---------------------------------------------------------------------------
# Step 5: the records, re-decided and shown
# ---------------------------------------------------------------------------

def load_report(records: Sequence) -> dict:
    """The stage's records by stage name (`baseline`, `route`, `candidate`, `manifest`, `handoff` when written),
    each read back with its sha256 checked, and the manifest's path and sha256."""
    report = {ref.stage: ref.load() for ref in records}
    manifest = next(ref for ref in records if ref.stage == "manifest")
    return {**report, "manifest_path": manifest.path, "manifest_sha256": manifest.sha256}


def gate_inputs(report: Mapping) -> dict:
    """The three gates' inputs, rebuilt from the baseline and candidate records."""
    baseline = report["baseline"]["baseline"]
    candidate = report["candidate"]

    def outcome(result: Mapping) -> dict:
        return {"correct": list(result["correct"]), "formatted": list(result["formatted"]),
                "latency_s": result["latency"]["latency_s"]}

    return {"identity": candidate["identity"], "stages": candidate["stage_inputs"],
            "baseline": outcome(baseline["student"]),
            "teacher_latency_s": {int(seed): result["teacher_latency"]["latency_s"]
                                  for seed, result in candidate["candidates"].items()},
            "candidates": {int(seed): outcome(result) for seed, result in candidate["candidates"].items()},
            "thresholds": dict(candidate["thresholds"])}


def recheck(report: Mapping, comparability: Callable, deployment_gates: Callable, terminal_decision: Callable) -> dict:
    """The record's decision taken again with the given functions."""
    inputs = gate_inputs(report)
    comparable = comparability(inputs["identity"]["teacher"], inputs["identity"]["student"], inputs["stages"])
    gates = {seed: deployment_gates(inputs["baseline"], outcome, inputs["teacher_latency_s"][seed],
                                    dict(inputs["thresholds"])) for seed, outcome in inputs["candidates"].items()}
    return terminal_decision(comparable, gates)


def stage_table(report: Mapping) -> str:
    """Development accuracy (and format share) per stage: G0 student and teacher, then G1's midpoint and G2 per seed."""
    baseline = report["baseline"]["baseline"]
    routes = report["route"]["routes"]
    candidates = report["candidate"]["candidates"]
    lines = [f"{'row':<28}{'accuracy':>10}{'format':>9}{'latency ms':>12}",
             f"{'G0 student (baseline)':<28}{baseline['student']['accuracy']:>10.3f}"
             f"{baseline['student']['format_share']:>9.3f}{1000 * baseline['student']['latency']['latency_s']:>12.3f}",
             f"{'teacher (frozen)':<28}{baseline['teacher']['accuracy']:>10.3f}"
             f"{baseline['teacher']['format_share']:>9.3f}{1000 * baseline['teacher']['latency']['latency_s']:>12.3f}"]
    for seed, result in candidates.items():
        midpoint = routes[seed]["midpoint"]
        lines.append(f"{'G1 midpoint, seed ' + seed:<28}{midpoint['accuracy']:>10.3f}{midpoint['format_share']:>9.3f}"
                     f"{'':>12}")
        lines.append(f"{'G2 candidate, seed ' + seed:<28}{result['accuracy']:>10.3f}{result['format_share']:>9.3f}"
                     f"{1000 * result['latency']['latency_s']:>12.3f}")
    return "\n".join(lines)


def report_lines(report: Mapping) -> str:
    baseline, candidate = report["baseline"], report["candidate"]
    models = baseline["models"]
    settings = baseline["settings"]
    decision = candidate["decision"]
    route = report["route"]
    return "\n".join([
        f"teacher {models['teacher']['model_id']} ({models['teacher']['parameters']} parameters, weights "
        f"{models['teacher']['weights']}), student {models['student']['model_id']} ({models['student']['parameters']} "
        f"parameters); tokenizer sha256 {models['teacher']['tokenizer_sha256'][:12]} / "
        f"{models['student']['tokenizer_sha256'][:12]}",
        f"route per seed: {settings['anchored_steps']} anchored steps on {route['anchors']['verified']} of "
        f"{route['anchors']['written']} teacher trajectories the verifier accepted, then {settings['distill_steps']} "
        f"on-policy steps; {settings['prompts_per_step']} prompts a step, lr {settings['learning_rate']:g}",
        f"development set: {baseline['baseline']['student']['problems']} problems, decoding {baseline['decoding']}; "
        f"latency clock: {baseline['baseline']['student']['latency']['clock']}",
        stage_table(report),
        f"comparability: {'comparable' if candidate['comparability']['comparable'] else 'NOT comparable'} "
        f"{candidate['comparability']['findings'] or ''}",
        *[f"seed {seed}: " + ", ".join(f"{gate['name']} {_shown(gate['measured'])} ({'pass' if gate['passed'] else 'FAIL'})"
                                       for gate in result["gates"]["gates"])
          for seed, result in candidate["candidates"].items()],
        f"decision: {decision['decision']} {decision['reasons'] or ''}; qualifying seeds {decision['qualifying_seeds']}",
        heldout_line(report),
    ])


def _shown(value) -> str:
    return "None" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def heldout_line(report: Mapping) -> str:
    final = report["candidate"]["final_heldout"]
    if final is None:
        return (f"final held-out set ({report['baseline']['final_heldout']['count']} problems): still closed, no read "
                f"receipt, no deployment handoff")
    return (f"final held-out set opened once (receipt {final['receipt']['path']}, {len(final['earlier_reads'])} earlier "
            f"reads): accuracy {final['accuracy']}; handoff {report['manifest']['handoff']['path']}")


def findings(report: Mapping) -> list[str]:
    """The page's sentences about this run: the baseline row, the gain, the retention, and the terminal rule."""
    baseline = report["baseline"]["baseline"]
    candidate = report["candidate"]
    effects = candidate["effects"]
    gain = effects["dev_gain"]
    retention = {seed: result["gates"]["gates"][1]["measured"] for seed, result in candidate["candidates"].items()}
    lines = [lesson_text.text("distilled_delivery.baseline", student=baseline["student"]["accuracy"],
                              teacher=baseline["teacher"]["accuracy"], problems=baseline["student"]["problems"])]
    key = "distilled_delivery.gain" if gain["lower"] > 0 else "distilled_delivery.no_gain"
    lines.append(lesson_text.text(key, interval=describe_effect(gain),
                                  midpoint=describe_effect(effects["dev_midpoint_gain"])))
    lost = [seed for seed, share in retention.items() if share is not None and share < candidate["thresholds"]["min_retention"]]
    lines.append(lesson_text.text("distilled_delivery.retention_lost" if lost else "distilled_delivery.retention_kept",
                                  shares=", ".join(f"{seed}: {_shown(share)}" for seed, share in retention.items()),
                                  threshold=candidate["thresholds"]["min_retention"]))
    decision = candidate["decision"]["decision"]
    lines.append(lesson_text.text("distilled_delivery.opened" if candidate["final_heldout"] else "distilled_delivery.closed",
                                  decision=decision))
    return lines


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 88."""
    lines = manifest_lines(record)
    models = record.get("models", {})
    lines += [f"{role}: {entry.get('model_id')} weights sha256 {str(entry.get('weights_sha256'))[:12]}"
              for role, entry in models.items()]
    lines.append("final held-out set: " + ("opened once, receipt " + record["final_heldout"]["receipt"]["path"]
                                           if record.get("final_heldout", {}).get("opened") else "closed"))
    lines.append("deployment handoff: " + (record["handoff"]["path"] if record.get("handoff") else "none written"))
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw_delivery(report: Mapping):
    """Figure: development accuracy at G0, G1's midpoint and G2 per seed beside the teacher (left), and each
    seed's four gates as measured / threshold, oriented so that crossing 1 fails (right)."""
    import matplotlib.pyplot as plt

    baseline = report["baseline"]["baseline"]
    routes, candidates = report["route"]["routes"], report["candidate"]["candidates"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    for seed, result in candidates.items():
        left.plot(["G0", "G1 midpoint", "G2"], [baseline["student"]["accuracy"], routes[seed]["midpoint"]["accuracy"],
                                               result["accuracy"]], marker="o", label=f"seed {seed}")
    left.axhline(baseline["teacher"]["accuracy"], color="black", linestyle="--", label="teacher")
    left.set(ylabel="development exact match (greedy)", ylim=(0, 1.05), title="The student along the route")
    left.legend(fontsize=8, loc="lower right")
    names = list(delivery_gates.GATE_NAMES)
    width = 0.8 / max(len(candidates), 1)
    for offset, (seed, result) in enumerate(candidates.items()):
        values = []
        for gate in result["gates"]["gates"]:
            measured, threshold = gate["measured"], gate["threshold"]
            if measured is None:
                values.append(0.0)
            elif gate["name"] == "latency":
                values.append(measured / threshold)
            else:  # a minimum: at or above it passes
                values.append(threshold / measured if measured > 0 else 2.0)
        right.bar([i + offset * width - 0.4 + width / 2 for i in range(len(names))], values, width=width,
                  label=f"seed {seed}")
    right.axhline(1.0, color="#cb181d", linestyle=":", label="gate line (above fails)")
    right.set_xticks(range(len(names)), names)
    right.set_ylim(0, max(1.6, max((patch.get_height() for patch in right.patches), default=0) + 0.5))
    right.set(ylabel="threshold-relative position", title="Four gates per seed, passed together or not at all")
    right.legend(fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    return fig
