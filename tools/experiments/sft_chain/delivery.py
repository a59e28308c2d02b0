"""Project 62 (SFT training delivery): train 63's chosen configuration, prove its files, open the
evaluation split once, and deliver (or refuse to).

Before any work the runner reads 63's manifest (present, promised sha256 (required in real_gpu),
seal, run mode, decision accept) and 65's (any decision: the model card reports it), then 64's
manifest through 63's input entry, the admitted data through it, and checks the sealed evaluation
split (without opening it). Then:

    training          the selected configuration on three seeds; seed 1 is the delivery: a checkpoint
                      after step k (the whole training state), the adapter in peft's format (with its
                      trainer state), a merged export (the adapter merged into the base's weights);
                      every file hashed
    fresh process     resume the checkpoint, reload the adapter, load the merged export (the worker)
    identity          what was trained, read back from the files (adapter_config.json, the trainer
                      state, the adapter's hash), against 63's selection and 63's chosen run
    final report      (only when identity and integrity passed; else the split stays sealed and the one
                      evaluation gate `final_report` fails) the evaluation split opened (a read receipt
                      written), the base and every seed
                      measured on it and on the base's held-out suite; the gates: a task gain whose
                      paired interval lies above 0, and the base's skill kept within the tolerance

and the state (the plan's mechanism, else `delivery_gates`) is delivered / needs_rerun / blocked /
rejected. Records: `evaluation` (everything measured) and the sealed `manifest`; only a delivered
adapter gets its model card (`adapter/README.md`) and the sealed `rollback` manifest.

What a downstream project (84, 85, 86) reads from a delivered manifest: `decision.decision ==
"delivered"`, then its `delivery` section: `adapter` (folder relative to the results root, the
files with their sha256, the adapter's tensor hash, the trained configuration), `merged` (folder,
files, the tolerance it was checked to), `model_card`, `base_model` (model id, revision, weights),
`task` (the system instruction, the splits and the final figures per seed), and `rollback_manifest`
(path and sha256 of the sealed record that names the base to serve without the adapter). Every file
is listed in `outputs` with its sha256, so a reader checks each byte before it loads it.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping

from tools.core.effects import paired_effect
from tools.core.handoff import seal
from tools.core.paths import resolve_project_root
from tools.data import sft_raw
from tools.errors import RecordExistsError, StageFailedError
from tools.experiments.sft_chain import admission, delivery_gates, manifests, model_card, qlora, selection
from tools.experiments.sft_chain.training import (
    QUALITY_METRIC,
    TrainConfig,
    answer_metrics,
    attach_adapter,
    base_metrics,
    export_merged,
    file_hashes,
    load_base,
    no_progress_bars,
    numerics_note,
    one_thread_on_cpu,
    render_problems,
    render_record,
    save_adapter,
    state_sha256,
    train_data,
    train_run,
)

CHAPTER_ID = "62"
UPSTREAM_ID = "63"
BRANCH_ID = "65"
EVALUATION_SCHEMA = "sft-delivery-evaluation/v2"
ROLLBACK_SCHEMA = "sft-delivery-rollback/v1"
MANIFEST_SCHEMA = "sft-delivery-manifest/v2"
RECORD_STAGES = ("evaluation", "rollback", "manifest")
DELIVERY_SEEDS = (1, 2, 3)
"""Seed 1 is delivered (63's chosen run has the same seed); seeds 2 and 3 measure the spread."""
GATE_NAMES = ("upstream_identity", "artifact_checks", "delivery_state")
TASK_SET, SKILL_SET = "evaluation", "base_skill_heldout"
LOSS_TOLERANCE = 1e-4
EVAL_TOLERANCE = 1e-4
MERGE_TOLERANCE = 1e-4
"""Largest absolute difference of logits (and of the validation loss) between the merged export and
the base with the adapter: merging changes the order of the additions, not the function."""
REGRESSION_TOLERANCE = selection.SETTINGS["cpu_smoke"]["regression_tolerance"]
WORKER_TIMEOUT_S = 600


def describe(run_mode: str, model: str) -> str:
    return (f"sft_delivery ({run_mode}): reads project 63's manifest (its selected configuration), 65's (its branch "
            f"decision) and 64's admitted data, trains the selection on {model} with seeds {DELIVERY_SEEDS} (seed 1 "
            "delivered, with a checkpoint halfway and a merged export), resumes, reloads and loads the merged export "
            "in a fresh process, checks the files against 63's selection, then opens the sealed evaluation split once "
            "and decides delivered / needs_rerun / blocked / rejected; nothing is read or written in dry_run")


def delivery_folder(sink) -> Path:
    return sink.results_root / sink.slug / f"{sink.slug}_delivery_{sink.run_label}"


def fresh_process(*, model: str, model_source: str, device: str, admitted: Mapping, config: TrainConfig,
                  folder: Path) -> dict:
    """Resume the checkpoint, reload the adapter and load the merged export in a new interpreter (the
    worker's `verify`); its JSON result, or StageFailedError with the end of its stderr if it fails."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        argv = [sys.executable, "-m", "tools.experiments.sft_chain.worker", "verify", "--model", model,
                "--model-source", model_source, "--device", device, "--admitted", str(admitted["path"]),
                "--admitted-sha256", admitted["sha256"], "--config", json.dumps(config.public()), "--out", str(out),
                "--checkpoint", str(folder / "checkpoint"), "--adapter", str(folder / "adapter"),
                "--merged", str(folder / "merged")]
        done = subprocess.run(argv, cwd=resolve_project_root(), capture_output=True, text=True,
                              timeout=WORKER_TIMEOUT_S)
        if done.returncode != 0 or not out.is_file():
            tail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
            raise StageFailedError(f"the resume / reload process failed (exit {done.returncode}): {tail}",
                                   stage="verify")
        return json.loads(out.read_text(encoding="utf-8"))


def evidence_of(folder: Path) -> dict:
    """What the delivered files say was trained: peft's adapter config (rank, alpha, dropout, target
    modules in the order peft wrote them), the adapter's trainer state (the run's settings and data
    hash) and the sha256 of the adapter's tensors as saved."""
    from safetensors.torch import load_file

    adapter = json.loads((folder / "adapter" / "adapter_config.json").read_text(encoding="utf-8"))
    state = json.loads((folder / "adapter" / "trainer_state.json").read_text(encoding="utf-8"))
    settings = state["config"]
    return {"rank": adapter["r"], "alpha": adapter["lora_alpha"], "dropout": adapter["lora_dropout"],
            "target_modules": list(adapter["target_modules"]),
            **{key: settings[key] for key in ("steps", "batch_size", "replay_fraction", "learning_rate", "schedule",
                                              "base")},
            "data_sha256": state["data_sha256"],
            "adapter_sha256": state_sha256(load_file(str(folder / "adapter" / "adapter_model.safetensors")))}


def expected_of(selected: Mapping, chosen: Mapping | None) -> dict:
    """63's selection as the identity gate compares it: the settings, the data hash and, when the
    delivery trains the chosen run's seed, that run's adapter hash."""
    expected = dict(selected)
    if chosen is not None and chosen.get("seed") == DELIVERY_SEEDS[0]:
        expected["adapter_sha256"] = chosen["adapter_sha256"]
    return expected


def write_trainer_state(folder: Path, config: TrainConfig, data_sha256: str, result: Mapping) -> None:
    """The delivered adapter's trainer state: what produced it (read back by the identity gate)."""
    state = {"config": config.public(), "data_sha256": data_sha256, "steps_done": len(result["losses"]),
             "final_learning_rate": result["learning_rates"][-1] if result["learning_rates"] else None,
             "final_loss": result["losses"][-1] if result["losses"] else None}
    (folder / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def merged_difference(model, merged_folder: Path, rendered: list, device: str) -> float:
    """Largest absolute logit difference between the merged export (loaded from its folder) and the
    model with the adapter, on up to 64 rendered chats."""
    import torch
    from transformers import AutoModelForCausalLM

    from tools.models.lab import training_batch

    with no_progress_bars():
        merged = AutoModelForCausalLM.from_pretrained(merged_folder, dtype=next(model.parameters()).dtype).to(device)
    batch = training_batch(rendered[:64], 0)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
        keep = mask.bool()
        difference = (merged(input_ids=ids, attention_mask=mask).logits
                      - model(input_ids=ids, attention_mask=mask).logits)[keep].abs().max()
    model.train(was_training)
    return float(difference)


NOT_OPENED_GATE = {"name": "final_report", "threshold": "identity and integrity pass before the evaluation split "
                   "is opened", "measured": None, "passed": False}
"""The one evaluation gate of a delivery that failed its identity or integrity checks: the sealed split stays
closed (no read receipt), since no figure measured on it could change the state."""


def final_report(base, states: Mapping, tokenizer, opened: Mapping, device: str) -> tuple[dict, dict]:
    """The paired effects on the opened evaluation split and the base's held-out suite, and the measures
    behind them: `{"base": {set: metrics}, "runs": {seed: {set: metrics}}}`."""
    final_sets = {TASK_SET: [render_record(tokenizer, r) for r in opened["records"]],
                  SKILL_SET: render_problems(tokenizer, sft_raw.base_skill_suite("heldout"))}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with one_thread_on_cpu(device):
        measures = {"base": base_metrics(base, tokenizer, final_sets, device),
                    "runs": {seed: {name: answer_metrics(model, rendered, pad_id, device)
                                    for name, rendered in final_sets.items()} for seed, model in states.items()}}
    runs, base_final = measures["runs"], measures["base"]
    effects = {
        "task_gain": paired_effect({s: runs[s][TASK_SET]["exact_match"] for s in DELIVERY_SEEDS},
                                   {s: base_final[TASK_SET]["exact_match"] for s in DELIVERY_SEEDS},
                                   metric=f"{TASK_SET} exact match, adapter minus the base"),
        "base_skill_change": paired_effect(
            {s: runs[s][SKILL_SET]["exact_match"] for s in DELIVERY_SEEDS},
            {s: base_final[SKILL_SET]["exact_match"] for s in DELIVERY_SEEDS},
            metric=f"{SKILL_SET} exact match, adapter minus the base"),
        "digit_gain": paired_effect({s: runs[s][TASK_SET]["digit_accuracy"] for s in DELIVERY_SEEDS},
                                    {s: base_final[TASK_SET]["digit_accuracy"] for s in DELIVERY_SEEDS},
                                    metric=f"{TASK_SET} digit accuracy, adapter minus the base"),
    }
    return effects, measures


def evaluation_gates(effects: Mapping) -> list[dict]:
    """The final report's gates: the task gain's paired interval above 0, and the base skill's mean
    change no worse than the tolerance."""
    gain, skill = effects["task_gain"], effects["base_skill_change"]
    return [{"name": "task_gain", "threshold": "interval lower end > 0", "measured": gain["lower"],
             "passed": gain["lower"] > 0},
            {"name": "base_skill_kept", "threshold": -REGRESSION_TOLERANCE, "measured": skill["mean"],
             "passed": skill["mean"] >= -REGRESSION_TOLERANCE}]


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    model_id = selection.CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    if not plan.writes:
        say(describe(plan.run_mode, model_id))
        return
    gates = SimpleNamespace(**{name: plan.mechanism.function(name, getattr(delivery_gates, name))
                               for name in GATE_NAMES})
    mechanism = plan.mechanism.describe({name: getattr(delivery_gates, name) for name in GATE_NAMES})
    sink.require_new(RECORD_STAGES)
    root, folder = sink.results_root, delivery_folder(sink)
    if folder.exists():
        raise RecordExistsError(f"{folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    manifests.require_promise(plan.run_mode, plan.options, (UPSTREAM_ID, BRANCH_ID), CHAPTER_ID)
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=selection.MANIFEST_SCHEMA)
    branch = manifests.read_upstream(root, upstream_id=BRANCH_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                     label=sink.run_label, options=plan.options, schema_version=qlora.MANIFEST_SCHEMA,
                                     decisions=None)
    admission_manifest = manifests.admission_of(upstream, root, schema_version=admission.MANIFEST_SCHEMA)
    manifests.check_evaluation_split(root, admission_manifest, reader_id=CHAPTER_ID)
    admitted = manifests.admitted_data(admission_manifest, root, schema_version=admission.ADMITTED_SCHEMA)
    admitted_entry = admission_manifest.output("admitted_data")
    selected, chosen = upstream.record["selected_config"], upstream.record["chosen_adapter"]
    config = TrainConfig.from_public({**selected, "seed": DELIVERY_SEEDS[0]})
    say(describe(plan.run_mode, model_id))
    checkpoint_step = config.steps // 2
    with one_thread_on_cpu(plan.device):
        base, tokenizer, identity = load_base(model_id, plan.model_source, config.base, plan.device)
        data = train_data(tokenizer, admitted["splits"]["train"])
        selection_sets = selection.evaluation_sets(tokenizer, admitted)
        runs, states, started = {}, {}, time.perf_counter()
        for seed in DELIVERY_SEEDS:
            seed_config = TrainConfig.from_public({**config.public(), "seed": seed})
            model = attach_adapter(copy.deepcopy(base), seed_config)
            delivered = seed == DELIVERY_SEEDS[0]
            result = train_run(model, tokenizer, data, selection_sets, seed_config, device=plan.device,
                               checkpoint_step=checkpoint_step if delivered else None,
                               checkpoint_dir=folder / "checkpoint" if delivered else None)
            runs[seed], states[seed] = result, model
            say(f"  seed {seed}: validation exact match {result['metrics'][selection.TASK_SET]['exact_match']:.3f}, "
                f"base skill {result['metrics'][selection.SKILL_SET]['exact_match']:.3f}"
                + (" (delivered)" if delivered else ""))
            if delivered:
                save_adapter(model, folder / "adapter", model_id, identity.get("base_revision"))
                write_trainer_state(folder / "adapter", seed_config, data.sha256, result)
                export_merged(model, folder / "merged")
                tokenizer.save_pretrained(folder / "merged")
                merge_gap = merged_difference(model, folder / "merged", selection_sets[selection.TASK_SET], plan.device)
        training_s = time.perf_counter() - started
    recorded = file_hashes(folder)
    say(f"62 training: {config.steps} steps x {len(DELIVERY_SEEDS)} seeds, checkpoint after step {checkpoint_step}; "
        "resuming, reloading and loading the merged export in a fresh process")
    verified = fresh_process(model=model_id, model_source=plan.model_source, device=plan.device,
                             admitted={"path": root / admitted_entry["path"], "sha256": admitted_entry["sha256"]},
                             config=config, folder=folder)
    resumed, reloaded, merged = verified["resumed"], verified["reloaded"], verified["merged"]
    found = file_hashes(folder)
    formal = runs[DELIVERY_SEEDS[0]]
    in_process = formal["metrics"][selection.TASK_SET]
    used = evidence_of(folder)
    identity_check = gates.upstream_identity(expected_of(selected, chosen), used, list(delivery_gates.UNORDERED))
    integrity = gates.artifact_checks(
        {"recorded": recorded, "found": found},
        {"reference_losses": formal["losses"], "checkpoint_step": checkpoint_step,
         "resumed_losses": resumed["losses"], "resumed_first_step": resumed["optimiser_steps"][0]},
        {"in_process": in_process["eval_loss"], "reloaded": reloaded["eval_loss"]},
        LOSS_TOLERANCE, EVAL_TOLERANCE)
    # the final report: the sealed evaluation split, opened once, and only for a delivery that can still happen
    checks = integrity.get("checks") if isinstance(integrity, Mapping) else None
    ready = (isinstance(identity_check, Mapping) and identity_check.get("matches") is True and bool(checks)
             and all(isinstance(check, Mapping) and check.get("passed") is True for check in checks))
    with one_thread_on_cpu(plan.device):
        base_final = base_metrics(base, tokenizer, selection_sets, plan.device)
    opened, effects, final_gates = None, None, [NOT_OPENED_GATE]
    if ready:
        opened = manifests.open_evaluation_split(root, admission_manifest, reader_id=CHAPTER_ID,
                                                 reader_label=sink.run_label, run_mode=plan.run_mode,
                                                 purpose="project 62's final report")
        effects, final_measures = final_report(base, states, tokenizer, opened, plan.device)
        base_final.update(final_measures["base"])
        for seed, measures in final_measures["runs"].items():
            runs[seed]["metrics"].update(measures)
        final_gates = evaluation_gates(effects)
    state = gates.delivery_state(identity_check, integrity, final_gates)
    branch_decision = {"decision": branch.record["decision"]["decision"],
                       "reasons": branch.record["decision"].get("reasons", [])}
    report = {"model": identity, "task": sft_raw.TASK, "system": sft_raw.TASK_SYSTEM, "selected": selected,
              "chosen_adapter": chosen, "config": {"data_sha256": data.sha256, **config.public()},
              "seeds": list(DELIVERY_SEEDS), "checkpoint_step": checkpoint_step, "training_s": training_s,
              "data": {"task_records": len(data.task), "replay_records": len(data.replay)},
              "files": {"recorded": recorded, "found": found}, "used": used,
              "base": base_final,
              "runs": {str(seed): {key: result[key] for key in ("losses", "learning_rates", "optimiser_steps",
                                                                "metrics", "curve", "undertrained",
                                                                "last_quarter_drop", "step_time_s", "adapter_sha256",
                                                                "training_state_bytes", "peak_allocated_bytes",
                                                                "peak_reserved_bytes", "sampled")}
                       for seed, result in runs.items()},
              "resumed": resumed, "reloaded": reloaded, "in_process_validation": in_process,
              "merged": {**merged, "max_logit_difference": merge_gap, "tolerance": MERGE_TOLERANCE,
                         "within_tolerance": merge_gap <= MERGE_TOLERANCE
                         and abs(merged["eval_loss"] - in_process["eval_loss"]) <= MERGE_TOLERANCE},
              "identity": identity_check, "integrity": integrity, "effects": effects, "evaluation_gates": final_gates,
              "regression_tolerance": REGRESSION_TOLERANCE, "quality_metric": QUALITY_METRIC,
              "evaluation_split": None if opened is None else {"sha256": opened["sha256"], "receipt": opened["receipt"],
                                                                "earlier_reads": opened["earlier_reads"]},
              "qlora_branch": branch_decision, "mechanism": mechanism, "state": state, "numerics": numerics_note(),
              "comparability_note": sft_raw.COMPARABILITY_NOTE}
    evaluation_path, _ = sink.save_record("evaluation", report, schema_version=EVALUATION_SCHEMA)
    outputs = [{"role": "evaluation_report", **sink.lineage(evaluation_path)}]
    delivery = None
    if state["state"] == "delivered":
        delivery = deliver(sink, folder, report, identity, opened, branch_decision)
        outputs.append({"role": "rollback_manifest", **delivery["rollback_manifest"]})
    outputs += [{"role": f"delivery/{path}", **sink.lineage(folder / path)} for path in sorted(file_hashes(folder))]
    resume_gap = max((abs(a - b) for a, b in zip(resumed["losses"], formal["losses"][checkpoint_step:])), default=None)
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), branch.entry(root), admission_manifest.entry(root),
                   {"role": "admitted_data", **admitted_entry},
                   *([] if opened is None else [{"role": "evaluation_split", **opened["entry"]},
                                                {"role": "evaluation_read_receipt", **opened["receipt"]}])],
        "candidates": [{"name": f"seed_{seed}", "config": {"data_sha256": data.sha256, **config.public(), "seed": seed},
                        "delivered": seed == DELIVERY_SEEDS[0], "adapter_sha256": runs[seed]["adapter_sha256"],
                        **{f"{name}_exact_match": runs[seed]["metrics"].get(name, {}).get("exact_match")
                           for name in (TASK_SET, SKILL_SET, selection.TASK_SET)}} for seed in DELIVERY_SEEDS],
        "base": {name: base_final.get(name, {}).get("exact_match") for name in (TASK_SET, SKILL_SET, selection.TASK_SET)},
        "gates": [
            {"name": "upstream_identity", "threshold": "63's selection and chosen run, read back from the files",
             "measured": identity_check["mismatches"], "passed": identity_check["matches"]},
            {"name": "files_intact", "threshold": len(recorded), "measured": len(found),
             "passed": integrity["checks"][0]["passed"]},
            {"name": "resume_continues", "threshold": LOSS_TOLERANCE, "measured": resume_gap,
             "passed": integrity["checks"][1]["passed"]},
            {"name": "reload_reproduces", "threshold": EVAL_TOLERANCE,
             "measured": abs(reloaded["eval_loss"] - in_process["eval_loss"]), "passed": integrity["checks"][2]["passed"]},
            *final_gates,
        ],
        "decision": {"decision": state["state"], "reasons": state["reasons"]},
        "next_action": state["next_action"],
        "outputs": outputs,
        "effects": effects,
        "delivery": delivery,
        "mechanism": mechanism,
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"62 delivery: {state['state']} {state['reasons'] or ''}; manifest {ref.path.name}")


def deliver(sink, folder: Path, report: Mapping, identity: Mapping, opened: Mapping, branch: Mapping) -> dict:
    """A delivered adapter's model card and sealed rollback manifest; returns the manifest's
    `delivery` section (see the module docstring)."""
    root = sink.results_root
    header = {"run_label": sink.run_label, "run_mode": sink.run_mode,
              "evidence_level": sink.header("manifest", MANIFEST_SCHEMA)["evidence_level"]}
    card = folder / "adapter" / "README.md"
    card.write_text(model_card.render(report, header, file_hashes(folder / "adapter")), encoding="utf-8")
    adapter_files = file_hashes(folder / "adapter")
    merged_files = file_hashes(folder / "merged")
    relative = folder.relative_to(root).as_posix()
    rollback = {
        **sink.header("rollback", ROLLBACK_SCHEMA),
        "delivered": {"adapter_folder": f"{relative}/adapter", "files": adapter_files,
                      "adapter_sha256": report["runs"]["1"]["adapter_sha256"]},
        "rollback_to": {"kind": "the base model without the adapter", "model_id": identity.get("model_id"),
                        "base_revision": identity.get("base_revision"), "weights": identity.get("weights"),
                        "weights_sha256": identity.get("weights_sha256"), "fingerprint": identity.get("fingerprint")},
        "how": "serve the base named in rollback_to alone (load it without the adapter, or disable the adapter); "
               "check its revision and weights sha256 first; no file of the delivery is needed",
        "figures_after_rollback": {name: report["base"][name]["exact_match"] for name in (TASK_SET, SKILL_SET)},
        "figures_delivered": {name: report["runs"]["1"]["metrics"][name]["exact_match"] for name in (TASK_SET, SKILL_SET)},
    }
    rollback_ref = sink.save(sink.record_path("rollback"), seal(rollback), stage="rollback")
    return {
        "adapter": {"folder": f"{relative}/adapter", "files": adapter_files,
                    "adapter_sha256": report["runs"]["1"]["adapter_sha256"], "config": report["config"],
                    "format": "peft LoRA (adapter_config.json, adapter_model.safetensors)"},
        "merged": {"folder": f"{relative}/merged", "files": merged_files, "tolerance": MERGE_TOLERANCE,
                   "max_logit_difference": report["merged"]["max_logit_difference"]},
        "model_card": {"path": card.relative_to(root).as_posix(), "sha256": adapter_files["README.md"]},
        "base_model": {"model_id": identity.get("model_id"), "revision": identity.get("base_revision"),
                       "weights": identity.get("weights")},
        "task": {"name": report["task"], "system": report["system"], "splits": list(model_card.SPLIT_NOTES),
                 "evaluation_exact_match": {seed: run["metrics"][TASK_SET]["exact_match"]
                                            for seed, run in report["runs"].items()},
                 "base_evaluation_exact_match": report["base"][TASK_SET]["exact_match"]},
        "qlora_branch": dict(branch),
        "rollback_manifest": {"path": rollback_ref.path.relative_to(root).as_posix(), "sha256": rollback_ref.sha256},
        "evaluation_split_reads_before": len(opened["earlier_reads"]),
    }
