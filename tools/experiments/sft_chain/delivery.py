"""Project 62 (SFT training delivery): train 63's chosen configuration, save, resume, reload, deliver.

Before any work the runner reads 63's manifest (present, promised sha256, seal, run mode, decision
accept) and the admitted data it names (sha256 checked). Then:

    formal training   the selected configuration on the admitted data; a checkpoint (adapter,
                      optimiser state, step) after step k, the final adapter in peft's format, the
                      evaluation on the frozen split in the training process; every file hashed
    resume            a fresh process loads the checkpoint and makes the steps after k
    reload            a fresh process loads the saved adapter onto a fresh base and evaluates it

and the gates (`delivery_gates`) decide delivered / needs_rerun / blocked from the identity of the
configuration with 63's selection, the files as recorded and as found, the resumed loss curve against
the uninterrupted one and the reloaded evaluation against the in-process one. Records: `evaluation`
and the sealed `manifest` (the adapter and checkpoint files among its outputs) that 84 and 85 read.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

from tools.core.paths import resolve_project_root
from tools.core.records import load_record
from tools.data import sft_raw
from tools.errors import RecordExistsError, StageFailedError
from tools.experiments.sft_chain import delivery_gates, manifests, selection
from tools.experiments.sft_chain.training import (
    TrainConfig,
    attach_adapter,
    file_hashes,
    load_base,
    one_thread_on_cpu,
    render,
    save_adapter,
    train_run,
)

CHAPTER_ID = "62"
UPSTREAM_ID = "63"
EVALUATION_SCHEMA = "sft-delivery-evaluation/v1"
MANIFEST_SCHEMA = "sft-delivery-manifest/v1"
RECORD_STAGES = ("evaluation", "manifest")
DELIVERY_SEED = 1
LOSS_TOLERANCE = 1e-4
EVAL_TOLERANCE = 1e-4
WORKER_TIMEOUT_S = 600


def describe(run_mode: str, model: str) -> str:
    return (f"sft_delivery ({run_mode}): reads project 63's manifest (its selected configuration) and 64's admitted "
            f"data, trains it on {model} with a checkpoint halfway, resumes the checkpoint and reloads the adapter in "
            "fresh processes, then decides delivered / needs_rerun / blocked; nothing is read or written in dry_run")


def delivery_folder(sink) -> Path:
    return sink.results_root / sink.slug / f"{sink.slug}_delivery_{sink.run_label}"


def used_config(selected: Mapping) -> TrainConfig:
    """The configuration this delivery trains: the selection's settings with the delivery seed."""
    settings = {key: value for key, value in selected.items() if key in TrainConfig.__dataclass_fields__}
    settings["target_modules"] = tuple(settings["target_modules"])
    return TrainConfig(**{**settings, "seed": DELIVERY_SEED})


def fresh_process(*, model: str, model_source: str, device: str, admitted: Mapping, config: TrainConfig,
                  folder: Path) -> dict:
    """Resume the checkpoint and reload the adapter in a new interpreter (the worker's `verify`); its
    JSON result, or StageFailedError with the end of its stderr if it fails."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "result.json"
        argv = [sys.executable, "-m", "tools.experiments.sft_chain.worker", "verify", "--model", model,
                "--model-source", model_source, "--device", device, "--admitted", str(admitted["path"]),
                "--admitted-sha256", admitted["sha256"], "--config", json.dumps(config.public()), "--out", str(out),
                "--checkpoint", str(folder / "checkpoint"), "--adapter", str(folder / "adapter")]
        done = subprocess.run(argv, cwd=resolve_project_root(), capture_output=True, text=True,
                              timeout=WORKER_TIMEOUT_S)
        if done.returncode != 0 or not out.is_file():
            tail = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
            raise StageFailedError(f"the resume / reload process failed (exit {done.returncode}): {tail}",
                                   stage="verify")
        return json.loads(out.read_text(encoding="utf-8"))


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    model_id = selection.CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    if not plan.writes:
        say(describe(plan.run_mode, model_id))
        return
    sink.require_new(RECORD_STAGES)
    root, folder = sink.results_root, delivery_folder(sink)
    if folder.exists():
        raise RecordExistsError(f"{folder} already exists: RUN_LABEL {sink.run_label!r} was used before.")
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=selection.MANIFEST_SCHEMA)
    selected = upstream.record["selected_config"]
    admitted_entry = next(entry for entry in upstream.record["inputs"] if entry["role"] == "admitted_data")
    admitted_path = root / admitted_entry["path"]
    admitted = load_record(admitted_path, expected_sha256=admitted_entry["sha256"])
    config = used_config(selected)
    used = {"data_sha256": admitted["version"]["content_sha256"], **config.public()}
    say(describe(plan.run_mode, model_id))
    checkpoint_step = config.steps // 2
    with one_thread_on_cpu(plan.device):
        base, tokenizer, identity = load_base(model_id, plan.model_source, config.base, plan.device)
        train = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["splits"]["train"]]
        evaluation = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
        model = attach_adapter(base, config)
        started = time.perf_counter()
        formal = train_run(model, tokenizer, train, evaluation, config, device=plan.device,
                           checkpoint_step=checkpoint_step, checkpoint_dir=folder / "checkpoint")
        save_adapter(model, folder / "adapter", model_id)
        training_s = time.perf_counter() - started
    recorded = file_hashes(folder)
    worker = {"model": model_id, "model_source": plan.model_source, "device": plan.device,
              "admitted": {"path": admitted_path, "sha256": admitted_entry["sha256"]}, "config": config}
    say(f"62 formal training: {config.steps} steps, checkpoint after step {checkpoint_step}; resuming and reloading in "
        "a fresh process")
    verified = fresh_process(folder=folder, **worker)
    resumed, reloaded = verified["resumed"], verified["reloaded"]
    found = file_hashes(folder)
    identity_check = delivery_gates.upstream_identity(selected, used)
    integrity = delivery_gates.artifact_checks(
        {"recorded": recorded, "found": found},
        {"reference_losses": formal["losses"], "checkpoint_step": checkpoint_step,
         "resumed_losses": resumed["losses"], "resumed_first_step": resumed["optimiser_steps"][0]},
        {"in_process": formal["eval_loss"], "reloaded": reloaded["eval_loss"]},
        loss_tolerance=LOSS_TOLERANCE, eval_tolerance=EVAL_TOLERANCE)
    state = delivery_gates.delivery_state(identity_check, integrity)
    report = {"model": identity, "selected": selected, "config": used, "checkpoint_step": checkpoint_step,
              "training_s": training_s, "files": {"recorded": recorded, "found": found},
              "formal": {key: formal[key] for key in ("losses", "optimiser_steps", "eval_loss", "exact_match",
                                                      "step_time_s", "adapter_sha256", "training_state_bytes",
                                                      "peak_allocated_bytes", "peak_reserved_bytes", "sampled")},
              "resumed": resumed, "reloaded": reloaded, "identity": identity_check, "integrity": integrity,
              "comparability_note": sft_raw.COMPARABILITY_NOTE}
    evaluation_path, _ = sink.save_record("evaluation", report, schema_version=EVALUATION_SCHEMA)
    resume_gap = max((abs(a - b) for a, b in zip(resumed["losses"], formal["losses"][checkpoint_step:])), default=None)
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), {"role": "admitted_data", **admitted_entry}],
        "candidates": [{"name": "delivery", "config": used, "eval_loss": formal["eval_loss"],
                        "exact_match": formal["exact_match"], "adapter_sha256": formal["adapter_sha256"]}],
        "gates": [
            {"name": "upstream_identity", "threshold": "63's selected_config", "measured": identity_check["mismatches"],
             "passed": identity_check["matches"]},
            {"name": "files_intact", "threshold": len(recorded), "measured": len(found),
             "passed": integrity["checks"][0]["passed"]},
            {"name": "resume_continues", "threshold": LOSS_TOLERANCE, "measured": resume_gap,
             "passed": integrity["checks"][1]["passed"]},
            {"name": "reload_reproduces", "threshold": EVAL_TOLERANCE,
             "measured": abs(reloaded["eval_loss"] - formal["eval_loss"]), "passed": integrity["checks"][2]["passed"]},
        ],
        "decision": {"decision": state["state"], "reasons": state["reasons"]},
        "next_action": state["next_action"],
        "outputs": [{"role": "evaluation_report", **sink.lineage(evaluation_path)}]
                   + [{"role": f"delivery/{path}", **sink.lineage(folder / path)} for path in recorded],
        "adapter": {"folder": (folder / "adapter").relative_to(root).as_posix(), "config": used,
                    "base_model": identity.get("model_id", model_id)},
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"62 delivery: {state['state']} {state['reasons'] or ''}; manifest {ref.path.name}")
