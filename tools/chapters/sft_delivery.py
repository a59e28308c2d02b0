"""Project 62 (SFT training delivery): what the notebook shows around its three gates.

The learner writes the gates (`upstream_identity`, `artifact_checks`, `delivery_state`); the delivery
stage (`tools.experiments.sft_chain.delivery`) trains, saves, resumes and reloads, and decides with
the library's gates. This module re-decides a delivery with the notebook's functions, draws the loss
curves and the two evaluations, and checks the delivered files against peft, safetensors and torch on
a short run of its own. Nothing here prints.
"""

from __future__ import annotations

from typing import Callable, Mapping

from tools.experiments.sft_chain import delivery as stage

CHAPTER_ID = stage.CHAPTER_ID


def gate_inputs(report: Mapping) -> dict:
    """The three gates' inputs, rebuilt from an evaluation record."""
    k = report["checkpoint_step"]
    return {"selected": report["selected"], "used": report["config"], "files": report["files"],
            "resume": {"reference_losses": report["formal"]["losses"], "checkpoint_step": k,
                       "resumed_losses": report["resumed"]["losses"],
                       "resumed_first_step": report["resumed"]["optimiser_steps"][0]},
            "reload": {"in_process": report["formal"]["eval_loss"], "reloaded": report["reloaded"]["eval_loss"]}}


def recheck(report: Mapping, upstream_identity: Callable, artifact_checks: Callable, delivery_state: Callable) -> dict:
    """The record's delivery decided again with the given functions (the notebook's)."""
    inputs = gate_inputs(report)
    identity = upstream_identity(inputs["selected"], inputs["used"])
    integrity = artifact_checks(inputs["files"], inputs["resume"], inputs["reload"], stage.LOSS_TOLERANCE,
                                stage.EVAL_TOLERANCE)
    return delivery_state(identity, integrity)


def report_lines(report: Mapping) -> str:
    k, formal = report["checkpoint_step"], report["formal"]
    resumed, reloaded = report["resumed"], report["reloaded"]
    gap = max(abs(a - b) for a, b in zip(resumed["losses"], formal["losses"][k:]))
    return "\n".join([
        f"configuration: {report['config']}",
        f"formal training: {len(formal['losses'])} steps, loss {formal['losses'][0]:.4f} -> {formal['losses'][-1]:.4f}; "
        f"checkpoint after step {k}",
        f"resumed in a fresh process: first optimiser step {resumed['optimiser_steps'][0]} (a restart would be 1), "
        f"{len(resumed['losses'])} steps, largest loss gap to the uninterrupted run {gap:.2e}",
        f"evaluation in the training process: loss {formal['eval_loss']:.6f}, exact match {formal['exact_match']:.3f}",
        f"reloaded adapter in a fresh process: loss {reloaded['eval_loss']:.6f}, exact match {reloaded['exact_match']:.3f}",
        f"delivered files: {len(report['files']['recorded'])} recorded, "
        f"{sum(1 for v in report['files']['found'].values() if v is not None)} found",
    ])


def record_summary(record: Mapping) -> list[str]:
    """Lines that show a manifest record of project 62."""
    from tools.chapters.sft_chain_pages import gates_table, manifest_lines

    lines = manifest_lines(record)
    lines.append(f"adapter {record.get('adapter', {}).get('folder')} on {record.get('adapter', {}).get('base_model')}")
    lines += gates_table(record.get("gates", [])).splitlines()
    return lines


def draw_delivery(report: Mapping):
    """Step 5: the uninterrupted loss curve with the resumed run drawn over it after the checkpoint, and
    the evaluation in the training process beside the reloaded one."""
    import matplotlib.pyplot as plt

    k, formal = report["checkpoint_step"], report["formal"]
    steps = list(range(1, len(formal["losses"]) + 1))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    left.plot(steps, formal["losses"], color="#2980b9", linewidth=3, alpha=0.5, label="uninterrupted run")
    left.plot(report["resumed"]["optimiser_steps"], report["resumed"]["losses"], "k.", label="resumed (fresh process)")
    left.axvline(k, color="#c0392b", linestyle="--", label=f"checkpoint after step {k}")
    left.set_xlabel("optimiser step")
    left.set_ylabel("reply loss")
    left.set_title("Resume continues the same curve from step k + 1")
    left.legend(fontsize=8)
    values = [formal["eval_loss"], report["reloaded"]["eval_loss"]]
    right.bar(["in the training\nprocess", "reloaded in a\nfresh process"], values, color=["#8fc1e3", "#b39ddb"])
    right.set_ylim(min(values) * 0.98, max(values) * 1.01)
    right.set_ylabel("evaluation loss (frozen split)")
    right.set_title("The reloaded adapter reproduces the evaluation")
    fig.tight_layout()
    return fig


def framework_check(model_id: str | None = None, steps: int = 4) -> dict:
    """What the delivery relies on, against peft, safetensors and torch, on a short run of its own (the
    lab model, 4 steps of 8 examples, a checkpoint after step 2, in a temporary folder):

    - the adapter file peft writes (`save_pretrained`, read back with `safetensors.torch.load_file`)
      holds exactly the trained adapter tensors (`get_peft_model_state_dict`), bit for bit;
    - a checkpoint's optimiser state loaded into a fresh `torch.optim.AdamW` continues its step
      counter (step k + 1 after one update), and the resumed losses equal the uninterrupted ones;
    - `PeftModel.from_pretrained` on a fresh base gives the same logits as the trained model (no tolerance on a CPU).
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
                                                      render, save_adapter, state_sha256, train_run)

    model_id = model_id or "tiny"  # the offline tiny model: a mechanism check, not the Step 5 model
    records = sft_raw.build_delivery().splits["train"][:64]
    config = TrainConfig(rank=4, steps=steps, batch_size=8)
    with one_thread_on_cpu("cpu"), tempfile.TemporaryDirectory() as scratch:
        base, tokenizer, _ = load_base(model_id, "local", "float32", "cpu")
        rendered = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in records
                    if "input" in r and r["output"].strip()]
        model = attach_adapter(copy.deepcopy(base), config)
        full = train_run(model, tokenizer, rendered, rendered[:8], config, device="cpu", checkpoint_step=steps // 2,
                         checkpoint_dir=Path(scratch) / "checkpoint")
        save_adapter(model, Path(scratch) / "adapter", model_id)
        saved = load_file(str(Path(scratch) / "adapter" / "adapter_model.safetensors"))
        state = get_peft_model_state_dict(model, save_embedding_layers=False)
        trained = {name: tensor.detach().cpu() for name, tensor in state.items()}
        file_equal = saved.keys() == trained.keys() and all(torch.equal(saved[n], trained[n]) for n in saved)
        resumed = train_run(attach_adapter(copy.deepcopy(base), config), tokenizer, rendered, rendered[:8], config,
                            device="cpu", resume_from=Path(scratch) / "checkpoint")
        reloaded = PeftModel.from_pretrained(copy.deepcopy(base), str(Path(scratch) / "adapter")).eval()
        ids = torch.tensor([rendered[0][0]])
        with torch.no_grad():
            same_logits = torch.equal(reloaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits)
    return {"peft": peft.__version__, "safetensors": safetensors.__version__, "torch": torch.__version__,
            "file_equals_trained": bool(file_equal), "file_sha256": state_sha256(saved),
            "trained_sha256": full["adapter_sha256"], "resumed_first_step": resumed["optimiser_steps"][0],
            "checkpoint_step": steps // 2, "resumed_equal": resumed["losses"] == full["losses"][steps // 2:],
            "reload_same_logits": bool(same_logits)}


def framework_lines(check: Mapping) -> str:
    return "\n".join([
        f"peft {check['peft']}, safetensors {check['safetensors']}, torch {check['torch']}",
        f"  adapter_model.safetensors == the trained adapter tensors: {check['file_equals_trained']} "
        f"(sha256 {check['file_sha256'][:12]} / {check['trained_sha256'][:12]})",
        f"  AdamW resumed from the checkpoint after step {check['checkpoint_step']}: first step "
        f"{check['resumed_first_step']}, losses equal the uninterrupted run: {check['resumed_equal']}",
        f"  PeftModel.from_pretrained on a fresh base: identical logits {check['reload_same_logits']}",
    ])
