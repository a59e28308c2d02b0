"""Project 65 (QLoRA low-resource branch): an NF4 base against a bf16 base at the same adapter, paired
by seed, and a capacity ladder recorded apart.

Before any work the runner reads 64's manifest and admitted data (as 63 does). For each shared seed it
trains the same LoRA adapter (every linear layer, bfloat16 compute) once on a bf16 base and once on an
NF4 base (transformers' `BitsAndBytesConfig` -> bitsandbytes `Linear4bit`, double quantisation), then
the capacity ladder (CUDA only: the largest batch under the memory budget on each base, OOM as a
status). The gates (`qlora_gates`) compute the paired deltas, the capacity gain and the branch
decision. The record says which bitsandbytes path ran (version, layers, quant type, the device of the
4-bit weights) and, when the 4-bit base cannot be built, records that and the error instead of a
number. On a CPU there is no device memory: the peaks are None and the capacity ladder is not run;
the bytes the bases hold in their tensors are counted (they show the 4-bit storage), never presented
as a peak.
"""

from __future__ import annotations

from typing import Mapping

from tools.data import sft_raw
from tools.experiments.sft_chain import admission, manifests, qlora_gates
from tools.experiments.sft_chain.selection import CPU_MODEL
from tools.models.lab import training_batch
from tools.experiments.sft_chain.training import (
    QUALITY_METRICS,
    TrainConfig,
    attach_adapter,
    base_tensor_bytes,
    load_base,
    one_thread_on_cpu,
    render,
    reply_loss,
    train_run,
)

CHAPTER_ID = "65"
UPSTREAM_ID = "64"
PAIRS_SCHEMA = "qlora-branch-pairs/v1"
MANIFEST_SCHEMA = "qlora-branch-manifest/v1"
RECORD_STAGES = ("pairs", "manifest")
SEEDS = (1, 2, 3)
BASES = ("bf16", "nf4")
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SETTINGS = {
    "cpu_smoke": {"steps": 30, "batch_size": 16, "learning_rate": 1e-2, "rank": 8, "alpha": 16.0, "quality": "token_accuracy",
                  "ladder": (), "memory_budget": 12 * 2 ** 30, "required_batch": 32, "quality_tolerance": 0.05},
    "real_gpu": {"steps": 20, "batch_size": 8, "learning_rate": 2e-4, "rank": 8, "alpha": 16.0, "quality": "exact_match",
                 "ladder": (8, 16, 32, 64, 128), "memory_budget": 12 * 2 ** 30, "required_batch": 32,
                 "quality_tolerance": 0.05},
}
LADDER_STEPS = 2
NEXT_STEP = {"accept": "train on the NF4 base where the budget needs the capacity it buys (see the scope)",
             "tune": "keep the bf16 base for now: the 4-bit base did not buy capacity this budget needs",
             "reject": "do not train on the NF4 base: it lost quality, or no pair could be measured"}
UNMEASURED_NEXT_STEP = ("keep the bf16 base for now: capacity was not measured here (device memory is measured on "
                        "CUDA only); run the capacity ladder on a GPU (real_gpu) before deciding the branch")


def next_step(decision: Mapping) -> str:
    """What to do after the branch decision; a tune whose capacity was not measured says so."""
    if decision["decision"] == "tune" and "capacity_not_measured" in decision["reasons"]:
        return UNMEASURED_NEXT_STEP
    return NEXT_STEP[decision["decision"]]


def settings_for(run_mode: str) -> dict:
    return SETTINGS["cpu_smoke" if run_mode == "dry_run" else run_mode]


def config_for(run_mode: str, base: str, seed: int) -> TrainConfig:
    s = settings_for(run_mode)
    return TrainConfig(rank=s["rank"], alpha=s["alpha"], target_modules=LINEAR, steps=s["steps"],
                       batch_size=s["batch_size"], learning_rate=s["learning_rate"], seed=seed,
                       base="bfloat16" if base == "bf16" else "nf4")


def describe(run_mode: str, model: str) -> str:
    s = settings_for(run_mode)
    ladder = f"capacity ladder {s['ladder']} under {s['memory_budget']} bytes" if s["ladder"] else \
        "no capacity ladder (device memory is measured on CUDA only)"
    return (f"qlora_branch ({run_mode}): reads project 64's manifest and admitted data, trains rank {s['rank']} on every "
            f"linear layer of {model} on a bf16 and an NF4 base, seeds {SEEDS}, {s['steps']} steps; {ladder}; "
            "nothing is read or written in dry_run")


def bitsandbytes_path(model) -> dict:
    """Which 4-bit path ran: bitsandbytes' version, its Linear4bit layers, their quant type and device."""
    import bitsandbytes

    layers = [module for module in model.modules() if type(module).__name__ == "Linear4bit"]
    first = layers[0].weight if layers else None
    state = getattr(first, "quant_state", None)
    return {"bitsandbytes": bitsandbytes.__version__, "linear4bit_layers": len(layers),
            "quant_type": getattr(state, "quant_type", None), "double_quant": getattr(state, "nested", None),
            "compute_dtype": str(layers[0].compute_dtype) if layers else None,
            "weights_device": str(first.device) if first is not None else None,
            "backend": "cuda" if first is not None and first.device.type == "cuda" else "cpu"}


def one_run(model_id: str, model_source: str, device: str, admitted: Mapping, config: TrainConfig) -> dict:
    """Train one (base, seed) run; a base that cannot be built or a failed run is a status, not an exception."""
    from tools.measure.training import free_device_memory, out_of_memory_error

    import torch

    oom = out_of_memory_error(torch)
    try:
        model, tokenizer, identity = load_base(model_id, model_source, config.base, device)
    except Exception as error:  # recorded: which path could not run, and why
        return {"status": "failed", "error": f"{type(error).__name__}: {error}", "config": config.public()}
    path = bitsandbytes_path(model) if config.base == "nf4" else None
    stored = base_tensor_bytes(model)
    try:
        train = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["splits"]["train"]]
        evaluation = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["evaluation"]]
        model = attach_adapter(model, config)
        result = train_run(model, tokenizer, train, evaluation, config, device=device)
    except oom as error:
        result = {"status": "oom", "error": str(error).strip().splitlines()[0] if str(error).strip() else "oom",
                  "config": config.public()}
    except Exception as error:  # recorded per run: the paired one still counts as unpaired evidence
        result = {"status": "failed", "error": f"{type(error).__name__}: {error}", "config": config.public()}
    finally:
        model = None
        free_device_memory(torch)
    return {**result, "model": identity, "bitsandbytes_path": path, "base_tensor_bytes": stored}


def ladder(model_id: str, model_source: str, device: str, admitted: Mapping, base: str, run_mode: str) -> list[dict]:
    """The capacity ladder of one base: a few steps at each batch size, peak allocated or OOM."""
    import torch

    from tools.measure.training import free_device_memory, out_of_memory_error

    oom, steps = out_of_memory_error(torch), []
    config = config_for(run_mode, base, SEEDS[0])
    model, tokenizer, _ = load_base(model_id, model_source, config.base, device)
    model = attach_adapter(model, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    rendered = [render(tokenizer, sft_raw.chat_prompt(r), r["output"]) for r in admitted["splits"]["train"]]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for size in settings_for(run_mode)["ladder"]:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        try:
            for _ in range(LADDER_STEPS):
                batch = training_batch([rendered[index % len(rendered)] for index in range(size)], pad_id)
                optimizer.zero_grad(set_to_none=True)
                reply_loss(model, batch, device).backward()
                optimizer.step()
            torch.cuda.synchronize()
            steps.append({"batch_size": size, "status": "ok", "peak_memory_bytes": int(torch.cuda.max_memory_allocated())})
        except oom:
            steps.append({"batch_size": size, "status": "oom", "peak_memory_bytes": None})
            optimizer.zero_grad(set_to_none=True)
            free_device_memory(torch)
            break
    model = optimizer = None
    free_device_memory(torch)
    return steps


def gate(runs: Mapping, ladders: Mapping, run_mode: str, gates=qlora_gates) -> dict:
    s = settings_for(run_mode)
    memory_key = "peak_allocated_bytes"
    sides = {base: {seed: {"status": run["status"], "peak_memory_bytes": run.get(memory_key),
                           "step_time_s": run.get("step_time_s"), "quality": run.get(s["quality"])}
                    for seed, run in runs[base].items()} for base in BASES}
    deltas = gates.paired_deltas(sides["nf4"], sides["bf16"])
    capacity = gates.capacity_gain(ladders, s["memory_budget"])
    decision = gates.branch_decision(deltas, capacity, s["required_batch"], s["quality_tolerance"])
    return {"deltas": deltas, "capacity": capacity, "decision": decision}


def run(plan, sink, *, log=None) -> None:
    """The experiment contract's runner (see the module docstring)."""
    say = log or (lambda message: None)
    model_id = CPU_MODEL if plan.run_mode != "real_gpu" and plan.model == "tiny" else plan.model
    if not plan.writes:
        say(describe(plan.run_mode, model_id))
        return
    sink.require_new(RECORD_STAGES)
    root = sink.results_root
    upstream = manifests.read_upstream(root, upstream_id=UPSTREAM_ID, reader_id=CHAPTER_ID, run_mode=plan.run_mode,
                                       label=sink.run_label, options=plan.options,
                                       schema_version=admission.MANIFEST_SCHEMA)
    admitted = manifests.admitted_data(upstream, root, schema_version=admission.ADMITTED_SCHEMA)
    say(describe(plan.run_mode, model_id))
    runs = {base: {} for base in BASES}
    with one_thread_on_cpu(plan.device):
        for seed in SEEDS:
            for base in BASES:
                result = one_run(model_id, plan.model_source, plan.device, admitted, config_for(plan.run_mode, base, seed))
                runs[base][seed] = {"data_sha256": admitted["version"]["content_sha256"], **result}
                say(f"  {base} seed {seed}: {result['status']}, exact match {result.get('exact_match')}, "
                    f"token accuracy {result.get('token_accuracy')}, "
                    f"step {result.get('step_time_s')} s")
        ladders = {base: (ladder(model_id, plan.model_source, plan.device, admitted, base, plan.run_mode)
                          if plan.device == "cuda" and settings_for(plan.run_mode)["ladder"] else [])
                   for base in BASES}
    gating = gate(runs, ladders, plan.run_mode)
    s = settings_for(plan.run_mode)
    pairs_body = {"seeds": list(SEEDS), "adapter": config_for(plan.run_mode, "bf16", SEEDS[0]).public(),
                  "quality_key": s["quality"], "quality_metric": QUALITY_METRICS[s["quality"]],
                  "memory_metric": "peak_allocated_bytes (torch.cuda.max_memory_allocated; None on a CPU)",
                  "runs": {base: {str(seed): run for seed, run in by_seed.items()} for base, by_seed in runs.items()},
                  "ladders": ladders, "ladder_note": None if ladders["bf16"] else
                  "not run: device memory is measured on CUDA only, so a CPU run claims no capacity",
                  "memory_budget": s["memory_budget"], "required_batch": s["required_batch"],
                  "gating": _plain(gating), "comparability_note": sft_raw.COMPARABILITY_NOTE}
    pairs_path, _ = sink.save_record("pairs", pairs_body, schema_version=PAIRS_SCHEMA)
    deltas, capacity, decision = gating["deltas"], gating["capacity"], gating["decision"]
    first_nf4 = runs["nf4"][SEEDS[0]]
    body = {
        "comparability": sft_raw.COMPARABILITY_NOTE,
        "inputs": [upstream.entry(root), {"role": "admitted_data", **upstream.output("admitted_data")}],
        "candidates": [{"base": base, "seed": seed, "status": run["status"], "quality": run.get(s["quality"]),
                        "exact_match": run.get("exact_match"), "token_accuracy": run.get("token_accuracy"),
                        "step_time_s": run.get("step_time_s"), "peak_allocated_bytes": run.get("peak_allocated_bytes"),
                        "base_tensor_bytes": run.get("base_tensor_bytes"), "adapter_sha256": run.get("adapter_sha256")}
                       for seed in SEEDS for base, by_seed in runs.items() for run in [by_seed[seed]]],
        "gates": [
            {"name": "paired_seeds", "threshold": len(SEEDS), "measured": len(deltas["paired"]),
             "passed": len(deltas["paired"]) == len(SEEDS)},
            {"name": "quality_delta", "threshold": -s["quality_tolerance"], "measured": deltas["mean"]["quality_delta"],
             "passed": deltas["mean"]["quality_delta"] is not None
             and deltas["mean"]["quality_delta"] >= -s["quality_tolerance"]},
            {"name": "capacity_for_required_batch", "threshold": s["required_batch"], "measured": capacity["largest"],
             "passed": decision["decision"] == "accept"},
            {"name": "peak_memory_change", "threshold": None, "measured": deltas["mean"]["memory_change"],
             "passed": deltas["mean"]["memory_change"] is not None and deltas["mean"]["memory_change"] < 0},
            {"name": "step_time_change", "threshold": 0.0, "measured": deltas["mean"]["step_time_change"],
             "passed": deltas["mean"]["step_time_change"] is not None and deltas["mean"]["step_time_change"] <= 0},
        ],
        "decision": {"decision": decision["decision"], "reasons": decision["reasons"], "scope": decision["scope"]},
        "next_action": next_step(decision),
        "outputs": [{"role": "pairs", **sink.lineage(pairs_path)}],
        "qlora_adapter_sha256": first_nf4.get("adapter_sha256"),
        "bitsandbytes_path": first_nf4.get("bitsandbytes_path"),
        "nf4_error": first_nf4.get("error"),
        "quality_metric": QUALITY_METRICS[s["quality"]],
    }
    ref = manifests.write_manifest(sink, body, schema_version=MANIFEST_SCHEMA)
    say(f"65 QLoRA branch: {decision['decision']} {decision['reasons']}; manifest {ref.path.name}")


def _plain(gating: Mapping) -> dict:
    """The gating result with int dict keys (seeds) as strings, as JSON keeps them."""
    deltas = dict(gating["deltas"])
    deltas["per_seed"] = {str(seed): row for seed, row in deltas["per_seed"].items()}
    return {**gating, "deltas": deltas}

