"""Project 62 (SFT training delivery): what the notebook shows around its three gates.

The learner writes the gates (`upstream_identity`, `artifact_checks`, `delivery_state`); the delivery
stage (`tools.experiments.sft_chain.delivery`) trains, saves, resumes, reloads, merges, opens the
evaluation split and decides with them (the notebook passes its functions through the plan's
mechanism). This module re-decides a delivery from its record, draws the loss curves and the final
evaluation against the base, words the findings (`lesson_text`, section `sft_delivery`), and checks
the delivered files against peft, safetensors and torch on a short run of its own. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.chapters import lesson_text
from tools.core.effects import describe as describe_effect
from tools.experiments.sft_chain import delivery as stage
from tools.experiments.sft_chain import delivery_gates

CHAPTER_ID = stage.CHAPTER_ID


def gate_inputs(report: Mapping) -> dict:
    """The three gates' inputs, rebuilt from an evaluation record."""
    k = report["checkpoint_step"]
    formal = report["runs"]["1"]
    return {"selected": stage.expected_of(report["selected"], report["chosen_adapter"]), "used": report["used"],
            "files": report["files"],
            "resume": {"reference_losses": formal["losses"], "checkpoint_step": k,
                       "resumed_losses": report["resumed"]["losses"],
                       "resumed_first_step": report["resumed"]["optimiser_steps"][0]},
            "reload": {"in_process": report["in_process_validation"]["eval_loss"],
                       "reloaded": report["reloaded"]["eval_loss"]},
            "evaluation": [{"name": gate["name"], "passed": gate["passed"]} for gate in report["evaluation_gates"]]}


def recheck(report: Mapping, upstream_identity: Callable, artifact_checks: Callable, delivery_state: Callable) -> dict:
    """The record's delivery decided again with the given functions."""
    inputs = gate_inputs(report)
    identity = upstream_identity(inputs["selected"], inputs["used"], list(delivery_gates.UNORDERED))
    integrity = artifact_checks(inputs["files"], inputs["resume"], inputs["reload"], stage.LOSS_TOLERANCE,
                                stage.EVAL_TOLERANCE)
    return delivery_state(identity, integrity, inputs["evaluation"])


def figures_table(report: Mapping) -> str:
    """Answer exact match per split: the no-adapter base, then every seed (seed 1 delivered)."""
    seeds = [str(seed) for seed in report["seeds"]]
    lines = [f"{'split':<24}{'base':>8}" + "".join(f"{'seed ' + s:>9}" for s in seeds)]
    for name in ("evaluation", "base_skill_heldout", "validation", "base_skill_validation"):
        row = [report["runs"][s]["metrics"][name]["exact_match"] for s in seeds]
        lines.append(f"{name:<24}{report['base'][name]['exact_match']:>8.3f}" + "".join(f"{v:>9.3f}" for v in row))
    return "\n".join(lines)


def report_lines(report: Mapping) -> str:
    k, formal = report["checkpoint_step"], report["runs"]["1"]
    resumed, reloaded, merged = report["resumed"], report["reloaded"], report["merged"]
    gap = max(abs(a - b) for a, b in zip(resumed["losses"], formal["losses"][k:]))
    return "\n".join([
        f"configuration: {report['config']}",
        f"seed 1 (delivered): {len(formal['losses'])} steps, loss {formal['losses'][0]:.4f} -> {formal['losses'][-1]:.4f}; "
        f"checkpoint after step {k}",
        f"resumed in a fresh process: first optimiser step {resumed['optimiser_steps'][0]} (a restart would be 1), "
        f"{len(resumed['losses'])} steps, largest loss gap to the uninterrupted run {gap:.2e}; adapter hash "
        f"{'equal' if resumed['adapter_sha256'] == formal['adapter_sha256'] else 'different'}",
        f"validation in the training process: loss {report['in_process_validation']['eval_loss']:.6f}; reloaded "
        f"adapter: {reloaded['eval_loss']:.6f}; merged export: {merged['eval_loss']:.6f} (largest logit difference "
        f"{merged['max_logit_difference']:.1e}, tolerance {merged['tolerance']:g})",
        f"identity read back from the files: {'matches' if report['identity']['matches'] else 'differs'} "
        f"{report['identity']['mismatches'] or ''}",
        split_line(report["evaluation_split"]),
        *([] if report["effects"] is None else [figures_table(report)]),
    ])


def split_line(split: Mapping | None) -> str:
    """Whether the final report opened the evaluation split (its hash, receipt and earlier reads) or left it sealed."""
    if split is None:
        return "evaluation split: still sealed (identity or integrity failed first; no read receipt written)"
    return (f"evaluation split sha256 {split['sha256'][:12]}, read receipt {split['receipt']['path']}, opened "
            f"{len(split['earlier_reads'])} time(s) before")


def findings(report: Mapping) -> list[str]:
    """The page's sentences about the final report (Simplified Chinese, from `lesson_text`)."""
    if report["effects"] is None:
        return [lesson_text.text("sft_delivery.split_sealed")]
    gain, skill = report["effects"]["task_gain"], report["effects"]["base_skill_change"]
    lines = [lesson_text.text("sft_delivery.baseline", base=report["base"]["evaluation"]["exact_match"],
                              skill=report["base"]["base_skill_heldout"]["exact_match"]),
             lesson_text.text("sft_delivery.task_gain" if gain["lower"] > 0 else "sft_delivery.no_task_gain",
                              interval=describe_effect(gain)),
             lesson_text.text("sft_delivery.skill_kept" if skill["mean"] >= -report["regression_tolerance"]
                              else "sft_delivery.skill_lost", interval=describe_effect(skill),
                              tolerance=report["regression_tolerance"])]
    earlier = report["evaluation_split"]["earlier_reads"]
    lines.append(lesson_text.text("sft_delivery.first_look") if not earlier else
                 lesson_text.text("sft_delivery.not_first_look", count=len(earlier)))
    return lines


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 62."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    delivery = record.get("delivery") or {}
    if delivery:
        lines.append(f"adapter {delivery['adapter']['folder']} on {delivery['base_model']}; merged "
                     f"{delivery['merged']['folder']}; rollback {delivery['rollback_manifest']['path']}")
    else:
        lines.append("nothing delivered (no model card, merged export or rollback manifest)")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw_delivery(report: Mapping):
    """Step 5: the uninterrupted loss curve with the resumed run over it after the checkpoint, and the
    final answers per seed against the no-adapter base on the evaluation split and the base's suite."""
    import matplotlib.pyplot as plt

    k, formal = report["checkpoint_step"], report["runs"]["1"]
    steps = list(range(1, len(formal["losses"]) + 1))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    left.plot(steps, formal["losses"], color="#2980b9", linewidth=3, alpha=0.5, label="uninterrupted run")
    left.plot(report["resumed"]["optimiser_steps"], report["resumed"]["losses"], "k.", label="resumed (fresh process)")
    left.axvline(k, color="#c0392b", linestyle="--", label=f"checkpoint after step {k}")
    left.set_xlabel("optimiser step")
    left.set_ylabel("reply loss")
    left.set_title("Resume continues the same curve from step k + 1")
    left.legend(fontsize=8)
    if report["effects"] is None:
        right.text(0.5, 0.5, "evaluation split not opened\n(identity or integrity failed first)", ha="center",
                   va="center", transform=right.transAxes)
        right.set_axis_off()
        fig.tight_layout()
        return fig
    names = ["evaluation", "base_skill_heldout"]
    for offset, seed in zip((-0.2, 0.0, 0.2), [str(s) for s in report["seeds"]]):
        right.scatter([index + offset for index in range(len(names))],
                      [report["runs"][seed]["metrics"][name]["exact_match"] for name in names], color="#2980b9",
                      zorder=3, label="adapter, per seed" if seed == "1" else None)
    right.scatter(range(len(names)), [report["base"][name]["exact_match"] for name in names], marker="_", s=900,
                  color="#c0392b", label="base, no adapter")
    right.set_xticks(range(len(names)), ["task (sum + 1)\nevaluation split", "base skill (sum)\nheld-out suite"])
    right.set_ylim(0, 1)
    right.set_ylabel("answer exact match")
    right.set_title("Final report: the split opened once")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def framework_check(model_id: str | None = None, steps: int = 4) -> dict:
    """What the delivery relies on, against peft, safetensors and torch, on a short run of its own (the
    tiny model, 4 steps of 8 examples with dropout and a cosine schedule, a checkpoint after step 2,
    in a temporary folder):

    - the adapter file peft writes (`save_pretrained`, read back with `safetensors.torch.load_file`)
      holds exactly the trained adapter tensors (`get_peft_model_state_dict`), bit for bit;
    - a checkpoint loaded into a fresh `torch.optim.AdamW` and `LambdaLR` continues its step counter
      (step k + 1 after one update), and the resumed losses equal the uninterrupted ones (dropout
      draws from the restored random state);
    - `PeftModel.from_pretrained` on a fresh base gives the same logits as the trained model (no
      tolerance on a CPU), and peft's `merge_and_unload` gives them within MERGE_TOLERANCE.
    """
    import copy
    import tempfile
    from pathlib import Path

    import peft
    import safetensors
    import torch
    from peft import PeftModel, get_peft_model_state_dict
    from safetensors.torch import load_file

    from tools.data import sft_raw
    from tools.experiments.sft_chain.training import (TrainConfig, attach_adapter, load_base, one_thread_on_cpu,
                                                      save_adapter, state_sha256, train_data, train_run)

    model_id = model_id or "tiny"  # the offline tiny model: a mechanism check, not the Step 5 model
    train = [r for r in sft_raw.build_delivery().splits["train"] if r["id"].startswith(("gen-", "rep-"))]
    records = [r for r in train if r["source"] != "replay"][:48] + [r for r in train if r["source"] == "replay"][:16]
    config = TrainConfig(rank=4, steps=steps, batch_size=8, dropout=0.1, schedule="cosine")
    with one_thread_on_cpu("cpu"), tempfile.TemporaryDirectory() as scratch:
        base, tokenizer, _ = load_base(model_id, "local", "float32", "cpu")
        data = train_data(tokenizer, records)
        model = attach_adapter(copy.deepcopy(base), config)
        full = train_run(model, tokenizer, data, {}, config, device="cpu", checkpoint_step=steps // 2,
                         checkpoint_dir=Path(scratch) / "checkpoint")
        save_adapter(model, Path(scratch) / "adapter", model_id, None)
        saved = load_file(str(Path(scratch) / "adapter" / "adapter_model.safetensors"))
        state = get_peft_model_state_dict(model, save_embedding_layers=False)
        trained = {name: tensor.detach().cpu() for name, tensor in state.items()}
        file_equal = saved.keys() == trained.keys() and all(torch.equal(saved[n], trained[n]) for n in saved)
        resumed = train_run(attach_adapter(copy.deepcopy(base), config), tokenizer, data, {}, config, device="cpu",
                            resume_from=Path(scratch) / "checkpoint")
        reloaded = PeftModel.from_pretrained(copy.deepcopy(base), str(Path(scratch) / "adapter")).eval()
        ids = torch.tensor([data.task[0][0]])
        with torch.no_grad():
            own = model.eval()(input_ids=ids).logits
            same_logits = torch.equal(reloaded(input_ids=ids).logits, own)
            merged = copy.deepcopy(model).merge_and_unload()
            merge_gap = float((merged(input_ids=ids).logits - own).abs().max())
    return {"peft": peft.__version__, "safetensors": safetensors.__version__, "torch": torch.__version__,
            "file_equals_trained": bool(file_equal), "file_sha256": state_sha256(saved),
            "trained_sha256": full["adapter_sha256"], "resumed_first_step": resumed["optimiser_steps"][0],
            "checkpoint_step": steps // 2, "resumed_equal": resumed["losses"] == full["losses"][steps // 2:],
            "resumed_sha256_equal": resumed["adapter_sha256"] == full["adapter_sha256"],
            "reload_same_logits": bool(same_logits), "merge_gap": merge_gap,
            "merge_within_tolerance": merge_gap <= stage.MERGE_TOLERANCE}


def framework_lines(check: Mapping) -> str:
    return "\n".join([
        f"peft {check['peft']}, safetensors {check['safetensors']}, torch {check['torch']}",
        f"  adapter_model.safetensors == the trained adapter tensors: {check['file_equals_trained']} "
        f"(sha256 {check['file_sha256'][:12]} / {check['trained_sha256'][:12]})",
        f"  AdamW + LambdaLR resumed from the checkpoint after step {check['checkpoint_step']} (dropout on): first step "
        f"{check['resumed_first_step']}, losses equal the uninterrupted run: {check['resumed_equal']}, "
        f"same adapter: {check['resumed_sha256_equal']}",
        f"  PeftModel.from_pretrained on a fresh base: identical logits {check['reload_same_logits']}",
        f"  merge_and_unload: largest logit difference {check['merge_gap']:.1e} (tolerance {stage.MERGE_TOLERANCE:g}) "
        f"-> within {check['merge_within_tolerance']}",
    ])
